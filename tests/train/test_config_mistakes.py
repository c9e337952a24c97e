"""Plausible first-contact mistakes found by a newcomer pass: each is one ``ConfigError`` line from
the stage-1 check (before anything is built), naming the key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from xformer.config.check import check_config_first, check_static
from xformer.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def _compose(overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=overrides)


@pytest.mark.parametrize(
    "override,fix",
    [
        ("model.pe=rope", "model/pe=rope"),
        ("model.norm=pre", "model/norm=pre"),
        ("model.ffn=gelu", "model/ffn=gelu"),
        ("model.attention=causal", "model/attention=causal"),
        ("model.mixer=gqa", "model/mixer=gqa"),
        ("model.init=gpt2", "model/init=gpt2"),
        ("optim.scheduler=cosine", "optim/scheduler=cosine"),
        ("optim.optimizer=adamw", "optim=adamw"),
    ],
)
def test_a_dot_where_a_group_slash_is_meant_names_the_group(override, fix):
    """One line naming the override and the group it means, not a traceback from Hydra's instantiate or the validator
    (``'str' object has no attribute '_target_'``, ``'str' object is not callable``)."""
    with pytest.raises(ConfigError) as err:
        check_static(_compose([override]))
    msg = str(err.value)
    assert msg.startswith(f"{override}: ") and msg.endswith(f"Fix: {fix}") and "\n" not in msg


def test_the_default_config_passes_stage_one():
    """The group nodes are found from the folders of conf/ (no table): the defaults pass."""
    check_static(_compose([]))


def test_a_string_that_some_option_of_the_group_also_sets_passes():
    """``trainer.strategy=fsdp`` is Lightning's own strategy string (``trainer/default.yaml`` sets a string
    there too), so only a key that every option of its group sets to a node is refused."""
    from xformer.config.check import check_group_nodes

    check_group_nodes(_compose(["trainer.strategy=fsdp"]))
    with pytest.raises(ConfigError, match=r"^optim.optimizer=adamw: .*Fix: optim=adamw$"):
        check_group_nodes(_compose(["optim.optimizer=adamw"]))


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["model/init=gpt2", "model.init.std=abc"], r"^model.init.std=abc: must be a number"),
        (["model/init=gpt2", "model.init.std=0"], r"^model.init.std=0: must be > 0"),
        (["model/init=gpt2", "model.init.scale_embeddings=maybe"], r"^model.init.scale_embeddings=maybe: must be"),
        (
            ["optim=adamw", "optim.optimizer.decay_min_ndim=x"],
            r"^optim.optimizer.decay_min_ndim=x: must be an integer",
        ),
        (["optim=adamw", "optim.optimizer.decay_embeddings=maybe"], r"^optim.optimizer.decay_embeddings=maybe"),
    ],
)
def test_recipe_options_are_type_checked(overrides, message):
    with pytest.raises(ConfigError, match=message):
        check_config_first(_compose(overrides))


def test_a_schedule_that_follows_a_missing_step_budget_is_refused():
    """``total_steps`` follows ``trainer.max_steps``; with ``-1`` and no epoch budget the message names the key the
    user set (``trainer.max_steps=-1``, not ``total_steps=-1``) and the fix; with ``max_epochs`` it follows the
    converted budget (tests/train/test_epoch_keys.py)."""
    cfg = _compose(["optim=adamw", "trainer.max_steps=-1", "trainer.max_epochs=-1"])
    with pytest.raises(ConfigError, match=r"^optim.scheduler.total_steps: follows trainer.max_steps=-1.*Fix: set "):
        check_static(cfg)
    check_static(_compose(["optim=adamw", "trainer.max_steps=-1", "trainer.max_epochs=1"]))


def test_a_logger_whose_package_is_missing_fails_first(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name.startswith("tensorboard") else real(name, *a)
    )
    cfg = _compose(["logger=tensorboard"])
    with pytest.raises(
        ConfigError, match=r"^logger.tensorboard: TensorBoardLogger needs tensorboard.*Fix: pip install"
    ):
        check_config_first(cfg)


@pytest.mark.parametrize(
    "overrides,words",
    [
        (["optim=adamw", "optim.warmup_steps=8", "trainer.max_steps=5"], "drops to its floor at once"),
        (["optim.warmup_steps=100", "trainer.max_steps=10"], "before the learning rate reaches its peak"),
    ],
)
def test_a_warmup_as_long_as_the_run_is_a_warning(overrides, words, caplog):
    """Judged on the config the trainer is built from (its budget in steps: tests/train/test_epoch_keys.py)."""
    from xformer.config.check import warmup_rules

    with caplog.at_level("WARNING", logger="xformer"):
        warmup_rules(_compose(overrides))
    assert any(words in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
    caplog.clear()
    with caplog.at_level("WARNING", logger="xformer"):
        warmup_rules(_compose(["optim=adamw", "trainer.max_steps=500"]))
    assert not caplog.records


@pytest.mark.parametrize(
    "override,fix",
    [
        ("+model.ffn_ratoi=4", "model.ffn_ratio"),
        ("+model.n_encoder_layer=2", "model.n_encoder_layers"),
    ],
)
def test_a_misspelled_model_key_added_with_plus_names_the_closest_argument(override, fix):
    """Hydra's "not in struct" hint says to add the key with ``+``; the model then failed with
    ``TypeError: unexpected keyword argument`` after the data was built."""
    from xformer.config.check import check_model

    with pytest.raises(
        ConfigError, match=rf"^{override[1:].split('=')[0]}: not a parameter of .* did you mean {fix}\?$"
    ):
        check_model(_compose([override]))


def _every_shipped_config() -> list[list[str]]:
    conf = REPO / "conf"
    out = [
        [f"experiment={p.relative_to(conf / 'experiment').with_suffix('')}"]
        for p in (conf / "experiment").rglob("*.yaml")
    ]
    for group in ("arch", "pe", "norm", "ffn", "attention", "mixer", "init"):
        out += [[f"model/{group}={p.stem}"] for p in (conf / "model" / group).glob("*.yaml")]
    return out


def test_every_shipped_config_passes_the_stage_one_rules_and_every_target_signature(monkeypatch):
    """Every node with a ``_target_`` of every shipped config (model, data, trainer, callbacks, logger,
    optimizer, ...) fits the signature of what it names (the schema read from the code)."""
    from xformer.config.check import check_targets

    monkeypatch.setenv("XFORMER_DATA", "/tmp")
    for overrides in _every_shipped_config():
        cfg = _compose(overrides)
        check_targets(cfg)
        try:
            check_static(cfg)
        except ConfigError as err:  # only the data folders, which this machine need not hold
            assert all(line.startswith("data.root=") for line in str(err).split("\nerror: ")), err


def test_check_config_runs_each_stage_once_and_sees_a_changed_config(monkeypatch):
    """No process-wide cache of checked configs: each call checks the config it is given, each stage once."""
    from xformer.config import check as stages

    cfg = _compose(["trainer.max_steps=5"])
    calls = []
    real = stages.check_model
    monkeypatch.setattr(stages, "check_model", lambda c, ckpt=None: (calls.append(1), real(c, ckpt)))
    monkeypatch.setattr(stages, "check_data_options", lambda _cfg: None)
    stages.check_config(cfg)
    assert len(calls) == 1
    cfg.model.n_heads = 3  # d_model 512 is not divisible by 3
    with pytest.raises(ConfigError, match="n_heads"):
        stages.check_config(cfg)
    assert len(calls) == 2


def test_weight_decay_set_where_no_optimizer_reads_it_is_refused():
    """``optim=adam +optim.weight_decay=0.1`` trained without any decay (Adam's is
    ``optim.optimizer.weight_decay``; only ``optim=adamw`` reads ``optim.weight_decay``)."""
    with pytest.raises(ConfigError, match=r"^optim.weight_decay=0.1: the chosen optimizer does not read it. Fix: "):
        check_static(_compose(["optim=adam", "+optim.weight_decay=0.1"]))
    check_static(_compose(["optim=adamw", "optim.weight_decay=0.05"]))
    check_static(_compose(["optim=adam", "+optim.weight_decay=0"]))


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("trainer.gradient_clip_algorithm=max", r"^trainer: `gradient_clip_algorithm` max is invalid.*Fix: "),
        ("trainer.devices=two", r"^trainer: `devices` selected with `CPUAccelerator` should be an int > 0.*Fix: "),
    ],
)
def test_a_trainer_value_lightning_refuses_is_one_error_line(override, says, tmp_path):
    """``trainer.*`` keys are typed by Lightning's signature; a value of the right type that Lightning's
    constructor refuses (a choice, a range, a device count given as a word: a ``TypeError``) is one
    ``ConfigError`` line, not a traceback."""
    from xformer.jobs.driver import build_trainer

    cfg = _compose([override, "trainer.accelerator=cpu", f"paths.output_dir={tmp_path}", "logger=none"])
    with pytest.raises(ConfigError, match=says) as err:
        build_trainer(cfg)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [("devices", "two"), ("devices", "0"), ("strategy", "bogus"), ("accelerator", "tpu")],
)
def test_a_trainer_value_lightning_refuses_is_named_by_its_key_before_any_data(key, value, tmp_path):
    """Stage 3 builds the trainer from its node before the data is read: the line names the one key whose value
    Lightning's own ``Trainer`` refuses (checked here against ``lightning.Trainer`` with that key alone)."""
    import lightning as L
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    from xformer.config.check import trainer_accepts

    with pytest.raises((ValueError, TypeError, ImportError, MisconfigurationException)):  # Lightning refuses it
        L.Trainer(**{key: int(value) if value.isdigit() else value}, logger=False, enable_checkpointing=False)
    cfg = _compose([f"trainer.{key}={value}", f"paths.output_dir={tmp_path}", "logger=none"])
    with pytest.raises(ConfigError, match=rf"^trainer\.{key}={value}: .+ Fix: another trainer\.{key} ") as err:
        trainer_accepts(cfg)
    assert "\n" not in str(err.value)
    trainer_accepts(_compose([f"paths.output_dir={tmp_path}", "logger=none"]))  # the default trainer passes


@pytest.mark.slow  # 30-60 s: in `make test-slow`, out of `make test`'s 10-minute budget
def test_run_py_refuses_a_trainer_value_in_one_line_before_building_the_model(tmp_path):
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    res = subprocess.run(
        [sys.executable, str(REPO / "run.py"), "trainer.devices=two", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0"},
    )
    out = res.stdout + res.stderr
    assert res.returncode == 2, out[-2000:]
    errors = [ln for ln in out.splitlines() if "error" in ln.lower()]
    # the run's one trainer refuses it, before the model is built (a dry run names the key before any data)
    assert len(errors) == 1 and errors[0].startswith("error: trainer: `devices` "), out[-2000:]
    assert "parameters:" not in out and "Traceback" not in out  # no model built


@pytest.mark.slow  # 30-60 s: in `make test-slow`, out of `make test`'s 10-minute budget
def test_a_refused_run_prints_its_error_line_alone_and_a_valid_one_keeps_its_warnings(tmp_path):
    """``trainer.max_steps=5`` draws the warm-up warning (once the budget is known); ``model.dropout=2`` is refused
    in stage 2: the refused run prints only its ``error:`` line, the same settings without the mistake print the
    warning."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    def run(*args: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0"}
        cmd = [sys.executable, str(REPO / "run.py"), "trainer.max_steps=5", f"hydra.run.dir={tmp_path}", *args]
        return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env)

    refused = run("model.dropout=2")
    lines = [ln for ln in (refused.stdout + refused.stderr).splitlines() if ln.strip()]
    assert refused.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: model.dropout=2"), lines
    valid = run("sweep.dry_run=true")
    out = valid.stdout + valid.stderr
    assert valid.returncode == 0 and "optim.warmup_steps=400 > trainer.max_steps=5" in out, out[-2000:]
    assert "warmup_steps=400 > trainer.max_steps=5" in (tmp_path / "run.log").read_text()  # the job's log keeps it


TIMED = "{_target_: datetime.timedelta, seconds: 60}"  # Lightning's ModelCheckpoint takes a timedelta


@pytest.mark.parametrize("key, value", [("train_time_interval", TIMED), ("every_n_train_steps", "10")])
def test_lightnings_periodic_checkpoint_under_accumulation_is_refused(key, value):
    """Lightning's ``ModelCheckpoint`` saving by time, or by steps after a resume, can save between the
    micro-batches of a step, whose gradients no checkpoint holds: refused with accumulation, with the fix
    (xformer's ``StepEndCheckpoint``, which the default ``StopCheckpoint`` extends, passes); without accumulation
    it passes."""
    add = "+" if key == "train_time_interval" else ""
    plain = [
        "callbacks.last_checkpoint._target_=lightning.pytorch.callbacks.ModelCheckpoint",
        "~callbacks.last_checkpoint.save_on_train_end",  # StopCheckpoint's own argument
        "callbacks.last_checkpoint.every_n_train_steps=null",
        f"{add}callbacks.last_checkpoint.{key}={value}",
    ]
    with pytest.raises(
        ConfigError,
        match=rf"^callbacks.last_checkpoint.{key}: with trainer.accumulate_grad_batches=2 .*"
        r"Fix: callbacks.last_checkpoint._target_=xformer.jobs.callbacks.StepEndCheckpoint$",
    ):
        check_static(_compose([*plain, "trainer.accumulate_grad_batches=2"]))
    check_static(_compose(plain))
    check_static(
        _compose(["trainer.accumulate_grad_batches=2", f"+callbacks.last_checkpoint.train_time_interval={TIMED}"])
    )


def test_a_checkpoint_time_interval_as_a_mapping_is_refused_with_the_timedelta_form():
    """Lightning's ``ModelCheckpoint`` calls ``timedelta`` methods on ``train_time_interval``: a bare mapping
    would fail at the first save, mid-run; it is refused at stage 1 with the form that builds one."""
    with pytest.raises(
        ConfigError,
        match=r"^callbacks.last_checkpoint.train_time_interval: ModelCheckpoint takes a datetime.timedelta.*"
        r"Fix: callbacks.last_checkpoint.train_time_interval=\{_target_: datetime.timedelta, minutes: 5\}$",
    ):
        check_static(_compose(["+callbacks.last_checkpoint.train_time_interval={minutes: 5}"]))


def test_max_time_as_a_number_is_refused_and_as_timedelta_keys_is_accepted():
    """``trainer.max_time`` is a ``DD:HH:MM:SS`` string or a node of ``timedelta`` keys, as Lightning's
    ``Timer`` takes it: a bare number is one line at stage 1, not Lightning's traceback on an ``int``, and
    the keys pass the stage-3 trainer check, which hands Lightning a plain dict."""
    from xformer.config.check import trainer_accepts

    with pytest.raises(ConfigError, match=r"^trainer.max_time=5: must be a string"):
        check_static(_compose(["trainer.max_time=5"]))
    trainer_accepts(_compose(["trainer.max_time={minutes: 1}"]))
    with pytest.raises(ConfigError, match=r"^trainer.max_time=bogus: .*not a valid duration"):
        trainer_accepts(_compose(["trainer.max_time=bogus"]))


@pytest.mark.parametrize("value", [0, -1])
def test_an_accumulation_below_one_is_refused_at_stage_one(value):
    """Lightning annotates ``accumulate_grad_batches`` as a bare ``int``: 0 would divide by zero inside its
    training loop and -1 would train as 1. Both are one line naming the key and its range."""
    with pytest.raises(ConfigError, match=rf"^trainer.accumulate_grad_batches={value}: must be >= 1\. Fix: "):
        check_static(_compose([f"trainer.accumulate_grad_batches={value}"]))
    check_static(_compose(["trainer.accumulate_grad_batches=2"]))


@pytest.mark.parametrize(
    "override, key, fix",
    [
        ("+trainer.min_epochs=2", "trainer.min_epochs", "trainer.min_steps=<optimizer steps>"),
        ("+trainer.reload_dataloaders_every_n_epochs=1", "trainer.reload_dataloaders_every_n_epochs", "remove it"),
        (
            "+callbacks.last_checkpoint.every_n_epochs=1",
            "callbacks.last_checkpoint.every_n_epochs",
            "callbacks.last_checkpoint.every_n_train_steps=<optimizer steps>",
        ),
    ],
)
def test_options_counted_in_lightnings_epochs_are_refused_with_the_step_counted_fix(override, key, fix):
    """Lightning runs the data epochs back to back as one epoch, which ends with the run: an option that
    counts its epochs would never act (or hold training forever), so it is refused at stage 1."""
    with pytest.raises(ConfigError, match=rf"^{key}: .*Fix: {fix}"):
        check_static(_compose([override]))
    check_static(_compose(["trainer.max_epochs=2", "trainer.check_val_every_n_epoch=1"]))  # data epochs: fine
