"""Config checks that run before any data is read or any step is trained.

Each failure raises :class:`xformer.errors.ConfigError` with one line: the offending key, the value,
and the fix. ``run.py`` prints that line and exits non-zero without a stack trace.

The checks come in the order of what they need, so a typo costs seconds, not the start-up of a run:

1. :func:`check_static` -- the composed config alone (each key's type and range, precision and
   optimizer kernel, the objective's name, the checkpoint file): no torch, Lightning, W&B or data.
2. :func:`check_model` -- the model built on torch's meta device (nothing allocated) and, with
   ``ckpt_path``, the checkpoint's model against this run's: torch and :mod:`xformer.model` only.
3. :func:`check_data_options` -- the data module's constructor (imports Lightning; reads nothing)
   and the objective against the data's metrics.
4. :func:`check_with_data` -- once the data is built, before the model: vocabulary and sequence
   lengths against the model and the checkpoint.

:func:`check_config` runs 1-3; ``run.py`` runs 1-2 (:func:`check_config_first`) before it imports
the training stack.
"""

from __future__ import annotations

import logging
import math
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from typing_extensions import override

from xformer.errors import ConfigError

if TYPE_CHECKING:  # imported where needed: stage 1 runs without torch
    import torch

log = logging.getLogger("xformer")

#: The sequence metrics the training module can compute (:func:`xformer.train.module.corpus_metrics`);
#: ``objective.metric=val/<m>`` with another ``m`` is a typo whatever the data.
SEQUENCE_METRICS = ("bleu", "exact_match")

#: The precision strings Lightning accepts (its full forms and short aliases), kept here so that a config
#: is checked before Lightning is imported; a test keeps the list equal to
#: :data:`xformer.jobs.lightning_compat.PRECISION_INPUTS` plus the aliases.
PRECISIONS = (
    "transformer-engine",
    "transformer-engine-float16",
    "16-true",
    "16-mixed",
    "bf16-true",
    "bf16-mixed",
    "32-true",
    "64-true",
    "64",
    "32",
    "16",
    "bf16",
)


@dataclass(frozen=True)
class Rule:
    """What one config key may hold; :data:`RULES` has one per key, and :func:`check_rules` applies them.

    Attributes:
        kind: ``"int"``, ``"float"``, ``"bool"`` or ``"choice"``.
        lo, hi: bounds of a number (``hi`` only for floats).
        lo_open, hi_open: whether a bound is excluded.
        nullable: ``null`` is allowed (means "unset" or "derived").
        choices: the allowed strings of a ``"choice"``.
    """

    kind: str
    lo: float = -math.inf
    hi: float = math.inf
    lo_open: bool = False
    hi_open: bool = True
    nullable: bool = False
    choices: tuple[str, ...] = ()

    def check(self, key: str, value) -> None:
        """Raise :class:`ConfigError` (``"key=value: what is wrong"``) unless ``value`` obeys the rule."""
        if value is None and self.nullable:
            return
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise ConfigError(f"{key}={value}: expected true or false")
        elif self.kind == "choice":
            if str(value) not in self.choices:
                raise ConfigError(f"{key}={value}: unknown. Fix: use {' or '.join(self.choices)}")
        elif self.kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(
                    f"{key}={value}: expected an integer >= {self.lo}" + (" or null" if self.nullable else "")
                )
            if value < self.lo:
                raise ConfigError(f"{key}={value}: must be >= {self.lo}")
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                raise ConfigError(f"{key}={value}: expected a number")
            above = value > self.lo if self.lo_open else value >= self.lo
            below = value < self.hi if self.hi_open else value <= self.hi
            if not (above and below):
                lo_b, hi_b = "(" if self.lo_open else "[", ")" if self.hi_open else "]"
                raise ConfigError(f"{key}={value}: must be in {lo_b}{self.lo}, {self.hi}{hi_b}")


def _int(lo: int, nullable: bool = False) -> Rule:
    return Rule("int", lo=lo, nullable=nullable)


def _float(lo: float, hi: float = math.inf, lo_open: bool = False, nullable: bool = False) -> Rule:
    return Rule("float", lo=lo, hi=hi, lo_open=lo_open, nullable=nullable)


_BOOL = Rule("bool")

#: Every key checked for type and value before anything is built, each once. Keys absent from the
#: config (another data set's options, for instance) are skipped. Checks that involve several keys
#: or build something (the model on the meta device, the data module's constructor, precision with
#: strategy) follow in :func:`check_config`. Library constructors (the model, dropout, the schedules)
#: still check their own arguments, for use without a config; here a bad value is caught before
#: anything is built, with the key's name.
RULES: dict[str, Rule] = {
    "seed": _int(0),
    "mode": Rule("choice", choices=("train", "eval")),
    "objective.mode": Rule("choice", choices=("min", "max")),
    "model.d_model": _int(1),
    "model.n_heads": _int(1),
    "model.d_head": _int(1, nullable=True),
    "model.n_kv_heads": _int(1, nullable=True),
    "model.mixer.stacks": Rule("choice", choices=("encoder", "decoder", "both")),
    "model.d_ff": _int(1, nullable=True),
    "model.n_encoder_layers": _int(0),
    "model.n_decoder_layers": _int(0),
    "model.max_len": _int(1),
    "model.attention.window": _int(1),
    "model.param_budget": _int(1, nullable=True),
    "model.dropout": _float(0.0, 1.0),
    "model.ffn_ratio": _float(0.0, lo_open=True),
    "model.tie_embeddings": _BOOL,
    "model.attn_scale": _BOOL,
    "model.bias": _BOOL,
    "model.init.std": _float(0.0, lo_open=True),
    "model.init.scale_embeddings": _BOOL,
    "optim.optimizer.decay_embeddings": _BOOL,
    "optim.optimizer.decay_min_ndim": _int(0),
    "loss.label_smoothing": _float(0.0, 1.0),
    "optim.lr": _float(0.0, lo_open=True),
    "optim.warmup_steps": _int(0),
    "optim.scheduler.decay_from": _int(1, nullable=True),
    "optim.weight_decay": _float(0.0),
    "optim.scheduler.total_steps": _int(1),
    "trainer.max_steps": _int(-1),
    "trainer.accumulate_grad_batches": _int(1),
    "trainer.log_every_n_steps": _int(1),
    "trainer.num_nodes": _int(1),
    "trainer.gradient_clip_val": _float(0.0, nullable=True),
    "trainer.gradient_clip_algorithm": Rule("choice", choices=("norm", "value"), nullable=True),
    "data.tokens_per_batch": _int(1, nullable=True),
    "data.block_size": _int(1),
    "data.batch_size": _int(1),
    "data.num_workers": _int(0),
    "data.n_train": _int(1),
    "data.n_val": _int(1),
    "data.n_test": _int(0),
    "data.n_long": _int(0),
    "data.vocab_size": _int(1),
    "data.train_max_len": _int(1),
    "data.train_min_len": _int(1),
    "data.n_symbols": _int(2),
    "data.train_windows_per_epoch": _int(1, nullable=True),
    "data.val_estimate_batches": _int(1, nullable=True),
    "decode.beam_size": _int(1),
    "decode.val_batches": _int(0, nullable=True),
    "decode.alpha": _float(0.0),
    "decode.max_len_a": _float(0.0),
    "decode.max_len_b": _float(0.0),
    "callbacks.last_checkpoint.every_n_train_steps": _int(1, nullable=True),
    "callbacks.model_checkpoint.every_n_train_steps": _int(1, nullable=True),
    "callbacks.nan_guard.check_every_n_steps": _int(1, nullable=True),
    "callbacks.wandb_panels.n_samples": _int(0),
}
_ABSENT = object()


#: Config nodes chosen by a config group: ``key -> how to choose it``. Written with a dot
#: (``model.pe=rope``) the override replaces the node by a string, which fails deep inside Hydra's
#: instantiate or Lightning; written with a slash (``model/pe=rope``) it selects the group's file.
GROUP_NODES: dict[str, str] = {
    "model.pe": "model/pe",
    "model.norm": "model/norm",
    "model.ffn": "model/ffn",
    "model.attention": "model/attention",
    "model.mixer": "model/mixer",
    "model.init": "model/init",
    "optim.scheduler": "optim/scheduler",
    "optim.optimizer": "optim",
    "loss": "loss",
    "decode": "decode",
    "data": "data",
    "trainer": "trainer",
}


def check_group_choices(cfg: DictConfig) -> None:
    """Refuse a group's node replaced by a plain string: ``model.pe=rope`` (a dot) where
    ``model/pe=rope`` (a slash) was meant, ``optim.optimizer=adamw`` for ``optim=adamw``.

    Raises:
        ConfigError: naming the key and the override that selects the group's option.
    """
    for key, group in GROUP_NODES.items():
        value = OmegaConf.select(cfg, key, default=None)
        if isinstance(value, str):
            raise ConfigError(
                f"{key}={value}: replaces the node with a string; it is chosen with the config group {group}. "
                f"Fix: {group}={value}"
            )


def _check_schedule_length(cfg: DictConfig) -> None:
    """A schedule whose ``total_steps`` follows ``trainer.max_steps`` needs a step budget: training
    by epochs (``max_steps=-1``) must give the schedule its length. A warm-up as long as the
    schedule (or the run) is legal but rarely meant: it gets a warning."""
    node = OmegaConf.select(cfg, "optim.scheduler", default=None)
    _warn_on_warmup_length(cfg, node)
    if (
        not isinstance(node, DictConfig)
        or "total_steps" not in node
        or not OmegaConf.is_interpolation(node, "total_steps")
    ):
        return
    max_steps = OmegaConf.select(cfg, "trainer.max_steps", default=None)
    if (
        isinstance(max_steps, int)
        and max_steps < 1
        and node._get_node("total_steps")._value() == "${trainer.max_steps}"
    ):
        raise ConfigError(
            f"optim.scheduler.total_steps: follows trainer.max_steps={max_steps}, which gives the schedule no "
            f"length. Fix: set optim.scheduler.total_steps=<steps> (training by epochs), or trainer.max_steps"
        )


def warn_once(message: str, cfg: DictConfig | None = None) -> None:
    """Log a config warning once per sweep: within a ``-m`` sweep, a message the sweep's check gave
    before its jobs started (the environment variable ``XFORMER_WARNED`` carries it, keyed by the sweep
    folder, into the launcher's job processes) is not repeated; a single run always warns."""
    import hashlib

    from hydra.core.hydra_config import HydraConfig

    scope = ""
    if cfg is not None and "hydra" in cfg:  # a job's config checked by the sweep before it starts
        scope = str(OmegaConf.select(cfg, "hydra.sweep.dir", default="") or "")
    elif HydraConfig.initialized() and str(HydraConfig.get().mode) == "RunMode.MULTIRUN":
        scope = str(HydraConfig.get().sweep.dir)
    if not scope:
        log.warning("%s", message)
        return
    key = hashlib.sha1(f"{scope}\0{message}".encode()).hexdigest()[:12]
    seen = [k for k in os.environ.get("XFORMER_WARNED", "").split(",") if k]
    if key in seen:
        return
    os.environ["XFORMER_WARNED"] = ",".join([*seen, key])
    log.warning("%s", message)


def _warn_on_warmup_length(cfg: DictConfig, node: Any) -> None:
    """Log a warning when ``optim.warmup_steps`` reaches the decay's end or the run's last step."""
    try:
        warmup = OmegaConf.select(cfg, "optim.warmup_steps", default=None)
        total = node.get("total_steps") if isinstance(node, DictConfig) else None
        max_steps = OmegaConf.select(cfg, "trainer.max_steps", default=None)
    except Exception:  # an unresolvable interpolation: the rules below name it
        return
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup <= 0:
        return
    if isinstance(total, int) and 0 < total <= warmup:
        warn_once(
            f"optim.warmup_steps={warmup} >= optim.scheduler.total_steps={total}: the learning rate climbs for "
            "the whole schedule, then drops to its floor at once",
            cfg,
        )
    elif isinstance(max_steps, int) and 0 < max_steps < warmup:
        warn_once(
            f"optim.warmup_steps={warmup} > trainer.max_steps={max_steps}: the run ends before the learning "
            "rate reaches its peak optim.lr",
            cfg,
        )


def check_rules(cfg: DictConfig) -> None:
    """Apply every rule of :data:`RULES` to its key in ``cfg`` (absent keys are skipped).

    Raises:
        ConfigError: for the first key that breaks its rule.
    """
    check_group_choices(cfg)
    _check_schedule_length(cfg)
    for key, rule in RULES.items():
        value = OmegaConf.select(cfg, key, default=_ABSENT)
        if value is not _ABSENT:
            rule.check(key, value)
    from xformer.train.schedules import check_scheduler_node

    check_scheduler_node(OmegaConf.select(cfg, "optim.scheduler", default=None))  # no stale or unknown key
    check_optimizer_node(OmegaConf.select(cfg, "optim.optimizer", default=None))
    _check_weight_decay_is_read(cfg)


def _check_weight_decay_is_read(cfg: DictConfig) -> None:
    """``optim.weight_decay`` is read only where the optimizer node points at it (``optim=adamw``'s
    ``${optim.weight_decay}``); set on ``optim=adam`` (``+optim.weight_decay=0.1``) it did nothing.

    Raises:
        ConfigError: naming the key, and where the chosen optimizer takes its decay.
    """
    optim = OmegaConf.select(cfg, "optim", default=None)
    if not isinstance(optim, DictConfig) or "weight_decay" not in optim:
        return
    node = optim.get("optimizer")
    text = OmegaConf.to_yaml(node) if isinstance(node, DictConfig) else ""
    if "${optim.weight_decay}" in text or not optim.weight_decay:
        return
    raise ConfigError(
        f"optim.weight_decay={optim.weight_decay}: the chosen optimizer does not read it. Fix: optim=adamw "
        f"(decoupled decay on >= 2-D weights), or set the optimizer's own optim.optimizer.weight_decay"
    )


#: Arguments of the optimizer node (and of an optimizer it wraps, ``DecayGroups``' ``optimizer``)
#: checked by name, whatever the optimizer class: torch's optimizers only check them when built.
_OPTIMIZER_ARGS: dict[str, Rule] = {
    "lr": _float(0.0, lo_open=True),
    "eps": _float(0.0, lo_open=True),
    "weight_decay": _float(0.0),
    "momentum": _float(0.0),
}


def check_optimizer_node(node: Any, key: str = "optim.optimizer") -> None:
    """Check the optimizer's own arguments under ``key`` (``lr`` > 0, ``eps`` > 0, ``weight_decay`` >= 0,
    ``betas`` two numbers in [0, 1)), and those of the optimizer it wraps (``key.optimizer``), so that
    ``optim.optimizer.optimizer.betas=[0.9,1.5]`` fails in stage 1 instead of when the optimizer is
    built after the model and the data. Interpolations (``${optim.lr}``) are checked where they point.

    Raises:
        ConfigError: naming the full key and its value.
    """
    if not isinstance(node, DictConfig):
        return
    for name, rule in _OPTIMIZER_ARGS.items():
        if name in node and not OmegaConf.is_interpolation(node, name):
            rule.check(f"{key}.{name}", node[name])
    if "betas" in node and not OmegaConf.is_interpolation(node, "betas"):
        betas = node["betas"]
        values = list(betas) if isinstance(betas, ListConfig | list | tuple) else None
        if (
            values is None
            or len(values) != 2
            or any(isinstance(b, bool) or not isinstance(b, int | float) or not 0.0 <= b < 1.0 for b in values)
        ):
            shown = f"[{','.join(str(b) for b in values)}]" if values is not None else betas
            raise ConfigError(f"{key}.betas={shown}: must be two numbers in [0, 1), e.g. [0.9,0.95]")
    inner = node.get("optimizer")
    if isinstance(inner, DictConfig):
        check_optimizer_node(inner, f"{key}.optimizer")


#: Loggers whose backing package is an optional install: ``_target_`` suffix -> (modules, any of
#: which serves, and the install line). Checked with ``find_spec``: nothing is imported.
_LOGGER_PACKAGES = {
    "TensorBoardLogger": (("tensorboard", "tensorboardX"), "pip install tensorboard"),
    "MLFlowLogger": (("mlflow",), "pip install mlflow"),
    "CometLogger": (("comet_ml",), "pip install comet-ml"),
    "NeptuneLogger": (("neptune",), "pip install neptune"),
}


def _check_loggers(cfg: DictConfig) -> None:
    """Every configured logger's package is installed (``logger=tensorboard`` needs tensorboard, which
    xformer does not depend on), so the run does not fail after the data and model are built."""
    from importlib.util import find_spec

    loggers = OmegaConf.select(cfg, "logger", default=None)
    if not isinstance(loggers, DictConfig):
        return
    for name, node in loggers.items():
        target = str(node.get("_target_", "")) if isinstance(node, DictConfig) else ""
        for suffix, (modules, install) in _LOGGER_PACKAGES.items():
            if target.endswith(suffix) and not any(find_spec(m) for m in modules):
                raise ConfigError(
                    f"logger.{name}: {suffix} needs {' or '.join(modules)}, which is not installed. "
                    f"Fix: {install}, or logger=csv"
                )


def _check_data_root(cfg: DictConfig) -> None:
    root = OmegaConf.select(cfg, "data.root", default=None)
    if root is not None and not Path(str(root)).expanduser().is_dir():
        raise ConfigError(
            f"data.root={root}: no such folder. Fix: point data.root at the folder holding "
            f"the data files, or set data.root=null to download/generate them"
        )


def _check_data(cfg: DictConfig):
    """``data.root`` exists when set, and the data module accepts its options (its constructor
    checks them; nothing is read). Returns the (not yet set up) data module."""
    from hydra.utils import instantiate

    _check_data_root(cfg)
    try:
        return instantiate(cfg.data)
    except Exception as err:  # Hydra wraps constructor errors in InstantiationException
        cause = err
        while cause.__cause__ is not None:
            cause = cause.__cause__
        if not isinstance(cause, (ValueError, TypeError)):
            raise
        target = str(cfg.data.get("_target_", "?")).rsplit(".", 1)[-1]
        raise ConfigError(f"data ({target}): {str(cause).splitlines()[0]}") from None


def _check_ckpt_file(path: str) -> None:
    if not os.path.isfile(path):
        raise ConfigError(f"ckpt_path={path}: no such file; give an existing .ckpt or ckpt_path=last")
    if not zipfile.is_zipfile(path):
        raise ConfigError(
            f"ckpt_path={path}: not a readable checkpoint (truncated or corrupt). Fix: use "
            f"another checkpoint, e.g. the job's checkpoints/last.ckpt or best-*.ckpt"
        )


# precisions Lightning's ModelParallelStrategy (trainer=fsdp) accepts
_FSDP_PRECISIONS = ("32-true", "bf16-mixed", "bf16-true", "16-true")


def _check_trainer(cfg: DictConfig) -> None:
    """Precision, optimizer kernel and gradient clipping: the combinations that cannot train fail here,
    before any data is read, instead of at the first optimizer step.

    A fused optimizer with gradient clipping is allowed under every precision (the module unscales
    gradients before clipping); ``fused`` and ``foreach`` together are not (torch refuses), nor is
    ``16-mixed`` under FSDP2 (Lightning's ``ModelParallelStrategy`` has no gradient scaler).

    Raises:
        ConfigError: one line naming the key and the fix.
    """
    precision = str(OmegaConf.select(cfg, "trainer.precision", default="32-true"))
    if precision not in PRECISIONS:
        raise ConfigError(
            f"trainer.precision={precision}: unknown. Fix: use one of 32-true, bf16-mixed "
            f"(GPU default), 16-mixed, bf16-true, 16-true, 64-true"
        )
    opt = OmegaConf.select(cfg, "optim.optimizer", default=None) or {}
    if opt.get("fused") and opt.get("foreach"):
        raise ConfigError(
            "optim.optimizer.fused=true and optim.optimizer.foreach=true: torch allows one "
            "kernel. Fix: keep fused=true (fastest) or set fused=false with foreach=true"
        )
    compile_opts = OmegaConf.select(cfg, "trainer.compile", default=False)
    if not isinstance(compile_opts, (bool, DictConfig)) and compile_opts is not None:
        raise ConfigError(
            f"trainer.compile={compile_opts}: expected true, false or torch.compile keyword "
            "arguments. Fix: trainer.compile=true or trainer.compile={mode:max-autotune}"
        )
    strategy = OmegaConf.select(cfg, "trainer.strategy", default=None)
    target = str(strategy.get("_target_", "")) if isinstance(strategy, DictConfig) else str(strategy)
    if target.endswith("fsdp_strategy") and precision not in _FSDP_PRECISIONS:
        raise ConfigError(
            f"trainer.precision={precision}: trainer=fsdp (FSDP2) has no gradient scaler for "
            f"it. Fix: use trainer.precision=bf16-mixed, or one of {', '.join(_FSDP_PRECISIONS)}"
        )


def _check_mixer(cfg: DictConfig) -> None:
    """The attention mechanism (``model/mixer``) against the stacks it serves: it must serve at least one
    stack of the model's shape, and its :meth:`~xformer.model.Mixer.refusal` must accept each served
    stack's pattern and positional scheme (linear attention has no score matrix for ALiBi/T5 biases
    or local windows).

    Raises:
        ConfigError: one line naming the key and the fix.
    """
    node = OmegaConf.select(cfg, "model.mixer", default=None)
    if node is None or "_target_" not in node:
        return
    from hydra.utils import get_class, instantiate

    from xformer.model import FullAttention, Mixer

    try:
        model_cls, mixer = get_class(cfg.model._target_), instantiate(node)
    except Exception:  # an unknown class or bad arguments: building the model reports it in one line
        return
    if not isinstance(mixer, Mixer) or not hasattr(model_cls, "stack_patterns"):
        return  # refused by the model's own check, with its fix
    pattern = instantiate(cfg.model.attention) if cfg.model.get("attention") is not None else FullAttention()
    if callable(pattern) and not hasattr(pattern, "blocked"):  # a factory, as the model accepts it
        pattern = pattern()
    patterns = model_cls.stack_patterns(pattern)
    served = [name for name in patterns if mixer.applies_to(name)]
    if not served:
        raise ConfigError(
            f"model.mixer.stacks={mixer.stacks}: model/arch={model_cls.arch} has no {mixer.stacks} "
            f"stack (it has {' and '.join(patterns)}). Fix: model.mixer.stacks=both"
        )
    pe_cls = get_class(cfg.model.pe._target_) if "pe" in cfg.model else None
    option = _choice("model/mixer") or type(mixer).__name__
    for name in served:
        why = mixer.refusal(patterns[name], pe_cls)
        if why:
            fix = "" if "Fix:" in why else ". Fix: another model/pe or model/attention, or model/mixer=mha"
            # the positional scheme serves every stack; only a pattern is the encoder's alone
            if len(patterns) > 1 and pe_cls is not None and "positional scheme" not in why:
                fix += f" (or model.mixer.stacks={next(n for n in patterns if n != name)})"
            raise ConfigError(f"model/mixer={option} on the {name}: {why}{fix}")


def _choice(group: str) -> str | None:
    """The option of config group ``group`` this run chose (``None`` outside a Hydra app)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    return HydraConfig.get().runtime.choices.get(group)


def check_static(cfg: DictConfig, keys_checked: bool = False) -> None:
    """Stage 1: everything the composed config shows by itself -- each key's type and value
    (:data:`RULES`), steps, mode with checkpoint, precision with strategy and optimizer kernel, the
    data folder, the objective's name (:func:`check_objective` without the data's metrics). Imports
    neither torch nor Lightning.

    Raises:
        ConfigError: one line naming the key and the fix.
    """
    if not keys_checked:
        check_keys(cfg)
    max_steps = OmegaConf.select(cfg, "trainer.max_steps", default=None)
    if cfg.mode == "train" and max_steps == 0:
        raise ConfigError(
            "trainer.max_steps=0: would train nothing and test an untrained model. Fix: "
            "max_steps >= 1 (or -1 with trainer.max_epochs), or mode=eval ckpt_path=..."
        )
    if cfg.mode == "eval" and not cfg.ckpt_path:
        raise ConfigError("ckpt_path: mode=eval needs ckpt_path=/path/to/checkpoint.ckpt")
    if cfg.ckpt_path and cfg.ckpt_path != "last":
        _check_ckpt_file(str(cfg.ckpt_path))
    _check_trainer(cfg)
    _check_loggers(cfg)
    _check_data_root(cfg)
    if cfg.mode == "train":
        check_objective(cfg, None)


def check_model(cfg: DictConfig, ckpt: str | None = None) -> None:
    """Stage 2: build the model on the meta device (sizes and variants; nothing is allocated) and,
    when ``ckpt`` (a checkpoint this run loads) is given, compare the checkpoint's model with this
    run's (:func:`check_checkpoint_model`). Imports torch and :mod:`xformer.model`, not Lightning.

    Raises:
        ConfigError: one line naming the key and the fix.
    """
    from .schema import check_targets

    check_targets(cfg, early=True)
    _check_mixer(cfg)
    build_model(cfg, 32, 32, 0, device="meta")
    if ckpt is not None and cfg.mode == "train":
        check_checkpoint_model(cfg, ckpt)


def check_data_options(cfg: DictConfig) -> None:
    """Stage 3: the data module's constructor accepts its options (nothing is read or generated;
    imports the data module, hence Lightning), and the objective is a metric the data computes.

    Raises:
        ConfigError: one line naming the key and the fix.
    """
    from .schema import check_targets

    check_targets(cfg, early=False)
    dm = _check_data(cfg)
    if cfg.mode == "train":
        check_objective(cfg, list(getattr(dm, "metrics", []) or []), type(dm).__name__)


def check_keys(cfg: DictConfig) -> None:
    """Stage 1's two readings of the config alone, reported together before torch is imported: the
    keys added with ``+`` (:func:`xformer.jobs.schema.check_additions`) and each key's rule
    (:func:`check_rules`); the ``_target_`` nodes' own signatures follow in stage 2.

    Raises:
        ConfigError: every problem found, one line each.
    """
    from .schema import check_additions, raise_all

    problems = []
    for check in (check_additions, check_rules):
        try:
            check(cfg)
        except ConfigError as err:
            problems.append(str(err))
    raise_all(problems)


def check_config_first(cfg: DictConfig, ckpt: str | None = None) -> None:
    """Stages 1 and 2 (:func:`check_static`, :func:`check_model`): what ``run.py`` checks before it
    imports Lightning or W&B or builds any data. Keys added with ``+`` (:mod:`xformer.jobs.schema`) and
    the key rules are reported together; then the ``_target_`` nodes, all of them at once."""
    check_keys(cfg)
    check_static(cfg, keys_checked=True)
    check_model(cfg, ckpt)
    _FIRST_PASSED[id(cfg)] = _fingerprint(cfg, ckpt)


#: Configs that passed :func:`check_config_first` in this process (``id`` -> fingerprint), so that the
#: driver does not build the model on the meta device a second time for the config ``run.py`` checked.
_FIRST_PASSED: dict[int, str] = {}


def _fingerprint(cfg: DictConfig, ckpt: str | None) -> str:
    return f"{ckpt}\n{OmegaConf.to_yaml(cfg)}"


def check_config(cfg: DictConfig, ckpt: str | None = None) -> None:
    """Validate everything that does not need the data: stages 1-3 (:func:`check_static`,
    :func:`check_model`, :func:`check_data_options`). Stages 1-2 are skipped for the very config
    object that passed them unchanged in this process (``run.py`` checks before it imports Lightning).

    Raises:
        ConfigError: one line naming the key and the fix.
    """
    if _FIRST_PASSED.get(id(cfg)) != _fingerprint(cfg, ckpt):
        check_config_first(cfg, ckpt)
    check_data_options(cfg)


def objective_keys(metrics: list[str]) -> list[str]:
    """The keys a training run logs at every validation, which ``objective.metric`` may name:
    ``val/loss``, ``val/ppl``, ``val/acc``, ``val/<m>`` for each sequence metric ``m`` of the data
    (``bleu``, ``exact_match``), and ``train/loss``."""
    return ["val/loss", "val/ppl", "val/acc"] + [f"val/{m}" for m in metrics] + ["train/loss"]


def check_objective(cfg: DictConfig, metrics: list[str] | None, data_name: str = "this data") -> None:
    """Reject an ``objective.metric`` that a training run with ``cfg`` would never log (a typo, a
    metric the data does not compute, a ``test/`` key, a decoded metric with decoding off during
    validation, a ``val/`` key with validation off), so no run finishes without its objective.

    Args:
        metrics: the data's sequence metrics; ``None`` before the data module is known: then
            ``val/<m>`` passes for every ``m`` in :data:`SEQUENCE_METRICS` (the data check follows).

    Raises:
        ConfigError: one line naming ``objective.metric`` (or the key that prevents it) and the fix.
    """
    metric = str(cfg.objective.metric)
    keys = objective_keys(list(SEQUENCE_METRICS) if metrics is None else metrics)
    if metric not in keys:
        if metric.startswith("test/"):
            why = "test metrics come after training"
        elif metrics is None:
            why = "no such metric"
        else:
            why = f"data {data_name} does not compute it"
        raise ConfigError(
            f"objective.metric={metric}: not logged during training ({why}); use one of {', '.join(keys)}"
        )
    if metrics is None:
        metrics = list(SEQUENCE_METRICS)
    if not metric.startswith("val/"):
        return
    limit_val = OmegaConf.select(cfg, "trainer.limit_val_batches", default=None)
    if limit_val is not None and not isinstance(limit_val, bool) and limit_val == 0:
        raise ConfigError(
            f"trainer.limit_val_batches={limit_val}: no validation runs, so objective.metric="
            f"{metric} is never logged; set limit_val_batches > 0 (or null) or objective.metric=train/loss"
        )
    val_decode = OmegaConf.select(cfg, "decode.val_batches", default=None)
    if metric.split("/", 1)[1] in metrics and val_decode == 0:
        raise ConfigError(
            f"decode.val_batches=0: validation decodes nothing, so objective.metric={metric} "
            f"is never logged; set decode.val_batches >= 1 (or null = all) or objective.metric=val/loss"
        )


def build_model(
    cfg: DictConfig, src_vocab_size: int, tgt_vocab_size: int, pad_id: int, device: str | None = None
) -> torch.nn.Module:
    """Instantiate ``cfg.model`` for the given vocabularies, turning constructor ``ValueError``s
    (window < 1, odd RoPE head size, …) into :class:`ConfigError`."""
    import torch
    from hydra.utils import instantiate

    try:
        if device:
            with torch.device(device):
                return instantiate(
                    cfg.model, src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, pad_id=pad_id
                )
        return instantiate(cfg.model, src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, pad_id=pad_id)
    except ConfigError:
        raise
    except Exception as err:  # Hydra wraps constructor errors in InstantiationException
        cause = err
        while cause.__cause__ is not None or cause.__context__ is not None:
            nxt = cause.__cause__ or cause.__context__
            if isinstance(nxt, ConfigError) or isinstance(nxt, ValueError):
                cause = nxt
                break
            cause = nxt
        if isinstance(cause, (ConfigError, ValueError)):
            raise ConfigError(str(cause).splitlines()[0]) from None
        raise


def check_with_data(cfg: DictConfig, dm, model: torch.nn.Module) -> None:
    """Checks that need the data: the objective against the data's metrics, the model shape against
    the task (the model's own :meth:`~xformer.model.ModelBase.check_data`), and sequence lengths
    against ``model.max_len`` for absolute positional schemes (learned, sinusoidal).

    In ``mode=eval`` data longer than the checkpoint's positions is only a warning: evaluation cuts
    over-long examples to fit.

    Raises:
        ConfigError: one line naming the key and the fix.
    """
    if cfg.mode == "train":
        check_objective(cfg, list(dm.metrics), type(dm).__name__)
    model.check_data(dm)
    limit = model.position_limit
    need = model.positions_needed(dm)
    if limit is None or limit >= need:
        return
    stack = model.encoder if getattr(model, "encoder", None) is not None else model.decoder
    pe = type(stack.pe).__name__
    if cfg.mode == "eval":  # the weights fix max_len: evaluate with over-long examples cut to fit
        log.warning(
            "model.max_len=%d: the data's longest sequence has %d tokens and %s positions stop "
            "at max_len; over-long examples are cut to fit (a warning per split names them)",
            limit,
            need,
            pe,
        )
        return
    raise ConfigError(
        f"model.max_len={limit}: the data's longest sequence has {need} tokens "
        f"and {pe} positions stop at max_len; set model.max_len={need} or more"
    )


# ---- a checkpoint given to a run: does its model fit this run's? ----------------------------------


def arch_name(target: str) -> str:
    """The ``model/arch`` option of a model class path (``xformer.model.DecoderOnly`` ->
    ``decoder_only``): the class name in snake case, as ``conf/model/arch/`` names them."""
    name = str(target).rsplit(".", 1)[-1]
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))


def model_shape(model_cfg, src_vocab_size: int | None = None, tgt_vocab_size: int | None = None) -> str:
    """One phrase for a model config: arch, width, heads, layers, vocabulary, e.g. ``decoder_only
    (d_model=64, n_heads=4, 0+2 layers, vocab 600)``; used in the errors of ``run.py ckpt_path=``
    and ``xformer translate``."""
    get = (lambda k: model_cfg.get(k)) if hasattr(model_cfg, "get") else (lambda k: getattr(model_cfg, k, None))
    parts = [f"d_model={get('d_model')}", f"n_heads={get('n_heads')}"]
    if get("n_encoder_layers") is not None or get("n_decoder_layers") is not None:
        parts.append(f"{get('n_encoder_layers')}+{get('n_decoder_layers')} layers")
    if src_vocab_size is not None:
        parts.append(
            f"vocab {tgt_vocab_size}"
            if src_vocab_size == tgt_vocab_size
            else f"vocab {src_vocab_size}/{tgt_vocab_size}"
        )
    target = get("_target_") or type(model_cfg).__name__
    return f"{arch_name(target)} ({', '.join(parts)})"


def _flat(node, prefix: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in (node or {}).items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}.{key}"))
        else:
            out[f"{prefix}.{key}"] = value
    return out


def _overrides_to(stored: dict, current: dict, prefix: str) -> list[str]:
    """``key=value`` overrides that turn ``current`` into ``stored`` (the checkpoint's settings);
    a different model class is named as its ``model/arch`` option."""
    want, have = _flat(stored, prefix), _flat(current, prefix)
    out = []
    for key in sorted(set(want) | set(have)):
        if want.get(key) == have.get(key) or key.endswith("._partial_"):
            continue
        if key == "model._target_":
            out.insert(0, f"model/arch={arch_name(str(want.get(key)))}")
        elif key in want:
            out.append(f"{key}={'null' if want[key] is None else want[key]}")
    return out


def load_checkpoint_parts(path: str) -> tuple[dict | None, dict | None]:
    """``(state_dict, xformer section)`` of a checkpoint file, memory-mapped (tensors are not
    read); ``(None, None)`` when it is not a Lightning checkpoint."""
    import torch

    try:
        ckpt = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    except Exception as err:  # truncated, corrupt, not a torch file
        raise ConfigError(
            f"ckpt_path={path}: not a readable checkpoint ({str(err).splitlines()[0][:200]}). "
            f"Fix: use another checkpoint, e.g. the job's checkpoints/last.ckpt or best-*.ckpt"
        ) from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("state_dict"), dict):
        return None, None
    return ckpt["state_dict"], ckpt.get("xformer") or None


def check_checkpoint_model(cfg: DictConfig, path: str) -> None:
    """The checkpoint ``path`` that ``ckpt_path`` names was written by xformer (``run.py``) and holds
    a model of this run's shape: the parameter names and sizes of this run's model (built on the meta
    device with the checkpoint's vocabulary sizes; the data's vocabulary is checked by
    :func:`check_with_data`) equal the checkpoint's. In ``mode=eval`` the model comes from the
    checkpoint, so only its origin is checked.

    Raises:
        ConfigError: one line naming the checkpoint's model, this run's, and the overrides that
            make them agree (or that the file is not an xformer checkpoint).
    """
    state, meta = load_checkpoint_parts(path)
    if state is None or meta is None:
        what = "a Lightning checkpoint from another program" if state is not None else "not a Lightning checkpoint"
        raise ConfigError(
            f"ckpt_path={path}: {what} (no 'xformer' section, so its model and tokenizer are "
            f"unknown). Fix: give a checkpoint written by run.py (<job dir>/checkpoints/last.ckpt "
            f"or best-*.ckpt), or drop ckpt_path to start from scratch"
        )
    if cfg.mode != "train":
        return
    src_v, tgt_v = int(meta["src_vocab_size"]), int(meta["tgt_vocab_size"])
    model = build_model(cfg, src_v, tgt_v, int(meta.get("pad_id", 0)), device="meta")
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    have = {
        k.replace("._orig_mod.", ".").removeprefix("model.").removeprefix("_orig_mod."): tuple(v.shape)
        for k, v in state.items()
        if k.startswith("model.")
    }
    if want == have:
        return
    stored = (meta.get("config") or {}).get("model") or {}
    current = OmegaConf.to_container(cfg.model, resolve=True)
    fix = _overrides_to(stored, current, "model")
    fix_text = " ".join(fix[:8]) + (" …" if len(fix) > 8 else "")
    raise ConfigError(
        f"ckpt_path={path}: the checkpoint holds {model_shape(stored, src_v, tgt_v)}, this run "
        f"builds {model_shape(current, src_v, tgt_v)}; its weights do not fit. Fix: "
        + (f"{fix_text} (the checkpoint's model), " if fix else "use the checkpoint's model settings, ")
        + "or drop ckpt_path to train this model from scratch"
    )


def check_checkpoint_vocab(cfg: DictConfig, path: str, dm) -> None:
    """The data's vocabulary sizes equal those the checkpoint ``path`` was trained with (its
    embeddings and output layer have one row per token).

    Raises:
        ConfigError: one line naming both sizes and the data keys that make them agree.
    """
    _, meta = load_checkpoint_parts(path)
    if not meta:
        return
    ck = (int(meta["src_vocab_size"]), int(meta["tgt_vocab_size"]))
    run = (int(dm.src_vocab_size), int(dm.tgt_vocab_size))
    if ck == run:
        return
    stored = (meta.get("config") or {}).get("data") or {}
    fix = [
        o
        for o in _overrides_to(stored, OmegaConf.to_container(cfg.data, resolve=True), "data")
        if o.split("=", 1)[0] in ("data.vocab_size", "data.tokenizer", "data._target_", "data.n_symbols")
    ]
    raise ConfigError(
        f"ckpt_path={path}: the checkpoint's vocabulary has {ck[0]}/{ck[1]} (source/target) "
        f"tokens, this run's data {run[0]}/{run[1]}; its embeddings do not fit. Fix: "
        + (f"{' '.join(fix)} (the checkpoint's data), " if fix else "use the checkpoint's data settings, ")
        + "or drop ckpt_path to train from scratch"
    )


def checkpoint_file(cfg: DictConfig, out_dir: Path | None) -> str | None:
    """The checkpoint file a run loads: ``ckpt_path``, with ``last`` meaning the job's
    ``checkpoints/last.ckpt`` when it exists (else ``None``: the run starts from scratch)."""
    ckpt = cfg.get("ckpt_path")
    if not ckpt:
        return None
    if ckpt != "last":
        return str(ckpt)
    last = Path(out_dir or ".") / "checkpoints" / "last.ckpt"
    return str(last) if out_dir is not None and last.is_file() else None


# ---- the output folder ----------------------------------------------------------------------------


def check_output_dir(path: str | os.PathLike, key: str = "hydra.run.dir") -> None:
    """The job's output folder can be created and written: make it (with its parents) and write,
    flush and remove a one-byte probe file, so a folder under ``/proc`` or under a file, on a
    read-only mount, without permission or on a full disk fails here with its name, not as a
    traceback from the first file Hydra or Lightning writes.

    Raises:
        ConfigError: ``<key>=<path>: cannot create/write the folder (<reason>). Fix: ...``.
    """
    folder = Path(str(path)).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(
            f"{key}={path}: cannot create the folder ({err.strerror or err}). Fix: set {key} "
            f"to a writable folder, e.g. {key}=outputs/my_run"
        ) from None
    probe = folder / f".xformer-write-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"x")
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as err:
        raise ConfigError(
            f"{key}={path}: cannot write into the folder ({err.strerror or err}). Fix: free space "
            f"there or set {key} to a writable folder, e.g. {key}=outputs/my_run"
        ) from None
    finally:
        try:
            probe.unlink()
        except OSError:
            pass


from hydra.experimental.callback import Callback as _HydraCallback  # noqa: E402 (light: no torch)


class OutputDirCheck(_HydraCallback):
    """Hydra callback (``conf/hydra/default.yaml``): :func:`check_output_dir` on ``hydra.run.dir``
    (single run) or ``hydra.sweep.dir`` (``-m``) before Hydra creates it; on failure it prints the one
    ``error:`` line and exits with status 2."""

    def _check(self, config: DictConfig, key: str) -> None:
        import sys

        try:
            check_output_dir(OmegaConf.select(config, key), key)
        except ConfigError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)

    @override
    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        self._check(config, "hydra.run.dir")

    @override
    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        self._check(config, "hydra.sweep.dir")
