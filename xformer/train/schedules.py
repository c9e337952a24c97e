"""Learning-rate schedules, one per ``optim/scheduler`` option: ``step`` (0-based optimizer steps taken) ->
multiplier of the peak rate ``optim.lr``, for ``torch.optim.lr_scheduler.LambdaLR``."""

from __future__ import annotations

import math
from typing import Annotated, Callable

from xformer.config_types import Range

#: Annotations of the schedules' arguments (their ranges; the config check reads them).
Warmup = Annotated[int, Range(ge=0)]
Steps = Annotated[int, Range(ge=1)]
Floor = Annotated[float, Range(ge=0, le=1)]


def describes(text: str):
    """Attach ``fn.describe(**node) -> str``: the schedule in words for a report's budget line, from
    the keys of its config node (``text`` formatted with them; the warm-up is the report's own)."""

    def deco(fn):
        def describe(**node) -> str:
            values = {k: v for k, v in node.items() if not str(k).startswith("_")}
            floor = values.get("floor")
            values["floor"] = f"{floor:g}" if isinstance(floor, (int, float)) else floor
            return text.format(**values)

        fn.describe = describe
        return fn

    return deco


class Schedule:
    """A schedule bound to its settings: ``Schedule(fn, **settings)(step) == fn(step, **settings)``.

    Not a ``functools.partial``: Hydra 1.3.8 turns a returned partial into a ``_DeferredTarget`` that
    re-runs its instantiation policy on every call (once per optimizer step; docs/results/nanogpt-cpu.md).
    The settings live in slots, so ``LambdaLR.state_dict`` (``lr_lambda.__dict__``) stores no function object
    (``torch.load(weights_only=True)`` reads it) and a resumed run keeps the schedule of its config.
    """

    __slots__ = ("fn", "settings", "__dict__", "__weakref__")

    def __init__(self, fn: Callable[..., float], **settings) -> None:
        self.fn, self.settings = fn, settings

    def __call__(self, step: int) -> float:
        return self.fn(step, **self.settings)

    def __getstate__(self):  # pickling (ddp_spawn copies the module): the slots, no __dict__
        return None, {"fn": self.fn, "settings": self.settings}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Schedule) and (self.fn, self.settings) == (other.fn, other.settings)

    def __hash__(self) -> int:
        return hash((self.fn, tuple(sorted(self.settings.items()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.settings.items())
        return f"Schedule({self.fn.__name__}, {args})"


def _inverse_sqrt(step: int, warmup_steps: int, decay_from: int) -> float:
    s = step + 1
    up = s / warmup_steps if warmup_steps > 0 else 1.0
    return min(up, math.sqrt(decay_from / s)) if s > decay_from else min(up, 1.0)


@describes("inverse-sqrt decay")
def inverse_sqrt(warmup_steps: Warmup = 4000, decay_from: Steps | None = None):
    """Linear warm-up then inverse-square-root decay (Vaswani et al. 2017 §5.3, eq. 3).

    With peak rate ``lr`` the multiplier at optimizer step ``s`` (1-based) is
    ``min(s / warmup_steps, sqrt(decay_from / s))``; with ``decay_from = warmup_steps`` (the
    default) and ``lr = d_model^-0.5 · warmup_steps^-0.5`` this is exactly the paper's
    ``d_model^-0.5 · min(s^-0.5, s · warmup_steps^-1.5)``. ``warmup_steps = 0`` starts at the peak
    (a "no warm-up" arm, Xiong et al. 2020); set ``decay_from`` to keep the decay of the warm-up arm.
    """
    decay_from = max(warmup_steps if decay_from is None else decay_from, 1)
    return Schedule(_inverse_sqrt, warmup_steps=warmup_steps, decay_from=decay_from)


def _warmup(s: int, warmup_steps: int) -> float | None:
    """The warm-up multiplier ``s / warmup_steps`` at 1-based step ``s``, or ``None`` once it is over."""
    return s / warmup_steps if warmup_steps > 0 and s <= warmup_steps else None


def _progress(s: int, warmup_steps: int, total_steps: int) -> float:
    """Fraction of the decay done at 1-based step ``s``: 0 at the end of warm-up, 1 at ``total_steps``."""
    return min(1.0, max(0.0, (s - warmup_steps) / max(total_steps - warmup_steps, 1)))


def _linear(step: int, warmup_steps: int, total_steps: int, floor: float) -> float:
    s = step + 1
    up = _warmup(s, warmup_steps)
    return up if up is not None else 1.0 - (1.0 - floor) * _progress(s, warmup_steps, total_steps)


@describes("linear decay to {floor}× peak")
def linear(warmup_steps: Warmup = 0, total_steps: Steps = 1000, floor: Floor = 0.1):
    """Linear warm-up to the peak, then linear decay to ``floor`` × peak at ``total_steps``, flat after.

    The claim sweeps' schedule (conf/scale/task/): a run ends on a flat rate, so its last validations tell a
    finished run from an under-trained one. Multiplier at optimizer step ``s`` (1-based): ``s / warmup_steps``
    while ``s <= warmup_steps``, then ``1 - (1 - floor) · p`` with
    ``p = min(1, (s - warmup_steps) / (total_steps - warmup_steps))``.
    """
    return Schedule(_linear, warmup_steps=warmup_steps, total_steps=total_steps, floor=floor)


warmup_linear = linear
"""Another name of :func:`linear`, so a config naming ``xformer.train.schedules.warmup_linear`` still loads."""


def _cosine(step: int, warmup_steps: int, total_steps: int, floor: float) -> float:
    s = step + 1
    up = _warmup(s, warmup_steps)
    if up is not None:
        return up
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * _progress(s, warmup_steps, total_steps)))


@describes("cosine decay to {floor}× peak")
def cosine(warmup_steps: Warmup = 0, total_steps: Steps = 1000, floor: Floor = 0.1):
    """Linear warm-up, then half a cosine from the peak down to ``floor`` × peak at ``total_steps``,
    flat after (Loshchilov & Hutter 2017, SGDR eq. 5 without restarts; nanoGPT's ``get_lr``).

    Multiplier at optimizer step ``s`` (1-based): ``s / warmup_steps`` while ``s <= warmup_steps``, then
    ``floor + (1 - floor) · (1 + cos(π p)) / 2`` with ``p`` as in :func:`linear`. nanoGPT's ``get_lr``
    is the same curve with ``min_lr = floor · lr`` and ``lr_decay_iters = total_steps``, one step earlier
    (its iteration ``it`` counts from 0 and warms up as ``(it + 1) / (warmup_iters + 1)``).
    """
    return Schedule(_cosine, warmup_steps=warmup_steps, total_steps=total_steps, floor=floor)


def _constant(step: int, warmup_steps: int) -> float:
    up = _warmup(step + 1, warmup_steps)
    return 1.0 if up is None else up


@describes("constant")
def constant(warmup_steps: Warmup = 0):
    """Linear warm-up (``s / warmup_steps`` at 1-based step ``s``), then the peak rate for good."""
    return Schedule(_constant, warmup_steps=warmup_steps)
