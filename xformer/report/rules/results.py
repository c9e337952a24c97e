"""The result types of the claim verdicts: the outcomes as enums (:class:`Status`, :class:`Outcome`,
:class:`Check`), one comparison of two settings (:class:`Comparison`), the second-half check
(:class:`Stability`) and the verdict (:class:`Verdict`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from ..aggregate import Group
from ..catalog import MIN_POINTS
from ..stats import Interval


class Status(StrEnum):
    """A verdict: the claim is supported, not supported, or the sweep cannot decide."""

    SUPPORTED = "supported"
    NOT_SUPPORTED = "not supported"
    INCONCLUSIVE = "inconclusive"


class Outcome(StrEnum):
    """One comparison of setting A with setting B on the decision metric."""

    BETTER = "better"
    WORSE = "worse"
    NOISE = "within noise"
    FEW = "too few seeds"


class Check(StrEnum):
    """Why a verdict is inconclusive whatever the claim's rule says (the common checks, the claim's
    precondition and its power)."""

    COVERAGE = "the sweep does not cover the claim's axis"
    SEEDS = "too few seeds"
    SATURATED = "saturated"
    NO_CURVE = "no validation curve"
    FEW_POINTS = f"fewer than {MIN_POINTS} validations in the second half"
    LATE_CROSSING = "late crossing"
    CLOSING = "the gap is closing"
    OFF_MARGIN = "the gap trend leaves the margin"
    PRECONDITION = "this setting cannot show it"
    UNDERPOWERED = "underpowered"


SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE = Status.SUPPORTED, Status.NOT_SUPPORTED, Status.INCONCLUSIVE
BETTER, WORSE, NOISE, FEW = Outcome.BETTER, Outcome.WORSE, Outcome.NOISE, Outcome.FEW


@dataclass
class Comparison:
    """Setting A against setting B on one metric (Welch's t, :func:`xformer.report.stats.welch`).

    ``delta`` is A's improvement over B in the metric's better direction (positive: A better; NaN when
    a side has no finite value; ±inf when divergence decided it), ``interval`` its 95 % interval in the
    same direction (``None`` with fewer than :data:`MIN_SEEDS` finished seeds on a side, or when
    divergence decided), ``outcome`` better | worse | within noise | too few seeds, ``n_a``/``n_b`` the
    finished seeds, ``noise`` the pooled sample std, ``div_a``/``div_b`` the diverged seeds,
    ``mean_b`` B's mean (for the relative effect), ``note`` why the outcome differs from the interval
    (divergence, multiple comparisons), ``p_adj``/``family``: the Holm-adjusted p-value and the family
    size when the pair was picked as the best of ``family``; ``groups``: the two groups compared;
    ``detectable``: the smallest true |Δ| this many seeds with this spread detect with 80 % power;
    ``terms``: the weighted groups of a contrast (:func:`~.compare.compare_contrast`) instead of two groups."""

    a: str
    b: str
    delta: float
    interval: Interval | None
    outcome: str
    n_a: int = 0
    n_b: int = 0
    noise: float | None = None
    div_a: int = 0
    div_b: int = 0
    mean_b: float | None = None
    note: str = ""
    p_adj: float | None = None
    family: int | None = None
    groups: tuple[Group, Group] | None = field(default=None, repr=False)
    metric: str = ""
    detectable: float | None = None
    terms: list[tuple[float, Group]] | None = field(default=None, repr=False)

    @property
    def by_divergence(self) -> bool:
        return math.isinf(self.delta)

    def text(self) -> str:
        head = f"{self.a} vs {self.b}: "
        div = (
            f", diverged {self.div_a}/{self.n_a + self.div_a} vs {self.div_b}/{self.n_b + self.div_b}"
            if self.div_a or self.div_b
            else ""
        )
        if self.interval is not None:
            iv = self.interval
            out = f"{head}Δ {iv.text()}, Welch p={iv.p:.2g}, n={self.n_a}/{self.n_b}{div}"
            if self.detectable is not None:
                out += f", detectable |Δ| ≥ {self.detectable:.3g} at 80 % power"
        else:
            delta = (
                f"{self.delta:+.3g}"
                if math.isfinite(self.delta)
                else ("n/a" if math.isnan(self.delta) else f"{self.delta:+}")
            )
            out = f"{head}Δ {delta}, n={self.n_a}/{self.n_b}{div}"
        if self.p_adj is not None:
            out += f", Holm–Bonferroni over {self.family} comparisons: adjusted p={self.p_adj:.2g}"
        out += f" → {self.outcome}"
        return out + (f" ({self.note})" if self.note else "")

    def relative(self) -> tuple[float, float, float] | None:
        """``(Δ, lo, hi)`` as a percentage of B's mean (B's uncertainty ignored); ``None`` without an
        interval or with B's mean 0."""
        if self.interval is None or not self.mean_b:
            return None
        scale = 100.0 / abs(self.mean_b)
        return self.interval.delta * scale, self.interval.lo * scale, self.interval.hi * scale


@dataclass
class StabilityPoint:
    """Δ (A's improvement over B) of the validation metric at one step: mean over seeds and its 95 %
    Welch interval (``None`` with fewer than 2 seeds a side)."""

    step: float
    delta: float
    interval: Interval | None


@dataclass
class Stability:
    """What the validation curves say about a comparison in the second half of training (item 1 of
    :data:`xformer.report.catalog.COMMON_RULE`).

    Attributes:
        comparison: the comparison checked; ``metric``: the validation curve read; ``points``: the
        (at most :data:`MAX_POINTS`) evenly spaced validations used; ``trend``: ``(a, b)`` of
        ``Δ ≈ a + b·log2(step)`` (``None`` with fewer than 2 points); ``problems``: sentences that make
        the verdict inconclusive; ``caveats``: sentences printed beside it.
    """

    comparison: Comparison
    metric: str
    points: list[StabilityPoint] = field(default_factory=list)
    trend: tuple[float, float] | None = None
    problems: list[tuple[Check, str]] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)


@dataclass
class Verdict:
    """The outcome for one claim in one context.

    Attributes:
        claim: ``"C1"`` ...; ``status``: supported | not supported | inconclusive; ``reason``: why, in
        one sentence; ``measured``: the numbers; ``published``: the paper's; ``context``: the other swept
        values the verdict holds at (``""``: all); ``evidence``: the comparisons with their intervals and
        the checks that failed; ``rule``: the claim's rule (:mod:`xformer.report.catalog`);
        ``budget``: the training budget the verdict holds at (steps, tokens, schedule); ``key``: the
        comparison of the summary table; ``metric``: the decision metric; ``settings``: the compared
        settings ``(name, group)``; ``stability``: the second-half check of the key comparison;
        ``problems``: the checks that made it inconclusive.
    """

    claim: str
    status: str
    reason: str
    measured: str
    published: str
    context: str = ""
    evidence: list[str] = field(default_factory=list)
    rule: str = ""
    budget: str = ""
    key: Comparison | None = None
    metric: str = ""
    settings: list[tuple[str, Group]] = field(default_factory=list, repr=False)
    stability: Stability | None = None
    problems: list[Check] = field(default_factory=list)

    def line(self) -> str:
        """One line: ``C1 [ctx]: supported at <budget>: reason | measured ... | published ...``."""
        ctx = f" [{self.context}]" if self.context else ""
        at = f" at {self.budget}" if self.budget else ""
        return (
            f"{self.claim}{ctx}: {self.status}{at}: {self.reason} | measured {self.measured} "
            f"| published {self.published}"
        )

    def block(self) -> str:
        """:meth:`line`, then one indented line per piece of evidence and the rule (what the CLI prints)."""
        lines = [self.line()] + [f"    evidence: {e}" for e in self.evidence]
        if self.rule:
            lines.append(f"    rule: {self.rule}")
        return "\n".join(lines)


@dataclass
class Options:
    """What the verdicts may use beyond the sweep: ``metric`` (``--metric``), parsed ``bench`` JSON."""

    metric: str | None = None
    bench: dict | None = None
