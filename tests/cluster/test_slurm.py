"""xformer on a real one-node SLURM cluster (``scripts/slurm-localhost.sh``): sweeps through
``hydra/launcher=slurm``, requeues that resume by themselves, bad launcher input.

In CI (not ``slow``): the launcher sweep, the sbatch requeue and the bad input. ``slow`` (``make
test-slow``): the time-limit requeue, a fresh job beside another job's checkpoint, DDP over ``srun``,
``scancel`` of a running sweep.

Every trained number is compared with the same job run here without SLURM (the uninterrupted
reference). The requeue signal is sent by SLURM itself (``scancel --signal``, what SLURM sends
``--signal`` seconds before a time limit) at a chosen step, from ``tests.cluster.signals``.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from tests.cluster.conftest import PYTHON, metrics, records
from tests.conftest import REPO
from tests.conftest import TINY as BASE_TINY

pytestmark = [pytest.mark.cluster, pytest.mark.slow]  # CI runs them after `make test` (.ci/run)

#: 30 steps of a tiny model; no periodic last.ckpt before the end (every_n_train_steps=100), so a
#: stop that did not save at the signal would start over
TRAIN = [
    *BASE_TINY,
    "data.tokens_per_batch=72",
    "trainer.max_steps=30",
    "trainer.val_check_interval=10",
    "trainer.deterministic=true",
]
#: hydra/launcher=slurm on this cluster's CPU partition, one CPU per job
SLURM_LAUNCHER = [
    "hydra/launcher=slurm",
    "hydra.launcher.partition=cpu",
    "hydra.launcher.gpus_per_node=0",
    "trainer.accelerator=cpu",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.timeout_min=20",
]
SAME = ("test/loss", "test/acc", "test/loss@long", "val/loss", "train/loss")


def signal_at(log: Path, batches: int, signal: str, times: int) -> list[str]:
    """Overrides adding :class:`tests.cluster.signals.SlurmSignalAt`."""
    return [
        "+callbacks.signal_at._target_=tests.cluster.signals.SlurmSignalAt",
        f"+callbacks.signal_at.batches={batches}",
        f"+callbacks.signal_at.log={log}",
        f"+callbacks.signal_at.signal={signal}",
        f"+callbacks.signal_at.times={times}",
    ]


def run_py(cluster, args: list[str], tmp: Path, timeout: float = 420) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, str(REPO / "run.py"), *args],
        cwd=tmp,
        env=cluster.env(tmp),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def fail_msg(res: subprocess.CompletedProcess) -> str:
    return f"rc={res.returncode}\nSTDOUT:\n{res.stdout[-3000:]}\nSTDERR:\n{res.stderr[-4000:]}"


def assert_same_numbers(job: Path, ref: Path) -> None:
    got, want = metrics(job), metrics(ref)
    assert got["status"] == "finished", got.get("error")
    assert got["global_step"] == want["global_step"]
    assert got["tokens_seen"] == want["tokens_seen"]
    for key in SAME:
        assert got["metrics"][key] == want["metrics"][key], (key, got["metrics"][key], want["metrics"][key])


def wandb_ids(job: Path) -> set[str]:
    return {p.name.rsplit("-", 1)[1] for p in job.glob("wandb/offline-run-*")}


def batch_script(path: Path, lines: list[str], ntasks: int = 1, log: Path | None = None) -> Path:
    """An sbatch script: ``ntasks`` tasks of one CPU, output appended across requeues to ``log``."""
    out = log or path.with_suffix(".out")
    path.write_text(
        "\n".join(
            [
                "#!/bin/bash",
                f"#SBATCH --ntasks-per-node={ntasks}",  # Lightning refuses --ntasks
                "#SBATCH --cpus-per-task=1",
                f"#SBATCH --output={out}",
                "#SBATCH --open-mode=append",
                *lines,
                "",
            ]
        )
    )
    return path


@pytest.fixture(scope="module")
def reference(slurm_cluster, tmp_path_factory) -> Path:
    """The uninterrupted job, run here without SLURM."""
    tmp = tmp_path_factory.mktemp("reference")
    res = run_py(slurm_cluster, [*TRAIN, f"hydra.run.dir={tmp / 'job'}"], tmp)
    assert res.returncode == 0, fail_msg(res)
    return tmp / "job"


@pytest.mark.slow  # 30-60 s: in `make test-slow`, out of `make test`'s 10-minute budget
def test_sweep_through_slurm_launcher_matches_local_run(slurm_cluster, reference, tmp_path):
    """Two SLURM jobs, each in its folder with metrics.json, an offline W&B run and its line in the
    sweep summary; job 0 (the reference's config) trains the reference's numbers bit for bit; the
    polling log says once that the cluster keeps no accounting, instead of submitit's warning per poll."""
    sweep = tmp_path / "sweep"
    res = run_py(
        slurm_cluster, ["-m", *SLURM_LAUNCHER, *TRAIN, "model.ffn_ratio=4,2", f"hydra.sweep.dir={sweep}"], tmp_path
    )
    assert res.returncode == 0, fail_msg(res)
    for num in (0, 1):
        assert metrics(sweep / str(num))["status"] == "finished"
        assert len(list((sweep / str(num)).glob("wandb/offline-run-*/run-*.wandb"))) == 1
    assert_same_numbers(sweep / "0", reference)
    assert metrics(sweep / "1")["metrics"]["test/loss"] != metrics(reference)["metrics"]["test/loss"]
    summary = (sweep / "sweep_summary.json").read_text()
    assert summary.count('"status": "finished"') == 2
    assert len(list((sweep / ".submitit").glob("*/*_result.pkl"))) == 2  # two SLURM jobs ran them
    out = res.stdout + res.stderr
    assert "Bypassing sacct error" not in out
    assert out.count("keeps no job accounting") <= 1


@pytest.mark.slow  # suite time: ~80 s; in CI the sbatch requeue test resumes a requeued job by itself
def test_time_limit_requeue_resumes_own_checkpoint_without_ckpt_path(slurm_cluster, reference, tmp_path):
    """submitit's time-limit signal (USR2) twice in a 2-minute job (submitit counts both as timeouts),
    max_num_timeout=2, no ckpt_path: each attempt saves at the step the signal arrived, is requeued
    by submitit and continues from that step; the job ends with the uninterrupted run's numbers,
    one W&B run, and nothing trained twice."""
    sweep, log = tmp_path / "sweep", tmp_path / "signals.jsonl"
    launcher = [o for o in SLURM_LAUNCHER if not o.startswith("hydra.launcher.timeout_min")]
    # SLURM's own signal_delay_s before the 2-minute limit comes after the job's ~3 x 20 s attempts
    launcher += ["hydra.launcher.timeout_min=2", "hydra.launcher.signal_delay_s=10", "hydra.launcher.max_num_timeout=2"]
    args = ["-m", *launcher, *TRAIN, f"hydra.sweep.dir={sweep}"]
    res = run_py(slurm_cluster, [*args, *signal_at(log, batches=7, signal="USR2", times=2)], tmp_path)
    assert res.returncode == 0, fail_msg(res)
    recs = records(log)
    signalled = [r["signal_step"] for r in recs if "signal_step" in r]
    started = [r["start_step"] for r in recs if "start_step" in r]
    assert signalled == [7, 14]
    assert started == [0, *signalled]  # lost work: 0 steps (the step in flight completed and was saved)
    assert_same_numbers(sweep / "0", reference)
    assert len(wandb_ids(sweep / "0")) == 1
    assert "ckpt_path" not in (sweep / "0" / ".hydra" / "overrides.yaml").read_text()
    assert not slurm_cluster.queued(tmp_path)
    submitit_log = "".join(p.read_text() for p in sweep.glob(".submitit/*/*_log.out"))
    assert "(1 remaining timeouts)" in submitit_log and "(0 remaining timeouts)" in submitit_log


@pytest.fixture(scope="module")
def sbatch_requeued(slurm_cluster, tmp_path_factory) -> tuple[Path, Path, Path]:
    """A plain sbatch job, ``srun python run.py ... hydra.run.dir=<fixed folder>``, sent Lightning's
    requeue signal (USR1) once at step 7. Returns ``(run folder, signals log, job output)``."""
    tmp = tmp_path_factory.mktemp("sbatch")
    run_dir, log = tmp / "run", tmp / "signals.jsonl"
    args = " ".join([*TRAIN, f"hydra.run.dir={run_dir}", *signal_at(log, batches=7, signal="USR1", times=1)])
    script = batch_script(tmp / "job.sh", [f"cd {tmp}", f"srun {PYTHON} {REPO / 'run.py'} {args}"])
    job = slurm_cluster.sbatch(script, tmp)
    slurm_cluster.wait_gone(job, tmp)
    return run_dir, log, script.with_suffix(".out")


def test_sbatch_job_requeues_on_lightning_signal_and_resumes_exactly(sbatch_requeued, reference):
    """Lightning's SLURM requeue signal (USR1): last.ckpt at the signal's step, `scontrol requeue`,
    the requeued job (same id, SLURM_RESTART_COUNT=1) continues from it by itself and ends with
    the uninterrupted run's numbers; no hpc_ckpt written mid-step."""
    run_dir, log, out = sbatch_requeued
    recs = records(log)
    assert [r["signal_step"] for r in recs if "signal_step" in r] == [7]
    assert [r["start_step"] for r in recs if "start_step" in r] == [0, 7]
    assert_same_numbers(run_dir, reference)
    assert not list(run_dir.glob("hpc_ckpt_*.ckpt"))
    assert len(wandb_ids(run_dir)) == 1
    assert "requeued SLURM job" in out.read_text()


def test_sbatch_requeued_attempts_log_that_they_resume_by_themselves(sbatch_requeued):
    """The attempt that got the signal says the job is requeued and resumes by itself, and where to see it
    wait; the next attempt says from which checkpoint and step it resumes; none gives a command to run."""
    run_dir, _, out = sbatch_requeued
    text = out.read_text()
    job = next(ln for ln in text.splitlines() if "requeued SLURM job" in ln).split("requeued SLURM job ")[1]
    job = job.split(":")[0].split()[0]
    assert f"requeued SLURM job {job}: it resumes from its last.ckpt by itself" in text
    assert f"squeue -j {job} shows it PENDING" in text
    assert f"requeued SLURM job {job} (restart 1): resuming by itself from {run_dir / 'checkpoints'}" in text
    assert "resume with:" not in text and "not requeued" not in text


@pytest.mark.slow  # the rule itself runs in CI: tests/scaling/test_slurm_units.py
def test_fresh_job_never_resumes_another_jobs_checkpoint(slurm_cluster, sbatch_requeued, reference, tmp_path):
    """A new job in the same fixed folder, requeued before it saved anything (so SLURM_RESTART_COUNT
    is 1), finds the earlier job's last.ckpt there and still trains from step 0."""
    run_dir, _, _ = sbatch_requeued
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    log = tmp_path / "signals.jsonl"
    args = " ".join([*TRAIN, f"hydra.run.dir={run_dir}", *signal_at(log, batches=10**6, signal="USR1", times=0)])
    script = batch_script(
        tmp_path / "fresh.sh",
        [
            'if [ -z "$SLURM_RESTART_COUNT" ]; then scontrol requeue "$SLURM_JOB_ID"; sleep 60; exit 0; fi',
            f"srun {PYTHON} {REPO / 'run.py'} {args}",
        ],
    )
    job = slurm_cluster.sbatch(script, tmp_path)
    slurm_cluster.wait_gone(job, tmp_path)
    assert [r["start_step"] for r in records(log)] == [0]
    assert_same_numbers(run_dir, reference)
    assert "not by this job; starting from scratch" in script.with_suffix(".out").read_text()


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["hydra.launcher.partition=nope", "seed=1,2"], "Invalid partition"),
        (["trainer=ddp", "trainer.devices=1,2"], "trainer.devices is swept"),
        (["trainer=ddp", "trainer.devices=3", "seed=1,2"], "Requested node configuration is not available"),
    ],
    ids=["unknown-partition", "swept-devices", "more-tasks-than-cpus"],
)
def test_slurm_sweep_bad_input_is_one_error_line_nothing_queued(slurm_cluster, tmp_path, overrides, says):
    sweep = tmp_path / "sweep"
    launcher = [o for o in SLURM_LAUNCHER if not o.startswith("hydra.launcher.partition")]
    if not any(o.startswith("hydra.launcher.partition") for o in overrides):
        launcher.append("hydra.launcher.partition=cpu")
    res = run_py(slurm_cluster, ["-m", *launcher, *BASE_TINY, *overrides, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert res.returncode == 2, fail_msg(res)
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and says in errors[0], res.stderr
    assert (res.stdout + res.stderr).count(says) == 1  # not also as a log line
    assert not (sweep / ".submitit").exists()
    assert not slurm_cluster.queued(tmp_path)


def test_slurm_sweep_dry_run_asks_slurm_and_queues_nothing(slurm_cluster, tmp_path):
    """`sweep.dry_run=true` under `hydra/launcher=slurm`: every job's config checked, SLURM asked
    (`sbatch --test-only`), one line per job, exit 0, no job queued; with a partition SLURM does not
    have, the dry run says so in one line (exit 2)."""
    sweep = tmp_path / "sweep"
    args = ["-m", *SLURM_LAUNCHER, *BASE_TINY, "model.ffn_ratio=1,2", "sweep.dry_run=true"]
    res = run_py(slurm_cluster, [*args, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert res.returncode == 0, fail_msg(res)
    assert len([line for line in res.stdout.splitlines() if line.startswith("[dry run] job ")]) == 2
    assert not (sweep / ".submitit").exists()
    assert not slurm_cluster.queued(tmp_path)
    bad = run_py(slurm_cluster, [*args, "hydra.launcher.partition=nope", f"hydra.sweep.dir={sweep}"], tmp_path)
    assert bad.returncode == 2 and "Invalid partition" in bad.stderr, fail_msg(bad)


@pytest.mark.slow
def test_ddp_two_tasks_over_srun_equals_two_local_processes(slurm_cluster, tmp_path):
    """`srun` starts both ranks (Lightning's SLURM environment, nothing relaunched); the job trains
    and evaluates exactly as the same DDP job with its two processes started here by Lightning."""
    args = [
        *BASE_TINY,
        "data.tokens_per_batch=72",
        "trainer.max_steps=6",
        "trainer.val_check_interval=3",
        "trainer=ddp",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
    ]
    script = batch_script(
        tmp_path / "ddp.sh",
        [f"cd {tmp_path}", f"srun {PYTHON} {REPO / 'run.py'} {' '.join(args)} hydra.run.dir={tmp_path / 'srun'}"],
        ntasks=2,
    )
    job = slurm_cluster.sbatch(script, tmp_path)
    local = run_py(slurm_cluster, [*args, f"hydra.run.dir={tmp_path / 'local'}"], tmp_path)
    assert local.returncode == 0, fail_msg(local)
    slurm_cluster.wait_gone(job, tmp_path)
    out = script.with_suffix(".out").read_text()
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in out, out[-3000:]
    assert (tmp_path / "srun" / "run_rank1.log").is_file()  # rank 1 came from srun ...
    assert not (tmp_path / "srun" / "train_ddp_process_1.log").exists()  # ... not from Lightning's launcher
    assert (tmp_path / "local" / "train_ddp_process_1.log").is_file()
    assert_same_numbers(tmp_path / "srun", tmp_path / "local")


@pytest.mark.slow
def test_ddp_job_over_srun_requeued_by_lightnings_signal_resumes_exactly(slurm_cluster, tmp_path):
    """2 DDP tasks over `srun`, Lightning's requeue signal (USR1) to both while step 3 is in flight: both ranks stop
    after the step in flight, last.ckpt is written there, rank 0 requeues the job, and the requeued job (both
    ranks) continues from it by itself; it ends with the numbers of the same DDP job run here
    uninterrupted with its two processes started by Lightning."""
    args = [
        *BASE_TINY,
        "data.tokens_per_batch=72",
        "trainer.max_steps=8",
        "trainer.val_check_interval=4",
        "trainer.deterministic=true",
        "trainer=ddp",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
    ]
    log = tmp_path / "signals.jsonl"
    signals = signal_at(log, batches=3, signal="USR1", times=1)
    command = f"srun {PYTHON} {REPO / 'run.py'} {' '.join([*args, *signals])} hydra.run.dir={tmp_path / 'srun'}"
    script = batch_script(tmp_path / "ddp.sh", [f"cd {tmp_path}", command], ntasks=2)
    job = slurm_cluster.sbatch(script, tmp_path)
    local = run_py(slurm_cluster, [*args, f"hydra.run.dir={tmp_path / 'local'}"], tmp_path)
    assert local.returncode == 0, fail_msg(local)
    slurm_cluster.wait_gone(job, tmp_path)
    out = script.with_suffix(".out").read_text()
    recs = records(log)
    assert [r["signal_step"] for r in recs if "signal_step" in r] == [3], out[-3000:]
    # the signal came while step 3 was in flight: the ranks agree at its end, it completes and is saved
    assert [r["start_step"] for r in recs if "start_step" in r] == [0, 3], out[-3000:]
    assert "requeued SLURM job" in out
    assert out.count("GLOBAL_RANK: 1, MEMBER: 2/2") == 2  # both attempts ran both ranks from srun
    assert_same_numbers(tmp_path / "srun", tmp_path / "local")


@pytest.mark.slow
def test_scancel_of_running_sweep_then_its_printed_command_resumes_it(slurm_cluster, reference, tmp_path):
    """A 2-job sweep: job 0 finishes, job 1 is cancelled with scancel while it trains (SIGTERM: it
    saves last.ckpt), the sweep's own process is stopped (Ctrl-C; without accounting it cannot see
    the cancelled job end). With the default W&B logger, whose service the SIGTERM stops too. The
    command job 1 printed skips job 0 and resumes job 1 through SLURM; it ends with the uninterrupted
    run's numbers."""
    import signal
    import time

    sweep = tmp_path / "sweep"
    slow = ["+callbacks.slow._target_=tests.reliability.first_contact_probe.SlowSteps", "+callbacks.slow.seconds=0.5"]
    # the default W&B logger: scancel's SIGTERM reaches every process of the job, W&B's service too
    cmd = [PYTHON, str(REPO / "run.py"), "-m", *SLURM_LAUNCHER, *TRAIN, *slow, f"hydra.sweep.dir={sweep}"]
    cmd = [*cmd, "trainer.max_steps=4,30"]
    first = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=slurm_cluster.env(tmp_path),
        stdout=subprocess.PIPE,
        text=True,
        # Ctrl-C reaches it as from a terminal also when the test session runs in the background (`&`,
        # nohup), whose ignored SIGINT the sweep's process would inherit and keep
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    csv = sweep / "1" / "csv" / "metrics.csv"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        done = (sweep / "0" / "metrics.json").is_file() and metrics(sweep / "0")["status"] == "finished"
        if done and csv.is_file() and csv.read_text().count("\n") > 6:
            break
        time.sleep(0.5)
    else:
        first.kill()
        raise AssertionError("job 1 did not get going")
    jobs = [line.split()[0] for line in slurm_cluster.queued(tmp_path, settle=0) if line.split()[0].endswith("_1")]
    assert len(jobs) == 1, jobs  # the array task of sweep job 1
    slurm_cluster.run(["scancel", jobs[0]], tmp_path)
    slurm_cluster.wait_gone(jobs[0], tmp_path)
    first.send_signal(signal.SIGINT)
    first.communicate(timeout=300)  # a loaded machine answers the status polls slowly
    stopped = metrics(sweep / "1")
    assert stopped["status"] == "preempted" and 0 < stopped["global_step"] < 30
    # the command the cancelled job printed: the sweep's own, SLURM launcher included (run from the
    # repository, as `python run.py`)
    saved = next(line for line in (sweep / "1" / "run.log").read_text().splitlines() if "resume with: " in line)
    printed = shlex.split(saved.split("resume with: ", 1)[1])
    assert printed[:2] == ["python", "run.py"] and printed[-1] == "-m", printed
    assert "hydra/launcher=slurm" in printed and "trainer.max_steps=4,30" in printed
    again = subprocess.run(
        [PYTHON, str(REPO / "run.py"), *printed[2:]],
        cwd=tmp_path,
        env=slurm_cluster.env(tmp_path),
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert again.returncode == 0, fail_msg(again)
    import json

    summary = {job["num"]: job for job in json.loads((sweep / "sweep_summary.json").read_text())["jobs"]}
    assert summary[0]["resume"] == "skipped" and summary[1]["resume"] == "resumed"
    logs = "".join(p.read_text() for p in sweep.glob(".submitit/*/*_log.out"))
    assert f"job 1 continues from {sweep / '1' / 'checkpoints' / 'last.ckpt'} (step {stopped['global_step']})" in logs
    assert_same_numbers(sweep / "1", reference)
