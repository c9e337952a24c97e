"""Errors xformer raises for bad input, importable without torch or Lightning (``run.py`` checks the
config before it imports either)."""


class ConfigError(ValueError):
    """An invalid configuration; the message is one line naming the config key and the fix."""
