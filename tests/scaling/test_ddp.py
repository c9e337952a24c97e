"""DDP on CPU (gloo, 2 processes): one run, metrics equal to a single process, torchrun, FSDP, ddp_spawn."""

from __future__ import annotations

import shutil
import sys

import pytest

from tests.conftest import REPO
from tests.scaling.common import DDP_CPU, TINY, fail_msg, metrics, run_py, wandb_run_files
from tests.scaling.wandb_records import exit_codes

EVAL_KEYS = (
    "test/loss",
    "test/acc",
    "test/ppl",
    "test/exact_match",
    "test/loss@long",
    "test/acc@long",
    "test/exact_match@long",
)


@pytest.fixture(scope="module")
def ddp_job(tmp_path_factory):
    """One 2-rank DDP job (4 steps, global batch 2 x 72 tokens)."""
    root = tmp_path_factory.mktemp("ddp")
    res = run_py([*TINY, *DDP_CPU, f"hydra.run.dir={root / 'job'}"], cwd=root, tmp_path=root)
    return root, res


@pytest.mark.slow  # 30-60 s: in `make test-slow`, out of `make test`'s 10-minute budget
def test_ddp_single_run_one_metrics_json_one_wandb_run(ddp_job):
    root, res = ddp_job
    assert res.returncode == 0, fail_msg(res)
    job = root / "job"
    m = metrics(job)
    assert m["status"] == "finished" and m["global_step"] == 4
    assert m["config"]["trainer"]["strategy"]["_target_"].endswith(".ddp_strategy")
    assert m["config"]["trainer"]["devices"] == 2
    for key in ("val/loss", "val/exact_match", "test/loss", "test/exact_match", "test/exact_match@long"):
        assert key in m["metrics"], key
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in res.stdout + res.stderr
    assert (job / "train_ddp_process_1.log").is_file()  # rank 1 ran this job, in this folder
    runs = wandb_run_files(job)
    assert len(runs) == 1 and exit_codes(runs[0]) == [0]  # one W&B run (rank 0), finished cleanly
    assert m["tokens_seen"] > 0
    assert not (root / "outputs").exists() and not (root / "multirun").exists()  # no stray folders


def test_ddp_console_shows_each_validation_and_no_sync_dist_advice(ddp_job):
    """xformer reduces its validation and test metrics over the ranks itself (every rank holds the
    total), so Lightning's advice to log them with sync_dist=True does not apply and is not shown."""
    root, res = ddp_job
    assert res.returncode == 0, fail_msg(res)
    out = res.stdout + res.stderr
    assert out.count("sync_dist=True") == 0, out[-3000:]
    assert out.count("validation at step") == 2  # steps 2 and 4, from rank 0 only


@pytest.mark.slow  # 30-60 s: in `make test-slow`, out of `make test`'s 10-minute budget
def test_ddp_eval_equals_single_process_on_same_checkpoint(ddp_job):
    """Validation/test under DDP count every example once: the sampler's padded duplicates (odd batch
    counts) are dropped by idx, so losses, accuracy and exact match equal one process exactly. The DDP
    job tested its best checkpoint on 2 ranks; here one process evaluates that checkpoint."""
    root, res = ddp_job
    assert res.returncode == 0, fail_msg(res)
    m_ddp = metrics(root / "job")
    ckpt = m_ddp["best"]["checkpoint"]
    one = run_py(
        [*TINY, "mode=eval", f"ckpt_path={ckpt}", "logger=none", f"hydra.run.dir={root / 'eval1'}"],
        cwd=root,
        tmp_path=root,
    )
    assert one.returncode == 0, fail_msg(one)
    m_one = metrics(root / "eval1")["metrics"]
    for key in EVAL_KEYS:
        assert m_ddp["metrics"][key] == m_one[key], (key, m_ddp["metrics"][key], m_one[key])


def test_ddp_training_equals_single_process_with_same_global_batch(ddp_job, tmp_path):
    """2 ranks x 72 tokens per device == 1 process x 72 tokens x accumulate_grad_batches=2: rank r takes
    batches r, r+2, ... of the same sequence, so every optimizer step sees the same examples."""
    root, res = ddp_job
    assert res.returncode == 0, fail_msg(res)
    # validation every 2 optimizer steps in both runs (val_check_interval counts optimizer steps)
    single = run_py(
        [
            *TINY,
            "trainer.accumulate_grad_batches=2",
            "trainer.val_check_interval=2",
            "logger=none",
            f"hydra.run.dir={tmp_path / 'single'}",
        ],
        cwd=tmp_path,
        tmp_path=tmp_path,
    )
    assert single.returncode == 0, fail_msg(single)
    m_ddp, m_one = metrics(root / "job"), metrics(tmp_path / "single")
    assert m_one["global_step"] == m_ddp["global_step"] == 4
    for key in ("val/loss", "val/acc", *EVAL_KEYS):
        assert m_ddp["metrics"][key] == pytest.approx(m_one["metrics"][key], rel=1e-4, abs=1e-6), key


@pytest.mark.slow  # suite time: ~45 s, two DDP runs
def test_ddp_job_resumed_counts_each_ranks_tokens_once(ddp_job, tmp_path):
    """The 4-step DDP job continued to 6 steps with ``ckpt_path=last`` ends with the ``tokens_seen``
    and numbers of the same 6-step DDP job run without a stop (was: every rank resumed rank 0's own
    count, so rank 0's tokens before the stop were counted twice and rank 1's not at all)."""
    root, res = ddp_job
    assert res.returncode == 0, fail_msg(res)
    job = tmp_path / "job"
    shutil.copytree(root / "job", job)
    longer = [*TINY, *DDP_CPU, "trainer.max_steps=6"]
    resumed = run_py([*longer, f"hydra.run.dir={job}", "ckpt_path=last"], cwd=tmp_path, tmp_path=root)
    assert resumed.returncode == 0, fail_msg(resumed)
    ref = run_py([*longer, f"hydra.run.dir={tmp_path / 'ref'}"], cwd=tmp_path, tmp_path=root)
    assert ref.returncode == 0, fail_msg(ref)
    m, m_ref = metrics(job), metrics(tmp_path / "ref")
    assert m["global_step"] == m_ref["global_step"] == 6
    assert m["tokens_seen"] == m_ref["tokens_seen"]
    for key in ("val/loss", "train/loss", *EVAL_KEYS):
        assert m["metrics"][key] == m_ref["metrics"][key], key


def test_torchrun_two_ranks_same_config_no_stray_folders(tmp_path):
    """Processes created by torchrun: Lightning joins them (no relaunch); rank 1 writes no outputs/ folder."""
    prefix = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(REPO / "run.py")]
    res = run_py(
        [*TINY, *DDP_CPU, "trainer.max_steps=2"], cwd=tmp_path, tmp_path=tmp_path, prefix=prefix, TMPDIR=str(tmp_path)
    )
    assert res.returncode == 0, fail_msg(res)
    jobs = [p for p in (tmp_path / "outputs").glob("*/*") if p.is_dir()]
    assert len(jobs) == 1, jobs  # rank 0's folder only, whatever second each rank started in
    m = metrics(jobs[0])
    assert m["status"] == "finished" and m["global_step"] == 2
    assert len(wandb_run_files(jobs[0])) == 1
    assert not list(jobs[0].glob("train_ddp_process_*.log"))  # nothing was re-launched
    assert len(list(tmp_path.glob("xformer-rank1-*/run_rank1.log"))) == 1  # rank 1's Hydra log, outside outputs/


@pytest.mark.slow
def test_ddp_spawn_console_and_wandb_files_are_the_jobs(tmp_path):
    """Ranks started by torch.multiprocessing log the validation lines to the console and the job's
    run.log, show no sync_dist advice, and write W&B's files (the sample tables) into the job folder,
    not into ./wandb of the folder the job was launched from."""
    job = tmp_path / "job"
    res = run_py(
        [*TINY, "trainer=ddp_spawn", "trainer.accelerator=cpu", "trainer.devices=2", f"hydra.run.dir={job}"],
        cwd=tmp_path,
        tmp_path=tmp_path,
        timeout=400,
    )
    assert res.returncode == 0, fail_msg(res)
    out = res.stdout + res.stderr
    assert out.count("sync_dist=True") == 0, out[-3000:]
    assert out.count("validation at step") == 2 and (job / "run.log").read_text().count("validation at step") == 2
    assert not (tmp_path / "wandb").exists()
    assert len(wandb_run_files(job)) == 1
    assert list(job.glob("wandb/offline-run-*/files/media/table/val/samples_*.table.json"))
    m = metrics(job)
    assert m["status"] == "finished" and "test/loss" in m["metrics"] and "val/loss" in m["metrics"]


@pytest.mark.slow
@pytest.mark.parametrize("trainer", ["fsdp"])
def test_fsdp_runs_on_cpu(trainer, tmp_path):
    res = run_py(
        [
            *TINY,
            f"trainer={trainer}",
            "trainer.accelerator=cpu",
            "trainer.devices=2",
            "logger=none",
            f"hydra.run.dir={tmp_path / 'job'}",
        ],
        cwd=tmp_path,
        tmp_path=tmp_path,
        timeout=400,
    )
    # TINY's 72-token batches give ranks different decoding lengths: FSDP must not all-gather per step
    assert res.returncode == 0, fail_msg(res)
    m = metrics(tmp_path / "job")
    assert m["status"] == "finished"
    if trainer == "fsdp":  # ddp_spawn trains in forked ranks: the job process never counts the steps
        assert m["global_step"] == 4 and m["tokens_seen"] > 0
    assert "test/loss" in m["metrics"] and "val/loss" in m["metrics"]
    assert (tmp_path / "job" / "checkpoints" / "last.ckpt").is_file()


def _train_losses(job) -> dict[int, float]:
    """``{update: train/loss}`` from the job's CSV log (the k-th update's row is labelled k - 1)."""
    import csv

    rows = csv.DictReader((job / "csv" / "metrics.csv").open())
    return {int(r["step"]) + 1: float(r["train/loss"]) for r in rows if r.get("train/loss")}


@pytest.mark.slow
@pytest.mark.parametrize("n_train", [66, 78], ids=["9-batches", "11-batches"])  # at 72 tokens a batch
def test_ddp_uneven_epoch_tail_trains_each_batch_once(n_train, tmp_path):
    """An epoch of an odd number of batches over 2 ranks. Rank 1's missing last batch is a weightless
    copy, not a repeat of batch 0 trained twice (pytorch#25162's DistributedSampler padding), so
    2 ranks equal one process x ``accumulate_grad_batches=2`` in tokens seen and in the loss of every
    update, through the epoch end (7 updates: the epoch has ceil(batches / 2) of them)."""
    common = [*TINY, f"data.n_train={n_train}", "trainer.max_steps=7", "logger=csv"]
    ddp = run_py([*common, *DDP_CPU, f"hydra.run.dir={tmp_path / 'ddp'}"], cwd=tmp_path, tmp_path=tmp_path)
    one = run_py(
        [*common, "trainer.accumulate_grad_batches=2", f"hydra.run.dir={tmp_path / 'one'}"],
        cwd=tmp_path,
        tmp_path=tmp_path,
    )
    assert ddp.returncode == 0, fail_msg(ddp)
    assert one.returncode == 0, fail_msg(one)
    m_ddp, m_one = metrics(tmp_path / "ddp"), metrics(tmp_path / "one")
    assert m_ddp["global_step"] == m_one["global_step"] == 7
    assert m_ddp["tokens_seen"] == m_one["tokens_seen"], (m_ddp["tokens_seen"], m_one["tokens_seen"])
    l_ddp, l_one = _train_losses(tmp_path / "ddp"), _train_losses(tmp_path / "one")
    assert sorted(l_ddp) == sorted(l_one) == list(range(1, 8))
    for step in l_one:
        assert l_ddp[step] == pytest.approx(l_one[step], rel=1e-5), (step, l_ddp[step], l_one[step])
