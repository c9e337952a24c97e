"""What W&B receives from a 2-job offline sweep, read from the offline run files, and the workspace
specification ``xformer dashboard`` builds for it.

wandb 0.31 has no Python reader for ``.wandb`` files (the Go core writes and syncs them), so the
records are read with ``tests/scaling/wandb_records.py``; tables are the JSON files W&B writes
beside them (``files/media/table/...``), exactly what ``wandb sync`` uploads."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.reliability.conftest import TINY, env_for, run_py
from tests.scaling.wandb_records import finished_records


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dash")
    root = tmp / "sweep"
    res = run_py(
        [
            *TINY,
            "data.n_val=40",
            "trainer.max_steps=4",
            "trainer.val_check_interval=2",
            "model.ffn_ratio=2,4",
            f"hydra.sweep.dir={root}",
            "-m",
        ],
        tmp,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return tmp, root


def _run_dir(job):
    runs = sorted(job.glob("wandb/offline-run-*"))
    assert len(runs) == 1
    return runs[0]


def _config_and_summary(run_dir):
    config, summary, metrics = {}, {}, {}
    for rec in finished_records(next(run_dir.glob("run-*.wandb"))):
        kind = rec.WhichOneof("record_type")
        if kind == "config":
            for u in rec.config.update:
                config[u.key or "/".join(u.nested_key)] = json.loads(u.value_json)
        elif kind == "summary":
            for u in rec.summary.update:
                summary[u.key or "/".join(u.nested_key)] = json.loads(u.value_json)
        elif kind == "metric" and rec.metric.name:
            metrics[rec.metric.name] = rec.metric
    return config, summary, metrics


@pytest.mark.parametrize("job,ratio", [("0", 2), ("1", 4)])
def test_each_run_has_best_value_summaries_swept_keys_and_a_16_row_sample_table(sweep, job, ratio):
    _, root = sweep
    run_dir = _run_dir(root / job)
    config, summary, metrics = _config_and_summary(run_dir)
    assert metrics["val/loss"].summary.min and metrics["val/loss"].step_metric == "trainer/global_step"
    assert metrics["val/exact_match"].summary.max and metrics["val/acc"].summary.max
    history = [float(r["val/loss"]) for r in _csv_rows(root / job) if r.get("val/loss")]
    assert summary["val/loss"] == {"min": pytest.approx(min(history))}
    assert set(summary["val/exact_match"]) == {"max"}
    assert config["swept"] == ["model.ffn_ratio"] and config["model_ffn_ratio"] == ratio
    assert config["params/total"] == sum(
        v for k, v in config.items() if k.startswith("params/") and k != "params/total"
    )
    tables = sorted((run_dir / "files" / "media" / "table" / "val").glob("samples_*.table.json"))
    assert len(tables) == 2  # one per validation (steps 2 and 4)
    steps = set()
    for path in tables:
        table = json.loads(path.read_text())
        assert table["columns"] == ["step", "source", "reference", "hypothesis"] and len(table["data"]) == 16
        assert len({row[0] for row in table["data"]}) == 1
        steps.add(table["data"][0][0])
    assert steps == {2, 4}
    meta = json.loads((root / job / "metrics.json").read_text())["job"]["wandb"]
    assert meta["name"] == f"model.ffn_ratio={ratio}"  # the override that differs between the jobs


def _csv_rows(job):
    import csv

    with open(job / "csv" / "metrics.csv") as fh:
        return list(csv.DictReader(fh))


def test_dashboard_specification_names_the_swept_key_and_the_objective(sweep):
    tmp, root = sweep
    res = subprocess.run(
        [sys.executable, "-m", "xformer.cli", "dashboard", str(root)],
        capture_output=True,
        text=True,
        env=env_for(tmp),
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert "--publish" in res.stdout and "not published" in res.stdout
    # the printout says what the file is for, the next steps, and what to read offline
    assert "nothing in it is readable offline" in res.stdout
    assert f"wandb sync {root}/*/wandb/offline-run-*" in res.stdout and f"xformer report {root}" in res.stdout
    spec = json.loads((root / "wandb_dashboard.json").read_text())
    assert spec["facts"]["swept"] == ["model.ffn_ratio"] and spec["facts"]["objective"] == "val/loss"
    sections = {s["name"]: s["panels"] for s in spec["workspace"]["sections"]}
    assert list(sections) == ["Curves", "Objective by setting", "Parallel coordinates", "Samples"]
    curves = sections["Curves"]
    assert [p["y"] for p in curves] == [["val/loss"], ["val/exact_match"]]
    assert all(p["x"] == "trainer/global_step" and p["groupby"] == {"name": "model_ffn_ratio"} for p in curves)
    scatter, bars = sections["Objective by setting"]
    assert scatter["x"] == {"name": "model_ffn_ratio"} and scatter["y"] == {"name": "val/loss"}
    assert bars["metrics"] == [{"name": "val/loss"}] and bars["groupby"] == {"name": "model_ffn_ratio"}
    coords, importance = sections["Parallel coordinates"]
    assert [c["metric"]["name"] for c in coords["columns"]] == ["model_ffn_ratio", "val/loss"]
    assert importance["with_respect_to"] == "val/loss"
    assert (
        sections["Samples"] == [{"layout": sections["Samples"][0]["layout"], "table_name": "val/samples"}]
        or sections["Samples"][0]["table_name"] == "val/samples"
    )
    view = json.dumps(spec["view"])
    assert "config:model_ffn_ratio.value" in view and "summary:val/loss" in view
    group = json.loads((root / "0" / "metrics.json").read_text())["job"]["wandb"]["group"]
    assert spec["facts"]["group"] == group and group in json.dumps(spec["workspace"]["runset_settings"])


def test_dashboard_of_a_folder_that_is_not_a_sweep_is_one_error_line(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "xformer.cli", "dashboard", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env_for(tmp_path),
        timeout=60,
    )
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error:") and "multirun.yaml" in res.stderr


def test_swept_keys_come_from_comma_lists_sweep_functions_and_sweeper_params(tmp_path):
    from xformer.jobs.overrides import swept_keys
    from xformer.jobs.wandb_panels import swept_values, top_level_key

    (tmp_path / "multirun.yaml").write_text(
        textwrap.dedent("""\
        hydra:
          overrides:
            task:
            - model.ffn_ratio=2,4
            - data.n_train=300
            - model/norm=pre,post
            - seed=range(1,4)
            - hydra.job.x=1
          sweeper:
            params:
              model.dropout: 0,0.1
              optim.lr: 0.001
        """)
    )
    keys = swept_keys(tmp_path)
    assert keys == ["model.ffn_ratio", "model/norm", "seed", "model.dropout"]
    assert swept_keys(None) == [] and swept_keys(tmp_path / "nope") == []
    assert top_level_key("model/norm") == "model_norm" and top_level_key("+model.d_head") == "model_d_head"
    values = swept_values(keys, ["model.ffn_ratio=4", "model/norm=pre", "seed=2"], {"model": {"dropout": 0.1}})
    assert values == {"model_ffn_ratio": 4, "model_norm": "pre", "seed": 2, "model_dropout": 0.1}


def test_swept_keys_are_read_with_hydras_parser(tmp_path):
    """A list value (``tags=[a,b]``, ``x=[1,2]``) is one value, not a sweep; comma
    lists, sweep functions (range, interval, Optuna's tag(...)) and ``hydra.sweeper.params`` are."""
    from omegaconf import OmegaConf

    from xformer.jobs.overrides import swept_keys

    OmegaConf.save(
        {
            "hydra": {
                "overrides": {"task": ["model.ffn_ratio=2,4", "tags=[a,b]", "x=[1,2]", "y=range(1,3)", "z=3"]},
                "sweeper": {"params": {"model/pe": "rope,alibi", "optim.lr": "tag(log,interval(1e-4,3e-3))"}},
            }
        },
        tmp_path / "multirun.yaml",
    )
    assert swept_keys(tmp_path) == ["model.ffn_ratio", "y", "model/pe", "optim.lr"]
