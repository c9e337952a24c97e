"""The config check (a dry run, a sweep's check of its jobs) judges the trainer the run builds: its epoch keys in
steps once the data is known, eval without a validation schedule, its callbacks as built, their monitors
against the metrics the run logs; a refusal inside a ``-m`` job prints its ``error:`` line, not a traceback."""

from __future__ import annotations

import json
import logging
import re

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from lightning.fabric.utilities.exceptions import MisconfigurationException

from tests.conftest import REPO
from tests.reliability.conftest import run_py
from xformer.config.check import check_config
from xformer.config.steps import steps_from_epochs
from xformer.errors import ConfigError
from xformer.jobs.driver import build_trainer

#: 6 training batches an epoch (6 optimizer steps)
SMALL = [
    "data.n_train=300",
    "data.n_val=60",
    "data.n_test=40",
    "data.n_long=20",
    "data.tokens_per_batch=512",
    "model.d_model=32",
    "model.n_heads=2",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=1",
    "trainer.enable_progress_bar=false",
    "logger=csv",
]


def _compose(overrides, tmp_path):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        extra = [f"paths.output_dir={tmp_path}", f"data.cache_dir={tmp_path / 'cache'}", "logger=none"]
        return compose("config", overrides=[*SMALL, *overrides, *extra])


def _run_verdict(cfg):
    """What the run does with ``cfg`` (xformer.jobs.driver.build): the conversion, then Lightning's trainer.
    Returns ``None`` (built) or the conversion's refusal, or ``"trainer"`` for Lightning's."""
    dm = instantiate(cfg.data)
    dm.prepare_data()
    dm.setup("fit")
    try:
        converted = steps_from_epochs(cfg, dm)
    except ConfigError as err:
        return str(err)
    try:
        build_trainer(converted)
    except ConfigError:
        return "trainer"
    return None


@pytest.mark.parametrize(
    "overrides",
    [
        ["trainer.val_check_interval=0.5"],
        ["trainer.val_check_interval=0.25", "trainer.max_steps=6"],
        ["trainer.max_epochs=2", "+trainer.limit_train_batches=0"],
        ["trainer.max_epochs=2", "+trainer.limit_train_batches=0.5"],
        ["trainer.max_epochs=2", "+trainer.limit_train_batches=0.01"],
        ["trainer.max_epochs=2", "trainer.check_val_every_n_epoch=2", "trainer.val_check_interval='00:00:00:10'"],
        ["trainer.max_epochs=2", "trainer.check_val_every_n_epoch=1", "trainer.val_check_interval=0.5"],
    ],
)
def test_the_check_refuses_exactly_what_the_run_refuses_with_the_same_line(tmp_path, overrides):
    """Epoch keys: the check passes what the run converts and builds (a fractional ``val_check_interval``) and
    refuses what its conversion refuses (``limit_train_batches=0`` with ``max_epochs``), with the run's line."""
    want = _run_verdict(_compose(overrides, tmp_path))
    try:
        check_config(_compose(overrides, tmp_path))
        got = None
    except ConfigError as err:
        got = "trainer" if str(err).startswith("trainer.") and want == "trainer" else str(err)
    assert got == want


def test_the_warmup_warning_judges_the_budget_in_steps(tmp_path, caplog):
    """``trainer.max_epochs=2`` (12 steps here) with the default 400 warm-up steps warns as ``max_steps=12`` does."""
    cfg = _compose(["trainer.max_epochs=2"], tmp_path)
    dm = instantiate(cfg.data)
    dm.prepare_data()
    dm.setup("fit")
    steps = steps_from_epochs(cfg, dm).trainer.max_steps
    with caplog.at_level(logging.WARNING, logger="xformer"):
        check_config(cfg)
    said = [r.getMessage() for r in caplog.records if "warmup_steps" in r.getMessage()]
    assert said == [f"optim.warmup_steps={cfg.optim.warmup_steps} > trainer.max_steps={steps}: the run ends before "
                    "the learning rate reaches its peak optim.lr"]  # fmt: skip


ES = ["+callbacks.es._target_=lightning.pytorch.callbacks.EarlyStopping"]
MC = ["+callbacks.mc._target_=lightning.pytorch.callbacks.ModelCheckpoint"]


@pytest.mark.parametrize(
    "overrides, kwargs, key",
    [
        ([*ES, "+callbacks.es.monitor=val/loss", "+callbacks.es.mode=maximum"], {"mode": "maximum"}, "mode"),
        ([*MC, "+callbacks.mc.mode=maximum"], {"mode": "maximum"}, "mode"),
        ([*MC, "+callbacks.mc.save_top_k=-2"], {"save_top_k": -2}, None),
    ],
)
def test_a_value_a_callbacks_constructor_refuses_is_one_line_in_the_check_and_the_run(tmp_path, overrides, kwargs, key):
    """Lightning's refusal (its own message, from its constructor here) is one ``ConfigError`` line naming the key
    it names, else the node: the same in the check and where the run builds its trainer."""
    cls = instantiate({"_target_": overrides[0].split("=", 1)[1], "_partial_": True})
    with pytest.raises(MisconfigurationException) as lightning:
        cls(**({"monitor": "val/loss"} if "EarlyStopping" in overrides[0] else {}), **kwargs)
    name = overrides[0].split(".")[1]
    at = f"callbacks.{name}.{key}={kwargs[key]}" if key else f"callbacks.{name} ({overrides[0].split('=', 1)[1]})"
    cfg = _compose(["trainer.max_steps=6", *overrides], tmp_path)
    for check in (check_config, build_trainer):
        with pytest.raises(ConfigError) as err:
            check(cfg)
        line = str(err.value)
        assert "\n" not in line and line.startswith(f"{at}: ") and str(lightning.value).rstrip(".") in line, line


@pytest.mark.parametrize(
    "overrides, monitor",
    [
        ([*ES, "+callbacks.es.monitor=val/bleu"], "callbacks.es.monitor=val/bleu"),
        ([*MC, "+callbacks.mc.monitor=val/bleu"], "callbacks.mc.monitor=val/bleu"),
        ([*ES, "+callbacks.es.monitor=test/loss"], "callbacks.es.monitor=test/loss"),
        ([*ES, "+callbacks.es.monitor=val/los"], "callbacks.es.monitor=val/los"),
    ],
)
def test_a_callbacks_monitor_the_run_does_not_log_is_refused_like_the_objective(tmp_path, overrides, monitor):
    """The names the line offers are the objective's: the loss keys and the data module's own metrics (a name
    that is no metric at all: the list before the data is known), and each of them passes."""
    cfg = _compose(["trainer.max_steps=6", *overrides], tmp_path)
    metrics = list(instantiate(cfg.data).metrics)
    logged = ["val/loss", "val/ppl", "val/acc", *[f"val/{m}" for m in metrics], "train/loss"]
    with pytest.raises(ConfigError) as err:
        check_config(cfg)
    offered = str(err.value).split(". Fix: use one of ", 1)[1].split(", ")
    assert str(err.value).startswith(f"{monitor}: not logged") and set(logged) <= set(offered), str(err.value)
    assert monitor.split("=")[1] not in offered
    for name in logged:  # each offered name passes
        check_config(
            _compose(["trainer.max_steps=6", *overrides[:-1], f"{overrides[-1].split('=')[0]}={name}"], tmp_path)
        )


class EpochStartCounter:
    """A user's callback that acts at the start of each training epoch."""

    def on_train_epoch_start(self, trainer, pl_module) -> None:  # noqa: ARG002 - hook signature
        pass


@pytest.mark.parametrize(
    "overrides, starts",
    [
        ([*MC, "+callbacks.mc.save_on_train_epoch_end=true"], "callbacks.mc.save_on_train_epoch_end=true: "),
        ([*MC, "trainer.limit_val_batches=0", "objective.metric=train/loss"], "trainer.limit_val_batches=0: "),
    ],
)
def test_a_checkpoint_saving_only_at_lightnings_epoch_end_is_refused_with_the_step_fix(tmp_path, overrides, starts):
    """With no step or time trigger Lightning's ``ModelCheckpoint`` saves after each validation, or at its epoch's
    end when told to or when nothing validates: here that end comes once, at the run's end."""
    with pytest.raises(ConfigError) as err:
        check_config(_compose(["trainer.max_epochs=3", *overrides], tmp_path))
    line = str(err.value)
    assert line.startswith(starts) and "Fix: callbacks.mc.every_n_train_steps=" in line, line


@pytest.mark.parametrize(
    "overrides",
    [
        MC,  # saves after each validation, as Lightning's does when validation is not at an epoch's end
        [*MC, "+callbacks.mc.save_on_train_epoch_end=true", "+callbacks.mc.every_n_train_steps=6"],
        [
            *MC,
            "+callbacks.mc.save_on_train_epoch_end=false",
            "trainer.limit_val_batches=0",
            "objective.metric=train/loss",
        ],
        ["trainer.limit_val_batches=0", "objective.metric=train/loss"],  # xformer's own checkpoint callbacks
    ],
)
def test_checkpoints_with_a_step_counted_trigger_pass(tmp_path, overrides):
    check_config(_compose(["trainer.max_epochs=3", *overrides], tmp_path))


def test_a_user_hook_at_the_epochs_start_is_refused_saying_when_it_runs(tmp_path):
    hook = ["+callbacks.mine._target_=tests.train.test_check_sees_the_run.EpochStartCounter"]
    with pytest.raises(ConfigError, match=r"^callbacks.mine \(EpochStartCounter\): its on_train_epoch_start runs "
                       r"once, at the run's start\. Fix: "):  # fmt: skip
        check_config(_compose(hook, tmp_path))


def _error_lines(res):
    return [ln for ln in (res.stdout + res.stderr).splitlines() if "error:" in ln]


def test_a_dry_run_a_sweeps_check_and_a_run_agree(tmp_path):
    """A fractional ``val_check_interval`` passes a sweep's check and a dry run (the run converts it); the
    conversion's refusal of ``limit_train_batches=0`` is the sweep's and the dry run's line, as the run's."""
    ok = run_py([*SMALL, "trainer.max_steps=6", "trainer.val_check_interval=0.5", "seed=0,1", "sweep.dry_run=true",
                 f"hydra.sweep.dir={tmp_path / 'ok'}", "-m"], tmp_path)  # fmt: skip
    assert ok.returncode == 0 and ok.stdout.count("-> config ok") == 2, ok.stderr[-2000:]
    said = [ln for ln in (ok.stdout + ok.stderr).splitlines() if "-> trainer.val_check_interval=" in ln]
    assert len(said) == 2, said  # once per job, by the job: the sweep's check says nothing of its own
    refused = [*SMALL, "trainer.max_epochs=2", "+trainer.limit_train_batches=0"]
    run = run_py([*refused, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    dry = run_py([*refused, "sweep.dry_run=true", f"hydra.run.dir={tmp_path / 'dry'}"], tmp_path)
    sweep = run_py([*refused[:-1], "+trainer.limit_train_batches=0,0.5", "sweep.dry_run=true",
                    f"hydra.sweep.dir={tmp_path / 'sweep'}", "-m"], tmp_path)  # fmt: skip
    assert run.returncode == dry.returncode == sweep.returncode == 2
    (line,) = _error_lines(run)
    assert line.startswith("error: trainer.limit_train_batches=0: ") and _error_lines(dry) == [line]
    assert _error_lines(sweep)[0] == f"error: sweep job 0 (+trainer.limit_train_batches=0): {line[7:]}"


def test_a_refusal_inside_a_sweep_job_is_its_error_line_not_a_traceback(tmp_path):
    """With the sweep's check off, the job's own check refuses it: the log says the run's line, no traceback."""
    args = [*SMALL, "trainer.max_epochs=2", "+trainer.limit_train_batches=0"]
    run = run_py([*args, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    (line,) = _error_lines(run)
    sweep = run_py([*args, "seed=0,1", "+hydra.callbacks.validate_sweep.enabled=false",
                    f"hydra.sweep.dir={tmp_path / 'sweep'}", "-m"], tmp_path)  # fmt: skip
    out = sweep.stdout + sweep.stderr
    assert "Traceback" not in out, out[-3000:]
    said = re.findall(r"job (\d) \(.*\) failed; the sweep goes on: (error: .*)", out)
    assert sorted(said) == [("0", line), ("1", line)], out[-3000:]


def test_a_sweeps_report_hint_names_no_step_its_jobs_do_not_run(tmp_path):
    """``trainer.max_epochs=1,2``: the hint at the sweep's start names no validation step past a job's budget (the
    conversion's own lines say the budgets)."""
    res = run_py([*SMALL, "trainer.max_epochs=1,2", "sweep.dry_run=true", f"hydra.sweep.dir={tmp_path / 's'}", "-m"],
                 tmp_path)  # fmt: skip
    out = res.stdout + res.stderr
    budgets = [int(n) for n in re.findall(r"trainer\.max_epochs=\d -> trainer\.max_steps=(\d+) ", out)]
    (hint,) = [ln for ln in out.splitlines() if "report: a verdict" in ln]
    named = [int(n) for part in re.findall(r"validations? \(([\d, ]+)\)", hint) for n in part.split(", ")]
    assert res.returncode == 0 and len(set(budgets)) == 2 and all(n <= max(budgets) for n in named), out[-3000:]


@pytest.mark.slow  # two runs and a dry run: in make test-slow (make test's 10-minute budget)
def test_eval_runs_without_the_validation_schedule_which_does_nothing_there(tmp_path):
    """``mode=eval`` with a fractional ``val_check_interval`` (Lightning's trainer refuses it without
    ``check_val_every_n_epoch``): the run tests the checkpoint, as without the key; the dry run passes."""
    train = run_py([*SMALL, "trainer.max_steps=2", f"hydra.run.dir={tmp_path / 'train'}"], tmp_path)
    assert train.returncode == 0, train.stderr[-2000:]
    (ckpt,) = (tmp_path / "train" / "checkpoints").glob("best-*.ckpt")
    base = [*SMALL, "mode=eval", f"ckpt_path={ckpt}"]
    plain = run_py([*base, f"hydra.run.dir={tmp_path / 'plain'}"], tmp_path)
    assert plain.returncode == 0, plain.stderr[-2000:]
    for name, extra in (("run", []), ("dry", ["sweep.dry_run=true"])):
        res = run_py([*base, "trainer.val_check_interval=0.5", *extra, f"hydra.run.dir={tmp_path / name}"], tmp_path)
        assert res.returncode == 0 and not _error_lines(res), res.stderr[-2000:]
    tested = [json.loads((tmp_path / d / "metrics.json").read_text())["metrics"] for d in ("plain", "run")]
    assert tested[0] == tested[1]
