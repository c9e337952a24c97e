"""One job of ``run.py`` in three steps: :func:`build` (validate; data, model, LightningModule from
``cfg.module``, loggers, trainer), :func:`fit_and_test`, :func:`write_summary` (``metrics.json``);
:func:`run` chains them and closes the W&B run (:mod:`xformer.jobs.wandb_run`).

Layout of a job folder (Hydra's output dir, one per ``-m`` job)::

    .hydra/           resolved config and overrides (Hydra)
    checkpoints/      last.ckpt and best-<step>.ckpt (by ``objective``)
    csv/metrics.csv   every logged value by step (Lightning's CSVLogger; read by ``xformer report``)
    wandb/            the W&B run (offline runs are synced later with ``wandb sync``)
    metrics.json      status, resolved config, final/best metrics, wall time, tokens seen, parameters

``status`` in ``metrics.json``: ``finished``; ``diverged`` (an outcome the report counts, with
``"diverged": {"step", "reason"}``): the training loss became NaN/Inf
(:class:`~xformer.jobs.callbacks.NonFiniteLossError`) or the last validation loss ended above the first
(:meth:`~xformer.jobs.callbacks.NonFiniteLossGuard.divergence`); ``preempted`` (SIGTERM); ``failed``
(any other error: a crash).
"""

from __future__ import annotations

import json
import logging
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from lightning.pytorch.callbacks.progress.progress_bar import ProgressBar
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf

from xformer.errors import ConfigError
from xformer.train.module import TransformerLitModule

from .build import build_model, refusal
from .callbacks import NonFiniteLossError, NonFiniteLossGuard, interrupt_signal
from .checkpoints import (
    check_checkpoint_vocab,
    check_resume_settings,
    describe_resume_changes,
    read_checkpoint,
    resolve_ckpt_path,
)
from .config_check.stages import check_config, check_with_data
from .console import progress_bar, quiet_console, single_log_lines, test_table
from .distributed import patch_lightning_for_job
from .resume import ConsistentResume, RerootCheckpoints, ResumableCSVLogger, checkpoint_step, own_checkpoint
from .slurm import job_key as slurm_job_key
from .steps import OptimizerStepIntervals
from .wandb_run import describe_runs, finish_runs, wandb_logger

# Lightning warns whenever `srun` is on PATH outside a SLURM job; outside a job it says nothing about this run
# (inside one, SLURM's variables select the SLURM environment), so that one message is not shown.
warnings.filterwarnings("ignore", message=r"The `srun` command is available on your system but is not used")

log = logging.getLogger("xformer")


def job_info() -> dict:
    """Hydra facts about this job: output dir, overrides, sweep dir and job number (empty outside Hydra)."""
    if not HydraConfig.initialized():
        return {"overrides": [], "multirun": False}
    hc = HydraConfig.get()
    multirun = str(hc.mode) == "RunMode.MULTIRUN"
    return {
        "output_dir": hc.runtime.output_dir,
        "overrides": list(hc.overrides.task),
        "multirun": multirun,
        "sweep_dir": hc.sweep.dir if multirun else None,
        "job_num": hc.job.num if multirun else None,
        "choices": dict(hc.runtime.choices),
    }


def build_loggers(cfg: DictConfig, info: dict, out_dir: Path) -> list:
    """The configured loggers plus the always-on CSV logger (which keeps its history before the
    checkpoint when the job resumes); W&B loggers come from :func:`xformer.jobs.wandb_run.wandb_logger`."""
    resumed = own_checkpoint(cfg, out_dir)  # resuming this job: keep its history before the checkpoint
    loggers: list = [
        ResumableCSVLogger(
            save_dir=str(out_dir), name="csv", version="", keep_before=checkpoint_step(resumed) if resumed else None
        )
    ]
    for node in (cfg.get("logger") or {}).values():
        if not isinstance(node, DictConfig) or "_target_" not in node:
            continue
        is_wandb = node._target_.endswith("WandbLogger")
        loggers.append(wandb_logger(node, cfg, info, out_dir) if is_wandb else instantiate(node))
    return loggers


def tokenizer_blob(dm) -> str | None:
    """The data module's tokenizer as the JSON text its ``save`` writes (stored in checkpoints)."""
    tok = getattr(dm, "tokenizer", None)
    if tok is None:
        return None
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tokenizer.json"
        tok.save(path)
        return path.read_text(encoding="utf-8")


def config_from_checkpoint(cfg: DictConfig, overrides: list[str], ckpt: str | None) -> DictConfig:
    """For ``mode=eval``: take ``model`` and ``data`` from the config stored in checkpoint ``ckpt`` (the
    resolved ``ckpt_path``; the weights only fit that model), keeping ``data.*`` keys given on the command
    line (e.g. ``data.root``)."""
    meta = read_checkpoint(ckpt).get("xformer") if ckpt else None
    if not meta:
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
    """What :func:`build` makes for one job: the data module, the model's parameter counts, the
    LightningModule, its loggers and the trainer, and the ``metrics.json`` summary so far."""

    dm: L.LightningDataModule
    module: TransformerLitModule
    trainer: L.Trainer
    loggers: list
    params: dict[str, int]
    summary: dict


def build_module(cfg: DictConfig, dm, model: torch.nn.Module) -> TransformerLitModule:
    """Instantiate ``cfg.module`` (``conf/module/``) for ``model`` and the data module's special ids,
    detokenizer, metrics and test splits; compile the model in place when ``trainer.compile`` is set."""
    module = instantiate(cfg.module)(
        model=model,
        pad_id=dm.pad_id,
        bos_id=dm.bos_id,
        eos_id=dm.eos_id,
        detokenize=dm.detokenize,
        metrics=dm.metrics,
        test_split_names=dm.test_split_names,
    )
    compile_opts = cfg.trainer.get("compile")
    if compile_opts:
        # in place (nn.Module.compile): the module is not wrapped, so checkpoints keep plain
        # parameter names and load into compiled and eager models alike
        kwargs = {} if compile_opts is True else OmegaConf.to_container(compile_opts, resolve=True)
        module.model.compile(**kwargs)
    return module


def build_trainer(cfg: DictConfig, loggers: list) -> L.Trainer:
    """``cfg.trainer`` with the configured callbacks plus xformer's own (optimizer-step intervals,
    consistent resume, the progress bar)."""
    patch_lightning_for_job()  # DDP child ranks of a Hydra job run exactly this job
    callbacks = [
        instantiate(c) for c in (cfg.get("callbacks") or {}).values() if isinstance(c, DictConfig) and "_target_" in c
    ]
    callbacks.append(OptimizerStepIntervals())  # "every N steps" = optimizer steps under accumulation
    callbacks.append(ConsistentResume())  # a checkpoint written when fit stopped mid-epoch resumes there
    callbacks.append(RerootCheckpoints())  # a moved job folder keeps its best checkpoint and score
    trainer_cfg = OmegaConf.to_container(cfg.trainer, resolve=True)
    trainer_cfg.pop("compile", None)
    trainer_cfg.setdefault("use_distributed_sampler", False)  # the data modules shard batches across ranks
    if trainer_cfg.get("enable_progress_bar", True) and not any(isinstance(c, ProgressBar) for c in callbacks):
        callbacks.append(progress_bar())  # Lightning's default bar, reading "Epoch N" when max_epochs=-1
    try:
        return instantiate(trainer_cfg, logger=loggers, callbacks=callbacks)
    except Exception as err:  # Lightning refuses a value its signature's type allows (a range, a choice)
        from lightning.fabric.utilities.exceptions import MisconfigurationException

        if (why := refusal(err, (ValueError, MisconfigurationException))) is None:
            raise
        raise ConfigError(f"trainer: {why} Fix: correct that trainer.* key") from None


def build(cfg: DictConfig, info: dict, out_dir: Path) -> Job:
    """Validate ``cfg``, then build data, model, module, loggers and trainer for one job.

    Raises:
        ConfigError / DataError: invalid configuration or input, before anything is trained.
    """
    summary: dict = {"status": "running", "job": info, "config": OmegaConf.to_container(cfg, resolve=True)}
    L.seed_everything(cfg.seed, workers=True)
    dm = instantiate(cfg.data)
    dm.prepare_data()
    dm.setup("fit")
    # the checks that need the data, on the model built on the meta device (nothing allocated yet)
    ckpt = resolve_ckpt_path(cfg, out_dir)
    if ckpt is not None:
        check_checkpoint_vocab(cfg, ckpt, dm)
        if changes := check_resume_settings(cfg, ckpt):  # model and data keys refused; the rest take effect
            log.info("%s", describe_resume_changes(ckpt, checkpoint_step(Path(ckpt)), changes))
            summary["changed_on_resume"] = {k: {"checkpoint": old, "now": new} for k, old, new in changes}
    check_with_data(cfg, dm, build_model(cfg, dm.src_vocab_size, dm.tgt_vocab_size, dm.pad_id, device="meta"))
    model = build_model(cfg, dm.src_vocab_size, dm.tgt_vocab_size, dm.pad_id)
    params = model.param_breakdown()
    log.info("parameters: %s", ", ".join(f"{k}={v:,}" for k, v in params.items()))
    module = build_module(cfg, dm, model)
    module.checkpoint_meta = {
        "config": summary["config"],
        "tokenizer": tokenizer_blob(dm),
        "src_vocab_size": dm.src_vocab_size,
        "tgt_vocab_size": dm.tgt_vocab_size,
        "pad_id": dm.pad_id,
        "slurm_job": slurm_job_key(),  # a requeued SLURM job resumes only its own checkpoints
    }
    loggers = build_loggers(cfg, info, out_dir)
    trainer = build_trainer(cfg, loggers)
    for lg in trainer.loggers:
        lg.log_hyperparams(summary["config"])
        lg.log_metrics({f"model/params_{k}": float(v) for k, v in params.items()}, step=0)
    if trainer.is_global_zero and (wandb_run := describe_runs(loggers)) is not None:
        summary["job"]["wandb"] = wandb_run
    return Job(dm, module, trainer, loggers, params, summary)


def fit_and_test(cfg: DictConfig, job: Job, ckpt: str | None) -> tuple[dict, dict, int | None]:
    """``mode=train``: fit (resuming from ``ckpt``), then test the objective's best checkpoint;
    ``mode=eval``: test ``ckpt``.

    Returns:
        ``(fit_metrics, test_metrics, tokens_seen)``: the callback metrics at the end of fit (empty
        in eval), the test results, and the tokens trained on (``None`` in eval).
    """
    trainer, module, dm = job.trainer, job.module, job.dm
    if cfg.mode != "train":
        return {}, _test(trainer, module, dm, ckpt), None
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt)
    fit_metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    # the last step's train-time values, also where that step was not logged (TransformerLitModule._logs_this_step)
    fit_metrics.update(getattr(module, "last_step_metrics", dict)())
    tokens_seen = module.tokens_seen  # testing the best checkpoint reloads its (older) count
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    return fit_metrics, _test(trainer, module, dm, best or None), tokens_seen


def _test(trainer: L.Trainer, module, dm, ckpt: str | None) -> dict:
    """``trainer.test`` with the results printed as :func:`~xformer.jobs.console.test_table` (one
    column per test split) instead of Lightning's per-dataloader table."""
    results = _merged(trainer.test(module, datamodule=dm, ckpt_path=ckpt, verbose=False))
    if trainer.is_global_zero and (table := test_table(results, list(dm.test_split_names))):
        print(table, end="", flush=True)
    return results


def _merged(results: list[dict]) -> dict:
    return {k: v for d in results for k, v in d.items()}


def write_summary(
    cfg: DictConfig, job: Job, out_dir: Path, final: dict, tokens_seen: int | None, wall_time_s: float
) -> dict:
    """Complete ``job.summary`` with the final metrics, the best checkpoint and its score, the
    objective, wall time, steps, tokens, parameters and BLEU signature; write it to
    ``<out_dir>/metrics.json`` and return it."""
    summary, trainer, module = job.summary, job.trainer, job.module
    objective_value = final.get(cfg.objective.metric)
    cb = trainer.checkpoint_callback
    best_score = cb.best_model_score if cb is not None and cb.best_model_score is not None else None
    summary.update(
        metrics={k: v for k, v in sorted(final.items())},
        best={
            "metric": cfg.objective.metric,
            "mode": cfg.objective.mode,
            "value": float(best_score) if best_score is not None else objective_value,
            "checkpoint": cb.best_model_path if cb is not None else None,
        },
        objective={"metric": cfg.objective.metric, "value": objective_value},
        wall_time_s=wall_time_s,
        global_step=trainer.global_step,
        tokens_seen=tokens_seen if tokens_seen is not None else module.tokens_seen,
        params=job.params,
        bleu_signature=module.bleu_signature,
        numerics=numerics(),
    )
    (out_dir / "metrics.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


def numerics() -> dict:
    """What decides a run's floating-point results beyond its config: torch's version, the CPU model,
    ATen's CPU kernel set (``torch.backends.cpu.get_cpu_capability()``; ``ATEN_CPU_CAPABILITY`` picks
    another) and the intra-op threads. A job re-run by its own command reproduces its metrics bit for
    bit where these match; on another CPU the kernels round differently and training amplifies the
    difference to about a seed's spread (docs/results/README.md, "Reproducing one job")."""
    import platform

    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "torch": torch.__version__,
        "cpu": cpu,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def divergence_of(trainer: L.Trainer) -> dict | None:
    """``{"step", "reason", ...}`` when the trainer's :class:`NonFiniteLossGuard` saw the validation loss
    end above its first value (or non-finite), else ``None`` (also without a guard)."""
    for cb in trainer.callbacks:
        if isinstance(cb, NonFiniteLossGuard):
            return cb.divergence()
    return None


def run(cfg: DictConfig, checked: bool = False) -> float | None:
    """Train (``mode=train``) or evaluate (``mode=eval``) as configured: :func:`build`,
    :func:`fit_and_test`, :func:`write_summary` (also when fit fails or is preempted), and close the
    W&B run. Returns the objective value (``None`` when it was not logged or is NaN). ``checked``: the
    caller ran stages 1-2 of the config check (:func:`~xformer.jobs.config_check.stages.check_config_first`)
    on this config and checkpoint, so only stage 3 runs here.

    Raises:
        ConfigError / DataError: invalid configuration or input, before training starts.
    """
    t_start = time.time()
    single_log_lines()  # Lightning's lines once, through Hydra's handlers
    info = job_info()
    out_dir = Path(info.get("output_dir") or cfg.paths.output_dir)
    quiet_console(resuming=own_checkpoint(cfg, out_dir) is not None)  # no false or noise library messages
    out_dir.mkdir(parents=True, exist_ok=True)
    check_config(cfg, resolve_ckpt_path(cfg, out_dir), first_done=checked)
    if cfg.mode == "eval":
        cfg = config_from_checkpoint(cfg, info["overrides"], resolve_ckpt_path(cfg, out_dir))
    job = build(cfg, info, out_dir)
    status, exit_code, final, tokens_seen = "failed", 1, {}, None
    try:
        fit_metrics, test_metrics, tokens_seen = fit_and_test(cfg, job, resolve_ckpt_path(cfg, out_dir, warn=True))
        final = {**fit_metrics, **test_metrics}
        status, exit_code = "finished", 0
        if cfg.mode == "train" and (rose := divergence_of(job.trainer)) is not None:
            status = "diverged"  # trained to the end, but ended worse than its first validation
            job.summary["diverged"] = rose
    except BaseException as err:  # recorded in metrics.json; SIGTERM (preemption) and Ctrl-C saved last.ckpt
        ctrl_c = isinstance(err, KeyboardInterrupt) or (  # Lightning's exit(1) after a KeyboardInterrupt
            type(err) is SystemExit and job.trainer.interrupted
        )
        if isinstance(err, SIGTERMException):
            status, exit_code = ("interrupted", 130) if interrupt_signal(err) == "SIGINT" else ("preempted", 143)
        else:
            status, exit_code = ("interrupted", 130) if ctrl_c else ("failed", 1)
        if isinstance(err, NonFiniteLossError):  # an outcome of the setting, not a crash
            status = "diverged"
            job.summary["diverged"] = {"step": err.step, "reason": "non-finite train/loss"}
        if status in ("interrupted", "preempted"):  # Lightning's SIGTERMException carries no message
            how = "Ctrl-C" if status == "interrupted" else "SIGTERM"
            job.summary["error"] = f"{status}: stopped by {how} at step {job.trainer.global_step}; last.ckpt was saved"
        else:
            job.summary["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:1000]
        raise
    finally:
        job.summary["status"] = status
        if job.trainer.is_global_zero:
            summary = write_summary(cfg, job, out_dir, final, tokens_seen, time.time() - t_start)
            finish_runs(job.loggers, summary["metrics"], exit_code)
            log.info("%s: the run's folder is %s (its summary: %s)", status, out_dir, out_dir / "metrics.json")
    value = job.summary.get("objective", {}).get("value")
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)
