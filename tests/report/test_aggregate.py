"""Finding jobs, swept-key detection, grouping and mean ± std over seeds."""

from __future__ import annotations

import json
import math

import pytest

from xformer.report.aggregate import NoJobsError, Stat, aggregate, parse_override, read_curves

from .conftest import write_job, write_sweep


def test_grouping_mean_std_match_hand_calculation(tmp_path):
    write_sweep(tmp_path, "model.ffn_ratio", {2: [0.5, 0.7], 4: [0.4, 0.5, 0.9], 8: [0.3]})
    sweep = aggregate([tmp_path])
    by_ratio = {g.values["model.ffn_ratio"]: g.stat("val/loss") for g in sweep.groups}
    assert list(by_ratio) == [2, 4, 8]
    # 0.5, 0.7: mean 0.6, std sqrt((0.01 + 0.01) / 1) = 0.141421...
    assert by_ratio[2].n == 2
    assert by_ratio[2].mean == pytest.approx(0.6)
    assert by_ratio[2].std == pytest.approx(0.1414213562)
    # 0.4, 0.5, 0.9: mean 0.6, std sqrt((0.04 + 0.01 + 0.09) / 2) = sqrt(0.07) = 0.264575...
    assert by_ratio[4].n == 3
    assert by_ratio[4].mean == pytest.approx(0.6)
    assert by_ratio[4].std == pytest.approx(0.2645751311)
    # one seed: no std
    assert by_ratio[8].n == 1 and by_ratio[8].mean == pytest.approx(0.3) and by_ratio[8].std is None
    assert by_ratio[2].text() == "0.6 ± 0.141 (n=2)"


def test_failed_and_unfinished_jobs_are_listed_not_averaged(tmp_path):
    write_sweep(tmp_path, "model.ffn_ratio", {2: [0.5, 0.7]})
    write_job(tmp_path, 10, ["model.ffn_ratio=2", "seed=3"], {"val/loss": 50.0}, status="failed")
    write_job(tmp_path, 11, ["model.ffn_ratio=2", "seed=4"], {}, status="running")
    write_job(tmp_path, 12, ["model.ffn_ratio=2", "seed=5"], status=None)  # crashed before metrics.json
    sweep = aggregate([tmp_path])
    assert [j.status for j in sweep.failed] == ["failed", "running", "missing"]
    assert sweep.failed[0].overrides == {"model.ffn_ratio": 2, "seed": 3}
    (group,) = sweep.groups
    assert group.n == 2 and len(group.failed) == 3
    assert group.stat("val/loss").mean == pytest.approx(0.6)


def test_diverged_jobs_stay_in_their_group_and_count_as_nonfinite(tmp_path):
    """Diverged runs (new status, and an older 'failed' NonFiniteLossError record) are outcomes of their
    setting: kept in the group (even one whose seeds all diverged), not in the failed list."""
    write_sweep(tmp_path, "model.ffn_ratio", {2: [0.5, 0.7]})
    write_job(
        tmp_path,
        10,
        ["model.ffn_ratio=2", "seed=3"],
        {},
        status="diverged",
        summary_extra={"diverged": {"step": 17, "reason": "non-finite train/loss"}},
    )
    write_job(
        tmp_path,
        11,
        ["model.ffn_ratio=8", "seed=1"],
        {},
        status="diverged",
        summary_extra={"diverged": {"step": 3, "reason": "non-finite train/loss"}},
    )
    write_job(
        tmp_path,
        12,
        ["model.ffn_ratio=8", "seed=2"],
        {},
        status="failed",
        summary_extra={"error": "NonFiniteLossError: train/loss is nan at step 5 (epoch 0, batch 5); ..."},
    )
    write_job(
        tmp_path,
        13,
        ["model.ffn_ratio=8", "seed=3"],
        {},
        status="failed",
        summary_extra={"error": "RuntimeError: CUDA out of memory"},
    )
    sweep = aggregate([tmp_path])
    assert [j.status for j in sweep.failed] == ["failed"] and "out of memory" in sweep.failed[0].error
    assert sorted(j.diverged_step for j in sweep.diverged) == [3, 5, 17]
    g2, g8 = sweep.groups
    assert g2.values == {"model.ffn_ratio": 2} and g8.values == {"model.ffn_ratio": 8}
    assert g2.n == 2 and len(g2.diverged) == 1 and not g2.failed
    s2 = g2.stat("val/loss")
    assert s2.n == 2 and s2.n_nonfinite == 1 and s2.mean == pytest.approx(0.6)
    assert g8.n == 0 and len(g8.diverged) == 2 and len(g8.failed) == 1
    s8 = g8.stat("val/loss")
    assert s8.n == 0 and s8.n_nonfinite == 2 and s8.text() == "diverged (2)"


def test_swept_keys_exclude_seed_and_shared_overrides(tmp_path):
    for i, (ratio, seed) in enumerate([(2, 1), (2, 2), (4, 1), (4, 2)]):
        write_job(tmp_path, i, [f"model.ffn_ratio={ratio}", f"seed={seed}", "trainer.max_steps=50"], {"val/loss": 1.0})
    sweep = aggregate([tmp_path])
    assert sweep.swept_keys == ["model.ffn_ratio"]
    assert sweep.fixed == {"trainer.max_steps": 50}
    assert [g.n for g in sweep.groups] == [2, 2]


def test_group_choice_is_swept_and_filled_from_choices_when_not_overridden(tmp_path):
    write_job(tmp_path / "a", 0, ["model/pe=rope", "seed=1"], {"val/loss": 1.0})
    write_job(tmp_path / "b", 0, ["seed=1"], {"val/loss": 2.0})  # default choice: sinusoidal
    write_job(tmp_path / "b", 1, ["seed=2"], {"val/loss": 3.0})
    sweep = aggregate([tmp_path / "a", tmp_path / "b"])
    assert sweep.swept_keys == ["model/pe"]
    assert {g.values["model/pe"]: g.n for g in sweep.groups} == {"rope": 1, "sinusoidal": 2}


def test_nested_job_folders_are_found_recursively(tmp_path):
    write_sweep(tmp_path / "multirun" / "d" / "t1", "model.n_heads", {1: [1.0], 4: [0.5]})
    for num, (heads, v) in enumerate(((1, 1.2), (4, 0.7))):  # a second sweep, seed 2
        write_job(tmp_path / "multirun" / "d" / "t2", num, [f"model.n_heads={heads}", "seed=2"], {"val/loss": v})
    sweep = aggregate([tmp_path / "multirun"])
    assert len(sweep.jobs) == 4 and [g.n for g in sweep.groups] == [2, 2] and not sweep.dropped


def test_missing_or_empty_dir_raises(tmp_path):
    with pytest.raises(NoJobsError, match="no jobs found"):
        aggregate([tmp_path])
    with pytest.raises(NoJobsError, match="no such directory"):
        aggregate([tmp_path / "absent"])


def test_parse_override_and_nonfinite_stat():
    assert parse_override("+model.attn_scale=false") == ("model.attn_scale", False)
    assert parse_override("model/pe=rope") == ("model/pe", "rope")
    assert parse_override("model.dropout=0.1") == ("model.dropout", 0.1)
    s = Stat.of([1.0, math.nan, 3.0])
    assert (s.mean, s.n, s.n_nonfinite) == (2.0, 2, 1)


def test_read_curves_from_sparse_csv(tmp_path):
    job = write_job(tmp_path, 0, ["seed=1"], {"val/loss": 1.0}, curve=[(10, 3.0, 3.5), (20, 2.0, 2.5)])
    sweep = aggregate([tmp_path])
    curves = read_curves(sweep.jobs[0])
    assert curves["train/loss"] == ([10.0, 20.0], [3.0, 2.0])
    assert curves["val/loss"] == ([10.0, 20.0], [3.5, 2.5])
    assert job.is_dir()


def test_top_level_group_choice_uses_choice_not_config(tmp_path):
    write_job(tmp_path, 0, ["data=multi30k", "seed=1"], {"val/loss": 1.0})
    job = write_job(tmp_path, 1, ["seed=1"], {"val/loss": 2.0})
    text = (job / "metrics.json").read_text().replace('"model/pe"', '"data": "numbers", "model/pe"')
    (job / "metrics.json").write_text(text)
    sweep = aggregate([tmp_path])
    assert sweep.swept_keys == ["data"]
    assert [g.values["data"] for g in sweep.groups] == ["multi30k", "numbers"]


def test_curve_steps_are_updates_done_as_in_the_budget_and_checkpoint_names(tmp_path):
    """Lightning's CSV labels the validation after the k-th update ``step = k - 1``; the report counts
    updates, as ``trainer.max_steps`` (the verdict's budget), ``global_step`` and ``best-<k>.ckpt`` do.
    Before, a 1 500-step run's second half was "steps 749.5–1499", which dropped the validation at
    750 and left C10's CPU form (validation every 250) one validation short of the stability rule."""
    from tests.reliability.conftest import TINY, run_py

    job = tmp_path / "job"
    res = run_py(
        [*TINY, "trainer.max_steps=10", "trainer.val_check_interval=5", "logger=csv", f"hydra.run.dir={job}"], tmp_path
    )
    assert res.returncode == 0, res.stderr[-2000:]
    sweep = aggregate([job])
    steps, _ = read_curves(sweep.jobs[0])["val/loss"]
    assert steps == [5.0, 10.0]
    assert sweep.jobs[0].global_step == 10
    best = {p.name for p in (job / "checkpoints").glob("best-*.ckpt")}
    assert best and best <= {"best-5.ckpt", "best-10.ckpt"}


def test_a_job_reached_through_two_paths_counts_once(sweep_dir):
    """``xformer report sweep sweep/3`` counts job 3 once, not twice (compare wandb#6614): the folder is
    resolved and read once, through a symlink too."""
    one = aggregate([sweep_dir])
    both = aggregate([sweep_dir, sweep_dir / "3", sweep_dir / ".." / sweep_dir.name / "3"])
    assert len(both.jobs) == len(one.jobs) and not both.dropped
    for g1, g2 in zip(one.groups, both.groups, strict=True):
        assert g2.stat("val/loss").n == g1.stat("val/loss").n == len(g1.jobs)
    link = sweep_dir.parent / "alias"
    link.symlink_to(sweep_dir / "3")
    assert len(aggregate([sweep_dir, link]).jobs) == len(one.jobs)


def test_two_folders_with_the_same_job_are_counted_once_and_named(sweep_dir, tmp_path, caplog):
    """A copy of job 3 in another folder (same setting, same seed) is dropped with a warning naming
    both folders and the choice made; a different seed of the same setting still counts."""
    import shutil

    other = tmp_path / "rerun"
    shutil.copytree(sweep_dir / "3", other / "0")
    shutil.copytree(sweep_dir / "4", other / "1")
    (other / "1" / ".hydra" / "overrides.yaml").write_text(
        (other / "1" / ".hydra" / "overrides.yaml").read_text().replace("seed=2", "seed=7")
    )
    meta = json.loads((other / "1" / "metrics.json").read_text())
    meta["config"]["seed"] = 7
    (other / "1" / "metrics.json").write_text(json.dumps(meta))
    with caplog.at_level("WARNING"):
        sweep = aggregate([sweep_dir, other])
    assert len(sweep.dropped) == 1 and "counted once" in sweep.dropped[0]
    assert str(other / "0") in sweep.dropped[0] and str(sweep_dir / "3") in sweep.dropped[0]
    assert "counted once" in caplog.text
    n = {g.values["model.ffn_ratio"]: g.stat("val/loss").n for g in sweep.groups}
    ref = {g.values["model.ffn_ratio"]: g.stat("val/loss").n for g in aggregate([sweep_dir]).groups}
    assert n[2] == ref[2] + 1  # the seed-7 run of ratio 2 counts
    assert sum(n.values()) == sum(ref.values()) + 1  # the copy of job 3 does not


def test_the_report_command_reads_a_job_given_twice_once(sweep_dir, tmp_path):
    """``xformer report sweep sweep/3`` (the CLI's own loader) reads job 3 once, with no warning."""
    from xformer.report.cli import main

    out = tmp_path / "out"
    assert main([str(sweep_dir), str(sweep_dir / "3"), "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "counted once" not in text
    assert f"- jobs: {len(aggregate([sweep_dir]).jobs)} " in text
