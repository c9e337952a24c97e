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
