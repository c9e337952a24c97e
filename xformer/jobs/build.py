"""Building config nodes with a constructor's refusal as one :class:`~xformer.errors.ConfigError` line
(``build_model`` lives with the training code, :mod:`xformer.train.checkpoint_file`)."""

from __future__ import annotations

from omegaconf import DictConfig

from xformer.errors import ConfigError
from xformer.train.checkpoint_file import build_model, refusal

__all__ = ["build_data", "build_model", "refusal"]


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
