"""Checkpoint files and models built from a config, for the training code and the jobs above it:
:func:`read_checkpoint` (the one reader of checkpoint files), :func:`build_model` (``cfg.model`` with a
constructor's refusal as one :class:`~xformer.errors.ConfigError` line) and :func:`arch_name`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from xformer.errors import ConfigError


class UnreadableCheckpoint(ValueError):
    """The file is not a readable torch checkpoint (truncated, corrupt, not a torch file); the message
    is the first line of the loader's own error."""


def read_checkpoint(path: str | Path) -> Any:
    """The object stored in checkpoint file ``path``, on the CPU and memory-mapped (only tensors touched are read).
    Raises: UnreadableCheckpoint (the first line of the cause, at most 200 characters)."""
    import torch

    try:
        return torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    except Exception as err:  # truncated, corrupt, not a torch file, missing
        raise UnreadableCheckpoint(str(err).splitlines()[0][:200] if str(err) else type(err).__name__) from err


def refusal(err: BaseException, kinds: tuple[type[BaseException], ...] = (ValueError,)) -> str | None:
    """The first line of the first exception of ``kinds`` in ``err``'s chain (Hydra wraps a constructor's
    error in ``InstantiationException``), or ``None`` when there is none."""
    cause: BaseException | None = err
    while cause is not None and not isinstance(cause, kinds):
        cause = cause.__cause__ or cause.__context__
    return str(cause).splitlines()[0] if cause is not None and str(cause) else None


def build_model(cfg: DictConfig, src_vocab_size: int, tgt_vocab_size: int, pad_id: int, device: str | None = None):
    """Instantiate ``cfg.model`` for the given vocabularies (on ``device``, e.g. ``"meta"``).
    Raises: ConfigError: the first line of a ``ValueError`` a constructor raises (window < 1, ...)."""
    import contextlib

    import torch
    from hydra.utils import instantiate

    try:
        with torch.device(device) if device else contextlib.nullcontext():
            return instantiate(cfg.model, src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, pad_id=pad_id)
    except ConfigError:
        raise
    except Exception as err:
        if (why := refusal(err)) is None:
            raise
        raise ConfigError(why) from None


def arch_name(target: str) -> str:
    """The ``model/arch`` option of a model class path (``xformer.model.DecoderOnly`` ->
    ``decoder_only``): the class name in snake case, as ``conf/model/arch/`` names them."""
    name = str(target).rsplit(".", 1)[-1]
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))
