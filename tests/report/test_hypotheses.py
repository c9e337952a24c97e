"""A researcher's own hypotheses, `xformer report DIR --claims FILE`: the example of docs/report.md on a
copy of the committed FFN-ratio report, and one `error:` line (file, claim, key, fix; exit 2) for
each kind of bad input."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import REPO
from xformer.report.cli import main

HYPOTHESES = """\
H1:
  statement: FFN ratio 4 beats ratio 2 at this budget
  parts:
    - test: superiority
      a: {model.ffn_ratio: 4}
      b: {model.ffn_ratio: 2}
      metric: test/loss
H2:
  statement: ratio 2 is no worse than ratio 4 by more than 0.01 nats
  parts:
    - test: non_inferiority
      a: {model.ffn_ratio: 2}
      b: {model.ffn_ratio: 4}
      margin: 0.01
      metric: test/loss
"""


@pytest.fixture
def c1_copy(tmp_path):
    copy = tmp_path / "c1_ffn_ratio"
    shutil.copytree(REPO / "docs" / "results" / "c1_ffn_ratio", copy)
    return copy


def test_the_documented_hypotheses_come_out_h1_supported_h2_not(c1_copy, tmp_path, capsys):
    f = tmp_path / "my_hypotheses.yaml"
    f.write_text(HYPOTHESES)
    assert main([str(c1_copy), "--claims", str(f), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("H1: supported") and out[1].startswith("H2: not supported"), out
    data = json.loads((tmp_path / "out" / "verdicts.json").read_text())
    got = {c["claim"]: (c["verdict"], [(p["test"], p["verdict"]) for p in c["parts"]]) for c in data["claims"]}
    assert got == {
        "H1": ("supported", [("superiority", "supported")]),
        "H2": ("not supported", [("non_inferiority", "not supported")]),
    }
    text = (tmp_path / "out" / "report.md").read_text()
    assert "| H1 | **supported** |" in text and "C1" not in text.split("## Results")[0]


BAD = {
    "unknown test type": (
        HYPOTHESES.replace("test: superiority", "test: superiorty"),
        "claim H1, part (i), key 'test': unknown test type 'superiorty'; fix: use one of ",
    ),
    "an arm that selects no job": (
        HYPOTHESES.replace("a: {model.ffn_ratio: 4}", "a: {model.ffn_ratio: 16}"),
        "claim H1, part (i), key 'a': the arm {model.ffn_ratio=16} selects no job; the sweep has "
        "model.ffn_ratio ∈ {1, 2, 4, 8}; fix: select values the sweep ran",
    ),
    "non_inferiority without a margin": (
        HYPOTHESES.replace("      margin: 0.01\n", ""),
        "claim H2, part (i), key 'margin': non_inferiority needs 'margin'; fix: add 'margin: ",
    ),
    "a metric the sweep does not have": (
        HYPOTHESES.replace("metric: test/loss", "metric: test/bleu", 1),
        "claim H1, part (i), key 'metric': metric 'test/bleu' is not in the sweep (it has: ",
    ),
    "a YAML syntax error": (
        HYPOTHESES.replace("a: {model.ffn_ratio: 4}", "a: {model.ffn_ratio: 4"),
        ": YAML syntax error at line ",
    ),
    # declarations checked for meaning: each was accepted silently (main at a7fe2e1)
    "a claim id declared twice": (
        HYPOTHESES + HYPOTHESES.split("H2:")[0],
        "duplicate key 'H1' at line 16 (a claim id or a key declared twice: YAML would keep the last silently); "
        "fix: rename or remove one of them",
    ),
    "a claim with no claim part": (
        HYPOTHESES.replace("      metric: test/loss\nH2", "      metric: test/loss\n      role: precondition\nH2"),
        "claim H1, key 'parts': no claim part (only preconditions or descriptive parts), so nothing can decide "
        "it; fix:",
    ),
    "contrast weights that do not sum to zero": (
        HYPOTHESES
        + """H3:
  statement: a C9-shaped contrast
  parts:
    - test: contrast
      terms:
        - {weight: 1, arm: {model.ffn_ratio: 4}}
        - {weight: 1, arm: {model.ffn_ratio: 2}}
      metric: test/loss
""",
        "claim H3, part (i), key 'terms': the weights sum to 2, so the contrast compares a sum of means, not a "
        "difference; fix: make them sum to 0",
    ),
    "a relative margin on a contrast": (
        HYPOTHESES
        + """H3:
  statement: a contrast with a percentage
  parts:
    - test: contrast
      terms:
        - {weight: 1, arm: {model.ffn_ratio: 4}}
        - {weight: -1, arm: {model.ffn_ratio: 2}}
      margin: "50%"
      metric: test/loss
""",
        "claim H3, part (i), key 'margin': a contrast has no reference arm to take a percentage of; fix: give the "
        "margin in the metric's units",
    ),
    "a margin on a trend": (
        HYPOTHESES
        + """H3:
  statement: wider is better
  parts:
    - test: trend
      axis: model.ffn_ratio
      values: all
      shape: monotone
      margin: 0.01
      metric: test/loss
""",
        "claim H3, part (i), key 'margin': a trend part does not read a margin (it would be ignored); fix: remove it",
    ),
    "a trend that does not name its levels": (
        HYPOTHESES
        + """H3:
  statement: wider is better
  parts:
    - test: trend
      axis: model.ffn_ratio
      shape: monotone
      metric: test/loss
""",
        "claim H3, part (i), key 'values': a trend names the levels it needs; fix: add 'values: [1, 2, 4, 8]'",
    ),
    "a level the sweep lacks": (
        HYPOTHESES
        + """H3:
  statement: wider is better
  parts:
    - test: trend
      axis: model.ffn_ratio
      values: [1, 2, 4, 8, 16]
      shape: monotone
      metric: test/loss
""",
        "claim H3, part (i), key 'values': level(s) 16 of model.ffn_ratio missing at every job (the sweep has "
        "1, 2, 4, 8); fix: select values the sweep ran",
    ),
    "an unknown statement kind": (
        HYPOTHESES.replace("H1:\n  statement: FFN", "H1:\n  at: forever\n  statement: FFN"),
        "claim H1, key 'at': 'forever' is not what a claim can state; fix: use one of 'budget', 'stable ranking'",
    ),
}


@pytest.mark.parametrize("kind", list(BAD))
def test_bad_hypotheses_are_one_error_line_naming_file_claim_key_and_fix(kind, c1_copy, tmp_path, capsys):
    text, expected = BAD[kind]
    f = tmp_path / "h.yaml"
    f.write_text(text)
    assert main([str(c1_copy), "--claims", str(f), "--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {f}: ") and expected in lines[0], captured.err
    assert "fix" in lines[0] or "correct" in lines[0]
    assert not (tmp_path / "out").exists()  # refused before anything is written
