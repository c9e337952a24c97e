"""Resumable ``-m`` sweeps (docs/scaling.md, "Resuming a sweep"): :func:`plan_job` decides per job folder to
``skip``, ``resume``, ``run`` or ``refuse`` (a job :func:`ran` there with another config)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from xformer.config.checkpoint import flat, runtime_keys, under

from .checkpoints import last_checkpoint
from .record import FILE, Status, read_record

#: The configs recorded in the job folders when this invocation started (``{num: config}``).
RECORDED_FILE = ".xformer/recorded_configs.json"


@dataclass
class Plan:
    """What a sweep job does (``refuse`` with ``reason``; ``checkpoint``: the ``last.ckpt`` a resume continues)."""

    action: str
    checkpoint: Path | None = None
    reason: str | None = None


def comparable(cfg: DictConfig | dict, ignore: list[str]) -> dict:
    """The unresolved task config as flat ``{dotted key: value}`` without ``hydra`` and the ``ignore`` keys."""
    tree = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else cfg
    leaves = flat({k: v for k, v in tree.items() if k != "hydra"}, empty=True)
    return {k: v for k, v in leaves.items() if not under(k, ignore)}


def config_diff(recorded: dict, current: DictConfig | dict, ignore: list[str]) -> list[tuple[str, Any, Any]]:
    """``[(key, recorded, current)]`` for every key outside ``ignore`` that differs, sorted (``<absent>`` on a
    missing side). Missing vs ``null`` is no difference: an option added since with a ``null`` default leaves
    the job as it ran."""
    a, b, absent = comparable(recorded, ignore), comparable(current, ignore), "<absent>"
    pairs = [(k, a.get(k, absent), b.get(k, absent)) for k in sorted(set(a) | set(b))]
    return [(k, old, new) for k, old, new in pairs if old != new and (old, new) not in ((None, absent), (absent, None))]


def describe_diff(diff: list[tuple[str, Any, Any]], limit: int = 3) -> str:
    """``optim.lr: 0.001 (recorded) -> 0.002 (now), ...`` for the first ``limit`` differences."""
    parts = [f"{k}: {old!r} (recorded) -> {new!r} (now)" for k, old, new in diff[:limit]]
    more = f" and {len(diff) - limit} more keys" if len(diff) > limit else ""
    return ", ".join(parts) + more


def ran(job_dir: Path) -> bool:
    """A job trained in ``job_dir``: it holds ``metrics.json`` or a checkpoint."""
    return (Path(job_dir) / FILE).is_file() or any((Path(job_dir) / "checkpoints").glob("*.ckpt"))


def recorded_config(job_dir: Path) -> dict | None:
    """The unresolved config in ``<job_dir>/.hydra/config.yaml``, or None when no job :func:`ran` there."""
    path = job_dir / ".hydra" / "config.yaml"
    if not path.is_file() or not ran(job_dir):
        return None
    try:
        return OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception:  # an unreadable record is treated as a changed config
        return {"<unreadable>": str(path)}


def plan_job(cfg: DictConfig, out_dir: Path, recorded: dict | None) -> Plan:
    """What the job with config ``cfg`` and folder ``out_dir`` does, given the config ``recorded`` there."""
    if recorded is None:
        return Plan("run")
    if diff := config_diff(recorded, cfg, runtime_keys(cfg)):
        return Plan(
            "refuse",
            reason=f"hydra.sweep.dir: the folder {out_dir} holds a job with another config "
            f"({describe_diff(diff)}); give the sweep a new hydra.sweep.dir, or the recorded values",
        )
    record = read_record(out_dir)
    if record is not None and record.status == Status.FINISHED:
        return Plan("skip")
    last = last_checkpoint(out_dir)
    if cfg.get("mode", "train") == "train" and last.is_file():
        return Plan("resume", checkpoint=last)
    return Plan("run")


def recorded_for(sweep_dir: Path, num: int) -> dict | None:
    """The config recorded in job folder ``num`` when this invocation started."""
    try:
        return json.loads((sweep_dir / RECORDED_FILE).read_text()).get(str(num))
    except (OSError, ValueError):
        return None


def sweep_counts(sweep_dir: Path, recorded: dict, n_jobs: int) -> tuple[int, int, int]:
    """``(finished, resumable, new)`` among the ``n_jobs`` jobs of this command."""
    finished = resumable = 0
    for num in (n for n in recorded if int(n) < n_jobs):
        job = sweep_dir / num
        done = (rec := read_record(job)) is not None and rec.status == Status.FINISHED
        finished += done
        resumable += (not done) and last_checkpoint(job).is_file()
    return finished, resumable, n_jobs - finished - resumable
