"""``docs/claims.md``, generated from the claim declarations (``claims/*.yaml``):
``python -m xformer.report.catalog > docs/claims.md`` (``tests/report/test_catalog.py`` fails when the
file drifts from the declarations)."""

from __future__ import annotations

from typing import Any

from .aggregate import fmt_value
from .rules.declare import Claim
from .rules.engine import project_claims
from .rules.part import Part


def _selector(sel: Any) -> str:
    if not isinstance(sel, dict):
        return str(sel)
    return "{" + ", ".join(f"{k}={fmt_value(v)}" for k, v in sel.items()) + "}"


def part_line(p: Part) -> str:
    """One Markdown list item for a part: label, role, test, what it says, arms, metric, margin."""
    spec = p.spec
    bits = [f"**{p.label}** {p.role if p.role != 'claim' else ''} `{p.test}`".replace("  ", " ")]
    if p.says:
        bits.append(f"{p.says}.")
    arms = [f"{key} = `{_selector(spec[key])}`" for key in ("a", "b") if key in spec]
    if "terms" in spec:
        arms.append(
            "contrast " + " ".join(f"{float(t.get('weight', 1)):+g}·`{_selector(t.get('arm'))}`" for t in spec["terms"])
        )
    if "axis" in spec:
        arms.append(f"along `{spec['axis']}`" + (f" at `{_selector(spec['at'])}`" if spec.get("at") else ""))
    keys = ("shape", "per", "mode", "level", "need", "expect", "factor", "from_value", "to_value", "measure")
    arms += [f"{key} {fmt_value(spec[key])}" for key in keys if key in spec]
    if "target" in spec:
        arms.append(f"target {spec['target']} ± {spec.get('tolerance')}")
    if "at_least" in spec:
        arms.append(f"at least {spec['at_least']}")
    if p.metric:
        arms.append(f"metric `{p.metric}`")
    if p.margin is not None:
        arms.append(f"margin {p.margin.text()}")
    if p.published_effect is not None:
        arms.append(f"published effect {p.published_effect:g}")
    out = " ".join(bits) + (" " + "; ".join(arms) + "." if arms else "")
    if p.margin_source:
        out += f" Margin: {p.margin_source}."
    return out


def claim_section(c: Claim) -> list[str]:
    """The section of one claim."""
    lines = [f"## {c.name}: {c.statement}", "", f"- source: {c.source}" if c.source else ""]
    lines += [f"- sweeps: {', '.join(f'`{s}`' for s in c.sweeps)}" if c.sweeps else "- sweeps: none"]
    lines += ["- measured by `xformer bench` (`bench.json`)" if c.bench else ""]
    lines += [f"- published: {c.published}" if c.published else "", f"- how: {c.rule}" if c.rule else ""]
    lines.append(f"- declared in `{c.file.split('/claims/')[-1]}`")
    lines += ["- parts:"] + [f"  - {part_line(p)}" for p in c.parts]
    return [x for x in lines if x] + [""]


def claims_markdown(claims: list[Claim] | None = None) -> str:
    """The text of ``docs/claims.md``."""
    claims = project_claims() if claims is None else claims
    out = [
        "# The design claims",
        "",
        "Generated from the declarations in `claims/` by `python -m xformer.report.catalog > docs/claims.md` "
        "(a test fails when this file drifts from them). Each claim is one YAML file: its statement and "
        "source, the sweeps it reads (`conf/experiment/claims/<sweep>.yaml`, reported in "
        "`docs/results/<sweep>/`) and its parts, each decided by a test type; how the test types decide "
        "and the checks every part gets are in [docs/report.md](report.md#test-types).",
        "",
        "A claim is **supported** when every claim part is, **not supported** when any is refuted, otherwise "
        "**inconclusive** naming its parts; a failed precondition (a positive control) makes it **cannot "
        "show it**; descriptive parts are printed only. Run a claim's sweep with `xformer claims run "
        "<sweep>` (resumable) and read it with `xformer report multirun/claims/<sweep>/cpu`; decide your "
        "own hypotheses the same way with `xformer report DIR --claims my_hypotheses.yaml`.",
        "",
    ]
    for c in claims:
        out += claim_section(c)
    return "\n".join(out)


if __name__ == "__main__":
    print(claims_markdown(), end="")
