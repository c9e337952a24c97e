"""The trainer a job builds, checked before it is built: its config as the run builds it (:func:`as_run`: the
epoch keys in steps, once the data is known), its callbacks (:func:`build_callbacks`, which the run builds with),
and Lightning's own checks of its keys (:func:`trainer_accepts`)."""

from __future__ import annotations

import logging
import warnings

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from xformer.config.steps import steps_from_epochs
from xformer.errors import ConfigError
from xformer.train.checkpoint_file import refusal

#: Keys of a node that xformer reads itself before it instantiates the node's target.
CONSUMED = {"lightning.Trainer": ("compile",), "lightning.pytorch.Trainer": ("compile",)}

#: Lightning's accelerator names (values of ``trainer.accelerator``) for devices torch can count
_ACCELERATORS = {
    "gpu": "cuda",
    "cuda": "cuda",
    "mps": "mps",
}


def _get(cfg: DictConfig, key: str, default=None):  # an interpolation that does not resolve: Hydra names it
    return OmegaConf.select(cfg, key, default=default, throw_on_resolution_failure=False)


def _nodes(cfg: DictConfig, key: str) -> list[tuple[str, DictConfig]]:
    """``(name, node)`` of each node under ``key`` (``callbacks``, ``logger``)."""
    parent = _get(cfg, key)
    return [(str(k), v) for k, v in (parent.items() if OmegaConf.is_dict(parent) else []) if OmegaConf.is_dict(v)]


def bare_trainer(target: str, keys: dict):
    """Lightning's ``target`` trainer from ``keys`` alone, without its logs. Raises: what its constructor raises."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)  # the device summary: printed once, by the run's own trainer
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            node = {"_target_": target, "_convert_": "all", **keys}  # plain dicts (max_time as a timedelta's keys)
            return instantiate(node, logger=False, enable_checkpointing=False, callbacks=[])
    finally:
        logging.disable(previous)


def _resolved(node: DictConfig) -> dict:
    """``node``'s keys but ``_target_`` that resolve here, resolved (not: ``${hydra:...}`` in a sweep's check)."""
    out = {}
    for key in (str(k) for k in node if k != "_target_"):
        try:
            out[key] = OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v := node[key]) else v
        except Exception:  # a reference named by another check
            continue
    return out


def build_callbacks(cfg: DictConfig, check: bool = False) -> list:
    """The ``callbacks`` nodes built (``check``: outside the job, from their keys that resolve). Raises: ConfigError
    naming the key, or the node, whose value its constructor refuses."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    built = []
    for name, node in ((n, c) for n, c in _nodes(cfg, "callbacks") if "_target_" in c):
        try:
            built.append(instantiate({"_target_": node._target_, **_resolved(node)} if check else node))
        except Exception as err:
            if (why := refusal(err, (ValueError, TypeError, MisconfigurationException))) is None:
                raise
            at = f"callbacks.{name}"
            if key := next((str(k) for k in node if f"`{k}`" in why), None):  # the key Lightning's message names
                raise ConfigError(f"{at}.{key}={node[key]}: {why.rstrip('.')}. Fix: another {at}.{key}") from None
            raise ConfigError(f"{at} ({node._target_}): {why.rstrip('.')}. Fix: correct that {at}.* key") from None
    return built


def as_run(cfg: DictConfig, dm=None) -> DictConfig:
    """``cfg`` as the job builds its trainer from it: training, its epoch keys in steps for the data module ``dm``
    (:func:`~xformer.config.steps.steps_from_epochs`, the data set up if a key needs it); eval (no fit, no ``dm``),
    without a validation schedule. Raises: ConfigError: the conversion's refusals."""
    if cfg.get("mode") == "eval":
        cfg = cfg.copy()
        OmegaConf.set_struct(cfg, False)
        cfg.trainer.val_check_interval = cfg.trainer.check_val_every_n_epoch = None
        return cfg

    class SetUp:  # ``dm``, set up for fitting when the conversion first reads it (only an epoch key needs the data)
        ready = False

        def __getattr__(self, name: str):
            if not SetUp.ready:
                dm.prepare_data()
                dm.setup("fit")
                SetUp.ready = True
            return getattr(dm, name)

    return steps_from_epochs(cfg, SetUp())


def trainer_accepts(cfg: DictConfig) -> None:
    """Lightning's own checks of ``trainer`` (a GPU's presence: :func:`~xformer.config.check.check_devices`), naming
    the key. Raises: ConfigError."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    node = _get(cfg, "trainer")
    if not isinstance(node, DictConfig) or "_target_" not in node or str(node.get("accelerator")) in _ACCELERATORS:
        return
    items = [(k, v) for k, v in _resolved(node).items() if k not in CONSUMED.get(str(node._target_), ())]
    kinds, refused = (ValueError, TypeError, MisconfigurationException, ImportError), False
    for n in (len(items), *range(1, len(items) + 1)):  # all keys; once refused, the first n: the key it refuses
        try:
            bare_trainer(str(node._target_), dict(items[:n]))
        except Exception as err:
            if (why := refusal(err, kinds)) is None:
                raise
            if refused:  # by the n-th key (a refusal of xformer's own strategy: its line as it is)
                key, sub = items[n - 1][0], node.get(items[n - 1][0])
                shown = f"{key} ({sub.get('_target_')})" if OmegaConf.is_dict(sub) else f"{key}={sub}"
                line = f"trainer.{shown}: {why.rstrip('.')}. Fix: another trainer.{key} (Trainer {key})"
                raise ConfigError(refusal(err, (ConfigError,)) or line) from None
            refused = True
        if not refused:
            return
