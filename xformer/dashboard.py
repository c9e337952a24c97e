"""``xformer dashboard``: a W&B workspace for one sweep, built as code with W&B's ``wandb-workspaces``.

Usage::

    xformer dashboard SWEEP_DIR [--entity E] [--project P] [--publish]
    xformer dashboard ENTITY/PROJECT/GROUP [--publish]

Four sections, shown for the sweep's W&B group only: Curves, Objective by setting, Parallel coordinates
and Samples (what each answers: docs/running.md, W&B). A sweep folder's facts are read offline from its
``multirun.yaml`` and the jobs' ``metrics.json``; ``ENTITY/PROJECT/GROUP`` reads the runs' configs through
the W&B API. ``SWEEP_DIR/wandb_dashboard.json`` (the specification) is always written; ``--publish`` (a W&B
key, online) saves the workspace and prints its URL.

Exit status: 0 done, 2 bad arguments or nothing to build from (one ``error:`` line).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from xformer.help import PlainHelpFormatter
from xformer.jobs.wandb_panels import swept_keys, top_level_key

TASK_METRICS = ("val/bleu", "val/exact_match")


class DashboardError(ValueError):
    """Nothing to build a dashboard from; :func:`main` prints it as one ``error:`` line (exit 2)."""


@dataclass
class SweepFacts:
    """What the workspace needs to know about a sweep."""

    project: str
    group: str
    swept: list[str]  # override keys, e.g. ["model.ffn_ratio", "seed"]
    objective: str = "val/loss"
    mode: str = "min"
    task_metric: str | None = None
    entity: str | None = None
    runs: list[str] = field(default_factory=list)


def facts_from_sweep_dir(sweep_dir: str | Path) -> SweepFacts:
    """Read a ``-m`` sweep folder (``multirun.yaml``, the jobs' ``metrics.json``).
    Raises: DashboardError: not a sweep folder, or no job logged to W&B."""
    root = Path(sweep_dir)
    if not (root / "multirun.yaml").is_file():
        raise DashboardError(f"{root}: no multirun.yaml; give the folder of a `python run.py ... -m` sweep")
    jobs = []
    for path in sorted(root.glob("*/metrics.json")):
        try:
            jobs.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    with_wandb = [j for j in jobs if (j.get("job") or {}).get("wandb")]
    if not with_wandb:
        raise DashboardError(f"{root}: no job logged to W&B (logger=wandb); nothing to show in a W&B workspace")
    first = with_wandb[0]
    wb = first["job"]["wandb"]
    metrics = set().union(*(j.get("metrics", {}) for j in jobs))
    objective = (first.get("objective") or {}).get("metric") or "val/loss"
    mode = (first.get("best") or {}).get("mode") or "min"
    project = ((first.get("config") or {}).get("logger") or {}).get("wandb", {}).get("project") or "xformer"
    return SweepFacts(
        project=str(project),
        group=str(wb.get("group") or ""),
        swept=swept_keys(root),
        objective=objective,
        mode=mode,
        task_metric=next((m for m in TASK_METRICS if m in metrics), None),
        runs=[j["job"]["wandb"].get("id") for j in with_wandb],
    )


def facts_from_wandb(path: str) -> SweepFacts:
    """Read ``ENTITY/PROJECT/GROUP`` through the W&B API (the runs' ``swept`` config key).
    Raises: DashboardError: malformed path, or no run in that group."""
    parts = path.split("/")
    if len(parts) != 3 or not all(parts):
        raise DashboardError(f"{path}: give a sweep folder or ENTITY/PROJECT/GROUP")
    entity, project, group = parts
    import wandb

    runs = list(wandb.Api().runs(f"{entity}/{project}", filters={"group": group}))
    if not runs:
        raise DashboardError(f"{path}: no W&B run in group {group!r}")
    cfg = runs[0].config
    summary_keys = set().union(*(set(r.summary.keys()) for r in runs))
    objective = (cfg.get("objective") or {}).get("metric", "val/loss")
    return SweepFacts(
        project=project,
        group=group,
        swept=list(cfg.get("swept") or []),
        objective=objective,
        mode=(cfg.get("objective") or {}).get("mode", "min"),
        entity=entity,
        task_metric=next((m for m in TASK_METRICS if m in summary_keys), None),
        runs=[r.id for r in runs],
    )


def build_workspace(facts: SweepFacts, entity: str):
    """The ``wandb_workspaces`` Workspace of the sweep (see the module docstring for its panels)."""
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    axes = [k for k in facts.swept if k != "seed"] or list(facts.swept)
    step = "trainer/global_step"
    band = {"groupby_aggfunc": "mean", "groupby_rangefunc": "minmax"}
    curves = []
    for metric in ["val/loss", *([facts.task_metric] if facts.task_metric else [])]:
        for key in axes or [None]:
            by = wr.Config(top_level_key(key)) if key else None
            title = f"{metric} by {key}" if key else metric
            curves.append(wr.LinePlot(title=title, x=step, y=[metric], groupby=by, **(band if by else {})))
    objective = []
    for key in axes:
        col = wr.Config(top_level_key(key))
        objective.append(
            wr.ScatterPlot(
                title=f"best {facts.objective} vs {key} (each run)", x=col, y=wr.SummaryMetric(facts.objective)
            )
        )
        objective.append(
            wr.BarPlot(
                title=f"best {facts.objective} by {key} (seed min–max)",
                metrics=[wr.SummaryMetric(facts.objective)],
                groupby=col,
                **band,
            )
        )
    columns = [
        wr.ParallelCoordinatesPlotColumn(metric=wr.Config(top_level_key(k)), display_name=k) for k in facts.swept
    ]
    columns.append(
        wr.ParallelCoordinatesPlotColumn(
            metric=wr.SummaryMetric(facts.objective), display_name=f"best {facts.objective}"
        )
    )
    sections = [
        ws.Section(name="Curves", panels=curves, is_open=True),
        ws.Section(name="Objective by setting", panels=objective, is_open=True),
        ws.Section(
            name="Parallel coordinates",
            panels=[
                wr.ParallelCoordinatesPlot(title="swept keys and the objective", columns=columns),
                wr.ParameterImportancePlot(with_respect_to=facts.objective),
            ],
            is_open=True,
        ),
        ws.Section(name="Samples", panels=[wr.WeavePanelSummaryTable(table_name="val/samples")], is_open=True),
    ]
    name = f"xformer {facts.group or facts.project}"[:120]
    runset = ws.RunsetSettings(filters=[ws.Metric("Group") == facts.group] if facts.group else "")
    return ws.Workspace(entity=entity, project=facts.project, name=name, sections=sections, runset_settings=runset)


def specification(workspace, facts: SweepFacts) -> dict:
    """The workspace as JSON: its ``facts``, every panel (``workspace``) and ``view``, what W&B stores."""
    import pydantic
    import wandb_workspaces.workspaces as ws

    out = {"facts": facts.__dict__, "workspace": json.loads(pydantic.TypeAdapter(ws.Workspace).dump_json(workspace))}
    try:  # the view as W&B stores it (what `--publish` uploads); a private method, hence optional
        out["view"] = json.loads(workspace._to_model().model_dump_json(by_alias=True))
    except Exception as err:  # a wandb-workspaces release without it: the readable form above remains
        out["view_error"] = f"{type(err).__name__}: {err}"[:300]
    return out


def main(argv: list[str] | None = None) -> int:
    """Run ``xformer dashboard``; returns the exit status (0 ok, 2 bad arguments)."""
    p = argparse.ArgumentParser(
        prog="xformer dashboard", description=__doc__.split("\n\n")[0], formatter_class=PlainHelpFormatter
    )
    p.add_argument("source", help="a -m sweep folder, or ENTITY/PROJECT/GROUP of W&B runs")
    p.add_argument("--entity", default=os.environ.get("WANDB_ENTITY"), help="W&B entity (default $WANDB_ENTITY)")
    p.add_argument("--project", default=None, help="W&B project (default: the runs' project)")
    p.add_argument("--publish", action="store_true", help="save the workspace to W&B (needs a key, online)")
    args = p.parse_args(argv)
    try:
        source = Path(args.source)
        facts = facts_from_sweep_dir(source) if source.is_dir() else facts_from_wandb(args.source)
    except DashboardError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.project:
        facts.project = args.project
    entity = args.entity or facts.entity or ""
    workspace = build_workspace(facts, entity or "ENTITY")
    spec = specification(workspace, facts)
    out = (source if source.is_dir() else Path.cwd()) / "wandb_dashboard.json"
    out.write_text(json.dumps(spec, indent=2, default=str))
    print(
        f"wrote {out} ({sum(len(s['panels']) for s in spec['workspace']['sections'])} panels, "
        f"swept: {', '.join(facts.swept) or 'none'}, objective: {facts.objective})"
    )
    from xformer.jobs.wandb_run import wandb_has_api_key

    online = os.environ.get("WANDB_MODE") not in ("offline", "disabled", "dryrun")
    if args.publish and entity and wandb_has_api_key() and online:
        workspace.save()
        print(f"published: {workspace.url}")
        return 0
    why = (
        "--entity (or WANDB_ENTITY) is not set"
        if not entity
        else "no W&B API key or W&B is offline"
        if args.publish
        else "--publish not given"
    )
    print(
        f"not published ({why}). The file is the workspace's specification (its sections and panels), for "
        f"W&B only: nothing in it is readable offline.\n"
        f"Next: 1. upload the runs: wandb sync {source}/*/wandb/offline-run-*\n"
        f"      2. publish the workspace: xformer dashboard {args.source} --entity {entity or '<entity>'} --publish\n"
        f"Offline, read the sweep with: xformer report {args.source}   (tables, curves.png, verdicts)"
    )
    return 0
