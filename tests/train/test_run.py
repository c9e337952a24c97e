"""run.py end to end in subprocesses: one job, and a two-job -m sweep with offline W&B runs."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.conftest import TINY as BASE_TINY

TINY = [*BASE_TINY, "trainer.max_steps=6", "trainer.val_check_interval=3"]


def run(args, tmp_path, timeout=240, env_extra=None):
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "XFORMER_CACHE": str(tmp_path / "cache"),
        "HYDRA_FULL_ERROR": "0",
        **(env_extra or {}),
    }
    env.pop("WANDB_API_KEY", None)
    return subprocess.run(
        [sys.executable, str(REPO / "run.py"), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_single_run_writes_metrics_checkpoints_history_and_offline_wandb(tmp_path):
    out = tmp_path / "job"
    res = run([*TINY, f"hydra.run.dir={out}"], tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "finished"
    assert metrics["global_step"] == 6
    for key in ("val/loss", "val/ppl", "val/acc", "val/exact_match", "test/exact_match", "test/exact_match@long"):
        assert key in metrics["metrics"], key
    assert metrics["config"]["model"]["d_model"] == 32
    assert metrics["params"]["total"] == sum(v for k, v in metrics["params"].items() if k != "total")
    assert metrics["tokens_seen"] > 0
    import torch

    numerics = metrics["numerics"]  # what a bit-identical re-run needs to match
    assert numerics["torch"] == torch.__version__ and numerics["threads"] >= 1
    assert numerics["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and numerics["cpu"]
    assert (out / "checkpoints" / "last.ckpt").is_file()
    history = (out / "csv" / "metrics.csv").read_text()
    assert "train/loss" in history and "perf/tokens_per_s" in history
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert "wandb sync" in res.stderr + res.stdout


@pytest.mark.slow  # suite time: ~17 s; in CI the sweep tests of tests/scaling run -m jobs
def test_multirun_gives_one_dir_and_one_wandb_run_per_job(tmp_path):
    sweep = tmp_path / "sweep"
    res = run([*TINY, "model.ffn_ratio=2,4", f"hydra.sweep.dir={sweep}", "-m"], tmp_path, timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit())
    assert [p.name for p in jobs] == ["0", "1"]
    groups = set()
    for job, ratio in zip(jobs, (2, 4), strict=False):
        metrics = json.loads((job / "metrics.json").read_text())
        assert metrics["config"]["model"]["ffn_ratio"] == ratio
        assert metrics["params"]["ffn"] == 2 * 2 * (2 * 32 * 32 * ratio + 32 * ratio + 32) // 2
        runs = list((job / "wandb").glob("offline-run-*"))
        assert len(runs) == 1
        record = next(runs[0].glob("*.wandb")).read_bytes()  # offline runs keep the config in this log
        assert f'"ffn_ratio":{ratio},'.encode() in record
        wb = metrics["job"]["wandb"]
        assert wb["id"] in runs[0].name and f"model.ffn_ratio={ratio}" in wb["tags"]
        assert wb["group"].encode() in record
        groups.add(wb["group"])
        assert (job / "checkpoints" / "last.ckpt").is_file()
    assert len(groups) == 1 and None not in groups  # one W&B group for the sweep
    assert not (tmp_path / "outputs").exists()  # no stray single-run folders


def test_invalid_config_fails_before_training_with_one_line(tmp_path):
    res = run([*TINY, "model.n_heads=3", "hydra.run.dir=x"], tmp_path)
    assert res.returncode == 2
    assert "model.n_heads=3" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "x" / "checkpoints").exists()


def test_tokens_seen_counts_all_training_when_the_best_checkpoint_is_earlier(tmp_path):
    """Testing reloads the best checkpoint; metrics.json must still report the tokens of the whole
    run (the last logged perf/tokens_seen), not the count stored in that earlier checkpoint."""
    import csv

    out = tmp_path / "job"
    # objective.mode=max on val/loss: the *worst* validation (the first, at step 3) is "best"
    res = run([*TINY, "objective.mode=max", f"hydra.run.dir={out}"], tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["best"]["checkpoint"].endswith("best-3.ckpt"), metrics["best"]  # step 3 of 6
    rows = list(csv.DictReader((out / "csv" / "metrics.csv").open()))
    logged = [float(r["perf/tokens_seen"]) for r in rows if r.get("perf/tokens_seen")]
    assert metrics["tokens_seen"] == int(logged[-1]) > int(logged[2])
