"""Errors xformer raises for bad input, importable without torch or Lightning (``run.py`` checks the
config before it imports either), and the one-per-sweep config warning."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from omegaconf import DictConfig


class ConfigError(ValueError):
    """An invalid configuration; the message is one line naming the config key and the fix."""


def warn_once(message: str, cfg: DictConfig | None = None) -> None:
    """Log a config warning once per ``-m`` sweep (``XFORMER_WARNED`` carries what the sweep's check gave
    into its job processes, keyed by the sweep folder); a single run always warns."""
    import hashlib
    import os

    from omegaconf import OmegaConf

    from xformer.hydra_job import sweep_dir

    log = logging.getLogger("xformer")

    scope = ""
    if cfg is not None and "hydra" in cfg:  # a job's config checked by the sweep before it starts
        scope = str(OmegaConf.select(cfg, "hydra.sweep.dir", default="") or "")
    elif (folder := sweep_dir()) is not None:
        scope = str(folder)
    if not scope:
        log.warning("%s", message)
        return
    key = hashlib.sha1(f"{scope}\0{message}".encode()).hexdigest()[:12]
    seen = [k for k in os.environ.get("XFORMER_WARNED", "").split(",") if k]
    if key in seen:
        return
    os.environ["XFORMER_WARNED"] = ",".join([*seen, key])
    log.warning("%s", message)


@contextlib.contextmanager
def held_warnings(logger: str = "xformer") -> Iterator[None]:
    """Hold ``logger``'s records inside the block and log them after it, unless it raised (a refused config:
    its ``error:`` line is all that is printed)."""
    held: list[logging.LogRecord] = []

    def hold(record: logging.LogRecord) -> bool:
        held.append(record)
        return False

    log = logging.getLogger(logger)
    log.addFilter(hold)
    try:
        yield
    finally:
        log.removeFilter(hold)
    for record in held:
        log.handle(record)
