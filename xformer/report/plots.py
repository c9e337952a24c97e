"""PNG plots of a sweep (matplotlib's Agg canvas; no pyplot, no display needed).

- ``metric_<metric>_vs_<key>.png``: a metric against one swept key, error bars = std over seeds, one
  line per combination of the other swept keys.
- ``length_<metric>.png``: ``@Nx`` test metrics against the test-length multiple N, one line per group (C5).
- ``params_<metric>.png``: a metric against the total parameter count, one point per group (C1 at
  equal size).
- ``curves.png``: ``train/loss`` and ``val/loss`` against step from each job's ``csv/metrics.csv``,
  one line per group, the mean over its seeds.

Every function returns the written path, or ``None`` when there is nothing to draw.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .aggregate import Group, Sweep, fmt_value, read_curves, value_sort_key

CURVE_KEYS = ("train/loss", "val/loss")


def slug(text: str) -> str:
    """A file-name-safe version of a metric or key (``val/loss`` → ``val-loss``)."""
    return re.sub(r"[^A-Za-z0-9_.@-]+", "-", text).strip("-")


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def plot_metric_vs_key(sweep: Sweep, metric: str, key: str, out: Path) -> Path | None:
    """``metric`` (mean ± std) against swept ``key``; one line per combination of the other swept keys."""
    others = [k for k in sweep.swept_keys if k != key]
    lines: dict[str, list[tuple[Any, float, float]]] = {}
    for g in sweep.groups:
        s = g.stat(metric)
        if s is None or s.n == 0:
            continue
        label = ", ".join(f"{k}={fmt_value(g.values[k])}" for k in others) or metric
        lines.setdefault(label, []).append((g.values[key], s.mean, s.std or 0.0))
    if not lines:
        return None
    xs_all = sorted({x for pts in lines.values() for x, _, _ in pts}, key=value_sort_key)
    numeric = all(_is_num(x) for x in xs_all)
    pos = {x: (float(x) if numeric else i) for i, x in enumerate(xs_all)}
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for label, pts in lines.items():
        pts.sort(key=lambda p: value_sort_key(p[0]))
        ax.errorbar([pos[p[0]] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts],
                    marker="o", capsize=3, label=label)
    if numeric and min(pos.values()) > 0 and max(pos.values()) / min(pos.values()) >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks([pos[x] for x in xs_all], [fmt_value(x) for x in xs_all])
    ax.set_xlabel(key)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} vs {key} (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    if len(lines) > 1:
        ax.legend(fontsize="small")
    return _save(fig, out / f"metric_{slug(metric)}_vs_{slug(key)}.png")


def plot_length(sweep: Sweep, base: str, lengths: dict[float, str], out: Path) -> Path | None:
    """``base@Nx`` against N for every group (length generalisation, C5)."""
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    drawn = False
    for g in sweep.groups:
        pts = [(n, g.stat(k)) for n, k in lengths.items() if g.stat(k) is not None and g.stat(k).n]
        if pts:
            ax.errorbar([n for n, _ in pts], [s.mean for _, s in pts], yerr=[s.std or 0.0 for _, s in pts],
                        marker="o", capsize=3, label=g.label())
            drawn = True
    if not drawn:
        return None
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(lengths), [f"{n:g}x" for n in lengths])
    ax.set_xlabel("test length / training length")
    ax.set_ylabel(base)
    ax.set_title(f"{base} against test length")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, out / f"length_{slug(base)}.png")


def plot_metric_vs_params(sweep: Sweep, metric: str, out: Path) -> Path | None:
    """``metric`` against total parameters, one labelled point per group (needs two distinct sizes)."""
    pts = [(g.params["total"], g.stat(metric), g.label()) for g in sweep.groups
           if g.params.get("total") and g.stat(metric) is not None and g.stat(metric).n]
    if len({total for total, _, _ in pts}) < 2:
        return None
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for total, s, label in pts:
        ax.errorbar([total], [s.mean], yerr=[s.std or 0.0], marker="o", capsize=3)
        ax.annotate(label, (total, s.mean), fontsize="x-small", xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("parameters (total)")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} vs parameter count")
    ax.grid(alpha=0.3)
    return _save(fig, out / f"params_{slug(metric)}.png")


def mean_curve(curves: list[tuple[list[float], list[float]]]) -> tuple[np.ndarray, np.ndarray] | None:
    """Mean of several (steps, values) curves: on their shared steps when they agree, else
    interpolated onto the union of steps inside the range all of them cover. ``None`` if empty."""
    curves = [(np.asarray(x, float), np.asarray(y, float)) for x, y in curves if len(x)]
    if not curves:
        return None
    if all(len(x) == len(curves[0][0]) and np.array_equal(x, curves[0][0]) for x, _ in curves):
        return curves[0][0], np.mean([y for _, y in curves], axis=0)
    lo, hi = max(x.min() for x, _ in curves), min(x.max() for x, _ in curves)
    grid = np.unique(np.concatenate([x for x, _ in curves]))
    grid = grid[(grid >= lo) & (grid <= hi)]
    if not len(grid):
        return None
    ys = []
    for x, y in curves:
        order = np.argsort(x)
        ys.append(np.interp(grid, x[order], y[order]))
    return grid, np.mean(ys, axis=0)


def plot_curves(sweep: Sweep, out: Path, keys: tuple[str, ...] = CURVE_KEYS) -> Path | None:
    """``keys`` against step (one panel each), one line per group averaged over its seeds."""
    per_group: list[tuple[Group, dict[str, tuple[np.ndarray, np.ndarray]]]] = []
    for g in sweep.groups:
        runs = [read_curves(j, keys) for j in g.jobs]
        means = {k: m for k in keys if (m := mean_curve([r[k] for r in runs if k in r])) is not None}
        if means:
            per_group.append((g, means))
    if not per_group:
        return None
    fig = Figure(figsize=(6 * len(keys), 4))
    axes = [fig.add_subplot(1, len(keys), i + 1) for i in range(len(keys))]
    for ax, k in zip(axes, keys):
        for g, means in per_group:
            if k in means:
                ax.plot(*means[k], label=f"{g.label()} (n={g.n})")
        if not ax.get_lines():  # e.g. fewer steps than trainer.log_every_n_steps
            ax.text(0.5, 0.5, f"no {k} points logged", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("step")
        ax.set_ylabel(k)
        ax.set_title(f"{k} (mean over seeds)")
        ax.grid(alpha=0.3)
    for ax in axes:
        if ax.get_lines():
            ax.legend(fontsize="small")
            break
    return _save(fig, out / "curves.png")


def write_plots(sweep: Sweep, out: Path, metrics: list[str],
                length: tuple[str, dict[float, str]] | None = None) -> list[Path]:
    """Every plot of the sweep for ``metrics`` into folder ``out``; returns the written files."""
    paths: list[Path | None] = []
    for m in metrics:
        paths += [plot_metric_vs_key(sweep, m, k, out) for k in sweep.swept_keys]
    if metrics:
        paths.append(plot_metric_vs_params(sweep, metrics[0], out))
    if length is not None:
        paths.append(plot_length(sweep, length[0], length[1], out))
    paths.append(plot_curves(sweep, out))
    return [p for p in paths if p is not None]
