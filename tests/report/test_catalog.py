"""One name per claim everywhere, docs/claims.md and sweeps/ in step with the code and the configs."""

from __future__ import annotations

from pathlib import Path

import yaml

from xformer.report import claims, sweeps
from xformer.report.catalog import CLAIMS, claims_markdown

REPO = Path(__file__).resolve().parents[2]


def test_docs_claims_md_is_generated_from_the_catalog():
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


def test_one_name_per_claim_in_configs_verdict_functions_and_catalog():
    functions = {fn.__name__: cid for cid, fns in claims.REGISTRY.items() for fn in fns}
    catalog = {name: cid for cid, c in CLAIMS.items() for name in c.names}
    assert set(functions) <= set(catalog) and set(functions.values()) == set(CLAIMS)
    configs = sweeps.claim_names()
    for name in configs:
        assert name in catalog, f"conf/experiment/claims/{name}.yaml has no catalog entry"
        tags = yaml.safe_load((sweeps.CLAIMS_DIR / f"{name}.yaml").read_text())["tags"]
        assert catalog[name] in tags, f"{name}: tags {tags} do not name {catalog[name]}"
    # every claim with a training sweep has a config of its own name, and a verdict function of that name
    for name, cid in catalog.items():
        if cid not in ("C2", "C7", "C8"):
            assert name in configs, f"{cid}: no conf/experiment/claims/{name}.yaml"
            assert name in functions or name == "c1_ffn_ratio_budget", f"{cid}: no verdict function {name}"
    assert not list(sweeps.CLAIMS_DIR.glob("*_gpu.yaml")), "GPU forms are scale=gpu, not twin configs"


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
