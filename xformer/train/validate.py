"""Config checks that run before any data is read or any step is trained.

Each failure raises :class:`xformer.model.ConfigError` with one line: the offending key, the value,
and the fix. ``run.py`` prints that line and exits non-zero without a stack trace.
"""

from __future__ import annotations

import os

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from xformer.model import ConfigError


def _range(key: str, value, lo, hi, lo_open=False, hi_open=True) -> None:
    ok = (value > lo if lo_open else value >= lo) and (value < hi if hi_open else value <= hi)
    if not ok:
        lo_b, hi_b = "(" if lo_open else "[", ")" if hi_open else "]"
        raise ConfigError(f"{key}={value}: must be in {lo_b}{lo}, {hi}{hi_b}")


def check_config(cfg: DictConfig) -> None:
    """Validate everything that does not need the data: model sizes and variants (by building the
    model on the meta device, which allocates nothing), optimiser, loss, decoding, objective,
    checkpoint path.

    Raises:
        ConfigError: one line naming the key and the fix.
    """
    _range("loss.label_smoothing", cfg.loss.label_smoothing, 0.0, 1.0)
    if cfg.optim.warmup_steps < 0:
        raise ConfigError(f"optim.warmup_steps={cfg.optim.warmup_steps}: must be >= 0")
    if not cfg.optim.lr > 0:
        raise ConfigError(f"optim.lr={cfg.optim.lr}: must be > 0")
    if cfg.objective.mode not in ("min", "max"):
        raise ConfigError(f"objective.mode={cfg.objective.mode}: use min or max")
    if cfg.decode.beam_size < 1:
        raise ConfigError(f"decode.beam_size={cfg.decode.beam_size}: must be >= 1")
    if cfg.mode not in ("train", "eval"):
        raise ConfigError(f"mode={cfg.mode}: use train or eval")
    if cfg.mode == "eval" and not cfg.ckpt_path:
        raise ConfigError("ckpt_path: mode=eval needs ckpt_path=/path/to/checkpoint.ckpt")
    if cfg.ckpt_path and cfg.ckpt_path != "last" and not os.path.isfile(cfg.ckpt_path):
        raise ConfigError(f"ckpt_path={cfg.ckpt_path}: no such file; give an existing .ckpt or ckpt_path=last")
    _range("model.dropout", cfg.model.dropout, 0.0, 1.0)
    build_model(cfg, 32, 32, 0, device="meta")


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
    """Checks that need the data: sequence lengths against ``model.max_len`` for absolute positional
    schemes, and model shape against the task.

    Raises:
        ConfigError: one line naming the key and the fix.
    """
    arch = getattr(model, "arch", "encoder_decoder")
    is_lm_data = dm.task == "lm"
    if arch == "encoder_decoder" and is_lm_data:
        raise ConfigError(f"model/arch=encoder_decoder: data {type(dm).__name__} is a language-modelling task; "
                          "use model/arch=decoder_only")
    if arch == "encoder_only" and is_lm_data:
        raise ConfigError("model/arch=encoder_only: needs a length-preserving seq2seq task "
                          "(data=copy, reverse or sort); got a language-modelling task")
    if arch == "encoder_only" and not getattr(dm, "length_preserving", False):
        raise ConfigError(f"model/arch=encoder_only: data {type(dm).__name__} is not length-preserving; "
                          "use data=copy, reverse or sort (tagging needs one label per source token)")
    if arch == "decoder_only" and not is_lm_data and dm.src_vocab_size != dm.tgt_vocab_size:
        raise ConfigError("model/arch=decoder_only: source and target vocabularies differ; "
                          "use a joint vocabulary for prefix-LM training")
    stacks = [m for m in (getattr(model, "encoder", None), getattr(model, "decoder", None)) if m is not None]
    if any(getattr(s.pe, "bounded", False) for s in stacks):
        if arch == "decoder_only" and not is_lm_data:
            need = dm.max_src_len + dm.max_tgt_len
        else:
            need = max(dm.max_src_len, dm.max_tgt_len)
        if model.max_len < need:
            pe = type(stacks[0].pe).__name__
            raise ConfigError(f"model.max_len={model.max_len}: the data's longest sequence has {need} tokens "
                              f"and {pe} positions stop at max_len; set model.max_len={need} or more")
