"""A claim's sweep freezes the declarations that read it into its folder before the first job, and a resumed sweep
records a changed declaration without overwriting the first freeze (issue 50, pre-registration by construction)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import yaml

from tests.conftest import REPO
from xformer.jobs import preregister


def _sweep(sweep_dir, *extra):
    cmd = [
        sys.executable,
        "run.py",
        "experiment=claims/c13_path_length",
        "model/mixer=mha",
        "data.distance=8",
        "seed=1",
        "data.n_train=64",
        "data.n_val=16",
        "data.n_test=16",
        "trainer.max_steps=2",
        "val_dense.every=1",
        "val_dense.until=2",
        "logger=csv",
        "trainer.enable_progress_bar=false",
        f"hydra.sweep.dir={sweep_dir}",
        *extra,
        "-m",
    ]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_a_claim_sweep_freezes_its_declaration_before_the_first_job(tmp_path):
    sweep_dir = tmp_path / "sweep"
    out = _sweep(sweep_dir)
    assert out.returncode == 0, out.stderr[-2000:]
    record = json.loads((sweep_dir / preregister.FILE).read_text())
    frozen = record["claims"]["C13"]
    declared = yaml.safe_load((REPO / "claims" / "C13.yaml").read_text())["C13"]
    # the frozen text is the file's declaration, and its hash an independent sha256 of its canonical JSON
    assert frozen["declaration"] == declared
    canonical = json.dumps(declared, sort_keys=True, separators=(",", ":"))
    assert frozen["sha256"] == hashlib.sha256(canonical.encode()).hexdigest()
    assert frozen["jobs_finished"] == 0 and frozen["n_jobs"] == 1
    assert preregister.status(record, "C13", declared)["status"] == "declared before the data"
    # the one job finished; the same sweep resumed with the same declaration records nothing new
    assert preregister.finished_jobs(sweep_dir) == 1
    assert _sweep(sweep_dir).returncode == 0
    assert json.loads((sweep_dir / preregister.FILE).read_text()) == record


def test_a_declaration_changed_after_jobs_finished_is_recorded_with_the_count(tmp_path):
    claims = tmp_path / "claims"
    claims.mkdir()
    body = {
        "statement": "ratio 2 is no worse than ratio 4",
        "sweeps": ["my_sweep"],
        "parts": [
            {"test": "non_inferiority", "a": {"model.ffn_ratio": 2}, "b": {"model.ffn_ratio": 4}, "margin": 0.01},
            {"test": "superiority", "a": {"model.ffn_ratio": 4}, "b": {"model.ffn_ratio": 2}},
        ],
    }
    (claims / "H.yaml").write_text(yaml.safe_dump({"H1": body, "H2": {**body, "sweeps": ["other"]}}))
    found = preregister.declarations_reading("my_sweep", claims)
    assert list(found) == ["H1"]
    sweep_dir = tmp_path / "sweep"
    preregister.freeze(sweep_dir, found, n_jobs=6, jobs_finished=0)
    first = json.loads((sweep_dir / preregister.FILE).read_text())
    # the margin of part 1 widened after 4 of 6 jobs had finished
    body["parts"][0]["margin"] = 0.05
    second = preregister.freeze(sweep_dir, {"H1": ("H.yaml", body)}, n_jobs=6, jobs_finished=4)
    assert second["claims"]["H1"] == first["claims"]["H1"]  # the first freeze stands
    got = preregister.status(second, "H1", body)
    assert got["status"] == "changed after the data"
    assert got["jobs_finished"] == 4 and got["changed_parts"] == [1]
    # a declaration the sweep never froze reads "not frozen"
    assert preregister.status(second, "H9", body)["status"] == "not frozen"
