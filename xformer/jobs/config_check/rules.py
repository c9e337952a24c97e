"""The named cross-key rules: what no single class's signature can know. Each raises one
:class:`~xformer.errors.ConfigError` line naming the key and the fix; those of :data:`STATIC` need no torch."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from xformer.errors import ConfigError, warn_once
from xformer.jobs.checkpoints import check_ckpt_file

#: The sequence metrics the training module can compute; ``objective.metric=val/<m>`` names one of them.
SEQUENCE_METRICS = ("bleu", "exact_match")
#: Precisions of Lightning's ModelParallelStrategy (FSDP2), which has no gradient scaler.
_FSDP_PRECISIONS = ("32-true", "bf16-mixed", "bf16-true", "16-true")
#: Lightning loggers whose package xformer does not install: class name -> (modules, install line).
_LOGGER_PACKAGES = {
    "TensorBoardLogger": (("tensorboard", "tensorboardX"), "pip install tensorboard"),
    "MLFlowLogger": (("mlflow",), "pip install mlflow"),
    "CometLogger": (("comet_ml",), "pip install comet-ml"),
    "NeptuneLogger": (("neptune",), "pip install neptune"),
}


def _get(cfg: DictConfig, key: str, default=None):  # an interpolation that does not resolve: Hydra names it
    return OmegaConf.select(cfg, key, default=default, throw_on_resolution_failure=False)


def schedule_length(cfg: DictConfig) -> None:
    """Warm-up vs schedule length: ``total_steps`` that follows ``max_steps`` needs a step budget (warns too)."""
    warmup, max_steps, node = _get(cfg, "optim.warmup_steps"), _get(cfg, "trainer.max_steps"), _get(cfg, "optim")
    node = node.get("scheduler") if isinstance(node, DictConfig) else None
    total = _get(cfg, "optim.scheduler.total_steps") if isinstance(node, DictConfig) else None
    if isinstance(warmup, int) and isinstance(total, int) and 0 < total <= warmup:
        why = f">= optim.scheduler.total_steps={total}: the learning rate climbs for the whole schedule, then drops"
        warn_once(f"optim.warmup_steps={warmup} {why} to its floor at once", cfg)
    elif isinstance(warmup, int) and isinstance(max_steps, int) and 0 < max_steps < warmup:
        why = f"> trainer.max_steps={max_steps}: the run ends before the learning rate reaches its peak optim.lr"
        warn_once(f"optim.warmup_steps={warmup} {why}", cfg)
    follows = isinstance(node, DictConfig) and "total_steps" in node and OmegaConf.is_interpolation(node, "total_steps")
    follows = follows and node._get_node("total_steps")._value() == "${trainer.max_steps}"
    if follows and isinstance(max_steps, int) and max_steps < 1:
        raise ConfigError(
            f"optim.scheduler.total_steps: follows trainer.max_steps={max_steps}, which gives the schedule no "
            "length. Fix: set optim.scheduler.total_steps=<steps> (training by epochs), or trainer.max_steps"
        )


def weight_decay_is_read(cfg: DictConfig) -> None:
    """Weight decay read by the optimizer: ``optim.weight_decay`` that the optimizer node ignores did nothing."""
    optim = _get(cfg, "optim")
    if isinstance(optim, DictConfig) and optim.get("weight_decay"):
        node = optim.get("optimizer")
        if "${optim.weight_decay}" not in (OmegaConf.to_yaml(node) if isinstance(node, DictConfig) else ""):
            raise ConfigError(
                f"optim.weight_decay={optim.weight_decay}: the chosen optimizer does not read it. Fix: pick an "
                "optimizer whose node reads ${optim.weight_decay}, or set its own optim.optimizer.weight_decay"
            )


def precision_and_strategy(cfg: DictConfig) -> None:
    """Precision x strategy: FSDP2 trains only with the precisions it has no need to scale for."""
    precision, strategy = str(_get(cfg, "trainer.precision", "32-true")), _get(cfg, "trainer.strategy")
    target = str(strategy.get("_target_", "")) if isinstance(strategy, DictConfig) else str(strategy)
    if target.endswith("fsdp_strategy") and precision not in _FSDP_PRECISIONS:
        raise ConfigError(
            f"trainer.precision={precision}: FSDP2 has no gradient scaler for it. Fix: "
            f"trainer.precision=bf16-mixed, or one of {', '.join(_FSDP_PRECISIONS)}"
        )


def mode_and_checkpoint(cfg: DictConfig) -> None:
    """Mode vs steps and checkpoint: training trains a step, evaluation names a checkpoint that exists."""
    if cfg.get("mode") == "train" and _get(cfg, "trainer.max_steps") == 0:
        raise ConfigError(
            "trainer.max_steps=0: would train nothing and test an untrained model. Fix: "
            "max_steps >= 1 (or -1 with trainer.max_epochs), or mode=eval ckpt_path=..."
        )
    if cfg.get("mode") == "eval" and not cfg.get("ckpt_path"):
        raise ConfigError("ckpt_path: mode=eval needs ckpt_path=/path/to/checkpoint.ckpt")
    if (path := cfg.get("ckpt_path")) and path != "last":  # a file named; ``last`` is the job's own
        check_ckpt_file(str(path))


def installed_and_present(cfg: DictConfig) -> None:
    """Each logger's optional package is installed (looked up, not imported); ``data.root`` exists."""
    from importlib.util import find_spec

    for name, node in (_get(cfg, "logger") or {}).items():
        target = str(node.get("_target_", "")).rsplit(".", 1)[-1] if isinstance(node, DictConfig) else ""
        modules, install = _LOGGER_PACKAGES.get(target, ((), ""))
        if modules and not any(find_spec(m) for m in modules):
            raise ConfigError(
                f"logger.{name}: {target} needs {' or '.join(modules)}, which is not installed. "
                f"Fix: {install}, or choose another logger"
            )
    if (root := _get(cfg, "data.root")) is not None and not Path(str(root)).expanduser().is_dir():
        raise ConfigError(
            f"data.root={root}: no such folder. Fix: point data.root at the folder holding the "
            "data files, or set data.root=null to download/generate them"
        )


def objective_keys(metrics: list[str]) -> list[str]:
    """The keys a training run logs at every validation, which ``objective.metric`` may name."""
    return ["val/loss", "val/ppl", "val/acc"] + [f"val/{m}" for m in metrics] + ["train/loss"]


def check_objective(cfg: DictConfig, metrics: list[str] | None, data_name: str = "this data") -> None:
    """Objective vs data: ``objective.metric`` is logged while training (``metrics``: the data's sequence
    metrics, ``None`` before the data is known). Raises: ConfigError naming the key that keeps it unlogged."""
    metric, known = str(cfg.objective.metric), list(SEQUENCE_METRICS) if metrics is None else metrics
    if metric not in objective_keys(known):
        why = "no such metric" if metrics is None else f"data {data_name} does not compute it"
        why = "test metrics come after training" if metric.startswith("test/") else why
        raise ConfigError(
            f"objective.metric={metric}: not logged during training ({why}); use one of "
            f"{', '.join(objective_keys(known))}"
        )
    limit_val = _get(cfg, "trainer.limit_val_batches")
    if metric.startswith("val/") and limit_val is not None and not isinstance(limit_val, bool) and limit_val == 0:
        raise ConfigError(
            f"trainer.limit_val_batches={limit_val}: no validation runs, so objective.metric={metric} "
            "is never logged; set limit_val_batches > 0 (or null) or objective.metric=train/loss"
        )
    if metric.split("/", 1)[-1] in known and _get(cfg, "decode.val_batches") == 0:
        raise ConfigError(
            f"decode.val_batches=0: validation decodes nothing, so objective.metric={metric} is never "
            "logged; set decode.val_batches >= 1 (or null = all) or objective.metric=val/loss"
        )


def objective_named(cfg: DictConfig) -> None:
    """Stage 1's reading of :func:`check_objective`: the metric's name, before the data is known."""
    return check_objective(cfg, None) if cfg.get("mode") == "train" else None


STATIC = (schedule_length, weight_decay_is_read, precision_and_strategy, mode_and_checkpoint)
STATIC += (installed_and_present, objective_named)


def optimizer_builds(cfg: DictConfig) -> None:
    """The optimizer node builds an optimizer for a one-weight model: its own constructor judges its arguments."""
    import torch
    from hydra.utils import instantiate

    from xformer.train.optim import build_optimizer

    node = _get(cfg, "optim.optimizer")
    if not isinstance(node, DictConfig) or "_target_" not in node:
        return
    try:
        build_optimizer(instantiate(node), torch.nn.Linear(1, 1))
    except (ValueError, RuntimeError, TypeError, IndexError) as err:
        raise ConfigError(
            f"optim.optimizer ({node._target_}): {str(err).splitlines()[0].rstrip('.')}. Fix: correct that "
            "argument under optim.optimizer (or what it interpolates, e.g. optim.lr)"
        ) from None


def mixer_fits(cfg: DictConfig) -> None:
    """Mixer vs positional scheme: the mixer serves a stack, and its ``refusal()`` accepts each one's scheme."""
    from hydra.utils import get_class, instantiate

    from xformer.model import FullAttention, Mixer

    try:
        model_cls, mixer = get_class(cfg.model._target_), instantiate(cfg.model.mixer)
    except Exception:  # no mixer node, an unknown class or bad arguments: the schema or the model names it
        return
    if not isinstance(mixer, Mixer) or not hasattr(model_cls, "stack_patterns"):
        return
    pattern = instantiate(cfg.model.attention) if cfg.model.get("attention") is not None else FullAttention()
    patterns = model_cls.stack_patterns(pattern() if callable(pattern) and not hasattr(pattern, "blocked") else pattern)
    if not (served := [name for name in patterns if mixer.applies_to(name)]):
        raise ConfigError(
            f"model.mixer.stacks={mixer.stacks}: model/arch={model_cls.arch} has no {mixer.stacks} "
            f"stack (it has {' and '.join(patterns)}). Fix: model.mixer.stacks=both"
        )
    pe_cls = get_class(cfg.model.pe._target_) if "pe" in cfg.model else None
    for name in served:
        if why := mixer.refusal(patterns[name], pe_cls):
            fix = "" if "Fix:" in why else ". Fix: another model/pe, model/attention or model/mixer"
            if len(patterns) > 1 and pe_cls is not None and "positional scheme" not in why:
                fix += f" (or model.mixer.stacks={next(n for n in patterns if n != name)})"
            raise ConfigError(f"model.mixer={type(mixer).__name__} on the {name}: {why}{fix}")
