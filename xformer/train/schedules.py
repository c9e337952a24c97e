"""Learning-rate schedules as step → multiplier functions for ``torch.optim.lr_scheduler.LambdaLR``."""

from __future__ import annotations

import functools
import math


def _inverse_sqrt(step: int, warmup_steps: int, decay_from: int) -> float:
    s = step + 1
    up = s / warmup_steps if warmup_steps > 0 else 1.0
    return min(up, math.sqrt(decay_from / s)) if s > decay_from else min(up, 1.0)


def inverse_sqrt(warmup_steps: int = 4000, decay_from: int | None = None):
    """Linear warm-up then inverse-square-root decay (Vaswani et al. 2017 §5.3, eq. 3).

    With peak rate ``lr`` the multiplier at optimizer step ``s`` (1-based) is
    ``min(s / warmup_steps, sqrt(decay_from / s))``; with ``decay_from = warmup_steps`` (the
    default) and ``lr = d_model^-0.5 · warmup_steps^-0.5`` this is exactly the paper's
    ``d_model^-0.5 · min(s^-0.5, s · warmup_steps^-1.5)``. ``warmup_steps = 0`` starts at the peak
    (claim C4's "no warm-up" arm); set ``decay_from`` to keep the decay of the warm-up arm.

    Raises:
        ValueError: if ``warmup_steps < 0`` or ``decay_from < 1``.
    """
    if warmup_steps < 0:
        raise ValueError(f"optim.warmup_steps={warmup_steps}: must be >= 0")
    decay_from = warmup_steps if decay_from is None else decay_from
    decay_from = max(decay_from, 1)
    return functools.partial(_inverse_sqrt, warmup_steps=warmup_steps, decay_from=decay_from)


def paper_lr(d_model: int, warmup_steps: int) -> float:
    """The peak rate of §5.3's schedule, ``d_model^-0.5 · warmup_steps^-0.5``."""
    return d_model ** -0.5 * max(warmup_steps, 1) ** -0.5


def _warmup_linear(step: int, warmup_steps: int, total_steps: int, floor: float) -> float:
    s = step + 1
    if warmup_steps > 0 and s <= warmup_steps:
        return s / warmup_steps
    span = max(total_steps - warmup_steps, 1)
    return max(floor, 1.0 - (1.0 - floor) * (s - warmup_steps) / span)


def warmup_linear(warmup_steps: int = 0, total_steps: int = 1000, floor: float = 0.1,
                  decay_from: int | None = None):
    """Linear warm-up to the peak, then linear decay to ``floor`` × peak at ``total_steps``.

    Used by the claim sweeps (conf/scale/task/): runs of a few thousand steps end on a flat loss, so the
    last two validations of a run can be compared to tell a finished run from an under-trained one.
    Multiplier at optimizer step ``s`` (1-based): ``s / warmup_steps`` while ``s <= warmup_steps``, then
    ``max(floor, 1 - (1 - floor)(s - warmup_steps) / (total_steps - warmup_steps))``.
    ``decay_from`` is accepted and ignored (it belongs to :func:`inverse_sqrt`'s config).

    Raises:
        ValueError: ``warmup_steps < 0``, ``total_steps < 1`` or ``floor`` outside [0, 1].
    """
    if warmup_steps < 0:
        raise ValueError(f"optim.warmup_steps={warmup_steps}: must be >= 0")
    if total_steps < 1:
        raise ValueError(f"optim.scheduler.total_steps={total_steps}: must be >= 1")
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"optim.scheduler.floor={floor}: must be in [0, 1]")
    return functools.partial(_warmup_linear, warmup_steps=warmup_steps, total_steps=total_steps, floor=floor)
