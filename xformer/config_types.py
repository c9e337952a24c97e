"""Annotations that the config check reads from a component's signature (:mod:`xformer.jobs.schema`).

A parameter annotated ``Annotated[float, Range(ge=0, lt=1)]`` has its range checked before training,
with one ``error:`` line naming the key; ``Literal["a", "b"]`` gives its choices. The range lives in
the signature of the class that takes the value, so a new option needs no other file.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Range:
    """Bounds of a number: ``ge`` / ``gt`` (lower, inclusive / exclusive), ``le`` / ``lt`` (upper)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def __repr__(self) -> str:
        parts = [
            f"{k}={v:g}"
            for k, v in (("ge", self.ge), ("gt", self.gt), ("le", self.le), ("lt", self.lt))
            if v is not None
        ]
        return f"Range({', '.join(parts)})"

    def problem(self, value: float) -> str | None:
        """Why ``value`` is outside the range, or ``None``."""
        for bound, ok, word in (
            (self.ge, lambda b: value >= b, ">="),
            (self.gt, lambda b: value > b, ">"),
            (self.le, lambda b: value <= b, "<="),
            (self.lt, lambda b: value < b, "<"),
        ):
            if bound is not None and not ok(bound):
                return f"must be {word} {bound:g}"
        return None
