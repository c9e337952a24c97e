"""The statistics behind every claim verdict: Welch's t interval and test on a difference of means over
seeds, the Welch–Satterthwaite interval of a contrast, and the detectable effect at 80 % power.

Welch, B. L. (1947), "The generalization of 'Student's' problem when several different population
variances are involved", Biometrika 34; the interval is the textbook
``Δ ± t_{1-α/2, ν} · sqrt(s_A²/n_A + s_B²/n_B)`` with the Welch–Satterthwaite degrees of freedom ``ν``.
TOST: Schuirmann (1987); equivalence within ``±m`` at level α holds when the ``1 - 2α`` interval of the
difference lies inside ``(-m, m)``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from scipy import stats as _st
from scipy.optimize import brentq as _brentq

CONFIDENCE = 0.95
"""Two-sided confidence of the intervals printed in verdicts (α = 0.05)."""


@dataclass(frozen=True)
class Interval:
    """A difference of means (``delta``: mean(A) - mean(B), in the metric's units) with its interval
    ``lo <= delta <= hi`` at level ``confidence``, the two-sided p-value ``p`` of no difference, the
    Welch–Satterthwaite degrees of freedom ``df`` and the standard error ``se``. Without spread in either
    sample: ``lo == hi == delta``, ``p`` 1 (equal means) or 0, ``df`` infinite, ``se`` 0."""

    delta: float
    lo: float
    hi: float
    p: float
    df: float
    confidence: float
    se: float = math.nan


def welch(a: list[float], b: list[float], confidence: float = CONFIDENCE) -> Interval:
    """Welch's t :class:`Interval` (two-sided ``confidence``, in (0, 1)) and test of ``mean(a) - mean(b)``,
    over finite per-seed values of one metric in two settings, at least 2 each.

    Raises:
        ValueError: fewer than 2 values on a side, a non-finite value, or ``confidence`` outside (0, 1).
    """
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"welch: needs at least 2 values per side, got {len(a)} and {len(b)}")
    if not all(math.isfinite(v) for v in [*a, *b]):
        raise ValueError("welch: values must be finite")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"welch: confidence={confidence} must be in (0, 1)")
    na, nb = len(a), len(b)
    ma, mb = sum(a) / na, sum(b) / nb
    va = sum((x - ma) ** 2 for x in a) / (na - 1)
    vb = sum((x - mb) ** 2 for x in b) / (nb - 1)
    se2 = va / na + vb / nb
    df = se2**2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1)) if se2 else math.inf
    return _t_interval(ma - mb, se2, df, confidence)


def _t_interval(delta: float, se2: float, df: float, confidence: float) -> Interval:
    """The t interval and two-sided test of ``delta`` with variance ``se2`` and ``df`` degrees of freedom
    (``delta`` exactly, p 1 or 0, without spread)."""
    if se2 == 0.0:
        return Interval(delta, delta, delta, 1.0 if delta == 0 else 0.0, math.inf, confidence, 0.0)
    se = math.sqrt(se2)
    t_crit = float(_st.t.ppf(0.5 + confidence / 2, df))
    p = float(2 * _st.t.sf(abs(delta) / se, df))
    return Interval(delta, delta - t_crit * se, delta + t_crit * se, p, df, confidence, se)


def mean_interval(values: list[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """``(mean, lo, hi)``: Student's t interval of the mean of ``values`` (``lo == hi == mean`` for one
    value or no spread), the error bars of the report's plots. Raises ValueError: no value, or a non-finite one."""
    if not values or not all(math.isfinite(v) for v in values):
        raise ValueError("mean_interval: needs at least one finite value and no non-finite one")
    n = len(values)
    m = sum(values) / n
    if n < 2:
        return m, m, m
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))
    half = float(_st.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    return m, m - half, m + half


POWER = 0.8
"""The power the detectable difference is stated at (the usual 80 %; Cohen 1988 §2.4)."""


def detectable_difference(
    sd: float, n_a: int, n_b: int, alpha: float = 1 - CONFIDENCE, power: float = POWER
) -> float | None:
    """The smallest true difference (units of ``sd``) a two-sided two-sample t-test at level ``alpha``
    detects with probability ``power``, for a per-seed standard deviation ``sd`` and ``n_a``/``n_b`` seeds:
    solved on the noncentral t distribution (ν = n_a + n_b − 2, noncentrality ``δ / (sd·√(1/n_a + 1/n_b))``;
    Cohen 1988 §2.4). ``None`` with fewer than 2 seeds a side or no finite spread."""
    if n_a < 2 or n_b < 2 or sd is None or not math.isfinite(sd):
        return None
    return detectable_for(sd * math.sqrt(1 / n_a + 1 / n_b), n_a + n_b - 2, alpha, power)


def seeds_needed(
    sd: float, effect: float, alpha: float = 1 - CONFIDENCE, power: float = POWER, most: int = 1000
) -> int:
    """Seeds per side for :func:`detectable_difference` with equal sides to reach ``|effect|``
    (``most + 1`` when even ``most`` seeds a side do not; 2 when ``sd`` is 0)."""
    if sd == 0:
        return 2
    for n in range(2, most + 1):
        mde = detectable_difference(sd, n, n, alpha, power)
        if mde is not None and mde <= abs(effect):
            return n
    return most + 1


def contrast(samples: list[list[float]], weights: list[float], confidence: float = CONFIDENCE) -> Interval:
    """Welch's interval for a linear contrast ``Σ wᵢ·mean(samplesᵢ)`` of independent settings, e.g. an
    interaction ``(A₁ − B₁) − (A₂ − B₂)`` (weights 1, −1, −1, 1): variance ``Σ wᵢ² sᵢ²/nᵢ``,
    Welch–Satterthwaite degrees of freedom (Satterthwaite 1946); with weights (1, −1) it is :func:`welch`.

    Raises:
        ValueError: fewer than 2 values in a sample, a non-finite value, or not one weight per sample.
    """
    if len(samples) != len(weights):
        raise ValueError(f"contrast: {len(samples)} samples for {len(weights)} weights")
    if any(len(s) < 2 for s in samples):
        raise ValueError("contrast: needs at least 2 values per sample")
    if not all(math.isfinite(v) for s in samples for v in s):
        raise ValueError("contrast: values must be finite")
    means = [sum(s) / len(s) for s in samples]
    parts = [
        w * w * sum((x - m) ** 2 for x in s) / (len(s) - 1) / len(s)
        for s, w, m in zip(samples, weights, means, strict=True)
    ]
    se2 = sum(parts)
    df = se2**2 / sum(p * p / (len(s) - 1) for p, s in zip(parts, samples, strict=True) if p) if se2 else math.inf
    return _t_interval(sum(w * m for w, m in zip(weights, means, strict=True)), se2, df, confidence)


def detectable_for(se: float, df: float, alpha: float = 1 - CONFIDENCE, power: float = POWER) -> float | None:
    """The detectable |difference| (``power``, two-sided ``alpha``) of an estimate with standard
    error ``se`` and ``df`` degrees of freedom (as :func:`detectable_difference`, for a contrast).
    The multiple of ``se`` depends on ``df`` alone; it is solved once per ``df`` rounded to 0.01."""
    if not math.isfinite(se) or not df or df < 1:
        return None
    return _noncentrality(round(min(df, 1e6), 2), alpha, power) * se


def c4(df: float) -> float:
    """E[s]/σ for a sample standard deviation with ``df`` degrees of freedom (normal data):
    ``sqrt(2/df)·Γ((df+1)/2)/Γ(df/2)``; 1 for ``df`` infinite."""
    if not math.isfinite(df) or df > 1e6:
        return 1.0
    return math.sqrt(2.0 / df) * math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2))


def detectable_planned(
    se: float, df: float, alpha: float = 1 - CONFIDENCE, power: float = POWER, tests: int = 1
) -> float | None:
    """The detectable effect the report prints: :func:`detectable_for` at the standard error
    corrected for its bias (an observed ``se`` underestimates the true one by :func:`c4` on average, so
    a detectable effect read from it has less than ``power``), and for ``tests`` steps that must all be
    detected (each at ``power ** (1 / tests)``)."""
    if not math.isfinite(se) or not df or df < 1:
        return None
    return detectable_for(se / c4(df), df, alpha, power ** (1.0 / tests))


@functools.lru_cache(maxsize=4096)
def _noncentrality(nu: float, alpha: float, power: float) -> float:
    """The noncentrality at which a two-sided t-test at ``alpha`` with ``nu`` degrees of freedom has ``power``."""
    crit = float(_st.t.ppf(1 - alpha / 2, nu))

    def short(nc: float) -> float:
        lower = float(_st.nct.cdf(-crit, nu, nc))
        return float(_st.nct.sf(crit, nu, nc)) + (lower if math.isfinite(lower) else 0.0) - power

    return float(_brentq(short, 0.0, 30.0))
