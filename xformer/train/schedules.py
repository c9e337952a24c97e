"""Learning-rate schedules as step → multiplier functions for ``torch.optim.lr_scheduler.LambdaLR``.

One function per option of the ``optim/scheduler`` config group (``conf/optim/scheduler/<name>.yaml``):
``inverse_sqrt`` (the paper's, default), ``cosine``, ``linear``, ``constant``. The multiplier scales the
optimizer's peak rate ``optim.lr``; ``step`` is the 0-based count of optimizer steps taken.
"""

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
    return d_model**-0.5 * max(warmup_steps, 1) ** -0.5


def _warmup(s: int, warmup_steps: int) -> float | None:
    """The warm-up multiplier ``s / warmup_steps`` at 1-based step ``s``, or ``None`` once it is over."""
    return s / warmup_steps if warmup_steps > 0 and s <= warmup_steps else None


def _check(warmup_steps: int, total_steps: int | None = None, floor: float | None = None) -> None:
    if warmup_steps < 0:
        raise ValueError(f"optim.warmup_steps={warmup_steps}: must be >= 0")
    if total_steps is not None and total_steps < 1:
        raise ValueError(f"optim.scheduler.total_steps={total_steps}: must be >= 1")
    if floor is not None and not 0.0 <= floor <= 1.0:
        raise ValueError(f"optim.scheduler.floor={floor}: must be in [0, 1]")


def _progress(s: int, warmup_steps: int, total_steps: int) -> float:
    """Fraction of the decay done at 1-based step ``s``: 0 at the end of warm-up, 1 at ``total_steps``."""
    return min(1.0, max(0.0, (s - warmup_steps) / max(total_steps - warmup_steps, 1)))


def _linear(step: int, warmup_steps: int, total_steps: int, floor: float) -> float:
    s = step + 1
    up = _warmup(s, warmup_steps)
    return up if up is not None else 1.0 - (1.0 - floor) * _progress(s, warmup_steps, total_steps)


def linear(warmup_steps: int = 0, total_steps: int = 1000, floor: float = 0.1):
    """Linear warm-up to the peak, then linear decay to ``floor`` × peak at ``total_steps``, flat after.

    Used by the claim sweeps (conf/scale/task/): runs of a few thousand steps end on a flat loss, so the
    last two validations of a run can be compared to tell a finished run from an under-trained one.
    Multiplier at optimizer step ``s`` (1-based): ``s / warmup_steps`` while ``s <= warmup_steps``, then
    ``1 - (1 - floor) · p`` with ``p = min(1, (s - warmup_steps) / (total_steps - warmup_steps))``.

    Raises:
        ValueError: ``warmup_steps < 0``, ``total_steps < 1`` or ``floor`` outside [0, 1].
    """
    _check(warmup_steps, total_steps, floor)
    return functools.partial(_linear, warmup_steps=warmup_steps, total_steps=total_steps, floor=floor)


warmup_linear = linear
"""The former name of :func:`linear` (configs written before the ``optim/scheduler`` group)."""


def _cosine(step: int, warmup_steps: int, total_steps: int, floor: float) -> float:
    s = step + 1
    up = _warmup(s, warmup_steps)
    if up is not None:
        return up
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * _progress(s, warmup_steps, total_steps)))


def cosine(warmup_steps: int = 0, total_steps: int = 1000, floor: float = 0.1):
    """Linear warm-up, then half a cosine from the peak down to ``floor`` × peak at ``total_steps``,
    flat after (Loshchilov & Hutter 2017, SGDR eq. 5 without restarts; nanoGPT's ``get_lr``).

    Multiplier at optimizer step ``s`` (1-based): ``s / warmup_steps`` while ``s <= warmup_steps``, then
    ``floor + (1 - floor) · (1 + cos(π p)) / 2`` with ``p`` as in :func:`linear`. nanoGPT's ``get_lr``
    is the same curve with ``min_lr = floor · lr`` and ``lr_decay_iters = total_steps``, one step earlier
    (its iteration ``it`` counts from 0 and warms up as ``(it + 1) / (warmup_iters + 1)``).

    Raises:
        ValueError: ``warmup_steps < 0``, ``total_steps < 1`` or ``floor`` outside [0, 1].
    """
    _check(warmup_steps, total_steps, floor)
    return functools.partial(_cosine, warmup_steps=warmup_steps, total_steps=total_steps, floor=floor)


def _constant(step: int, warmup_steps: int) -> float:
    up = _warmup(step + 1, warmup_steps)
    return 1.0 if up is None else up


def constant(warmup_steps: int = 0):
    """Linear warm-up (``s / warmup_steps`` at 1-based step ``s``), then the peak rate for good.

    Raises:
        ValueError: ``warmup_steps < 0``.
    """
    _check(warmup_steps)
    return functools.partial(_constant, warmup_steps=warmup_steps)


def check_scheduler_node(node) -> None:
    """Refuse an ``optim.scheduler`` config node whose keys are not all parameters of its
    ``_target_`` (a key left over from another schedule, or a typo), or whose values the schedule
    refuses; ``None`` or a node without ``_target_`` passes.

    Raises:
        ConfigError: one line naming the key and the fix.
    """
    import inspect

    from hydra.utils import get_method, instantiate
    from omegaconf import OmegaConf

    from xformer.errors import ConfigError

    if node is None or "_target_" not in node:
        return
    target = str(node["_target_"])
    try:
        fn = get_method(target)
    except Exception:
        raise ConfigError(
            f"optim.scheduler._target_={target}: not importable. Fix: pick a schedule with "
            "optim/scheduler=inverse_sqrt|cosine|linear|constant"
        ) from None
    params = inspect.signature(fn).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        unknown = [k for k in node if not str(k).startswith("_") and k not in params]
        if unknown:
            raise ConfigError(
                f"optim.scheduler.{unknown[0]}: not a parameter of {target} (takes "
                f"{', '.join(params) or 'nothing'}). Fix: select the schedule with "
                f"optim/scheduler=<name> instead of setting optim.scheduler._target_, or drop the key"
            )
    try:
        instantiate(OmegaConf.create(OmegaConf.to_container(node, resolve=True)))
    except Exception as err:  # the schedule's own ValueError, wrapped by Hydra
        cause = err
        while cause.__cause__ is not None and not isinstance(cause, ValueError):
            cause = cause.__cause__
        raise ConfigError(str(cause).splitlines()[0]) from None
