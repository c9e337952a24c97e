"""A resumed run continues exactly where it stopped -- same loss, epoch, batch index
and tokens seen at every step as the uninterrupted run -- from a checkpoint taken at any step: inside
an epoch or on its last batch, with epochs of 1, 2 and 3 batches, whether the checkpoint was the
periodic save (as after a SIGKILL) or the one written when ``fit`` stopped (``max_steps``)."""

from __future__ import annotations

import pytest

from tests.reliability.conftest import metrics, run_py, train_losses
from tests.train.step_probe import events

# data.tokens_per_batch 2048 / 4096 / 8192 give 3 / 2 / 1 training batches per epoch
T = [
    "data.n_train=500",
    "data.n_val=20",
    "data.n_test=10",
    "data.n_long=5",
    "model.d_model=32",
    "model.n_heads=2",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=1",
    "logger=csv",
    "trainer.enable_progress_bar=false",
    "trainer.deterministic=true",
    "trainer.log_every_n_steps=1",
    "trainer.val_check_interval=3",
    "callbacks.last_checkpoint.every_n_train_steps=100",
]
TOTAL = 7
PERIODIC_ONLY = ["callbacks.last_checkpoint.save_on_train_end=false", "callbacks.model_checkpoint.save_last=false"]
_REFERENCES: dict[int, tuple] = {}


def _run(tmp, job, args, name):
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
    assert res.returncode == 0, res.stderr[-3000:]
    return [(e["step"], e["epoch"], e["batch_idx"], e["tokens_seen"]) for e in events(probe) if e["kind"] == "batch"]


def _reference(tmp_path_factory, tpb: int) -> tuple:
    if tpb not in _REFERENCES:
        tmp = tmp_path_factory.mktemp(f"ref{tpb}")
        job = tmp / "job"
        batches = _run(tmp, job, [f"data.tokens_per_batch={tpb}", f"trainer.max_steps={TOTAL}"], "ref")
        _REFERENCES[tpb] = (batches, train_losses(job), metrics(job)["tokens_seen"])
    return _REFERENCES[tpb]


def _check(tmp_path, tmp_path_factory, tpb: int, stop: int, periodic: bool) -> None:
    ref_batches, ref_losses, ref_tokens = _reference(tmp_path_factory, tpb)
    job = tmp_path / "job"
    first = [f"data.tokens_per_batch={tpb}", f"trainer.max_steps={stop}"]
    if periodic:  # last.ckpt is the periodic save of step `stop`, as a SIGKILL right after it leaves it
        first += [f"callbacks.last_checkpoint.every_n_train_steps={stop}", *PERIODIC_ONLY]
    before = _run(tmp_path, job, first, "first")
    after = _run(
        tmp_path, job, [f"data.tokens_per_batch={tpb}", f"trainer.max_steps={TOTAL}", "ckpt_path=last"], "resumed"
    )
    assert before + after == ref_batches  # (step, epoch, batch index, tokens seen) at every step
    assert train_losses(job) == ref_losses
    assert metrics(job)["tokens_seen"] == ref_tokens


@pytest.mark.parametrize(  # the rest: the slow matrix below (suite time: the epoch-end case runs there too)
    "tpb, stop", [pytest.param(2048, 5, marks=pytest.mark.slow), pytest.param(4096, 2, marks=pytest.mark.slow)]
)
def test_resume_after_max_steps_continues_the_same_curve(tmp_path, tmp_path_factory, tpb, stop):
    """(2048, 5) is the report: the resumed step 5 was epoch 2 batch 0 instead of epoch 1 batch 2;
    (4096, 2) stops on an epoch's last batch (the next epoch got an extra batch and other data)."""
    _check(tmp_path, tmp_path_factory, tpb, stop, periodic=False)


@pytest.mark.slow
@pytest.mark.parametrize("periodic", [False, True], ids=["fit_end", "periodic"])
@pytest.mark.parametrize("tpb", [2048, 4096, 8192])
@pytest.mark.parametrize("stop", [1, 2, 3, 4, 5])
def test_resume_from_any_step_matches_the_uninterrupted_run(tmp_path, tmp_path_factory, tpb, stop, periodic):
    _check(tmp_path, tmp_path_factory, tpb, stop, periodic)
