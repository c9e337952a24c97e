"""Config checks that run before any data is read or any step is trained.

Each failure raises :class:`xformer.model.ConfigError` with one line: the offending key, the value,
and the fix. ``run.py`` prints that line and exits non-zero without a stack trace.
"""

from __future__ import annotations

import logging
import math
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from xformer.model import ConfigError

log = logging.getLogger("xformer")

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
                raise ConfigError(f"{key}={value}: expected an integer >= {self.lo}"
                                  + (" or null" if self.nullable else ""))
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
    "model.d_model": _int(1), "model.n_heads": _int(1), "model.d_head": _int(1, nullable=True),
    "model.n_kv_heads": _int(1, nullable=True),
    "model.mixer.stacks": Rule("choice", choices=("encoder", "decoder", "both")),
    "model.d_ff": _int(1, nullable=True),
    "model.n_encoder_layers": _int(0), "model.n_decoder_layers": _int(0),
    "model.max_len": _int(1), "model.attention.window": _int(1), "model.param_budget": _int(1, nullable=True),
    "model.dropout": _float(0.0, 1.0),
    "model.ffn_ratio": _float(0.0, lo_open=True),
    "model.tie_embeddings": _BOOL, "model.attn_scale": _BOOL, "model.bias": _BOOL,
    "loss.label_smoothing": _float(0.0, 1.0),
    "optim.lr": _float(0.0, lo_open=True),
    "optim.warmup_steps": _int(0), "optim.scheduler.decay_from": _int(1, nullable=True),
    "optim.weight_decay": _float(0.0), "optim.scheduler.total_steps": _int(1),
    "trainer.max_steps": _int(-1), "trainer.accumulate_grad_batches": _int(1),
    "trainer.log_every_n_steps": _int(1), "trainer.num_nodes": _int(1),
    "trainer.gradient_clip_val": _float(0.0, nullable=True),
    "trainer.gradient_clip_algorithm": Rule("choice", choices=("norm", "value"), nullable=True),
    "data.tokens_per_batch": _int(1, nullable=True), "data.block_size": _int(1), "data.batch_size": _int(1),
    "data.num_workers": _int(0), "data.n_train": _int(1), "data.n_val": _int(1),
    "data.n_test": _int(0), "data.n_long": _int(0), "data.vocab_size": _int(1),
    "data.train_max_len": _int(1), "data.train_min_len": _int(1), "data.n_symbols": _int(2),
    "data.train_windows_per_epoch": _int(1, nullable=True), "data.val_estimate_batches": _int(1, nullable=True),
    "decode.beam_size": _int(1), "decode.val_batches": _int(0, nullable=True),
    "decode.alpha": _float(0.0), "decode.max_len_a": _float(0.0), "decode.max_len_b": _float(0.0),
    "callbacks.last_checkpoint.every_n_train_steps": _int(1, nullable=True),
    "callbacks.model_checkpoint.every_n_train_steps": _int(1, nullable=True),
    "callbacks.nan_guard.check_every_n_steps": _int(1, nullable=True),
    "callbacks.wandb_panels.n_samples": _int(0),
}
_ABSENT = object()


def check_rules(cfg: DictConfig) -> None:
    """Apply every rule of :data:`RULES` to its key in ``cfg`` (absent keys are skipped).

    Raises:
        ConfigError: for the first key that breaks its rule.
    """
    for key, rule in RULES.items():
        value = OmegaConf.select(cfg, key, default=_ABSENT)
        if value is not _ABSENT:
            rule.check(key, value)
    from xformer.train.schedules import check_scheduler_node

    check_scheduler_node(OmegaConf.select(cfg, "optim.scheduler", default=None))  # no stale or unknown key


def _check_data(cfg: DictConfig):
    """``data.root`` exists when set, and the data module accepts its options (its constructor
    checks them; nothing is read). Returns the (not yet set up) data module."""
    root = OmegaConf.select(cfg, "data.root", default=None)
    if root is not None and not Path(str(root)).expanduser().is_dir():
        raise ConfigError(f"data.root={root}: no such folder. Fix: point data.root at the folder holding "
                          f"the data files, or set data.root=null to download/generate them")
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
        raise ConfigError(f"ckpt_path={path}: not a readable checkpoint (truncated or corrupt). Fix: use "
                          f"another checkpoint, e.g. the job's checkpoints/last.ckpt or best-*.ckpt")


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
    from xformer.jobs.lightning_compat import PRECISION_INPUTS

    precision = str(OmegaConf.select(cfg, "trainer.precision", default="32-true"))
    known = PRECISION_INPUTS + ("64", "32", "16", "bf16")
    if precision not in known:
        raise ConfigError(f"trainer.precision={precision}: unknown. Fix: use one of 32-true, bf16-mixed "
                          f"(GPU default), 16-mixed, bf16-true, 16-true, 64-true")
    opt = OmegaConf.select(cfg, "optim.optimizer", default=None) or {}
    if opt.get("fused") and opt.get("foreach"):
        raise ConfigError("optim.optimizer.fused=true and optim.optimizer.foreach=true: torch allows one "
                          "kernel. Fix: keep fused=true (fastest) or set fused=false with foreach=true")
    compile_opts = OmegaConf.select(cfg, "trainer.compile", default=False)
    if not isinstance(compile_opts, (bool, DictConfig)) and compile_opts is not None:
        raise ConfigError(f"trainer.compile={compile_opts}: expected true, false or torch.compile keyword "
                          "arguments. Fix: trainer.compile=true or trainer.compile={mode:max-autotune}")
    strategy = OmegaConf.select(cfg, "trainer.strategy", default=None)
    target = str(strategy.get("_target_", "")) if isinstance(strategy, DictConfig) else str(strategy)
    if target.endswith("fsdp_strategy") and precision not in _FSDP_PRECISIONS:
        raise ConfigError(f"trainer.precision={precision}: trainer=fsdp (FSDP2) has no gradient scaler for "
                          f"it. Fix: use trainer.precision=bf16-mixed, or one of {', '.join(_FSDP_PRECISIONS)}")


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
    from hydra.utils import get_class

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
        raise ConfigError(f"model.mixer.stacks={mixer.stacks}: model/arch={model_cls.arch} has no {mixer.stacks} "
                          f"stack (it has {' and '.join(patterns)}). Fix: model.mixer.stacks=both")
    pe_cls = get_class(cfg.model.pe._target_) if "pe" in cfg.model else None
    for name in served:
        why = mixer.refusal(patterns[name], pe_cls)
        if why:
            raise ConfigError(f"model/mixer={type(mixer).__name__} on the {name}: {why}. Fix: another model/pe "
                              f"or model/attention, model/mixer=mha, or model.mixer.stacks= the other stack")


def check_config(cfg: DictConfig) -> None:
    """Validate everything that does not need the data: each key's type and value (:data:`RULES`),
    then what involves several keys or builds something: model sizes and variants (by building the
    model on the meta device, which allocates nothing), precision with strategy and optimizer
    kernel, the data module's options, the objective, the checkpoint path.

    Raises:
        ConfigError: one line naming the key and the fix.
    """
    check_rules(cfg)
    max_steps = OmegaConf.select(cfg, "trainer.max_steps", default=None)
    if cfg.mode == "train" and max_steps == 0:
        raise ConfigError("trainer.max_steps=0: would train nothing and test an untrained model. Fix: "
                          "max_steps >= 1 (or -1 with trainer.max_epochs), or mode=eval ckpt_path=...")
    if cfg.mode == "eval" and not cfg.ckpt_path:
        raise ConfigError("ckpt_path: mode=eval needs ckpt_path=/path/to/checkpoint.ckpt")
    if cfg.ckpt_path and cfg.ckpt_path != "last":
        _check_ckpt_file(str(cfg.ckpt_path))
    _check_trainer(cfg)
    _check_mixer(cfg)
    build_model(cfg, 32, 32, 0, device="meta")
    dm = _check_data(cfg)
    if cfg.mode == "train":
        check_objective(cfg, list(getattr(dm, "metrics", []) or []), type(dm).__name__)


def objective_keys(metrics: list[str]) -> list[str]:
    """The keys a training run logs at every validation, which ``objective.metric`` may name:
    ``val/loss``, ``val/ppl``, ``val/acc``, ``val/<m>`` for each sequence metric ``m`` of the data
    (``bleu``, ``exact_match``), and ``train/loss``."""
    return ["val/loss", "val/ppl", "val/acc"] + [f"val/{m}" for m in metrics] + ["train/loss"]


def check_objective(cfg: DictConfig, metrics: list[str], data_name: str = "this data") -> None:
    """Reject an ``objective.metric`` that a training run with ``cfg`` would never log (a typo, a
    metric the data does not compute, a ``test/`` key, a decoded metric with decoding off during
    validation, a ``val/`` key with validation off), so no run finishes without its objective.

    Raises:
        ConfigError: one line naming ``objective.metric`` (or the key that prevents it) and the fix.
    """
    metric = str(cfg.objective.metric)
    keys = objective_keys(metrics)
    if metric not in keys:
        why = ("test metrics come after training" if metric.startswith("test/")
               else f"data {data_name} does not compute it")
        raise ConfigError(f"objective.metric={metric}: not logged during training ({why}); use one of "
                          f"{', '.join(keys)}")
    if not metric.startswith("val/"):
        return
    limit_val = OmegaConf.select(cfg, "trainer.limit_val_batches", default=None)
    if limit_val is not None and not isinstance(limit_val, bool) and limit_val == 0:
        raise ConfigError(f"trainer.limit_val_batches={limit_val}: no validation runs, so objective.metric="
                          f"{metric} is never logged; set limit_val_batches > 0 (or null) or objective.metric=train/loss")
    val_decode = OmegaConf.select(cfg, "decode.val_batches", default=None)
    if metric.split("/", 1)[1] in metrics and val_decode == 0:
        raise ConfigError(f"decode.val_batches=0: validation decodes nothing, so objective.metric={metric} "
                          f"is never logged; set decode.val_batches >= 1 (or null = all) or objective.metric=val/loss")


def build_model(cfg: DictConfig, src_vocab_size: int, tgt_vocab_size: int, pad_id: int,
                device: str | None = None) -> torch.nn.Module:
    """Instantiate ``cfg.model`` for the given vocabularies, turning constructor ``ValueError``s
    (window < 1, odd RoPE head size, …) into :class:`ConfigError`."""
    try:
        if device:
            with torch.device(device):
                return instantiate(cfg.model, src_vocab_size=src_vocab_size,
                                   tgt_vocab_size=tgt_vocab_size, pad_id=pad_id)
        return instantiate(cfg.model, src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size,
                           pad_id=pad_id)
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
        log.warning("model.max_len=%d: the data's longest sequence has %d tokens and %s positions stop "
                    "at max_len; over-long examples are cut to fit (a warning per split names them)",
                    limit, need, pe)
        return
    raise ConfigError(f"model.max_len={limit}: the data's longest sequence has {need} tokens "
                      f"and {pe} positions stop at max_len; set model.max_len={need} or more")
