"""One part of a declared claim as read from its YAML mapping, and its margin.

A leaf module: :mod:`.declare` builds parts and :mod:`.tests` decides them, so both import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ROMAN = ("i", "ii", "iii", "iv", "v", "vi", "vii", "viii", "ix", "x", "xi", "xii")


@dataclass(frozen=True)
class Margin:
    """A margin in the metric's units (``value``), or a share of the reference arm's mean (``relative``)."""

    value: float
    relative: bool = False

    def resolve(self, reference: float | None) -> float:
        """The margin in the metric's units (``reference``: the reference arm's mean)."""
        if not self.relative:
            return self.value
        return self.value * abs(reference) if reference is not None else float("nan")

    def text(self) -> str:
        return f"{self.value * 100:g} % of the reference mean" if self.relative else f"{self.value:g}"


@dataclass(frozen=True)
class Part:
    """One part of a claim: a test type, its arms and options (the YAML mapping as read)."""

    claim: str
    index: int
    spec: dict
    file: str = ""
    at: str = "budget"
    """What the claim states: ``budget`` (the final interval decides) or ``stable ranking`` (a gap shown
    to close over the second half makes a decided part inconclusive)."""

    @property
    def test(self) -> str:
        return str(self.spec["test"])

    @property
    def label(self) -> str:
        return str(self.spec.get("label") or f"({ROMAN[self.index] if self.index < len(ROMAN) else self.index + 1})")

    @property
    def role(self) -> str:
        return str(self.spec.get("role") or "claim")

    @property
    def says(self) -> str:
        return str(self.spec.get("says") or "")

    @property
    def metric(self) -> str | None:
        m = self.spec.get("metric")
        return str(m) if m is not None else None

    @property
    def margin(self) -> Margin | None:
        return parse_margin(self.spec.get("margin"))

    @property
    def margin_source(self) -> str:
        return str(self.spec.get("margin_source") or "")

    @property
    def published_effect(self) -> float | None:
        v = self.spec.get("published_effect")
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def get(self, key: str, default: Any = None) -> Any:
        return self.spec.get(key, default)

    def where(self, key: str) -> str:
        """``file: claim H1, part (i), key 'margin'`` for error lines."""
        return f"{self.file}: claim {self.claim}, part {self.label}, key '{key}'"


def parse_margin(raw: Any) -> Margin | None:
    """``0.01`` → 0.01 in the metric's units; ``"1.5%"`` → 1.5 % of the reference arm's mean; ``None``
    when absent.

    Raises:
        ValueError: not a number, a percentage, or not > 0.
    """
    if raw is None:
        return None
    if isinstance(raw, str) and raw.strip().endswith("%"):
        value, relative = float(raw.strip()[:-1]) / 100.0, True
    elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
        value, relative = float(raw), False
    else:
        raise ValueError(f"{raw!r} is not a number or a percentage")
    if not value >= 0:
        raise ValueError(f"{raw!r} must be >= 0")
    return Margin(value, relative)
