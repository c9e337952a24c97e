"""Epoch keys converted to optimizer steps, once, when the data is known, with one console line each or refused
in one line (docs/scaling.md, "Steps are the unit")."""

from __future__ import annotations

import logging
import math

from omegaconf import DictConfig, OmegaConf

from xformer.errors import ConfigError

log = logging.getLogger("xformer")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def steps_from_epochs(cfg: DictConfig, dm, world_size: int = 1) -> DictConfig:
    """``cfg`` with its epoch keys (``max_epochs``, ``limit_train_batches``, ``val_check_interval`` as a fraction,
    ``check_val_every_n_epoch``, ``limit_val_batches`` as a fraction) rewritten for the training data ``dm`` (set
    up), each rewrite logged in one line (the table: docs/scaling.md, "Steps are the unit"). Steps an epoch:
    ``ceil(batches / accumulate_grad_batches)`` of one of ``world_size`` ranks' batches. Raises: ConfigError for
    an epoch key with no step equivalent."""
    t = cfg.trainer
    keys = ("max_epochs", "limit_train_batches", "val_check_interval", "check_val_every_n_epoch", "limit_val_batches")
    given = {k: t.get(k) for k in keys}
    epochs, limit, interval, every = (given[k] for k in keys[:4])
    val_in_epochs = every is not None or isinstance(interval, float)
    needs_epoch = val_in_epochs or (_number(epochs) and epochs > 0) or (_number(limit) and limit != 1.0)
    val_fraction = given["limit_val_batches"]
    val_fraction = val_fraction if isinstance(val_fraction, float) and 0 < val_fraction < 1 else None
    if not needs_epoch and val_fraction is None:
        return cfg
    cfg = cfg.copy()
    OmegaConf.set_struct(cfg, False)
    t = cfg.trainer
    lines = []
    if needs_epoch:
        n = math.ceil(len(dm.train_dataloader().batch_sampler) / max(1, world_size))
        batches = n
        if _number(limit) and limit != 1.0:  # an int, or a fraction rounded down as Lightning does
            batches = min(n, int(limit) if isinstance(limit, int) else int(n * float(limit)))
            if batches < 1:
                raise ConfigError(
                    f"trainer.limit_train_batches={limit}: takes none of an epoch's {n} batches. "
                    f"Fix: trainer.limit_train_batches={1 / n:.3g} or more, or an int"
                )
            t.limit_train_batches = None
            cfg.data_epoch_batches = batches
            lines.append(f"trainer.limit_train_batches={limit} -> data epochs of {batches} of their {n} batches")
        steps = math.ceil(batches / int(t.get("accumulate_grad_batches") or 1))
        per = f"({steps} optimizer steps an epoch of {batches} batches)"
        if _number(epochs) and epochs > 0:
            budget = epochs * steps
            max_steps = t.get("max_steps")
            t.max_steps = budget if max_steps is None or max_steps < 0 else min(max_steps, budget)
            t.max_epochs = -1
            lines.append(f"trainer.max_epochs={epochs} -> trainer.max_steps={t.max_steps} {per}")
        if val_in_epochs:
            t.val_check_interval = _interval(interval, every, steps)
            t.check_val_every_n_epoch = None
            was = ", ".join(f"trainer.{k}={given[k]}" for k in ("val_check_interval", "check_val_every_n_epoch"))
            lines.append(f"{was} -> trainer.val_check_interval={t.val_check_interval} {per}")
    if val_fraction is not None:
        kept, total = dm.limit_val_examples(val_fraction)
        t.limit_val_batches = None
        lines.append(
            f"trainer.limit_val_batches={val_fraction} -> validation on {kept} of {total} examples, evenly spread "
            "over their lengths"
        )
    for line in lines:
        log.info("%s", line)
    return cfg


def _interval(interval, every: int | None, steps: int) -> int:
    """The validation interval in optimizer steps for ``val_check_interval`` and ``check_val_every_n_epoch``
    ``every``, with ``steps`` optimizer steps an epoch. Raises: ConfigError when that is no fixed interval."""
    if not _number(interval):  # a time
        raise ConfigError(
            f"trainer.check_val_every_n_epoch={every}: counts epochs, and trainer.val_check_interval={interval} is a "
            "time. Fix: trainer.check_val_every_n_epoch=null"
        )
    k = max(1, int(steps * interval)) if isinstance(interval, float) else int(interval)
    if every is None or (every == 1 and steps % k == 0):
        return k
    if k == steps:  # once an epoch, at its end: every N epochs
        return every * steps
    raise ConfigError(
        f"trainer.check_val_every_n_epoch={every}: with trainer.val_check_interval={interval} it validates after "
        f"step {k} of every{'' if every == 1 else f' {every}th'} epoch of {steps} optimizer steps, which is no fixed "
        f"interval in steps (xformer counts steps). Fix: trainer.check_val_every_n_epoch=null and "
        f"trainer.val_check_interval=<optimizer steps> (e.g. {k}, or {every * steps} for every {every} epoch(s))"
    )
