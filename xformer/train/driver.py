"""One job of ``run.py``: validate, build data/model/module/trainer from the config, fit, test,
write ``metrics.json``, close the W&B run.

Layout of a job folder (Hydra's output dir, one per ``-m`` job)::

    .hydra/           resolved config and overrides (Hydra)
    checkpoints/      last.ckpt and best-<step>.ckpt (by ``objective``)
    csv/metrics.csv   every logged value by step (Lightning's CSVLogger; read by ``xformer report``)
    wandb/            the W&B run (offline runs are synced later with ``wandb sync``)
    metrics.json      status, resolved config, final/best metrics, wall time, tokens seen, parameters
"""

from __future__ import annotations

import json
import logging
import math
import netrc
import os
import time
from pathlib import Path

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from lightning.pytorch.callbacks.progress.progress_bar import ProgressBar
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf

from .console import progress_bar, single_log_lines
from .module import TransformerLitModule
from .steps import ConsistentResume, OptimizerStepIntervals
from .wandb_limits import fit_wandb_fields
from .validate import build_model, check_config, check_with_data
from .resume import ResumableCSVLogger, checkpoint_step, own_checkpoint, start_wandb, wandb_resume_kwargs

log = logging.getLogger("xformer")


def wandb_has_api_key() -> bool:
    """True when a W&B API key is available (``WANDB_API_KEY`` or a ``~/.netrc`` entry)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


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
    """Instantiate the configured loggers plus the always-on CSV logger; fill W&B name/group/tags."""
    resumed = own_checkpoint(cfg, out_dir)  # resuming this job: keep its history before the checkpoint
    loggers: list = [ResumableCSVLogger(save_dir=str(out_dir), name="csv", version="",
                                        keep_before=checkpoint_step(resumed) if resumed else None)]
    for name, node in (cfg.get("logger") or {}).items():
        if not isinstance(node, DictConfig) or "_target_" not in node:
            continue
        kwargs = {}
        if node._target_.endswith("WandbLogger"):
            if not wandb_has_api_key() and os.environ.get("WANDB_MODE") not in ("online", "disabled"):
                os.environ["WANDB_MODE"] = "offline"
            swept = [o for o in info["overrides"] if not o.startswith(("hydra.", "trainer.max_steps"))]
            from .wandb_panels import swept_keys  # in a sweep, name runs by what differs between jobs

            varying = set(swept_keys(info.get("sweep_dir")))
            differ = [o for o in swept if o.partition("=")[0].lstrip("+~") in varying] if varying else swept
            name = node.get("name") if node.get("name") is not None else (",".join(differ) or None)
            group = node.get("group")
            if group is None and info.get("sweep_dir"):
                group = "_".join(Path(info["sweep_dir"]).parts[-2:])
            tags = sorted(set(list(node.get("tags") or []) + swept))[:64]
            fitted, full = fit_wandb_fields(name=name, group=group, tags=tags, project=node.get("project"),
                                            job_type=node.get("job_type"))  # W&B's length limits
            kwargs.update(fitted)
            kwargs.update(wandb_resume_kwargs(cfg, out_dir))  # same run id when resuming this job
            loggers.append(start_wandb(lambda **kw: instantiate(node, **kwargs, **kw), out_dir))
            if full and loggers[-1]._experiment is not None:  # rank 0: the shortened fields' full text
                loggers[-1].experiment.config.update({"wandb_full": full}, allow_val_change=True)
            continue
        loggers.append(instantiate(node, **kwargs))
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


def config_from_checkpoint(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """For ``mode=eval``: take ``model`` and ``data`` from the config stored in the checkpoint (the
    weights only fit that model), keeping ``data.*`` keys given on the command line (e.g. ``data.root``)."""
    ckpt = cfg.ckpt_path
    meta = torch.load(ckpt, map_location="cpu", weights_only=False).get("xformer") if ckpt != "last" else None
    if not meta:
        return cfg
    stored = OmegaConf.create(meta["config"])
    cli = OmegaConf.from_dotlist([o for o in overrides if o.startswith("data.")])
    cfg = cfg.copy()
    OmegaConf.set_struct(cfg, False)
    cfg.model = stored.model
    cfg.data = OmegaConf.merge(stored.data, cli.get("data", {}))
    return cfg


def run(cfg: DictConfig) -> float | None:
    """Train (``mode=train``) or evaluate (``mode=eval``) as configured; return the objective value.

    Raises:
        ConfigError / DataError: invalid configuration or input, before training starts.
    """
    t_start = time.time()
    single_log_lines()  # Lightning's lines once, through Hydra's handlers
    info = job_info()
    out_dir = Path(info.get("output_dir") or cfg.paths.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    check_config(cfg)
    if cfg.mode == "eval":
        cfg = config_from_checkpoint(cfg, info["overrides"])
    summary: dict = {"status": "running", "job": info, "config": OmegaConf.to_container(cfg, resolve=True)}
    L.seed_everything(cfg.seed, workers=True)

    dm = instantiate(cfg.data)
    dm.prepare_data()
    dm.setup("fit")
    model = build_model(cfg, dm.src_vocab_size, dm.tgt_vocab_size, dm.pad_id)
    check_with_data(cfg, dm, model)
    params = model.param_breakdown()
    log.info("parameters: %s", ", ".join(f"{k}={v:,}" for k, v in params.items()))

    module = TransformerLitModule(
        model, optimizer=instantiate(cfg.optim.optimizer), lr_lambda=instantiate(cfg.optim.scheduler),
        label_smoothing=cfg.loss.label_smoothing, pad_id=dm.pad_id, bos_id=dm.bos_id, eos_id=dm.eos_id,
        detokenize=dm.detokenize, metrics=dm.metrics,
        decode={k: cfg.decode[k] for k in ("beam_size", "alpha", "max_len_a", "max_len_b")},
        test_split_names=dm.test_split_names, val_decode_limit=cfg.decode.get("val_batches"),
    )
    module.checkpoint_meta = {
        "config": summary["config"], "tokenizer": tokenizer_blob(dm),
        "src_vocab_size": dm.src_vocab_size, "tgt_vocab_size": dm.tgt_vocab_size, "pad_id": dm.pad_id,
    }
    compile_opts = cfg.trainer.get("compile")
    if compile_opts:
        # in place (nn.Module.compile): the module is not wrapped, so checkpoints keep plain
        # parameter names and load into compiled and eager models alike
        kwargs = {} if compile_opts is True else OmegaConf.to_container(compile_opts, resolve=True)
        module.model.compile(**kwargs)

    loggers = build_loggers(cfg, info, out_dir)
    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values()
                 if isinstance(c, DictConfig) and "_target_" in c]
    callbacks.append(OptimizerStepIntervals())  # "every N steps" = optimizer steps under accumulation
    callbacks.append(ConsistentResume())  # a checkpoint written when fit stopped mid-epoch resumes there
    trainer_cfg = OmegaConf.to_container(cfg.trainer, resolve=True)
    trainer_cfg.pop("compile", None)
    trainer_cfg.setdefault("use_distributed_sampler", False)  # the data modules shard batches across ranks
    if trainer_cfg.get("enable_progress_bar", True) and not any(isinstance(c, ProgressBar) for c in callbacks):
        callbacks.append(progress_bar())  # Lightning's default bar, reading "Epoch N" when max_epochs=-1
    trainer: L.Trainer = instantiate(trainer_cfg, logger=loggers, callbacks=callbacks)
    flat_cfg = summary["config"]
    for lg in trainer.loggers:
        lg.log_hyperparams(flat_cfg)
        lg.log_metrics({f"model/params_{k}": float(v) for k, v in params.items()}, step=0)

    wandb_dir = None
    for lg in loggers:
        if isinstance(lg, WandbLogger) and trainer.is_global_zero:
            run = lg.experiment
            wandb_dir = run.dir
            summary["job"]["wandb"] = {"id": run.id, "name": run.name, "group": run.group,
                                       "tags": list(run.tags or []), "mode": os.environ.get("WANDB_MODE", "online")}
    status, exit_code = "failed", 1
    tokens_seen: int | None = None
    try:
        ckpt = cfg.ckpt_path
        if ckpt == "last":
            last = out_dir / "checkpoints" / "last.ckpt"
            ckpt = str(last) if last.exists() else None
            if ckpt is None:
                log.warning("ckpt_path=last: no %s yet, starting from scratch (to resume a job, pass its "
                            "folder: hydra.run.dir=<job dir>)", last)
        if cfg.mode == "train":
            trainer.fit(module, datamodule=dm, ckpt_path=ckpt)
            fit_metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
            tokens_seen = module.tokens_seen  # testing the best checkpoint reloads its (older) count
            best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
            test_results = trainer.test(module, datamodule=dm, ckpt_path=best or None)  # the objective's best
        else:
            fit_metrics, best = {}, ""
            test_results = trainer.test(module, datamodule=dm, ckpt_path=ckpt)
        test_metrics = {k: v for d in test_results for k, v in d.items()}
        status, exit_code = "finished", 0
    except BaseException as err:  # recorded in metrics.json; SIGTERM (preemption) saved last.ckpt
        preempted = isinstance(err, SIGTERMException)
        status, exit_code = ("preempted", 143) if preempted else ("failed", 1)
        summary["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:1000]
        raise
    finally:
        summary["status"] = status
        if trainer.is_global_zero:
            final = {**(fit_metrics if status == "finished" else {}),
                     **(test_metrics if status == "finished" else {})}
            objective_value = final.get(cfg.objective.metric)
            cb = trainer.checkpoint_callback
            best_score = cb.best_model_score if cb is not None and cb.best_model_score is not None else None
            summary.update(
                metrics={k: v for k, v in sorted(final.items())},
                best={"metric": cfg.objective.metric, "mode": cfg.objective.mode,
                      "value": float(best_score) if best_score is not None else objective_value,
                      "checkpoint": cb.best_model_path if cb is not None else None},
                objective={"metric": cfg.objective.metric, "value": objective_value},
                wall_time_s=time.time() - t_start, global_step=trainer.global_step,
                tokens_seen=tokens_seen if tokens_seen is not None else module.tokens_seen,
                params=params, bleu_signature=module.bleu_signature,
            )
            (out_dir / "metrics.json").write_text(json.dumps(summary, indent=2, default=str))
            for lg in trainer.loggers:
                if isinstance(lg, WandbLogger):
                    lg.experiment.summary.update({f"final/{k}": v for k, v in summary["metrics"].items()})
                    lg.experiment.finish(exit_code=exit_code)
                    if os.environ.get("WANDB_MODE") == "offline" and wandb_dir:
                        log.info("W&B run saved offline; upload with: wandb sync %s", Path(wandb_dir).parent)
    value = summary.get("objective", {}).get("value")
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)
