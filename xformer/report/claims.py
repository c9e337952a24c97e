"""Claim verdicts: the entry point of :mod:`xformer.report.rules` (the engine) for the report.

A claim is declared in YAML (the project's in ``claims/``, one file per claim; a researcher's with
``xformer report DIR --claims FILE``) and decided part by part by the test types of
:mod:`xformer.report.rules.tests`; :func:`evaluate` returns one :class:`ClaimResult` per claim the
sweep asks about."""

from __future__ import annotations

from .rules.declare import Claim, DeclarationError, load_file  # noqa: F401 (re-exported)
from .rules.engine import evaluate, project_claims  # noqa: F401 (re-exported)
from .rules.results import ClaimResult, PartResult, Status  # noqa: F401 (re-exported)
