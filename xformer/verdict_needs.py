"""What a comparison needs before ``xformer report`` can decide it (seeds, second-half validations); below every
layer, so the report's rules and a sweep's start (:func:`xformer.jobs.sweep.report_needs`) read one number each."""

from __future__ import annotations

MIN_SEEDS = 3
"""Seeds each setting of a comparison needs for an interval over seeds (fewer: inconclusive)."""
MIN_LATE_VALIDATIONS = 4
"""Validations every seed shares in the second half of training for the second-half check (fewer: not checked)."""


def validation_steps(max_steps: int, interval: int, dense_every: int | None = None, dense_until: int = 0) -> list[int]:
    """The optimizer steps a run of ``max_steps`` validates at: every ``interval`` steps, every
    ``dense_every`` steps up to ``dense_until`` (``val_dense``), and at ``max_steps`` (a run that ends off a
    validation step validates once more), sorted."""
    steps = set(range(interval, max_steps + 1, interval)) if interval > 0 else set()
    if dense_every:
        steps |= set(range(dense_every, min(dense_until, max_steps) + 1, dense_every))
    return sorted(steps | {max_steps}) if interval > 0 or dense_every else sorted(steps)


def late_validations(steps: list[int]) -> list[int]:
    """The validations of ``steps`` in the second half of training, as the report reads them: at a step of at
    least half the last validation's."""
    if not steps:
        return []
    last = max(steps)
    return [s for s in steps if 0 < s and s >= last / 2]


def interval_for(max_steps: int, dense_every: int | None = None, dense_until: int = 0) -> int | None:
    """The largest ``trainer.val_check_interval`` that gives a run of ``max_steps`` at least
    :data:`MIN_LATE_VALIDATIONS` second-half validations; ``None`` when none does."""
    dense = set(validation_steps(max_steps, 0, dense_every, dense_until))
    for interval in range(max_steps, 0, -1):
        steps = dense | set(range(interval, max_steps + 1, interval)) | {max_steps}
        if len(late_validations(sorted(steps))) >= MIN_LATE_VALIDATIONS:
            return interval
    return None
