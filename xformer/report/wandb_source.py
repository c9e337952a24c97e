"""Jobs from a W&B project (``--wandb ENTITY/PROJECT[:GROUP]``), as the driver logged them.

The driver tags each run with its overrides (``model.ffn_ratio=2``), logs the resolved config, the
parameter counts as ``model/params_<role>`` and the final metrics as ``final/<metric>`` in the run
summary. Only used when an API key is present; nothing here runs in the tests (no network).
"""

from __future__ import annotations

from pathlib import Path

from .aggregate import LIGHTNING_STEP_OFFSET, Job, parse_override

STATES = {"finished": "finished", "running": "running", "crashed": "failed", "failed": "failed", "killed": "failed"}
CURVE_KEYS = ("train/loss", "val/loss")


def load_wandb_jobs(spec: str) -> list[Job]:
    """All runs of ``ENTITY/PROJECT`` (only group ``GROUP`` when given) as :class:`Job`.

    Raises:
        ValueError: ``spec`` is not ``ENTITY/PROJECT[:GROUP]``.
        Exception: whatever ``wandb.Api`` raises (network, permissions); the caller reports it.
    """
    path, _, group = spec.partition(":")
    if path.count("/") != 1 or not all(path.split("/")):
        raise ValueError(f"--wandb {spec!r}: expected ENTITY/PROJECT[:GROUP]")
    import wandb  # imported here: slow, and only needed for this source

    jobs = []
    for run in wandb.Api().runs(path, filters={"group": group} if group else None):
        summary = dict(run.summary._json_dict) if hasattr(run.summary, "_json_dict") else dict(run.summary)
        overrides = dict(kv for kv in (parse_override(t) for t in run.tags) if kv is not None)
        nums = {k: v for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        metrics = {k.removeprefix("final/"): float(v) for k, v in nums.items() if k.startswith("final/")}
        params = {k.removeprefix("model/params_"): int(v) for k, v in nums.items() if k.startswith("model/params_")}
        history = {}
        for k in CURVE_KEYS:
            # Lightning's WandbLogger stores the trainer's row label (0-based, as in its CSV) in
            # `trainer/global_step`; W&B's own `_step` counts log calls. Both become updates done.
            rows = run.history(keys=[k, "trainer/global_step"], pandas=False)
            pts = [
                (r.get("trainer/global_step", r.get("_step")) + LIGHTNING_STEP_OFFSET, r[k])
                for r in rows
                if r.get(k) is not None
            ]
            if pts:
                history[k] = ([float(s) for s, _ in pts], [float(v) for _, v in pts])
        name, status = Path(f"wandb:{path}/{run.id}"), STATES.get(run.state, run.state)
        jobs.append(Job(name, status, overrides, dict(run.config), metrics=metrics, params=params, curves=history))
    return jobs
