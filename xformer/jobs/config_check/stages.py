"""The config check's entry points, in the order of what they need: 1. :func:`check_static`, the config
alone (interpolations that do not resolve, ``+`` additions, group nodes given a string, :data:`DECLARED` keys,
:data:`.rules.STATIC`; no torch); 2. :func:`check_model`, the :data:`.schema.EARLY` nodes against their
classes, the mixer and optimizer rules, the model on the meta device, a checkpoint's model (torch, no
Lightning); 3. :func:`check_data_options`, the other nodes and the data module's constructor; 4.
:func:`check_with_data`, the built data against the model."""

from __future__ import annotations

import logging
from typing import Annotated, Literal

from omegaconf import DictConfig

from xformer.config_types import Range
from xformer.errors import ConfigError
from xformer.jobs.checkpoints import check_checkpoint_model
from xformer.train.checkpoint_file import build_model, refusal

from . import rules
from .schema import check_additions, check_group_nodes, check_resolves, check_targets, fit_problems, raise_all


def _root(seed: Annotated[int, Range(ge=0)], mode: Literal["train", "eval"], ckpt_path: str | None): ...
def _objective(metric: str, mode: Literal["min", "max"]): ...
def _optim(lr: Annotated[float, Range(gt=0)]): ...  # warm-up and decay: the schedule's and optimizer's own
def _unchecked_by_lightning(  # keys Lightning reads late (clipping) or accepts out of range (a negative interval)
    gradient_clip_algorithm: Literal["norm", "value"] | None,
    log_every_n_steps: Annotated[int, Range(ge=0)] | None,
): ...


#: Nodes without a ``_target_`` that run.py and the driver read (and a key Lightning checks late), as signatures.
DECLARED = {"": _root, "objective": _objective, "optim": _optim, "trainer": _unchecked_by_lightning}


def check_static(cfg: DictConfig) -> None:
    """Stage 1. Raises: ConfigError, every problem found, one line each (only the unresolvable
    interpolations when there are any: the other checks would read their values)."""
    check_resolves(cfg)
    problems = []
    for path, fn in DECLARED.items():
        if isinstance(node := cfg.get(path) if path else cfg, DictConfig):
            problems += [p.lstrip(".") for p in fit_problems(node, path, fn, path or "the root config", strict=False)]
    for check in (check_additions, check_group_nodes, *rules.STATIC):
        try:
            check(cfg)
        except ConfigError as err:
            problems.append(str(err))
    raise_all(problems)


def check_model(cfg: DictConfig, ckpt: str | None = None) -> None:
    """Stage 2, with ``ckpt`` (the checkpoint this run loads) against this run's model. Raises: ConfigError."""
    check_targets(cfg, early=True)
    rules.mixer_fits(cfg)
    rules.optimizer_builds(cfg)
    build_model(cfg, 32, 32, 0, device="meta")
    if ckpt is not None and cfg.mode == "train":
        check_checkpoint_model(cfg, ckpt)


def check_data_options(cfg: DictConfig):
    """Stage 3: the remaining nodes, and ``cfg.data`` built (its constructor checks its options; nothing is
    read). Returns the data module, not set up. Raises: ConfigError (``data (<class>): <the refusal>``)."""
    from hydra.utils import instantiate

    check_targets(cfg, early=False)
    try:
        dm = instantiate(cfg.data)
    except Exception as err:
        if (why := refusal(err, (ValueError, TypeError))) is None:
            raise
        raise ConfigError(f"data ({str(cfg.data.get('_target_', '?')).rsplit('.', 1)[-1]}): {why}") from None
    if cfg.mode == "train":
        rules.check_objective(cfg, list(getattr(dm, "metrics", []) or []), type(dm).__name__)
    return dm


def check_config_first(cfg: DictConfig, ckpt: str | None = None) -> None:
    """Stages 1 and 2: what ``run.py`` checks before it imports Lightning or W&B. Raises: ConfigError."""
    check_static(cfg)
    check_model(cfg, ckpt)


def check_config(cfg: DictConfig, ckpt: str | None = None) -> None:
    """Stages 1-3 (a dry run, every job of a sweep). Raises: ConfigError, one line per problem."""
    check_config_first(cfg, ckpt)
    check_data_options(cfg)


def check_with_data(cfg: DictConfig, dm, model) -> None:
    """Stage 4: objective vs the data's metrics, the model's :meth:`check_data`, the longest sequence vs
    ``model.max_len`` for absolute positions (a warning in ``mode=eval``, which cuts them). Raises: ConfigError."""
    if cfg.mode == "train":
        rules.check_objective(cfg, list(dm.metrics), type(dm).__name__)
    model.check_data(dm)
    limit, need = model.position_limit, model.positions_needed(dm)
    if limit is None or limit >= need:
        return
    stack = model.encoder if getattr(model, "encoder", None) is not None else model.decoder
    what = f"the data's longest sequence has {need} tokens and {type(stack.pe).__name__} positions stop at max_len"
    if cfg.mode != "eval":
        raise ConfigError(f"model.max_len={limit}: {what}; set model.max_len={need} or more")
    logging.getLogger("xformer").warning("model.max_len=%d: %s; over-long examples are cut to fit", limit, what)
