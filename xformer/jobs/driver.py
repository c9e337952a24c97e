"""One job of ``run.py`` after its config passed stages 1-2 of the check: :func:`run` builds the data and model
once each, fits and tests, and writes ``metrics.json`` however it ends (the job folder: docs/running.md)."""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks.progress.progress_bar import ProgressBar
from omegaconf import DictConfig, OmegaConf

from xformer.config.check import check_data_options, check_with_data
from xformer.config.checkpoint import check_checkpoint_vocab, check_resume_settings
from xformer.config.steps import steps_from_epochs
from xformer.config.trainer import build_callbacks
from xformer.data.base import XformerDataModule
from xformer.errors import ConfigError
from xformer.train.checkpoint_file import build_model, read_checkpoint, refusal
from xformer.train.module import TransformerLitModule

from .callbacks import NonFiniteLossGuard, OptimizerStepTimer
from .checkpoints import slurm_job_key
from .console import StepBar, quiet_console, single_log_lines, test_table
from .context import JobContext, Outcome, outcome_of
from .distributed import peer_lost_line
from .record import FILE, RunRecord, read_record
from .resume import OptimizerStepIntervals, ResumableCSVLogger
from .wandb_run import describe_runs, finish_runs, wandb_logger

# Lightning warns whenever `srun` is on PATH; outside a SLURM job that says nothing about this run.
warnings.filterwarnings("ignore", message=r"The `srun` command is available on your system but is not used")

log = logging.getLogger("xformer")


def build_loggers(cfg: DictConfig, ctx: JobContext) -> list:
    """The configured loggers plus the always-on CSV logger, which keeps its history before a resumed checkpoint."""
    keep_before = ctx.step if ctx.resumed else None  # resuming this job: keep its history before the checkpoint
    loggers: list = [ResumableCSVLogger(save_dir=str(ctx.out_dir), name="csv", version="", keep_before=keep_before)]
    for node in (cfg.get("logger") or {}).values():
        if isinstance(node, DictConfig) and "_target_" in node:
            is_wandb = node._target_.endswith("WandbLogger")
            loggers.append(wandb_logger(node, ctx.info(), ctx.out_dir, ctx.resumed) if is_wandb else instantiate(node))
    return loggers


def config_from_checkpoint(cfg: DictConfig, overrides: tuple[str, ...], ckpt: str | None) -> DictConfig:
    """For ``mode=eval``: ``model`` and ``data`` from the config stored in checkpoint ``ckpt`` (the weights only
    fit that model), keeping the ``data.*`` keys given on the command line."""
    if not (meta := read_checkpoint(ckpt).get("xformer") if ckpt else None):
        return cfg
    stored = OmegaConf.create(meta["config"])
    cli = OmegaConf.from_dotlist([o for o in overrides if o.startswith("data.")])
    cfg = cfg.copy()
    OmegaConf.set_struct(cfg, False)
    cfg.model = stored.model
    cfg.data = OmegaConf.merge(stored.data, cli.get("data", {}))
    return cfg


@dataclass
class Job:
    """What :func:`build` makes for one job (``cfg`` with its epoch keys in steps), with its run record so far."""

    cfg: DictConfig
    dm: L.LightningDataModule
    module: TransformerLitModule
    trainer: L.Trainer
    record: RunRecord


def build_module(cfg: DictConfig, dm, model: torch.nn.Module) -> TransformerLitModule:
    """``cfg.module`` for ``model`` and the data module ``dm``, compiled in place when ``trainer.compile`` is set."""
    from_data = ("pad_id", "bos_id", "eos_id", "detokenize", "metrics", "test_split_names")
    module = instantiate(cfg.module)(model=model, **{k: getattr(dm, k) for k in from_data})
    compile_opts = cfg.trainer.get("compile")
    if compile_opts:
        # in place: checkpoints keep plain parameter names, loading into compiled and eager models alike
        kwargs = {} if compile_opts is True else OmegaConf.to_container(compile_opts, resolve=True)
        module.model.compile(**kwargs)
    return module


def build_trainer(cfg: DictConfig, start: float | None = None) -> L.Trainer:
    """``cfg.trainer`` with the configured callbacks, :class:`~xformer.jobs.resume.OptimizerStepIntervals` (clock
    from ``start``) and the progress bar; no loggers yet. Raises: ConfigError for a value Lightning or a callback
    refuses."""
    callbacks = build_callbacks(cfg)  # a value a callback's constructor refuses: one ConfigError line
    trainer_cfg = OmegaConf.to_container(cfg.trainer, resolve=True)
    trainer_cfg.pop("compile", None)  # xformer's key (build_module)
    interval = trainer_cfg.get("val_check_interval")
    dense = cfg.get("val_dense") or {}
    steps = interval if isinstance(interval, int) and not isinstance(interval, bool) else None  # else a time
    callbacks.append(OptimizerStepIntervals(steps, dense.get("every"), dense.get("until"), cfg.seed, start))
    if trainer_cfg.get("enable_progress_bar", True) and not any(isinstance(c, ProgressBar) for c in callbacks):
        callbacks.append(StepBar())
    try:
        if (max_time := trainer_cfg.get("max_time")) is not None:  # Lightning's timer, checked at steps' ends
            callbacks.append(OptimizerStepTimer(max_time))  # (Lightning then leaves trainer.max_time to it)
        return instantiate(trainer_cfg, logger=False, callbacks=callbacks)
    except Exception as err:  # Lightning refuses a value its signature allows (a range, a choice, a count as a word)
        if (why := refusal(err, (ValueError, TypeError, MisconfigurationException))) is None:
            raise
        fix = "" if "Fix:" in why else " Fix: correct that trainer.* key"  # a strategy's refusal names its own fix
        raise ConfigError(f"trainer: {why}{fix}") from None


def build(cfg: DictConfig, ctx: JobContext, start: float | None = None) -> Job:
    """Stages 3-4 of the config check around building data, model, module, loggers and trainer, each once.
    Raises: ConfigError / DataError before anything is trained."""
    L.seed_everything(cfg.seed, workers=True)
    dm = check_data_options(cfg, trainer=False)  # stage 3; Lightning checks the trainer's values as it builds it
    if not isinstance(dm, XformerDataModule):
        raise ConfigError(
            f"data._target_={cfg.data.get('_target_')}: run.py needs an xformer.data.base.XformerDataModule (it runs "
            "the data's epochs back to back). Fix: subclass it"
        )
    dm.prepare_data()
    dm.setup("fit")
    if cfg.mode == "train":  # epoch keys -> optimizer steps, once, with a line each
        cfg = steps_from_epochs(cfg, dm)
    record = RunRecord(job=ctx.info(), config=OmegaConf.to_container(cfg, resolve=True))
    trainer = build_trainer(cfg, start)  # the run's one trainer, its loggers given once they are built
    if ctx.ckpt is not None:
        check_checkpoint_vocab(cfg, ctx.ckpt, dm)
        if changes := check_resume_settings(cfg, ctx.ckpt):
            at = f" from step {ctx.step}" if ctx.step is not None else ""
            items = ", ".join(f"{k}: {old!r} -> {new!r}" for k, old, new in changes)
            line = "resuming %s with settings changed from the checkpoint's (they take effect%s): %s"
            log.info(line, ctx.ckpt, at, items)
            record.changed_on_resume = {k: {"checkpoint": old, "now": new} for k, old, new in changes}
    model = build_model(cfg, dm.src_vocab_size, dm.tgt_vocab_size, dm.pad_id)
    check_with_data(cfg, dm, model)  # stage 4
    record.params = model.param_breakdown()
    log.info("parameters: %s", ", ".join(f"{k}={v:,}" for k, v in record.params.items()))
    module = build_module(cfg, dm, model)
    meta = {"config": record.config, "tokenizer": None}
    if (tok := getattr(dm, "tokenizer", None)) is not None:  # the JSON text its ``save`` writes
        with tempfile.TemporaryDirectory() as tmp:
            tok.save(path := Path(tmp) / "tokenizer.json")
            meta["tokenizer"] = path.read_text(encoding="utf-8")
    meta.update({k: getattr(dm, k) for k in ("src_vocab_size", "tgt_vocab_size", "pad_id")})
    module.checkpoint_meta = {**meta, "slurm_job": slurm_job_key()}  # a requeued SLURM job resumes only its own
    trainer.loggers = build_loggers(cfg, ctx)  # after every check: no W&B run for a refused config
    dm.serve_epochs_back_to_back(cfg.get("data_epoch_batches"), trainer.accumulate_grad_batches)
    for lg in trainer.loggers:
        lg.log_hyperparams(record.config)
        lg.log_metrics({f"model/params_{k}": float(v) for k, v in record.params.items()}, step=0)
    if trainer.is_global_zero and (wandb_run := describe_runs(trainer.loggers)) is not None:
        record.job["wandb"] = wandb_run
    return Job(cfg, dm, module, trainer, record)


def fit_and_test(job: Job, ckpt: str | None, out_dir: Path) -> tuple[dict, dict, int | None, dict | None]:
    """``mode=train``: fit (resuming from ``ckpt``), then test the objective's best checkpoint; ``mode=eval``:
    test ``ckpt``. Returns ``(fit_metrics, test_metrics, tokens_seen, rose)`` (``{}``, ``None`` and ``None`` in
    eval; ``rose``: the fit's :func:`divergence_of`); a resume with nothing left to train takes its fit values
    from the record in the job's folder ``out_dir``."""
    cfg, trainer, module, dm = job.cfg, job.trainer, job.module, job.dm
    if cfg.mode != "train":
        return {}, _test(trainer, module, dm, ckpt), None, None
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt)
    rose = divergence_of(trainer)  # testing the best checkpoint reloads its callbacks' (older) state
    # `epoch` is the data position the loggers' rows carry (the module logs it), not a metric of the run
    fit_metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k != "epoch"}
    # the last step's train-time values, also where that step was not logged
    last_step = getattr(module, "last_step_metrics", dict)()
    if ckpt is not None and not last_step and (before := read_record(out_dir)) is not None:
        # a resume with nothing left to train: the fit's values are those the job's last run recorded
        fit_metrics = {**{k: v for k, v in before.metrics.items() if not k.startswith("test/")}, **fit_metrics}
    fit_metrics.update(last_step)
    tokens_seen = module.tokens_seen  # testing the best checkpoint reloads its (older) count
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    return fit_metrics, _test(trainer, module, dm, best or None), tokens_seen, rose


def _test(trainer: L.Trainer, module, dm, ckpt: str | None) -> dict:
    """``trainer.test`` with the results printed as one column per test split."""
    tested = trainer.test(module, datamodule=dm, ckpt_path=ckpt, verbose=False)
    results = {k: v for d in tested for k, v in d.items() if k != "epoch"}  # the rows' data position, not a metric
    if trainer.is_global_zero and (table := test_table(results, list(dm.test_split_names))):
        print(table, end="", flush=True)
    return results


def complete_record(job: Job, end: Outcome, final: dict, tokens_seen: int | None) -> None:
    """Fill ``job.record`` with how the job ended, its metrics, best checkpoint, objective and numerics."""
    cfg, record, trainer, module = job.cfg, job.record, job.trainer, job.module
    objective_value = final.get(cfg.objective.metric)
    cb = trainer.checkpoint_callback
    best_score = cb.best_model_score if cb is not None else None
    record.status, record.diverged, record.error = end.status, end.diverged, end.message
    record.metrics = dict(sorted(final.items()))
    record.best = {
        "metric": cfg.objective.metric,
        "mode": cfg.objective.mode,
        "value": float(best_score) if best_score is not None else objective_value,
        "checkpoint": cb.best_model_path if cb is not None else None,
    }
    record.objective = {"metric": cfg.objective.metric, "value": objective_value}
    clock = next(cb for cb in trainer.callbacks if isinstance(cb, OptimizerStepIntervals))
    record.wall_time_s, record.global_step = clock.elapsed(), trainer.global_step
    record.tokens_seen = tokens_seen if tokens_seen is not None else module.tokens_seen
    record.bleu_signature, record.numerics = module.bleu_signature, numerics()
    # the precision that ran, which Lightning may change (16-mixed on a CPU runs bf16-mixed), and the one asked for
    record.numerics["precision"] = str(trainer.precision)
    if str(cfg.trainer.get("precision")) != record.numerics["precision"]:
        record.numerics["precision_asked"] = str(cfg.trainer.get("precision"))


def numerics() -> dict:
    """What decides a run's floating-point results beyond its config: torch's version, the CPU model, ATen's CPU
    kernel set and the intra-op threads (docs/results/README.md, "Reproducing one job")."""
    cpu = platform.processor() or "unknown"
    with contextlib.suppress(OSError):
        names = [x for x in Path("/proc/cpuinfo").read_text().splitlines() if x.startswith("model name")]
        cpu = names[0].split(":", 1)[1].strip() if names else cpu
    return {
        "torch": torch.__version__,
        "cpu": cpu,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def divergence_of(trainer: L.Trainer) -> dict | None:
    """The :class:`NonFiniteLossGuard`'s ``divergence()``, ``None`` without a guard."""
    return next((cb.divergence() for cb in trainer.callbacks if isinstance(cb, NonFiniteLossGuard)), None)


def apply_omp_threads() -> None:
    """Set torch's intra-op threads from ``OMP_NUM_THREADS`` (a reused launcher worker sets it per job)."""
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0 and torch.get_num_threads() != int(threads):
        torch.set_num_threads(int(threads))


def run(cfg: DictConfig, ctx: JobContext) -> tuple[Outcome, RunRecord]:
    """Train or evaluate one job whose config passed stages 1-2; returns ``(how it ended, its record)``, an error
    in fit or test in the outcome. Raises: ConfigError / DataError before training starts (no record)."""
    start = time.time()  # the job's clock: building the data and model counts
    single_log_lines()  # Lightning's lines once, through Hydra's handlers
    quiet_console(resuming=ctx.resumed is not None)
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    apply_omp_threads()
    if cfg.mode == "eval":
        cfg = config_from_checkpoint(cfg, ctx.overrides, ctx.ckpt)
    job = build(cfg, ctx, start)
    final, tokens_seen = {}, None
    try:
        fit_metrics, test_metrics, tokens_seen, rose = fit_and_test(job, ctx.ckpt, ctx.out_dir)
        final = {**fit_metrics, **test_metrics}
        end = outcome_of(rose=rose)
    except BaseException as err:  # recorded; SIGTERM (preemption) and Ctrl-C saved last.ckpt
        ctrl_c = type(err) is SystemExit and job.trainer.interrupted  # Lightning's exit(1) after a KeyboardInterrupt
        step = job.trainer.global_step
        end = outcome_of(
            err, ctrl_c=ctrl_c, step=step, out_dir=ctx.out_dir, peer_lost=peer_lost_line(err, step, ctx.out_dir)
        )
    complete_record(job, end, final, tokens_seen)
    if job.trainer.is_global_zero:
        job.record.write(ctx.out_dir / FILE)
        finish_runs(job.trainer.loggers, job.record.metrics, end.exit_code)
        log.info("%s: the run's folder is %s (its summary: %s)", end.status, ctx.out_dir, ctx.out_dir / FILE)
    return end, job.record
