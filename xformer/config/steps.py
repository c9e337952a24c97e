"""Epoch keys converted to optimizer steps, once, when the data is known, with one console line each or refused
in one line (docs/scaling.md, "Steps are the unit")."""

from __future__ import annotations

import logging
import math

from omegaconf import DictConfig, OmegaConf

from xformer.errors import ConfigError

log = logging.getLogger("xformer")

#: Lightning's reading of a number (Trainer docs): an int counts, a float in [0, 1] is a fraction of an epoch.
#: Per key: what the int counts (at least 1 here) and the fractions a run can use.
_COUNTS = {
    "limit_train_batches": ("batches an epoch", "(0, 1]"),
    "val_check_interval": ("optimizer steps", "[0, 1]"),
}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _n(count: int, word: str, plural: str | None = None) -> str:
    """``count`` and ``word``, plural unless ``count`` is 1 (``word + "s"`` unless given)."""
    return f"{count} {word if count == 1 else plural or word + 's'}"


def check_epoch_values(t: DictConfig) -> None:
    """The epoch keys' own values, before any data: ``max_epochs`` an int >= 1 or -1 (none), ``limit_train_batches``
    and ``val_check_interval`` an int >= 1 or a fraction of an epoch in [0, 1], ``check_val_every_n_epoch`` an int
    >= 1 (no Lightning import: the config check may call it). Raises: ConfigError naming the first key out of
    range."""
    epochs, every = t.get("max_epochs"), t.get("check_val_every_n_epoch")
    if epochs == 0:
        raise ConfigError(
            "trainer.max_epochs=0: would train nothing. "
            "Fix: trainer.max_epochs=<data epochs >= 1>, or mode=eval ckpt_path=..."
        )
    if epochs is not None and not (isinstance(epochs, int) and not isinstance(epochs, bool) and epochs >= -1):
        raise ConfigError(
            f"trainer.max_epochs={epochs}: counts data epochs, an int >= 1 (or -1: no limit). "
            "Fix: trainer.max_epochs=<data epochs>"
        )
    for key, (unit, fractions) in _COUNTS.items():
        value = t.get(key)
        if (
            not _number(value)
            or (isinstance(value, int) and value >= 1)
            or (isinstance(value, float) and 0 <= value <= 1)
        ):
            continue
        why = f"an int counts {unit}, at least 1" if isinstance(value, int) else "a fraction of an epoch is in [0, 1]"
        raise ConfigError(
            f"trainer.{key}={value}: {why}. Fix: trainer.{key}=<{unit} >= 1> or a fraction in {fractions}"
        )
    if every is not None and not (isinstance(every, int) and not isinstance(every, bool) and every >= 1):
        raise ConfigError(
            f"trainer.check_val_every_n_epoch={every}: counts data epochs, an int >= 1. "
            "Fix: trainer.check_val_every_n_epoch=<epochs >= 1>, "
            "or null and trainer.val_check_interval=<optimizer steps>"
        )


def world_size(t: DictConfig) -> int | None:
    """The run's processes, ``devices`` x ``num_nodes`` as Lightning counts them: an int, a list of ids (its length),
    or ``"auto"``/-1/a string with a named ``accelerator`` (that accelerator's devices here, Lightning's
    ``Accelerator.auto_device_count``/``parse_devices``). None where only the built trainer knows
    (``accelerator=auto`` with such devices, or devices the accelerator refuses)."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from lightning.pytorch.accelerators import AcceleratorRegistry

    devices, nodes = t.get("devices", "auto"), int(t.get("num_nodes") or 1)
    if OmegaConf.is_list(devices):
        devices = list(devices)
    if isinstance(devices, int) and not isinstance(devices, bool) and devices > 0:
        return devices * nodes
    if isinstance(devices, list):
        return len(devices) * nodes
    name = {"gpu": "cuda"}.get(str(t.get("accelerator", "auto")), str(t.get("accelerator", "auto")))
    if name not in AcceleratorRegistry:
        return None
    accelerator = type(AcceleratorRegistry.get(name))
    try:
        found = accelerator.auto_device_count() if devices == "auto" else accelerator.parse_devices(devices)
    except (ValueError, TypeError, MisconfigurationException):
        return None
    return (found if isinstance(found, int) else len(found)) * nodes


def steps_from_epochs(cfg: DictConfig, dm) -> DictConfig:
    """``cfg`` with its epoch keys (``max_epochs``, ``limit_train_batches``, ``val_check_interval`` as a fraction,
    ``check_val_every_n_epoch``, ``limit_val_batches`` as a fraction) rewritten for the training data ``dm`` (set
    up), each rewrite logged in one line on rank 0 (the table: docs/scaling.md, "Steps are the unit"). Steps an
    epoch: ``ceil(batches / accumulate_grad_batches)`` of one of :func:`world_size` ranks' batches. What the data
    side keeps is recorded as config keys: ``data_epoch_batches`` (an epoch's batches, when fewer than all) and
    ``data_val_examples`` (the validation examples kept). Raises: ConfigError for a value out of range or an epoch
    key with no step equivalent."""
    t = cfg.trainer
    check_epoch_values(t)
    keys = ("max_epochs", "limit_train_batches", "val_check_interval", "check_val_every_n_epoch", "limit_val_batches")
    given = {k: t.get(k) for k in keys}
    epochs, limit, interval, every = (given[k] for k in keys[:4])
    by_epochs = epochs is not None and epochs != -1  # checked: an int >= 1
    limited = isinstance(limit, int) or (isinstance(limit, float) and limit < 1)  # an int 1 is one batch
    val_in_epochs = every is not None or isinstance(interval, float)
    val_fraction = given["limit_val_batches"]
    val_fraction = val_fraction if isinstance(val_fraction, float) and 0 < val_fraction < 1 else None
    if not (by_epochs or limited or val_in_epochs) and val_fraction is None:
        return cfg
    cfg = cfg.copy()
    OmegaConf.set_struct(cfg, False)
    t = cfg.trainer
    lines = []
    if by_epochs or limited or val_in_epochs:
        if (ranks := world_size(t)) is None:
            raise ConfigError(
                f"trainer.devices={t.get('devices')}: an epoch's optimizer steps count one process's share of the "
                f"batches, and with trainer.accelerator={t.get('accelerator')} the processes are known only once "
                "the trainer is built. Fix: trainer.devices=<count> (or a list of ids), or set the budget and the "
                "validation interval in optimizer steps (trainer.max_steps, trainer.val_check_interval)"
            )
        n = math.ceil(len(dm.train_dataloader().batch_sampler) / ranks)
        batches = n
        if limited:  # an int, or a fraction rounded down as Lightning does
            batches = min(n, limit if isinstance(limit, int) else int(n * limit))
            if batches < 1:
                raise ConfigError(
                    f"trainer.limit_train_batches={limit}: takes none of an epoch's {n} batches. "
                    f"Fix: trainer.limit_train_batches={1 / n:.3g} or more, or an int >= 1"
                )
            t.limit_train_batches = None  # else Lightning would end the one endless epoch after that many
            if batches < n:
                cfg.data_epoch_batches = batches
            lines.append(f"trainer.limit_train_batches={limit} -> data epochs of {batches} of their {n} batches")
        steps = math.ceil(batches / int(t.get("accumulate_grad_batches") or 1))
        per = f"{_n(steps, 'optimizer step')} an epoch of {_n(batches, 'batch', 'batches')}"
        if by_epochs:
            budget, max_steps = epochs * steps, t.get("max_steps")
            t.max_epochs = -1
            if max_steps is not None and 0 <= max_steps < budget:  # whichever comes first (Lightning)
                lines.append(
                    f"trainer.max_epochs={epochs} -> trainer.max_steps={max_steps}: {_n(epochs, 'epoch')} are "
                    f"{budget} optimizer steps ({per}), so trainer.max_steps={max_steps} ends the run first"
                )
            else:
                t.max_steps = budget
                lines.append(f"trainer.max_epochs={epochs} -> trainer.max_steps={budget} ({per})")
        if val_in_epochs:
            t.val_check_interval, why = _interval(interval, every, steps)
            t.check_val_every_n_epoch = None
            was = ", ".join(f"trainer.{k}={given[k]}" for k in ("val_check_interval", "check_val_every_n_epoch"))
            lines.append(f"{was} -> trainer.val_check_interval={t.val_check_interval} ({why}{per})")
    if val_fraction is not None:
        kept, total = dm.limit_val_examples(val_fraction)
        t.limit_val_batches = None  # the subset replaces Lightning's first batches
        cfg.data_val_examples = kept
        lines.append(
            f"trainer.limit_val_batches={val_fraction} -> validation on {kept} of {total} examples, evenly spread "
            "over their lengths"
        )
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    if not getattr(rank_zero_only, "rank", 0):  # every rank converts; one says so
        for line in lines:
            log.info("%s", line)
    return cfg


def _interval(interval, every: int | None, steps: int) -> tuple[int | str, str]:
    """The validation interval in optimizer steps for ``val_check_interval`` and ``check_val_every_n_epoch``
    ``every``, with ``steps`` optimizer steps an epoch, and what the console line adds about it ("" or a clause
    ending "; "). An int interval of an epoch or more falls at the epoch's end; a time stays a time with
    ``every`` 1 (Lightning: no alignment then). Raises: ConfigError when that is no fixed interval."""
    if not _number(interval):  # a time
        if every == 1:
            return interval, ""
        raise ConfigError(
            f"trainer.check_val_every_n_epoch={every}: counts epochs, and trainer.val_check_interval={interval} is a "
            "time. Fix: trainer.check_val_every_n_epoch=null"
        )
    k = max(1, int(steps * interval)) if isinstance(interval, float) else min(interval, steps)
    each = "every epoch" if every in (None, 1) else f"every {every} epochs"
    why = (
        f"{interval} optimizer steps are an epoch or more: at the end of {each}; "
        if isinstance(interval, int) and interval > steps
        else ""
    )
    if every is None or (every == 1 and steps % k == 0):
        return k, why
    if k == steps:  # once an epoch, at its end: every N epochs
        return every * steps, why
    inside = "each epoch" if every == 1 else f"one epoch in {every}"
    raise ConfigError(
        f"trainer.check_val_every_n_epoch={every}: with trainer.val_check_interval={interval} it validates every "
        f"{_n(k, 'optimizer step')}, in {inside} only (epochs of {_n(steps, 'optimizer step')}), which is no fixed "
        "interval in steps "
        f"(xformer counts steps). Fix: trainer.check_val_every_n_epoch=null and "
        f"trainer.val_check_interval=<optimizer steps> (e.g. {k}, or {every * steps} for {each})"
    )
