"""Steps are the unit (issue 51): an epoch key is converted to optimizer steps once, with one console line, or
refused in one line; every Lightning feature keyed to epochs is refused before anything is built, with the
step-counted fix; ``val_dense`` adds validations early in training."""

from __future__ import annotations

import logging
import math
import re

import lightning as L
import pytest
from hydra import compose, initialize_config_dir

from tests.conftest import REPO
from tests.reliability.conftest import run_py
from tests.train.step_probe import events
from tests.train.test_step_intervals import T as SMALL  # the tiny run with 3 training batches an epoch
from xformer.config.check import check_config
from xformer.config.steps import steps_from_epochs
from xformer.errors import ConfigError


def _compose(overrides, tmp_path):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=[*overrides, f"paths.output_dir={tmp_path}", "logger=none"])


class EpochEndCounter(L.Callback):
    """A user's callback that acts at the end of each training epoch."""

    def __init__(self) -> None:
        self.ends = 0

    def on_train_epoch_end(self, trainer, pl_module) -> None:  # noqa: ARG002 - hook signature
        self.ends += 1


EARLY_STOPPING = ["+callbacks.es._target_=lightning.pytorch.callbacks.EarlyStopping", "+callbacks.es.monitor=val/loss"]
REFUSED = {
    "early_stopping_at_epoch_end": (
        [*EARLY_STOPPING, "+callbacks.es.check_on_train_epoch_end=true"],
        "callbacks.es.check_on_train_epoch_end=true: ",
        "Fix: callbacks.es.check_on_train_epoch_end=false",
    ),
    "lr_monitor_by_epoch": (
        ["callbacks.lr_monitor.logging_interval=epoch"],
        "callbacks.lr_monitor.logging_interval=epoch: ",
        "Fix: callbacks.lr_monitor.logging_interval=step",
    ),
    "swa": (
        [
            "+callbacks.swa._target_=lightning.pytorch.callbacks.StochasticWeightAveraging",
            "+callbacks.swa.swa_lrs=0.01",
        ],
        "callbacks.swa (StochasticWeightAveraging): ",
        "Fix: remove it",
    ),
    "accumulation_schedule": (
        [
            "+callbacks.gas._target_=lightning.pytorch.callbacks.GradientAccumulationScheduler",
            "+callbacks.gas.scheduling={0: 1, 1: 2}",
        ],
        "callbacks.gas (GradientAccumulationScheduler): ",
        "Fix: remove it and set trainer.accumulate_grad_batches=",
    ),
    "backbone_finetuning": (
        ["+callbacks.bb._target_=lightning.pytorch.callbacks.BackboneFinetuning"],
        "callbacks.bb (BackboneFinetuning): ",
        "Fix: remove it",
    ),
    "tqdm_bar": (
        ["+callbacks.bar._target_=lightning.pytorch.callbacks.TQDMProgressBar"],
        "callbacks.bar (TQDMProgressBar): ",
        "Fix: remove it",
    ),
    "users_epoch_end_hook": (
        ["+callbacks.mine._target_=tests.train.test_epoch_keys.EpochEndCounter"],
        "callbacks.mine (EpochEndCounter): its on_train_epoch_end",
        "Fix: act in on_train_batch_end",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_an_epoch_keyed_lightning_feature_is_refused_in_one_line_with_the_step_counted_fix(tmp_path, case):
    """Each would silently act once, at the run's end, or never (issue 51's table, rows 1-5): refused by the
    config check (stages 1-3, as a dry run and a sweep's check run it), before data or a trainer is built."""
    overrides, starts, fix = REFUSED[case]
    with pytest.raises(ConfigError) as err:
        check_config(_compose(overrides, tmp_path))
    line = str(err.value)
    assert "\n" not in line and line.startswith(starts) and fix in line, line


@pytest.mark.parametrize(
    "overrides",
    [
        [*EARLY_STOPPING, "+callbacks.es.check_on_train_epoch_end=false", "+callbacks.es.patience=0"],
        ["callbacks.lr_monitor.logging_interval=step"],
    ],
)
def test_the_step_counted_forms_pass(tmp_path, overrides):
    check_config(_compose(overrides, tmp_path))


def test_a_refused_feature_stops_the_run_before_any_training(tmp_path):
    """The run: exit 2, one ``error:`` line, nothing trained (issue 51, row 1: it trained all 15 steps)."""
    job = tmp_path / "job"
    res = run_py(
        [*SMALL, *EARLY_STOPPING, "+callbacks.es.check_on_train_epoch_end=true", f"hydra.run.dir={job}"], tmp_path
    )
    assert res.returncode == 2, res.stderr[-2000:]
    errors = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "check_on_train_epoch_end" in errors[0]
    assert not (job / "checkpoints").exists() and not (job / "metrics.json").exists()


@pytest.fixture(scope="module")
def numbers(tmp_path_factory):
    from xformer.data.numbers import NumbersDataModule

    dm = NumbersDataModule(n_train=500, n_val=20, n_test=10, n_long=5, cache_dir=str(tmp_path_factory.mktemp("cache")))
    dm.prepare_data()
    dm.setup("fit")
    return dm


def _batches_an_epoch(dm) -> int:
    return len(dm.train_dataloader().batch_sampler)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_max_epochs_becomes_the_steps_of_that_many_epochs_with_one_line(tmp_path, numbers, caplog, accumulate):
    n = _batches_an_epoch(numbers)
    steps = math.ceil(n / accumulate)  # an epoch ends with a whole optimizer step
    cfg = _compose(
        ["trainer.max_epochs=3", "trainer.max_steps=-1", f"trainer.accumulate_grad_batches={accumulate}"], tmp_path
    )
    with caplog.at_level(logging.INFO, logger="xformer"):
        out = steps_from_epochs(cfg, numbers)
    assert out.trainer.max_steps == 3 * steps and out.trainer.max_epochs == -1
    assert cfg.trainer.max_epochs == 3  # the user's config is not edited in place
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        f"trainer.max_epochs=3 -> trainer.max_steps={3 * steps} ({steps} optimizer steps an epoch of {n} batches)"
    ]


def test_the_schedule_follows_the_converted_budget(tmp_path, numbers):
    """``optim=adamw``'s schedule ends at ``${trainer.max_steps}``: by epochs, at the converted step budget."""
    n = _batches_an_epoch(numbers)
    cfg = _compose(["optim=adamw", "trainer.max_steps=-1", "trainer.max_epochs=2"], tmp_path)
    out = steps_from_epochs(cfg, numbers)
    assert out.optim.scheduler.total_steps == out.trainer.max_steps == 2 * n


def test_a_smaller_max_steps_stays_the_budget(tmp_path, numbers):
    out = steps_from_epochs(_compose(["trainer.max_epochs=100", "trainer.max_steps=4"], tmp_path), numbers)
    assert out.trainer.max_steps == 4


@pytest.mark.parametrize(
    "interval, every, want",
    [(1.0, 2, "2n"), (0.5, None, "n//2"), (1.0, 1, "n"), (None, None, None)],
)
def test_validation_by_epochs_becomes_an_interval_in_steps(tmp_path, numbers, interval, every, want):
    n = _batches_an_epoch(numbers)
    args = [f"trainer.check_val_every_n_epoch={'null' if every is None else every}"]
    args += [f"trainer.val_check_interval={interval}"] if interval is not None else []
    out = steps_from_epochs(_compose(args, tmp_path), numbers)
    expected = {"2n": 2 * n, "n//2": max(1, int(n * 0.5)), "n": n, None: 500}[want]
    assert out.trainer.val_check_interval == expected and out.trainer.check_val_every_n_epoch is None


def test_limit_train_batches_makes_the_data_epochs_shorter(tmp_path, numbers):
    n = _batches_an_epoch(numbers)
    out = steps_from_epochs(_compose(["+trainer.limit_train_batches=0.5", "trainer.max_epochs=2"], tmp_path), numbers)
    assert out.data_epoch_batches == int(n * 0.5) and out.trainer.limit_train_batches is None
    assert out.trainer.max_steps == 2 * int(n * 0.5)


def test_a_config_without_epoch_keys_is_left_as_it_is(tmp_path, numbers):
    cfg = _compose([], tmp_path)
    assert steps_from_epochs(cfg, numbers) is cfg


def test_a_fraction_of_the_validation_examples_represents_the_split(tmp_path):
    """``trainer.limit_val_batches=0.25`` on the numbers task's 96 validation examples: 24 of them, whose mean
    target length is the split's within 5 % (issue 51, row 6: the 36 shortest, 3.92 against 4.98)."""
    import numpy as np

    from xformer.data.numbers import NumbersDataModule

    dm = NumbersDataModule(n_train=300, n_val=96, n_test=40, n_long=10, tokens_per_batch=256, cache_dir=str(tmp_path))
    dm.prepare_data()
    dm.setup("fit")
    lengths = np.array([len(dm.val_set[i]["tgt"]) for i in range(len(dm.val_set))])
    out = steps_from_epochs(_compose(["trainer.limit_val_batches=0.25"], tmp_path), dm)
    assert out.trainer.limit_val_batches is None  # the subset replaces Lightning's first batches
    seen = [i for batch in dm.val_dataloader() for i in batch["idx"].tolist()]
    assert len(seen) == len(set(seen)) == 24
    assert abs(lengths[seen].mean() - lengths.mean()) <= 0.05 * lengths.mean()


def _validated(tmp_path, name, args):
    probe = tmp_path / f"{name}.json"
    job = tmp_path / name
    extra = [
        f"hydra.run.dir={job}",
        "+callbacks.probe._target_=tests.train.step_probe.Probe",
        f"+callbacks.probe.path={probe}",
    ]
    res = run_py([*SMALL, *args, *extra], tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    return [e["step"] for e in events(probe) if e["kind"] == "val"], res, job


def test_val_dense_validates_every_n_steps_up_to_a_step_then_every_interval(tmp_path):
    """``val_dense: {every: 2, until: 6}`` with ``val_check_interval=5`` and 12 steps: 2, 4, 6 from the dense
    schedule, 5 and 10 from the interval, 12 as the run's last step."""
    steps, _, _ = _validated(
        tmp_path,
        "dense",
        ["trainer.max_steps=12", "trainer.val_check_interval=5", "val_dense.every=2", "val_dense.until=6"],
    )
    dense, regular = set(range(2, 7, 2)), set(range(5, 13, 5))
    assert steps == sorted(dense | regular | {12})


def test_a_run_by_epochs_trains_whole_data_epochs_and_logs_the_epoch_as_an_integer(tmp_path):
    """``trainer.max_epochs=2`` (no max_steps): the run trains the data's epochs 0 and 1 exactly, says the
    conversion once, and its CSV writes ``epoch`` as Lightning writes its own (an integer)."""
    import csv

    probe = tmp_path / "probe.json"
    job = tmp_path / "job"
    res = run_py(
        [
            *SMALL,
            "trainer.max_steps=-1",
            "trainer.max_epochs=2",
            "trainer.log_every_n_steps=1",
            f"hydra.run.dir={job}",
            "+callbacks.probe._target_=tests.train.step_probe.Probe",
            f"+callbacks.probe.path={probe}",
        ],
        tmp_path,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    batches = [e for e in events(probe) if e["kind"] == "batch"]
    per_epoch = [sum(1 for b in batches if b["epoch"] == e) for e in (0, 1)]
    assert {b["epoch"] for b in batches} == {0, 1} and per_epoch[0] == per_epoch[1]
    said = re.findall(r"trainer\.max_epochs=2 -> trainer\.max_steps=(\d+) ", res.stdout + res.stderr)
    assert said == [str(len(batches))]
    with open(job / "csv" / "metrics.csv") as f:
        epochs = [r["epoch"] for r in csv.DictReader(f) if r.get("epoch")]
    assert epochs and all(re.fullmatch(r"\d+", e) for e in epochs) and {"0", "1"} <= set(epochs)


@pytest.mark.parametrize("epochs", ["-1", "null"])
def test_a_run_without_a_budget_is_refused(tmp_path, epochs):
    """``max_steps=-1`` and no epochs or time: the data's epochs never end a run, so it would train forever."""
    from xformer.config.check import check_static

    with pytest.raises(ConfigError, match=r"^trainer.max_steps=-1: no budget .* Fix: trainer.max_steps="):
        check_static(_compose(["trainer.max_steps=-1", f"trainer.max_epochs={epochs}"], tmp_path))
    check_static(_compose(["trainer.max_steps=-1", "trainer.max_epochs=2"], tmp_path))


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "xformer"]


@pytest.mark.parametrize("limit", ["1", "2", "0.5", "1.0", "1000"])
def test_an_int_limit_counts_batches_and_a_float_is_a_fraction(tmp_path, numbers, caplog, limit):
    """Lightning's ``limit_train_batches`` (Trainer docs): an int counts batches (1 is one batch, "1 batch per epoch
    will be used"), a float in [0, 1] is a fraction, rounded down; more than the epoch has is all of it. The
    one endless epoch is never cut by it (the key is cleared once converted)."""
    n, value = _batches_an_epoch(numbers), (float(limit) if "." in limit else int(limit))
    want = min(n, value) if isinstance(value, int) else int(n * value)
    with caplog.at_level(logging.INFO, logger="xformer"):
        out = steps_from_epochs(
            _compose([f"+trainer.limit_train_batches={limit}", "trainer.max_epochs=3"], tmp_path), numbers
        )
    assert out.trainer.max_steps == 3 * want and out.get("data_epoch_batches") == (want if want < n else None)
    assert out.trainer.get("limit_train_batches") in (None, 1.0)
    step = "1 optimizer step an epoch of 1 batch" if want == 1 else f"{want} optimizer steps an epoch of {want} batches"
    assert f"trainer.max_epochs=3 -> trainer.max_steps={3 * want} ({step})" in _lines(caplog)


@pytest.mark.parametrize("every", [1, 2, 3])
@pytest.mark.parametrize("interval", ["default", "epoch", "1.0"])
def test_check_val_every_n_epoch_alone_is_n_epochs_of_steps(tmp_path, numbers, caplog, every, interval):
    """``check_val_every_n_epoch=N`` with the config's ``val_check_interval`` (500 steps, more than an epoch),
    exactly an epoch's steps, or 1.0: Lightning validates at the end of every N-th epoch, so every N epochs of
    steps; an int interval longer than the epoch can only mean the epoch's end, and the line says so."""
    n = _batches_an_epoch(numbers)
    given = {"default": [], "epoch": [f"trainer.val_check_interval={n}"], "1.0": ["trainer.val_check_interval=1.0"]}
    cfg = _compose([*given[interval], f"trainer.check_val_every_n_epoch={every}"], tmp_path)
    with caplog.at_level(logging.INFO, logger="xformer"):
        out = steps_from_epochs(cfg, numbers)
    assert out.trainer.val_check_interval == every * n and out.trainer.check_val_every_n_epoch is None
    (line,) = _lines(caplog)
    each = "every epoch" if every == 1 else f"every {every} epochs"
    assert (f"at the end of {each}" in line) == (cfg.trainer.val_check_interval == 500 > n), line


def test_an_interval_inside_every_other_epoch_is_refused_with_step_counted_fixes(tmp_path, numbers):
    """``val_check_interval=1`` with ``check_val_every_n_epoch=2``: every step of one epoch in two, then none:
    no fixed interval, refused with the two step-counted readings (every step, every 2 epochs of steps)."""
    n = _batches_an_epoch(numbers)
    with pytest.raises(ConfigError) as err:
        steps_from_epochs(
            _compose(["trainer.val_check_interval=1", "trainer.check_val_every_n_epoch=2"], tmp_path), numbers
        )
    line = str(err.value)
    assert line.startswith("trainer.check_val_every_n_epoch=2: ") and "one epoch in 2" in line and "2th" not in line
    assert line.endswith(f"(e.g. 1, or {2 * n} for every 2 epochs)"), line


OUT_OF_RANGE = [
    "trainer.val_check_interval=0",
    "trainer.val_check_interval=-3",
    "trainer.val_check_interval=-0.5",
    "trainer.val_check_interval=1.5",
    "trainer.check_val_every_n_epoch=0",
    "trainer.check_val_every_n_epoch=-1",
    "+trainer.limit_train_batches=0",
    "+trainer.limit_train_batches=-2",
    "+trainer.limit_train_batches=1.5",
    "+trainer.limit_train_batches=-0.5",
    "trainer.max_epochs=0",
    "trainer.max_epochs=-2",
]


@pytest.mark.parametrize("override", OUT_OF_RANGE)
def test_a_count_below_one_or_a_fraction_outside_0_1_is_refused_in_one_line(tmp_path, numbers, override):
    """Lightning reads these numbers as a count (an int) or a fraction of an epoch (a float in [0, 1]); it
    refuses other floats. A count below 1 trains nothing (``limit_train_batches``, ``max_epochs``, as
    ``max_steps=0``) or divides by zero (intervals): each refused in one line naming the key and the fix,
    also without any other epoch key (``max_steps=5``) and where ``val_check_interval=1.0`` would make N epochs
    of steps of it."""
    every = ["trainer.val_check_interval=1.0"] if "every_n_epoch" in override else []  # once an epoch, every N
    with pytest.raises(ConfigError) as err:
        steps_from_epochs(_compose(["trainer.max_steps=5", *every, override], tmp_path), numbers)
    line, key = str(err.value), override.lstrip("+")
    assert "\n" not in line and line.startswith(f"{key}: ") and " Fix: " in line, line
    if key.endswith("=0") and "limit_train" in key:
        assert "Fix: trainer.limit_train_batches=<batches an epoch >= 1>" in line, line


def test_a_zero_interval_stops_the_run_before_any_training(tmp_path):
    """``max_steps=5 val_check_interval=0`` (no epoch key): one ``error:`` line, exit 2 (was: a ZeroDivisionError
    in the validation schedule during training)."""
    job = tmp_path / "job"
    res = run_py([*SMALL, "trainer.max_steps=5", "trainer.val_check_interval=0", f"hydra.run.dir={job}"], tmp_path)
    assert res.returncode == 2, res.stderr[-2000:]
    errors = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert (
        len(errors) == 1
        and errors[0].startswith("error: trainer.val_check_interval=0: ")
        and "Traceback" not in res.stderr
    )
    assert not (job / "checkpoints").exists()


def test_a_smaller_max_steps_says_it_ends_the_run_first(tmp_path, numbers, caplog):
    """Lightning stops at whichever of ``max_epochs`` and ``max_steps`` comes first: the line gives the epochs'
    steps and says the smaller ``max_steps`` stands."""
    n = _batches_an_epoch(numbers)
    with caplog.at_level(logging.INFO, logger="xformer"):
        out = steps_from_epochs(_compose(["trainer.max_epochs=1000", "trainer.max_steps=1500"], tmp_path), numbers)
    assert out.trainer.max_steps == min(1500, 1000 * n)
    assert _lines(caplog) == [
        f"trainer.max_epochs=1000 -> trainer.max_steps=1500: 1000 epochs are {1000 * n} optimizer steps "
        f"({n} optimizer steps an epoch of {n} batches), so trainer.max_steps=1500 ends the run first"
    ]


@pytest.mark.parametrize(
    "devices, nodes", [("2", 1), ("auto", 1), ("'2'", 2), ("1", 3)], ids=["two", "auto", "string", "nodes"]
)
def test_the_world_size_is_lightnings(tmp_path, devices, nodes):
    """The processes an epoch's batches are shared by, as the trainer Lightning builds from the same keys counts
    them (``Trainer.world_size``), before it is built."""
    from xformer.config.steps import world_size

    cfg = _compose(["trainer.accelerator=cpu", f"trainer.devices={devices}", f"trainer.num_nodes={nodes}"], tmp_path)
    devices = cfg.trainer.devices
    trainer = L.Trainer(accelerator="cpu", devices=devices, num_nodes=nodes, logger=False, enable_checkpointing=False)
    assert world_size(cfg.trainer) == trainer.world_size


def test_an_epoch_counts_one_ranks_share_of_the_batches(tmp_path, numbers):
    """``devices`` a list of ids: as many ranks, each with ``ceil(batches / ranks)`` batches an epoch (was: one
    rank for any devices but an int)."""
    n = _batches_an_epoch(numbers)
    out = steps_from_epochs(
        _compose(["trainer.devices=[0,1]", "trainer.max_epochs=2", "trainer.max_steps=-1"], tmp_path), numbers
    )
    assert out.trainer.max_steps == 2 * math.ceil(n / 2)


def test_devices_only_the_built_trainer_counts_are_refused_with_epoch_keys(tmp_path, numbers):
    cfg = _compose(["trainer.accelerator=auto", "trainer.devices=auto", "trainer.max_epochs=2"], tmp_path)
    with pytest.raises(ConfigError, match=r"^trainer.devices=auto: .* Fix: trainer.devices=<count>"):
        steps_from_epochs(cfg, numbers)
    steps_from_epochs(_compose(["trainer.accelerator=auto", "trainer.devices=auto"], tmp_path), numbers)


def test_only_rank_zero_says_the_conversion(tmp_path, numbers, caplog, monkeypatch):
    """Every rank converts its config; the lines are printed once (Lightning's ``rank_zero_only.rank``)."""
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    cfg = _compose(["trainer.max_epochs=2"], tmp_path)
    for rank, said in ((1, 0), (0, 1)):
        monkeypatch.setattr(rank_zero_only, "rank", rank)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="xformer"):
            out = steps_from_epochs(cfg, numbers)
        assert len(_lines(caplog)) == said and out.trainer.max_steps == 2 * _batches_an_epoch(numbers)


@pytest.mark.parametrize("changed", ["data_epoch_batches", "data_val_examples"])
def test_the_record_keeps_the_data_side_of_the_conversion_and_a_resume_may_not_change_it(tmp_path, changed):
    """``data_epoch_batches`` and ``data_val_examples`` (the config keys ``metrics.json`` and the checkpoint
    carry) say what the run trained and validated on; a resume that changes either, also from or to all of the
    data, is refused as a change of the data is, naming the trainer key (validation losses on other examples would
    be compared with the checkpoint's: its best, the divergence rule)."""
    import torch
    from omegaconf import OmegaConf

    from xformer.config.checkpoint import check_resume_settings
    from xformer.data.numbers import NumbersDataModule

    dm = NumbersDataModule(n_train=500, n_val=96, n_test=10, n_long=5, cache_dir=str(tmp_path / "cache"))
    dm.prepare_data()
    dm.setup("fit")
    n, here = _batches_an_epoch(dm), [f"paths.root_dir={tmp_path}"]  # no Hydra run to resolve it
    first = steps_from_epochs(
        _compose(
            [*here, "+trainer.limit_train_batches=1", "trainer.limit_val_batches=0.25", "trainer.max_steps=8"], tmp_path
        ),
        dm,
    )
    assert n > 1 and first.data_epoch_batches == 1 and first.data_val_examples == len(dm.val_set) < 96
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": {}, "xformer": {"config": OmegaConf.to_container(first, resolve=True)}}, path)
    keep = {
        "data_epoch_batches": "trainer.limit_val_batches=0.25",
        "data_val_examples": "+trainer.limit_train_batches=1",
    }
    resumed = steps_from_epochs(_compose([*here, keep[changed], "trainer.max_steps=8"], tmp_path), dm)
    was = {"data_epoch_batches": 1, "data_val_examples": len(dm.val_set)}[changed]
    with pytest.raises(ConfigError) as refused:
        check_resume_settings(resumed, str(path))
    line = str(refused.value)
    assert f"{changed}: {was!r} (checkpoint) -> None (now)" in line and "\n" not in line
    key = {"data_epoch_batches": "limit_train_batches", "data_val_examples": "limit_val_batches"}[changed]
    assert f"Fix: trainer.{key}=<as the checkpoint's run had it: {was}>" in line
    assert check_resume_settings(first, str(path)) == []
