"""Overrides that become W&B tags, run names and group names are shortened to W&B's
limits (tags <= 64 characters, names and groups <= 128), with the full text in the run's config."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.reliability.conftest import metrics, run_py, wandb_records
from xformer.jobs.wandb_run import GROUP_MAX, NAME_MAX, TAG_MAX, fit_wandb_fields, shorten

T = [
    "data.n_train=500",
    "data.n_val=20",
    "data.n_test=10",
    "data.n_long=5",
    "model.d_model=32",
    "model.n_heads=2",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=1",
    "trainer.enable_progress_bar=false",
]


def test_shorten_keeps_short_text_and_hashes_long_text():
    assert shorten("a" * 64, 64) == "a" * 64
    long_a, long_b = "x" * 100 + "a", "x" * 100 + "b"
    assert len(shorten(long_a, 64)) == 64 and shorten(long_a, 64) == shorten(long_a, 64)
    assert shorten(long_a, 64) != shorten(long_b, 64)  # same prefix, different text: different values
    with pytest.raises(ValueError):
        shorten("abc", 5)


def test_fit_wandb_fields_limits_every_field_and_reports_full_text():
    tags = ["ckpt_path=" + "/d" * 60, "", "seed=1", "ckpt_path=" + "/d" * 60]
    kwargs, full = fit_wandb_fields(name="n" * 200, group="g" * 129, tags=tags, project="p" * 130, job_type="train")
    assert len(kwargs["name"]) == NAME_MAX and len(kwargs["group"]) == GROUP_MAX
    assert len(kwargs["project"]) == 128 and kwargs["job_type"] == "train"
    assert all(1 <= len(t) <= TAG_MAX for t in kwargs["tags"]) and len(kwargs["tags"]) == 2
    assert full == {"name": "n" * 200, "group": "g" * 129, "project": "p" * 130, "tags": tags}
    assert fit_wandb_fields(name="short", tags=["a"]) == ({"name": "short", "tags": ["a"]}, {})


def _offline_config(job) -> dict:
    """The config keys of the job's (last) offline W&B run, from its ``.wandb`` records."""
    run = sorted((job / "wandb").glob("offline-run-*"))[-1]
    out = {}
    for rec in wandb_records(run):
        if rec.WhichOneof("record_type") == "config":
            for item in rec.config.update:
                out[item.key] = json.loads(item.value_json)
    return out


@pytest.mark.slow  # ~10 s: the suite stays under 10 min (make test-slow runs it)
def test_eval_with_a_long_checkpoint_path_runs_with_the_default_wandb_logger(tmp_path):
    train = tmp_path / "train"
    res = run_py([*T, "trainer.max_steps=1", "logger=csv", f"hydra.run.dir={train}"], tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    long_dir = tmp_path / ("a_rather_long_folder_name_for_checkpoints_" * 2)
    long_dir.mkdir()
    ckpt = long_dir / "last.ckpt"
    shutil.copy(train / "checkpoints" / "last.ckpt", ckpt)
    assert len(f"ckpt_path={ckpt}") > TAG_MAX
    job = tmp_path / "eval"
    res = run_py(["mode=eval", f"ckpt_path={ckpt}", f"hydra.run.dir={job}"], tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]  # not W&B's "Tag ... is 1xx characters"
    w = metrics(job)["job"]["wandb"]
    assert w["tags"] and all(len(t) <= TAG_MAX for t in w["tags"])
    assert len(w["name"]) <= NAME_MAX
    cfg = _offline_config(job)
    assert f"ckpt_path={ckpt}" in cfg["wandb_full"]["tags"]


@pytest.mark.slow  # suite time: ~10 s
def test_long_sweep_folder_and_long_overrides_give_a_short_group_and_name(tmp_path):
    sweep = tmp_path / ("s" * 70) / ("t" * 70)
    long_tag = "tags=[" + "x" * 80 + "]"
    res = run_py(
        [
            *T,
            "trainer.max_steps=1",
            "trainer.val_check_interval=1",
            "seed=0,1",
            long_tag,
            f"hydra.sweep.dir={sweep}",
            "-m",
        ],
        tmp_path,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    groups = set()
    for num in (0, 1):
        w = metrics(sweep / str(num))["job"]["wandb"]
        assert len(w["group"]) <= GROUP_MAX and all(len(t) <= TAG_MAX for t in w["tags"]), w
        groups.add(w["group"])
        full = _offline_config(sweep / str(num))["wandb_full"]
        assert full["group"] == f"{'s' * 70}_{'t' * 70}" and "x" * 80 in full["tags"]
    assert len(groups) == 1, "every job of the sweep is in the same (shortened) group"
