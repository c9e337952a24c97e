"""Errors raised by the xformer data layer."""

from __future__ import annotations


class DataError(ValueError):
    """A data set is missing, corrupt, misaligned or fails its checksum.

    The message is one line that names the offending file (and line, where it applies), says what
    is wrong, and says how to fix it. Subclass of ``ValueError`` so callers that already catch
    ``ValueError`` keep working.
    """
