"""PNG plots of a sweep (matplotlib's Agg canvas; no pyplot, no display needed). Error bars are the 95 % t
interval of the mean over seeds, clipped to the metric's range, dashed and labelled where fewer than 3 seeds
make it.

- ``metric_<metric>_vs_<key>.png``: a metric against one swept key, a line per combination of the other keys.
- ``length_<metric>.png``: ``@Nx`` test metrics against the test-length multiple N, a line per group.
- ``params_<metric>.png``: a metric against the total parameter count, a point per group.
- ``curves.png``: ``train/loss`` (named label-smoothed where it is), ``train/nll`` where logged and ``val/loss``
  against step, a line per group: the mean over its seeds, with a band from the lowest to the highest seed.
- ``claim_<claim>_<n>.png`` (:func:`plot_claim`, shown next to its claim): each compared part's arms with
  their intervals, and Δ over the second half of training where a part was checked there.

Every function returns the written path, or ``None`` when there is nothing to draw.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from .aggregate import Group, Stat, Sweep, fmt_value, read_curves, value_sort_key
from .rules.evidence import bounds
from .stats import mean_interval

CURVE_KEYS = ("train/loss", "train/nll", "val/loss")
"""The curves drawn when logged: ``train/nll`` is the unsmoothed training loss, drawn beside ``train/loss``
(the objective, label-smoothed where ``loss.label_smoothing`` > 0) so the two are never confused."""
LENGTH_RE = re.compile(r"^(?P<base>.+)@(?P<n>\d+(?:\.\d+)?)x$")


def length_metrics(keys: list[str], base: str | None = None) -> tuple[str, dict[float, str]] | None:
    """The ``@Nx`` metric family of a length-generalisation sweep: ``(base, {N: key})`` with some N > 1
    (``base`` first when given, else test loss, BLEU, exact match, accuracy), or ``None``."""
    families: dict[str, dict[float, str]] = {}
    for k in keys:
        if m := LENGTH_RE.match(k):
            families.setdefault(m["base"], {})[float(m["n"])] = k
    order = [base] if base else ["test/loss", "test/bleu", "test/exact_match", "test/acc"]
    order += sorted(families)
    for b in order:
        fam = families.get(b or "")
        if fam and any(n > 1 for n in fam):
            return b, dict(sorted(fam.items()))
    return None


def slug(text: str) -> str:
    """A file-name-safe version of a metric or key (``val/loss`` → ``val-loss``)."""
    return re.sub(r"[^A-Za-z0-9_.@-]+", "-", text).strip("-")


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


FEW_SEEDS = 3
"""Intervals from fewer seeds than this are drawn dashed and labelled: two seeds give a t interval
12.7 standard errors wide, more a warning than a measurement."""


def ci_err(s: Stat | list[float], metric: str | None = None) -> tuple[float, float]:
    """``(below, above)`` the mean: the 95 % t interval of the mean of a group's finished seeds,
    clipped to the metric's range (a loss never below 0, exact match within [0, 1])."""
    values = s.values if isinstance(s, Stat) else list(s)
    m, lo, hi = mean_interval(values)
    b = bounds(metric) if metric else None
    if b is not None:
        lo, hi = max(lo, b[0]), min(hi, b[1])
    return m - lo, hi - m


def _errorbar(ax, points: list[tuple[float, float, tuple[float, float], int]], **kw) -> None:
    """Error bars at ``points`` ``(x, mean, (below, above), seeds)``, dashed and labelled where a point's
    interval comes from fewer than :data:`FEW_SEEDS` seeds."""
    xs, means, errs, _ = zip(*points, strict=True)
    container = ax.errorbar(xs, means, yerr=[[e[0] for e in errs], [e[1] for e in errs]], capsize=3, **kw)
    few = [(x, m, n) for x, m, _, n in points if n < FEW_SEEDS]
    if few:
        for bars in container[2]:
            bars.set_linestyle("--")
        for x, m, n in few:
            ax.annotate(f"n={n} < {FEW_SEEDS}", (x, m), fontsize="x-small", xytext=(4, -10), textcoords="offset points")


def plot_metric_vs_key(sweep: Sweep, metric: str, key: str, out: Path) -> Path | None:
    """``metric`` (mean ± std) against swept ``key``; one line per combination of the other swept keys."""
    others = [k for k in sweep.swept_keys if k != key]
    lines: dict[str, list[tuple[Any, float, float]]] = {}
    for g in sweep.groups:
        s = g.stat(metric)
        if s is None or s.n == 0:
            continue
        label = ", ".join(f"{k}={fmt_value(g.values[k])}" for k in others) or metric
        lines.setdefault(label, []).append((g.values[key], s.mean, ci_err(s, metric), s.n))
    if not lines:
        return None
    xs_all = sorted({p[0] for pts in lines.values() for p in pts}, key=value_sort_key)
    numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs_all)
    pos = {x: (float(x) if numeric else i) for i, x in enumerate(xs_all)}
    ax = Figure(figsize=(6, 4)).add_subplot()
    for label, pts in lines.items():
        pts.sort(key=lambda p: value_sort_key(p[0]))
        _errorbar(ax, [(pos[x], *rest) for x, *rest in pts], marker="o", label=label)
    if numeric and min(pos.values()) > 0 and max(pos.values()) / min(pos.values()) >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks([pos[x] for x in xs_all], [fmt_value(x) for x in xs_all])
    ax.set(xlabel=key, ylabel=metric, title=f"{metric} vs {key} (mean, 95 % interval over seeds)")
    ax.grid(alpha=0.3)
    if len(lines) > 1:
        ax.legend(fontsize="small")
    return _save(ax.figure, out / f"metric_{slug(metric)}_vs_{slug(key)}.png")


def plot_length(sweep: Sweep, base: str, lengths: dict[float, str], out: Path) -> Path | None:
    """``base@Nx`` against N for every group (length generalisation)."""
    ax = Figure(figsize=(6, 4)).add_subplot()
    for g in sweep.groups:
        pts = [(n, s.mean, ci_err(s, k), s.n) for n, k in lengths.items() if (s := g.stat(k)) is not None and s.n]
        if pts:
            _errorbar(ax, pts, marker="o", label=g.label())
    if not ax.get_lines():
        return None
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(lengths), [f"{n:g}x" for n in lengths])
    ax.set(xlabel="test length / training length", ylabel=base, title=f"{base} against test length")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _save(ax.figure, out / f"length_{slug(base)}.png")


def plot_metric_vs_params(sweep: Sweep, metric: str, out: Path) -> Path | None:
    """``metric`` against total parameters, one labelled point per group (needs two distinct sizes)."""
    pts = [
        (g.params["total"], g.stat(metric), g.label())
        for g in sweep.groups
        if g.params.get("total") and g.stat(metric) is not None and g.stat(metric).n
    ]
    if len({total for total, _, _ in pts}) < 2:
        return None
    ax = Figure(figsize=(6, 4)).add_subplot()
    for total, s, label in pts:
        _errorbar(ax, [(total, s.mean, ci_err(s, metric), s.n)], marker="o")
        ax.annotate(label, (total, s.mean), fontsize="x-small", xytext=(3, 3), textcoords="offset points")
    ax.set(xlabel="parameters (total)", ylabel=metric, title=f"{metric} vs parameter count")
    ax.grid(alpha=0.3)
    return _save(ax.figure, out / f"params_{slug(metric)}.png")


def seed_band(
    curves: list[tuple[list[float], list[float]]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """``(steps, mean, lowest, highest)`` over several (steps, values) curves: on their shared steps
    when they agree, else interpolated onto the union of steps inside the range all of them cover.
    ``None`` if empty."""
    curves = [(np.asarray(x, float), np.asarray(y, float)) for x, y in curves if len(x)]
    if not curves:
        return None
    if all(len(x) == len(curves[0][0]) and np.array_equal(x, curves[0][0]) for x, _ in curves):
        grid, ys = curves[0][0], np.array([y for _, y in curves])
    else:
        lo, hi = max(x.min() for x, _ in curves), min(x.max() for x, _ in curves)
        grid = np.unique(np.concatenate([x for x, _ in curves]))
        grid = grid[(grid >= lo) & (grid <= hi)]
        if not len(grid):
            return None
        ys = np.array([np.interp(grid, x[np.argsort(x)], y[np.argsort(x)]) for x, y in curves])
    return grid, ys.mean(axis=0), ys.min(axis=0), ys.max(axis=0)


def curve_name(key: str, smoothing: list[float]) -> str:
    """What a curve is: ``train/loss`` with label smoothing ε > 0 is the smoothed objective, above the
    NLL by construction (so above ``val/loss`` without any generalisation gap); ``train/nll`` is the
    unsmoothed training loss."""
    if key == "train/loss" and smoothing:
        eps = "/".join(f"{e:g}" for e in smoothing)
        return f"train/loss, label-smoothed (ε = {eps}): not comparable with val/loss"
    if key == "train/nll":
        return "train/nll (unsmoothed training loss)"
    return key


def plot_curves(sweep: Sweep, out: Path, keys: tuple[str, ...] = CURVE_KEYS) -> Path | None:
    """``keys`` against step (one panel each), one line per group: the mean over its seeds, with the
    band between its lowest and highest seed."""
    per_group: list[tuple[Group, dict[str, tuple]]] = []
    for g in sweep.groups:
        runs = [read_curves(j, keys) for j in g.jobs]
        bands = {k: b for k in keys if (b := seed_band([r[k] for r in runs if k in r])) is not None}
        if bands:
            per_group.append((g, bands))
    if not per_group:
        return None
    keys = tuple(k for k in keys if k == "val/loss" or any(k in b for _, b in per_group)) or keys
    eps_of_jobs = (((j.config or {}).get("loss") or {}).get("label_smoothing") for j in sweep.jobs)
    smoothing = sorted({float(e) for e in eps_of_jobs if isinstance(e, (int, float)) and e > 0})
    fig = Figure(figsize=(6 * len(keys), 4))
    axes = [fig.add_subplot(1, len(keys), i + 1) for i in range(len(keys))]
    for ax, k in zip(axes, keys, strict=True):
        for g, bands in per_group:
            if k in bands:
                x, mean, lo, hi = bands[k]
                # a marker on every point of a short curve: a single validation is otherwise invisible
                (line,) = ax.plot(x, mean, label=f"{g.label()} (n={g.n})", marker="o" if len(x) <= 3 else None)
                if g.n > 1:
                    ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
        if not ax.get_lines():  # e.g. fewer steps than trainer.log_every_n_steps
            ax.text(0.5, 0.5, f"no {k} points logged", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("step")
        name = curve_name(k, smoothing)
        ax.set_ylabel(name)
        ax.set_title(f"{name}\n(mean over seeds; band: lowest to highest seed)", fontsize="small")
        ax.grid(alpha=0.3)
    for ax in axes:
        if ax.get_lines():
            ax.legend(fontsize="small")
            break
    return _save(fig, out / "curves.png")


def plot_claim(result: Any, out: Path, index: int) -> Path | None:
    """One figure for a claim (:class:`xformer.report.rules.results.ClaimResult`): a panel per part that
    compared arms (each arm's mean with its interval; x: the seeds) and, when a part was checked over the
    second half of training, a panel of Δ against step with its intervals. ``None`` when nothing to draw."""
    arm_parts = [p for p in result.parts if any(a.values for a in p.arms)][:3]
    stab = next((p for p in result.parts if p.stability is not None and p.stability.points), None)
    panels = len(arm_parts) + (1 if stab is not None else 0)
    if not panels:
        return None
    fig = Figure(figsize=(4.6 * panels, 3.8))
    for k, part in enumerate(arm_parts):
        ax = fig.add_subplot(1, panels, k + 1)
        arms = [a for a in part.arms if a.values]
        for i, a in enumerate(arms):
            err = ci_err(a.values, part.metric) if a.n > 1 else (0.0, 0.0)
            _errorbar(ax, [(i, a.mean, err, a.n)], marker="o", color="tab:blue")
            ax.plot([i] * a.n, a.values, "x", color="tab:orange", alpha=0.7)
        names = [a.name + (f"\n({a.diverged} diverged)" if a.diverged else "") for a in arms]
        ax.set_xticks(range(len(arms)), names, fontsize="x-small", rotation=15)
        ax.set_xlim(-0.5, len(arms) - 0.5)
        ax.set_ylabel(part.metric or "")
        ax.set_title(f"{result.claim} {part.label} {part.test}: {part.verdict}", fontsize="small")
        ax.grid(alpha=0.3)
    if stab is not None:
        st = stab.stability
        ax2 = fig.add_subplot(1, panels, panels)
        xs = [p.step for p in st.points]
        ys = [p.delta for p in st.points]
        err = [
            [p.delta - p.lo if p.lo is not None else 0.0 for p in st.points],
            [p.hi - p.delta if p.hi is not None else 0.0 for p in st.points],
        ]
        ax2.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label="Δ (95 % interval)")
        ax2.axhline(0.0, color="k", linewidth=0.8)
        ax2.set_xscale("log", base=2)
        ax2.set_xticks(xs, [f"{x:g}" for x in xs])
        ax2.minorticks_off()
        ax2.legend(fontsize="x-small")
        curve = f"running best of {st.metric}" if st.running_best else st.metric
        ax2.set_title(f"{stab.label}: Δ over the second half ({curve}): {st.outcome}", fontsize="small")
        ax2.set_xlabel("step")
        ax2.grid(alpha=0.3)
    return _save(fig, out / f"claim_{slug(result.claim)}_{index}.png")


def write_plots(
    sweep: Sweep, out: Path, metrics: list[str], length: tuple[str, dict[float, str]] | None = None
) -> list[Path]:
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
