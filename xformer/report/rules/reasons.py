"""Every reason a part or a claim can be given, one template each: a ``reason`` is always :func:`reason`
of one key of :data:`REASONS`, one clause that never nests a verdict or a second reason (what an
overridden result would have read goes to the evidence lines). :func:`parse` reads a reason back to its key.
"""

from __future__ import annotations

import re
import string

REASONS: dict[str, str] = {
    # comparisons (superiority, contrast, trend steps)
    "better": "{a} is better than {b}{by}",
    "not better": "{a} is not better than {b}{by}: the interval lies below",
    "within noise": "within the noise: the interval contains {boundary}",
    "not reproduced": (
        "not reproduced at this budget: the interval [{lo}, {hi}] excludes the published effect {effect}, "
        "which these seeds detect (|Δ| ≥ {detectable} at 80 % power)"
    ),
    "contrast above": "the contrast lies above {boundary}",
    "contrast below": "the contrast lies below {boundary}",
    # non-inferiority, equivalence
    "non-inferior": "{a} is at worst {worst} worse than {b}, inside the margin {m}",
    "inferior": "{a} is worse than {b} by more than the margin {m}",
    "straddles margin": "the interval straddles −{m}: neither shown within the margin nor beyond it",
    "equivalent": "the 90 % interval [{lo}, {hi}] lies inside ±{m}",
    "different": "the 95 % interval [{lo}, {hi}] lies entirely outside ±{m}",
    "straddles both": "the intervals straddle the margin ±{m}: neither equivalent nor different at this budget",
    # diverged seeds
    "divergence count": "{counts}: the divergence count decides (exact p {p})",
    "divergence count open": "{counts}: the divergence count does not decide (exact p {p})",
    "ranks": "with diverged seeds ranked below every finished one, the ranks lie {side} {boundary} (exact p {p})",
    "ranks open": (
        "with diverged seeds ranked below every finished one, the ranks do not decide against {boundary} (exact p {p})"
    ),
    "ranks margin": "diverged seeds leave only ranks, which a margin of a contrast cannot be applied to",
    # checks every comparison gets
    "too few seeds": "too few seeds ({arms}; needs ≥ {need})",
    "saturated": "{what}: it cannot separate the arms",
    "underpowered": (
        "underpowered: the seeds detect only |Δ| ≥ {detectable} at 80 % power, above the published effect {effect}"
    ),
    "closing": "a stable ranking is not shown: {outcome} over the second half of training",
    # trend
    "every step": "every step along {axis} is better than the one before",
    "a step fails": "a step is not better: {steps}",
    "steps open": "not every step is decided: {steps}",
    "gains shrink": "the gains {unit} shrink at every step along {axis}",
    "gain grows": "the gain grows at {where}",
    "gains open": "within the noise at {where}",
    # threshold
    "count reached": "enough seeds {word} {level} in every setting (need: {need})",
    "count short": "too few seeds {word} {level}: {short}",
    "count censored": (
        "not decided: {censored} stopped before the budget without reaching {level} (censored, not misses)"
    ),
    "count few": "too few seeds (fewest: {fewest}; needs ≥ {need})",
    "growth more": "{growth}: more than ×{factor}",
    "growth at most": "{growth}: at most ×{factor}",
    "growth open": "{growth}: not shown {side} ×{factor}{censored}",
    "steps few": "too few seeds with a {metric} curve (needs ≥ {need} in each of {cells})",
    # quantity
    "quantity off": "off {target} by more than {far}: {bad}",
    "quantity within": "every value within {target} ± {tol} (largest deviation {worst})",
    "quantity between": "between ±{tol} and ±{far} of {target} (largest deviation {worst})",
    "at least": "every value ≥ {floor}",
    "below": "below {floor}: {low}",
    # not covered
    "not covered": "not covered: {what}",
    # a claim from its parts
    "claim supported": "every claim part is supported: {parts}",
    "claim refuted": "{parts} not supported",
    "claim open": "{parts}",
    "claim partly": "partly supported: {parts}",
    "precondition fails": "precondition {parts} fails",
    "cannot show": "cannot show it: precondition {parts} not established, so {refuted} cannot refute the claim",
    "precondition open": "precondition {parts} not established",
    "no claim part": "no claim part among these parts (they are printed, not decided)",
}


def reason(key: str, **fields: object) -> str:
    """The reason ``key`` with its ``fields`` filled in.

    Raises:
        KeyError: an unknown key or a missing field."""
    return REASONS[key].format(**fields)


def _pattern(template: str) -> re.Pattern:
    out = []
    for literal, name, _, _ in string.Formatter().parse(template):
        out.append(re.escape(literal))
        if name is not None:
            out.append("(.*)")
    return re.compile("^" + "".join(out) + "$", re.S)


PATTERNS = {k: _pattern(t) for k, t in REASONS.items()}


def parse(text: str) -> list[str]:
    """The keys whose template ``text`` matches (a reason made by :func:`reason` matches its own)."""
    return [k for k, p in PATTERNS.items() if p.match(text)]
