"""Resume continues exactly from any checkpoint -- whatever wrote it and wherever
it fell.

Save triggers: the periodic ``last.ckpt`` (``every_n_train_steps``; the run goes on one more step
and ends without saving, as a SIGKILL during that step leaves it), the same periodic save followed
by a real SIGKILL at the start of the next micro-batch (``sigkill``: the loader and Lightning's
prefetching fetcher have already fetched past the saved position, nothing runs after the kill),
the best checkpoint
(``best-<step>.ckpt`` of a validation), SIGTERM and Ctrl-C (``StopCheckpoint``), the end of ``fit``
(``max_steps``) and ``max_time`` (Lightning's timer). Positions: inside an epoch, an epoch's last
batch, the last batch of an epoch shortened by ``trainer.limit_train_batches``, inside an
accumulation window (SIGTERM or ``max_time`` between micro-batches: the run finishes the window's step
before it stops), and with ``data.num_workers=2``;
with ``trainer.accumulate_grad_batches`` 1 and 2. The resumed run must train the same batches in
the same order with the same epoch numbers as the uninterrupted run: per micro-batch
``(step, epoch, batch index, tokens seen)``, every step's ``train/loss`` and the final
``tokens_seen`` are compared exactly, and so are the steps validated after the checkpoint's and the
step labels of their CSV rows. Every checkpoint holds whole optimizer steps, and the data position
stored is that of the last batch whose update is in the saved weights.

Fast set: resumes from the checkpoint of a final validation and of a validation step; the single
cases before them and the whole matrix are ``slow``.
"""

from __future__ import annotations

import csv

import pytest

from tests.reliability.conftest import metrics, run_py, train_losses
from tests.reliability.test_resume_positions import PERIODIC_ONLY, T
from tests.train.step_probe import events

TOTAL = 7  # optimizer steps of every run
# data.tokens_per_batch 2048 -> 3 training batches per epoch, 1024 -> 6
POSITIONS = {  # name -> (data/trainer overrides, optimizer step of the checkpoint per accumulation)
    "mid_epoch": (["data.tokens_per_batch=2048"], {1: 5, 2: 3}),
    "epoch_end": (["data.tokens_per_batch=2048"], {1: 3, 2: 2}),
    "limited_epoch_end": (["data.tokens_per_batch=1024", "+trainer.limit_train_batches=0.67"], {1: 4, 2: 2}),
    "workers": (["data.tokens_per_batch=2048", "data.num_workers=2"], {1: 5, 2: 3}),
}
TRIGGERS = ["periodic", "sigkill", "best", "sigterm", "sigint", "fit_end", "max_time", "final_validation"]
_REFERENCES: dict[tuple, tuple] = {}


def _run(tmp, job, args, name, status=0):
    probe = tmp / f"{name}.json"
    res = run_py(
        [
            *T,
            *args,
            f"hydra.run.dir={job}",
            "+callbacks.probe._target_=tests.train.step_probe.Probe",
            f"+callbacks.probe.path={probe}",
        ],
        tmp,
    )
    assert res.returncode == status, res.stderr[-3000:]
    return [
        (e["step"], e["epoch"], e["batch_idx"], e["tokens_seen"], e["logged_step"])
        for e in events(probe)
        if e["kind"] == "batch"
    ]


def _validations(tmp, name) -> list[int]:
    """The optimizer steps the run ``name`` validated after (from its probe)."""
    return [e["step"] for e in events(tmp / f"{name}.json") if e["kind"] == "val"]


def _val_rows(job) -> list[int]:
    """Step labels of the ``val/loss`` rows of the job's CSV history."""
    with open(job / "csv" / "metrics.csv") as f:
        return [int(r["step"]) for r in csv.DictReader(f) if r.get("val/loss")]


def _reference(tmp_path_factory, data: list[str]) -> tuple:
    key = tuple(a for a in data if not a.startswith("data.num_workers"))  # workers change no batch
    if key not in _REFERENCES:
        tmp = tmp_path_factory.mktemp("ref")
        job = tmp / "job"
        batches = _run(tmp, job, [*key, f"trainer.max_steps={TOTAL}"], "ref")
        _REFERENCES[key] = (
            batches,
            train_losses(job),
            metrics(job)["tokens_seen"],
            _validations(tmp, "ref"),
            _val_rows(job),
        )
    return _REFERENCES[key]


def _check(
    tmp_path,
    tmp_path_factory,
    trigger: str,
    data: list[str],
    accumulate: int,
    step: int | None = None,
    micro_batches: int | None = None,
) -> None:
    """Stop by ``trigger`` with the checkpoint at optimizer ``step`` (or, for SIGTERM, Ctrl-C and max_time,
    signalled during micro-batch ``micro_batches``), resume with ``max_steps=TOTAL``, compare with the
    reference."""
    data = [*data, f"trainer.accumulate_grad_batches={accumulate}"]
    ref_batches, ref_losses, ref_tokens, ref_vals, ref_val_rows = _reference(tmp_path_factory, data)
    if micro_batches is None:  # the micro-batch that completes optimizer step `step`
        micro_batches = next(i for i, b in enumerate(ref_batches) if b[0] == step) + 1
    after_batch = [b[0] for b in ref_batches]  # global_step after each micro-batch
    # a stop lands at the end of the optimizer step in flight: the first micro-batch from `micro_batches`
    # on that completes a step (in the reference, its global_step is one more than the batch before's)
    kept = next(
        i
        for i in range(micro_batches, len(ref_batches) + 1)
        if after_batch[i - 1] > (after_batch[i - 2] if i > 1 else 0)
    )
    step = after_batch[kept - 1]  # the checkpoint holds micro-batches 1..kept, optimizer steps 1..step
    job = tmp_path / "job"
    resume = [*data, f"trainer.max_steps={TOTAL}", "ckpt_path=last"]
    if trigger == "periodic":
        first = [
            *data,
            f"trainer.max_steps={step + 1}",
            f"callbacks.last_checkpoint.every_n_train_steps={step}",
            *PERIODIC_ONLY,
        ]
        before = _run(tmp_path, job, first, "first")
    elif trigger == "sigkill":  # periodic last.ckpt at `step`, then SIGKILL as the next micro-batch starts
        kill = [
            "+callbacks.kill._target_=tests.reliability.stoppers.SigkillAt",
            f"+callbacks.kill.batches={micro_batches + 1}",
        ]
        first = [*data, f"trainer.max_steps={TOTAL}", f"callbacks.last_checkpoint.every_n_train_steps={step}", *kill]
        before = _run(tmp_path, job, first, "first", status=-9)
        assert len(before) == micro_batches  # killed before its next micro-batch ended
    elif trigger == "best":
        only_best = [
            f"trainer.val_check_interval={step}",
            "callbacks.last_checkpoint.save_on_train_end=false",
            "callbacks.model_checkpoint.save_last=false",
        ]
        before = _run(tmp_path, job, [*data, f"trainer.max_steps={step}", *only_best], "first")
        resume = [*data, *only_best, f"trainer.max_steps={TOTAL}", f"ckpt_path={job}/checkpoints/best-{step}.ckpt"]
    elif trigger == "fit_end":
        before = _run(tmp_path, job, [*data, f"trainer.max_steps={step}"], "first")
    elif trigger == "final_validation":  # last.ckpt written by the extra validation after the last step
        final = [
            f"callbacks.last_checkpoint.every_n_train_steps={step - 1}",
            "callbacks.last_checkpoint.save_on_train_end=false",
        ]
        before = _run(tmp_path, job, [*data, f"trainer.max_steps={step}", *final], "first")
        resume = [*resume, *final]
    elif trigger in ("sigterm", "sigint"):
        stopper = "SigtermAt" if trigger == "sigterm" else "SigintAt"
        stop = [
            f"+callbacks.stop._target_=tests.reliability.stoppers.{stopper}",
            f"+callbacks.stop.batches={micro_batches}",
        ]
        status = 143 if trigger == "sigterm" else 130
        before = _run(tmp_path, job, [*data, f"trainer.max_steps={TOTAL}", *stop], "first", status=status)
        assert len(before) == kept  # trained on to the end of the step in flight, and no further
    elif trigger == "max_time":
        timed = ["trainer.max_time=00:01:00:00"]
        stop = [
            "+callbacks.stop._target_=tests.reliability.stoppers.TimeUpAt",
            f"+callbacks.stop.batches={micro_batches}",
        ]
        before = _run(tmp_path, job, [*data, *timed, f"trainer.max_steps={TOTAL}", *stop], "first")
        assert len(before) == kept
        resume = [*resume, *timed]
    else:
        raise AssertionError(trigger)
    assert before[:kept] == ref_batches[:kept]
    after = _run(tmp_path, job, resume, "resumed")
    # (step, epoch, batch index, tokens seen, logged step label) of every later micro-batch
    assert after == ref_batches[kept:]
    assert train_losses(job) == ref_losses
    assert metrics(job)["tokens_seen"] == ref_tokens
    # validation: after the checkpoint's step, at the uninterrupted run's steps (the schedule is a
    # function of the optimizer step), and logged under the same step labels; the "best" trigger
    # resumes with its own interval (the checkpoint's step), so its reference is the schedule's
    # formula: every interval, and after the last step
    if trigger == "best":
        ref_vals = [s for s in range(1, TOTAL + 1) if s % step == 0 or s == TOTAL]
        ref_val_rows = [s - 1 for s in ref_vals]
    assert _validations(tmp_path, "resumed") == [s for s in ref_vals if s > step]
    assert [r for r in _val_rows(job) if r >= step] == [r for r in ref_val_rows if r >= step]


# -- single cases: a save mid-epoch, at a shortened epoch's end, inside a window, at a validation ----
@pytest.mark.slow  # suite time: ~15 s; the matrix's sigkill trigger covers it
def test_periodic_mid_epoch_checkpoint_resumes_without_skipping_a_batch(tmp_path, tmp_path_factory):
    """3 batches per epoch, ``every_n_train_steps=4`` (the save falls on epoch 1's first batch), a real
    SIGKILL as step 5 starts, resume with ``ckpt_path=last``: steps 5..7 must be the uninterrupted
    run's (epoch, batch, tokens seen, loss)."""
    _check(tmp_path, tmp_path_factory, "sigkill", ["data.tokens_per_batch=2048"], 1, step=4)


@pytest.mark.slow  # suite time: ~17 s; the matrix covers it
def test_resume_at_the_end_of_an_epoch_shortened_by_limit_train_batches(tmp_path, tmp_path_factory):
    """``limit_train_batches=0.67`` (4 of 6 batches), stop at step 4 (the shortened epoch's end),
    resume: step 5 is epoch 1's first batch (was: epoch 0's fifth batch, other tokens and loss)."""
    _check(tmp_path, tmp_path_factory, "fit_end", POSITIONS["limited_epoch_end"][0], 1, step=4)


@pytest.mark.slow  # suite time: ~17 s; the matrix covers it
def test_sigterm_inside_an_accumulation_window_resumes_the_whole_window(tmp_path, tmp_path_factory):
    """6 batches per epoch, accumulation 2: SIGTERM after micro-batch 5 (the first of step 3's window):
    the run trains micro-batch 6 and steps before it stops, so the checkpoint holds step 3 and the resumed
    run goes on with micro-batch 7."""
    _check(tmp_path, tmp_path_factory, "sigterm", ["data.tokens_per_batch=1024"], 2, micro_batches=5)


@pytest.mark.slow  # suite time: ~30 s
def test_resume_from_the_final_validations_checkpoint_logs_the_next_step_under_its_own_label(
    tmp_path, tmp_path_factory
):
    """A run to step 5 whose ``last.ckpt`` is the one written at its final validation (Lightning saves
    ``_batches_that_stepped`` one behind there), resumed to 7: training is exact and step 6 is logged
    under its own label, not step 5's (CSV and W&B drop or merge such rows)."""
    _check(tmp_path, tmp_path_factory, "final_validation", ["data.tokens_per_batch=2048"], 1, step=5)


@pytest.mark.slow  # 30-60 s: in `make test-slow`, out of `make test`'s 10-minute budget
@pytest.mark.parametrize("trigger", ["fit_end", "sigint"])
def test_a_resume_from_a_validation_step_validates_at_the_uninterrupted_runs_steps(tmp_path, tmp_path_factory, trigger):
    """6 batches per epoch, validation every 3 steps: stopped at step 3 (its validation ran) by the
    end of ``fit`` or by Ctrl-C, resumed to 7: validations after 6 and 7 only, as the uninterrupted
    run (was: also after 4, the first resumed step, with its best checkpoint and CSV row)."""
    _check(tmp_path, tmp_path_factory, trigger, ["data.tokens_per_batch=1024"], 1, step=3)


@pytest.mark.slow  # 30-60 s: in `make test-slow`, out of `make test`'s 10-minute budget
def test_sigterm_during_a_validation_stops_right_after_it(tmp_path, tmp_path_factory):
    """6 batches per epoch, accumulation 2, validation every 2 steps: SIGTERM as the validation after
    step 2 starts. No micro-batch is in flight, so the run stops after that validation, at step 2 (not
    after one more step), saves there, and the resumed run equals the uninterrupted one."""
    data = ["data.tokens_per_batch=1024", "trainer.accumulate_grad_batches=2", "trainer.val_check_interval=2"]
    ref_batches, ref_losses, ref_tokens, ref_vals, _ = _reference(tmp_path_factory, data)
    job = tmp_path / "job"
    stop = ["+callbacks.stop._target_=tests.reliability.stoppers.SigtermInValidation", "+callbacks.stop.validations=1"]
    before = _run(tmp_path, job, [*data, f"trainer.max_steps={TOTAL}", *stop], "first", status=143)
    assert [b[0] for b in before] == [b[0] for b in ref_batches[:4]] and before[-1][0] == 2
    assert _validations(tmp_path, "first") == [2]
    after = _run(tmp_path, job, [*data, f"trainer.max_steps={TOTAL}", "ckpt_path=last"], "resumed")
    assert after == ref_batches[4:]
    assert train_losses(job) == ref_losses and metrics(job)["tokens_seen"] == ref_tokens
    assert _validations(tmp_path, "resumed") == [s for s in ref_vals if s > 2]


# -- the whole matrix --------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
@pytest.mark.parametrize("position", sorted(POSITIONS))
@pytest.mark.parametrize("trigger", TRIGGERS)
def test_resume_matrix(tmp_path, tmp_path_factory, trigger, position, accumulate):
    data, steps = POSITIONS[position]
    _check(tmp_path, tmp_path_factory, trigger, data, accumulate, step=steps[accumulate])


@pytest.mark.slow
@pytest.mark.parametrize("micro_batches", [3, 5])
@pytest.mark.parametrize("trigger", ["sigterm", "max_time"])
def test_stop_inside_an_accumulation_window(tmp_path, tmp_path_factory, trigger, micro_batches):
    _check(tmp_path, tmp_path_factory, trigger, ["data.tokens_per_batch=1024"], 2, micro_batches=micro_batches)


@pytest.mark.slow  # three runs
@pytest.mark.parametrize(
    "schedule, first",
    [
        (["trainer.val_check_interval=2"], 5),  # after steps 2, 4, 6, 8
        # one epoch of 3 steps, converted to val_check_interval=3: after steps 3, 6 and the last, 8
        (["trainer.val_check_interval=1.0", "trainer.check_val_every_n_epoch=1"], 4),
        # val_dense every step up to 3, then every 2: after steps 1, 2, 3, 4, 6, 8
        (["trainer.val_check_interval=2", "val_dense.every=1", "val_dense.until=3"], 5),
    ],
    ids=["steps", "epochs", "dense"],
)
def test_a_finished_job_resumed_with_a_larger_budget_validates_as_the_uninterrupted_run(tmp_path, schedule, first):
    """A job finished at ``max_steps=first``, a step its schedule does not validate (validated there only
    because it was the last), resumed in place with the same budget and then with ``max_steps=8``, and an
    uninterrupted ``max_steps=8`` run end with the same validations: in the CSV history, in the divergence
    guard's record, in the best checkpoint."""
    import torch

    data = ["data.tokens_per_batch=2048", *schedule]
    ref, job = tmp_path / "ref", tmp_path / "job"
    ref_batches = _run(tmp_path, ref, [*data, "trainer.max_steps=8"], "ref")
    _run(tmp_path, job, [*data, f"trainer.max_steps={first}"], "first")
    assert first not in _validations(tmp_path, "ref") and _validations(tmp_path, "first")[-1] == first
    # resumed with the same budget first: nothing to train, and its checkpoint keeps the record; the job's
    # record keeps its metrics and objective, and its wall time only grows
    recorded = metrics(job)
    assert _run(tmp_path, job, [*data, f"trainer.max_steps={first}", "ckpt_path=last"], "same") == []
    again = metrics(job)
    assert again["metrics"] == recorded["metrics"] and again["objective"] == recorded["objective"]
    assert again["status"] == "finished" and again["wall_time_s"] >= recorded["wall_time_s"]
    after = _run(tmp_path, job, [*data, "trainer.max_steps=8", "ckpt_path=last"], "resumed")
    assert after == ref_batches[first:]
    assert _validations(tmp_path, "resumed") == [s for s in _validations(tmp_path, "ref") if s > first]
    assert _val_rows(job) == _val_rows(ref)
    assert sorted(p.name for p in (job / "checkpoints").iterdir()) == sorted(
        p.name for p in (ref / "checkpoints").iterdir()
    )
    assert metrics(job)["best"]["value"] == metrics(ref)["best"]["value"]

    def guard_steps(folder):
        states = torch.load(folder / "checkpoints" / "last.ckpt", weights_only=False)["callbacks"]
        return next([s for s, _ in v["validations"]] for k, v in states.items() if "NonFiniteLossGuard" in k)

    assert guard_steps(job) == guard_steps(ref)


@pytest.mark.slow  # 30-60 s: in `make test-slow`, out of `make test`'s 10-minute budget
@pytest.mark.parametrize("accumulate", [1, 2])
def test_an_epoch_budget_continued_with_a_larger_one_matches_the_uninterrupted_run(tmp_path, accumulate):
    """3 batches per epoch, ``max_steps=-1``: a job that ran ``max_epochs=1``, resumed in place with the same
    budget (it trains nothing and still ends), then with ``max_epochs=3``, equals an uninterrupted
    ``max_epochs=3`` run per micro-batch (under accumulation 2 each epoch ends with a weightless copy),
    per step loss, validations and CSV rows."""
    data = ["data.tokens_per_batch=2048", f"trainer.accumulate_grad_batches={accumulate}", "trainer.max_steps=-1"]
    ref, job = tmp_path / "ref", tmp_path / "job"
    ref_batches = _run(tmp_path, ref, [*data, "trainer.max_epochs=3"], "ref")
    assert {b[1] for b in ref_batches} == {0, 1, 2} and len(ref_batches) == 3 * (3 + (accumulate == 2))
    first = _run(tmp_path, job, [*data, "trainer.max_epochs=1"], "first")
    assert _run(tmp_path, job, [*data, "trainer.max_epochs=1", "ckpt_path=last"], "same") == []
    after = _run(tmp_path, job, [*data, "trainer.max_epochs=3", "ckpt_path=last"], "resumed")
    assert first + after == ref_batches
    assert train_losses(job) == train_losses(ref)
    ref_vals, stop = _validations(tmp_path, "ref"), first[-1][0]
    assert _validations(tmp_path, "first")[-1] == stop  # the budget's end validates
    assert _validations(tmp_path, "resumed") == [s for s in ref_vals if s > stop]
    assert _val_rows(job) == _val_rows(ref)
    assert metrics(job)["tokens_seen"] == metrics(ref)["tokens_seen"]


def test_a_resumed_run_saves_periodically_only_at_the_end_of_a_step(tmp_path, tmp_path_factory):
    """Accumulation 2, ``last.ckpt`` every 3 steps: a run stopped at step 3 is resumed and SIGKILLed as its
    second micro-batch starts, then resumed again. The periodic save must not fire after the resumed run's
    first micro-batch (``global_step`` is still the saved 3 there: a checkpoint inside a window, which the
    second resume would continue a micro-batch off), so the second resume starts at step 3 again and equals
    the uninterrupted run."""
    data = ["data.tokens_per_batch=1024", "trainer.accumulate_grad_batches=2"]
    ref_batches, ref_losses, ref_tokens, _, _ = _reference(tmp_path_factory, data)
    job, periodic = tmp_path / "job", ["callbacks.last_checkpoint.every_n_train_steps=3"]
    before = _run(tmp_path, job, [*data, *periodic, "trainer.max_steps=3"], "first")
    kill = ["+callbacks.kill._target_=tests.reliability.stoppers.SigkillAt", "+callbacks.kill.batches=2"]
    killed = _run(tmp_path, job, [*data, *periodic, f"trainer.max_steps={TOTAL}", "ckpt_path=last", *kill], "k", -9)
    assert len(killed) == 1
    after = _run(tmp_path, job, [*data, *periodic, f"trainer.max_steps={TOTAL}", "ckpt_path=last"], "resumed")
    assert before + after == ref_batches
    assert train_losses(job) == ref_losses and metrics(job)["tokens_seen"] == ref_tokens
