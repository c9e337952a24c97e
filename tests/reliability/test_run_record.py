"""How a job ended maps to one status and one exit code (README, "When things go wrong"), and
``metrics.json`` read and written through :class:`~xformer.jobs.record.RunRecord` keeps its bytes."""

from __future__ import annotations

import errno
import json

import pytest
from lightning.pytorch.utilities.exceptions import SIGTERMException

from xformer.data.errors import DataError
from xformer.errors import ConfigError
from xformer.jobs.callbacks import NonFiniteLossError
from xformer.jobs.context import outcome_of
from xformer.jobs.record import RunRecord, Status, read_record


@pytest.mark.parametrize(
    "ending, want",
    [
        ({}, ("finished", 0, False)),
        ({"rose": {"step": 4, "reason": "val/loss rose"}}, ("diverged", 0, False)),
        ({"err": ConfigError("model.n_heads=3: ...")}, ("failed", 2, True)),
        ({"err": DataError("data.root=/x: no such folder")}, ("failed", 2, True)),
        ({"err": NonFiniteLossError("train/loss is nan at step 3", step=3)}, ("diverged", 1, True)),
        ({"err": OSError(errno.ENOSPC, "No space left on device", "/out/last.ckpt")}, ("failed", 1, True)),
        ({"err": RuntimeError("a crash")}, ("failed", 1, False)),  # no line: its traceback is shown
        ({"err": KeyboardInterrupt()}, ("interrupted", 130, False)),
        ({"err": SystemExit(1), "ctrl_c": True}, ("interrupted", 130, False)),  # Lightning's exit after Ctrl-C
        ({"err": SIGTERMException()}, ("preempted", 143, False)),  # no SIGINT was recorded: SIGTERM
    ],
)
def test_each_ending_has_one_status_and_exit_code(ending, want):
    end = outcome_of(**ending, step=7)
    assert (end.status, end.exit_code, end.line is not None) == want
    if end.status in (Status.INTERRUPTED, Status.PREEMPTED):
        assert end.message.endswith("at step 7; last.ckpt was saved")
    if isinstance(ending.get("err"), NonFiniteLossError):
        assert end.diverged == {"step": 3, "reason": "non-finite train/loss"}


def test_a_record_read_and_written_again_is_the_same_file(tmp_path):
    """The driver's layout, optional keys included; unknown keys are kept, after the known ones."""
    written = {
        "status": "diverged",
        "job": {"output_dir": "/o", "overrides": ["seed=1"], "multirun": False, "sweep_dir": None},
        "config": {"seed": 1, "model": {"d_model": 32}},
        "changed_on_resume": {"optim.lr": {"checkpoint": 0.1, "now": 0.2}},
        "diverged": {"step": 3, "reason": "non-finite train/loss"},
        "error": "NonFiniteLossError: train/loss is nan at step 3",
        "metrics": {"train/loss": float("nan"), "val/loss": 2.5},
        "best": {"metric": "val/loss", "mode": "min", "value": 2.5, "checkpoint": "/o/checkpoints/best-2.ckpt"},
        "objective": {"metric": "val/loss", "value": float("nan")},
        "wall_time_s": 1.5,
        "global_step": 3,
        "tokens_seen": 300,
        "params": {"total": 10},
        "bleu_signature": None,
        "numerics": {"torch": "2"},
        "added_later": 1,
    }
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(written, indent=2))
    record = RunRecord.read(path)
    assert record.status == Status.DIVERGED and record.objective_value is None and record.global_step == 3
    record.write(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_text() == path.read_text()


def test_a_finished_record_without_optional_keys_writes_none_of_them(tmp_path):
    record = RunRecord(status=Status.FINISHED, objective={"metric": "val/loss", "value": 1.0})
    record.write(tmp_path / "metrics.json")
    data = json.loads((tmp_path / "metrics.json").read_text())
    assert data["status"] == "finished" and not {"error", "diverged", "changed_on_resume"} & set(data)
    assert read_record(tmp_path).objective_value == 1.0


def test_an_unreadable_record_is_none(tmp_path):
    assert read_record(tmp_path) is None  # none written
    (tmp_path / "metrics.json").write_text('{"status": "finis')  # killed while writing
    assert read_record(tmp_path) is None


@pytest.mark.slow  # 30-60 s: in `make test-slow`, out of `make test`'s 10-minute budget
@pytest.mark.parametrize("stop", ["budget", "sigterm"])
def test_a_resumed_jobs_wall_time_counts_the_run_before_its_checkpoint(tmp_path, stop):
    """``wall_time_s`` of a job resumed from its own ``last.ckpt`` holds the seconds of the run that wrote it:
    the first run sleeps 2 s after each of its 3 batches, so the resumed job's wall time is at least the 6 s
    slept; it is no more than the two runs' wall time measured from outside. Evaluating that checkpoint
    counts only the evaluation."""
    import time

    from tests.reliability.conftest import TINY, run_py

    job = tmp_path / "job"
    slow = ["+callbacks.slow._target_=tests.reliability.first_contact_probe.SlowSteps", "+callbacks.slow.seconds=2"]
    first = [*TINY, f"hydra.run.dir={job}", "trainer.max_steps=3", *slow]
    if stop == "sigterm":  # stopped after its third batch of 6
        first[-3:-2] = ["trainer.max_steps=6"]
        first += ["+callbacks.stop._target_=tests.reliability.stoppers.SigtermAt", "+callbacks.stop.batches=3"]
    t0 = time.monotonic()
    res = run_py(first, tmp_path)
    assert res.returncode == (143 if stop == "sigterm" else 0), res.stderr[-2000:]
    res = run_py([*TINY, f"hydra.run.dir={job}", "trainer.max_steps=6", "ckpt_path=last"], tmp_path)
    outside = time.monotonic() - t0
    assert res.returncode == 0, res.stderr[-2000:]
    resumed = read_record(job)
    assert resumed.status == Status.FINISHED and resumed.global_step == 6
    assert 6.0 <= resumed.wall_time_s <= outside

    evaluated = tmp_path / "eval"
    t0 = time.monotonic()
    res = run_py([*TINY, f"hydra.run.dir={evaluated}", "mode=eval", f"ckpt_path={job}/checkpoints/last.ckpt"], tmp_path)
    eval_outside = time.monotonic() - t0
    assert res.returncode == 0, res.stderr[-2000:]
    # its own process's seconds, without the >= 6 s the checkpoint counted (the process's start-up is less)
    assert read_record(evaluated).wall_time_s <= eval_outside
