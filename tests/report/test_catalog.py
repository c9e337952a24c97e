"""The declarations, the sweep configs, docs/claims.md and sweeps/ in step; no claim in the code."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from xformer.report import sweeps
from xformer.report.catalog import claims_markdown
from xformer.report.rules.engine import project_claims

REPO = Path(__file__).resolve().parents[2]


def test_docs_claims_md_is_generated_from_the_declarations():
    text = (REPO / "docs" / "claims.md").read_text()
    assert text == claims_markdown(), "docs/claims.md drifted; fix: python -m xformer.report.catalog > docs/claims.md"


def test_sweep_files_match_the_claim_configs():
    assert sweeps.drifted() == [], "fix: python -m xformer.report.sweeps"


def test_sweep_drift_is_detected(tmp_path):
    (tmp_path / "claims").mkdir()
    (tmp_path / "sweeps").mkdir()
    cfg = {"hydra": {"sweeper": {"params": {"model.ffn_ratio": "1,2"}}}}
    (tmp_path / "claims" / "c1_x.yaml").write_text(yaml.safe_dump(cfg))
    assert sweeps.drifted(tmp_path / "claims", tmp_path / "sweeps") == ["sweeps/c1_x.yaml"]
    (tmp_path / "sweeps" / "c1_x.yaml").write_text(sweeps.sweep_text("c1_x", tmp_path / "claims"))
    assert sweeps.drifted(tmp_path / "claims", tmp_path / "sweeps") == []
    cfg["hydra"]["sweeper"]["params"]["model.ffn_ratio"] = "1,2,4"
    (tmp_path / "claims" / "c1_x.yaml").write_text(yaml.safe_dump(cfg))
    assert sweeps.drifted(tmp_path / "claims", tmp_path / "sweeps") == ["sweeps/c1_x.yaml"]


def test_every_declared_sweep_is_a_claim_config_and_every_config_is_declared():
    configs = set(sweeps.claim_names())
    declared = {s for c in project_claims() for s in c.sweeps}
    assert declared <= configs, f"declared sweeps without a config: {declared - configs}"
    assert configs <= declared, f"claim configs no claim reads: {configs - declared}"
    assert not list(sweeps.CLAIMS_DIR.glob("*_gpu.yaml")), "GPU forms are scale=gpu, not twin configs"


def test_every_arm_selects_a_key_its_sweep_varies():
    """An arm's keys are the axes of the sweep it reads (``hydra.sweeper.params``), so a declaration
    cannot drift from its experiment unnoticed."""
    for c in project_claims():
        for p in c.parts:
            names = [p.get("sweep")] if p.get("sweep") else list(c.sweeps)
            axes = set()
            for n in names:
                cfg = yaml.safe_load((sweeps.CLAIMS_DIR / f"{n}.yaml").read_text())
                axes |= set(cfg["hydra"]["sweeper"]["params"])
            selectors = [p.get("a"), p.get("b"), p.get("at")] + [t.get("arm") for t in p.get("terms") or []]
            keys = {k for sel in selectors if sel for k in sel} | ({p.get("axis")} if p.get("axis") else set())
            assert keys <= axes, f"{c.name} {p.label}: {keys - axes} not swept by {names}"


def test_no_file_of_the_report_code_names_a_claim_or_its_sweep():
    claim_ids = re.compile(r"\bC\d{1,2}\b")
    names = sweeps.claim_names()
    found = []
    for f in (REPO / "xformer" / "report").rglob("*.py"):
        text = f.read_text()
        if claim_ids.search(text) or any(n in text for n in names):
            found.append(str(f.relative_to(REPO)))
    assert found == []


def test_a_claims_own_seed_axis_wins_over_the_scales(tmp_path):
    """C12 label smoothing names six seeds for its power; the W&B grid must run all six, once each."""
    (tmp_path / "claims").mkdir()
    cfg = {"hydra": {"sweeper": {"params": {"loss.label_smoothing": "0,0.1", "seed": "1,2,3,4,5,6"}}}}
    (tmp_path / "claims" / "c12_x.yaml").write_text(yaml.safe_dump(cfg))
    doc = yaml.safe_load(sweeps.sweep_text("c12_x", tmp_path / "claims"))
    assert doc["parameters"]["seed"] == {"values": [1, 2, 3, 4, 5, 6]}
    assert list(doc["parameters"]).count("seed") == 1
    del cfg["hydra"]["sweeper"]["params"]["seed"]
    (tmp_path / "claims" / "c12_x.yaml").write_text(yaml.safe_dump(cfg))
    doc = yaml.safe_load(sweeps.sweep_text("c12_x", tmp_path / "claims"))
    assert doc["parameters"]["seed"] == {"values": [1, 2, 3]}
