"""Which kind of Hydra job this process runs: the one place that reads Hydra's run mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def sweep_dir(hydra_cfg: Any = None) -> Path | None:
    """The sweep folder (``hydra.sweep.dir``) when the job is part of a ``-m`` sweep, else None.
    ``hydra_cfg``: the job's Hydra config; None reads the current job's (None outside a Hydra job)."""
    if hydra_cfg is None:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():
            return None
        hydra_cfg = HydraConfig.get()
    if str(hydra_cfg.mode) != "RunMode.MULTIRUN":
        return None
    return Path(str(hydra_cfg.sweep.dir))
