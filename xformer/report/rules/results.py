"""What the engine returns: a part's result (:class:`PartResult`), a claim's (:class:`ClaimResult`),
and the verdict words (:class:`Status`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum


class Status(StrEnum):
    """A part's or a claim's verdict."""

    SUPPORTED = "supported"
    NOT_SUPPORTED = "not supported"
    INCONCLUSIVE = "inconclusive"
    CANNOT_SHOW = "cannot show it"


SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, CANNOT_SHOW = Status  # its members, in order


@dataclass
class Arm:
    """One arm's per-seed outcomes on a part's metric: ``values`` (the finished seeds' finite values),
    ``diverged`` (seeds that diverged or ended non-finite: an outcome worse than every finished one),
    ``jobs`` and the ``name`` it is printed as. ``n`` counts both."""

    name: str
    values: list[float]
    diverged: int = 0
    jobs: list = field(default_factory=list, repr=False)
    params: float | None = None

    @property
    def n(self) -> int:
        return len(self.values) + self.diverged

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values) if self.values else math.nan

    def text(self) -> str:
        if not self.values:
            return f"{self.name}: no run"
        k = len(self.values)
        sd = math.sqrt(sum((v - self.mean) ** 2 for v in self.values) / (k - 1)) if k > 1 else None
        out = f"{self.name}: {self.mean:.4g}" + (f" ± {sd:.3g}" if sd is not None else "") + f" (n={self.n}"
        return out + (f", {self.diverged} diverged, ranked below every finished seed)" if self.diverged else ")")


@dataclass
class StabilityPoint:
    """Δ at one second-half validation: the mean over seeds and its 95 % interval (``None``: < 2 seeds a side)."""

    step: float
    delta: float
    lo: float | None = None
    hi: float | None = None


@dataclass
class Stability:
    """The second-half check of one comparison (:mod:`.stability`): the curve read, the points, the
    per-doubling trend of Δ with its 95 % interval, the limit, the ``outcome`` and a sentence."""

    metric: str
    running_best: bool = False
    points: list[StabilityPoint] = field(default_factory=list)
    slope: float | None = None
    slope_lo: float | None = None
    slope_hi: float | None = None
    limit: float | None = None
    outcome: str = "not closing"
    text: str = ""

    @property
    def shown_closing(self) -> bool:
        """Whether the curves show the gap closing (the trend's whole interval beyond the limit, or a
        late crossing): what makes a stable-ranking part inconclusive."""
        return self.outcome in ("closing", "late crossing")


@dataclass
class PartResult:
    """One part decided: ``estimate``/``lo``/``hi``, the decisive estimate and its interval (``confidence``);
    ``margin`` and ``detectable`` (the smallest true effect the seeds detect at 80 % power) in the metric's
    units; ``stability``, the second-half check; ``evidence``, every further line; ``problems``, why it is
    inconclusive (short names)."""

    label: str
    test: str
    role: str
    says: str
    verdict: Status
    reason: str
    metric: str | None = None
    estimate: float | None = None
    lo: float | None = None
    hi: float | None = None
    confidence: float | None = None
    margin: float | None = None
    margin_source: str = ""
    detectable: float | None = None
    published_effect: float | None = None
    arms: list[Arm] = field(default_factory=list)
    stability: Stability | None = None
    evidence: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)
    seeds_needed: int | None = None
    scale: str = "metric"
    sweep: str = ""

    def interval_text(self) -> str:
        if self.estimate is None:
            return "–"
        if self.lo is None or self.hi is None:
            return f"{self.estimate:+.3g}"
        conf = f"{self.confidence:.0%} " if self.confidence else ""
        ranks = " (ranks)" if self.scale == "ranks" else ""
        return f"{self.estimate:+.3g} [{conf}{self.lo:+.3g}, {self.hi:+.3g}]{ranks}"

    def record(self) -> dict:
        """The part as ``verdicts.json`` stores it."""
        return {
            "part": self.label,
            "test": self.test,
            "role": self.role,
            "says": self.says,
            "verdict": str(self.verdict),
            "reason": self.reason,
            "metric": self.metric,
            "estimate": self.estimate,
            "interval": None if self.lo is None else [self.lo, self.hi],
            "confidence": self.confidence,
            "margin": self.margin,
            "margin_source": self.margin_source,
            "detectable": self.detectable,
            "published_effect": self.published_effect,
            "stability": None
            if self.stability is None
            else {
                "curve": self.stability.metric,
                "running_best": self.stability.running_best,
                "slope": self.stability.slope,
                "slope_interval": None
                if self.stability.slope_lo is None
                else [self.stability.slope_lo, self.stability.slope_hi],
                "limit": self.stability.limit,
                "outcome": self.stability.outcome,
            },
            "problems": list(self.problems),
            "caveats": list(self.caveats),
            "seeds_needed": self.seeds_needed,
            "scale": self.scale,
            "sweep": self.sweep,
        }


@dataclass
class ClaimResult:
    """A claim decided on one sweep: its parts and the verdict they make (:func:`.engine.combine`)."""

    claim: str
    statement: str
    verdict: Status
    reason: str
    parts: list[PartResult]
    budget: str = ""
    sweep: str = ""
    published: str = ""
    headline: str = ""
    source: str = ""
    note: str = ""
    file: str = ""
    at: str = "budget"
    preregistration: dict | None = None
    scope: str = ""
    """Empty when the verdict is over every part of the claim; else the sweep(s) whose parts it is over
    (the other parts read sweeps not among these jobs: the claim's one verdict needs them all)."""

    def line(self) -> str:
        """One console line: the claim, its verdict and each part's verdict in a few words."""
        parts = "; ".join(
            f"{p.label} {p.verdict}" + (f" {p.interval_text()}" if p.estimate is not None else "")
            for p in self.parts
            if p.role != "descriptive" and "other sweep" not in p.problems
        )
        scope = f" (on the parts reading {self.scope})" if self.scope else ""
        return f"{self.claim}{scope}: {self.verdict}" + (f" — {parts}" if parts else "")

    def record(self) -> dict:
        return {
            "claim": self.claim,
            "statement": self.statement,
            "verdict": str(self.verdict),
            "reason": self.reason,
            "budget": self.budget,
            "sweep": self.sweep,
            "published": self.headline or self.published,
            "note": self.note,
            "at": self.at,
            "scope": self.scope,
            "preregistration": self.preregistration,
            "parts": [p.record() for p in self.parts],
        }
