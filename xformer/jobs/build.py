"""Building config nodes with a constructor's refusal as one :class:`~xformer.errors.ConfigError` line."""

from __future__ import annotations

from omegaconf import DictConfig

from xformer.errors import ConfigError


def refusal(err: BaseException, kinds: tuple[type[BaseException], ...] = (ValueError,)) -> str | None:
    """The first line of the first exception of ``kinds`` in ``err``'s chain (Hydra wraps a constructor's
    error in ``InstantiationException``), or ``None`` when there is none."""
    cause: BaseException | None = err
    while cause is not None and not isinstance(cause, kinds):
        cause = cause.__cause__ or cause.__context__
    return str(cause).splitlines()[0] if cause is not None and str(cause) else None


def build_model(cfg: DictConfig, src_vocab_size: int, tgt_vocab_size: int, pad_id: int, device: str | None = None):
    """Instantiate ``cfg.model`` for the given vocabularies (on ``device``, e.g. ``"meta"``).

    Raises:
        ConfigError: the first line of a ``ValueError`` a constructor raises (window < 1, an odd head
            size for rotary positions, ...).
    """
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


def build_data(cfg: DictConfig):
    """Instantiate ``cfg.data`` (its constructor checks its options; nothing is read or generated).

    Raises:
        ConfigError: ``data (<class>): <the constructor's ValueError or TypeError>``.
    """
    from hydra.utils import instantiate

    try:
        return instantiate(cfg.data)
    except Exception as err:
        if (why := refusal(err, (ValueError, TypeError))) is None:
            raise
        raise ConfigError(f"data ({str(cfg.data.get('_target_', '?')).rsplit('.', 1)[-1]}): {why}") from None
