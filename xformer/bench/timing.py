"""Timing helpers of the benchmark rows. Comparisons are *interleaved* (each repeat runs every contender
once, rotating which goes first, so a burst of load hits all alike) and use medians over repeats.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch


def sync(device: torch.device | str) -> None:
    """Wait for queued kernels on ``device`` (no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_once(fn: Callable[[], object], device: torch.device | str = "cpu") -> float:
    """Seconds one call of ``fn`` takes, device work included."""
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def interleaved(
    fns: dict[str, Callable[[], object]], warmup: int, repeats: int, device: torch.device | str = "cpu"
) -> dict[str, list[float]]:
    """``{name: [seconds per repeat]}``: each of ``fns`` timed ``repeats`` times, interleaved and rotated,
    after ``warmup`` untimed calls of each."""
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            out[name].append(time_once(fns[name], device))
    return out


def median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def fit_exponent(ns: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of ``log y`` on ``log n`` (the ``k`` of ``y ∝ n^k``); ``None`` with fewer
    than two positive points."""
    pts = [(n, y) for n, y in zip(ns, ys, strict=False) if y is not None and y > 0]
    if len(pts) < 2:
        return None
    return float(np.polyfit(*np.log(np.array(pts, dtype=float).T), 1)[0])


def loadavg() -> list[float]:
    """The 1/5/15-minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as fh:
        return int(re.search(rf"^{key}:\s+(\d+)\s+kB", fh.read(), re.M).group(1))


def rss_peak_bytes(fn: Callable[[], object]) -> int | None:
    """Peak resident memory newly touched by ``fn()`` (Linux): resets the kernel's high-water mark
    (``echo 5 > /proc/self/clear_refs``), then ``VmHWM`` after the call minus ``VmRSS`` before, in
    bytes (4 KiB pages; memory the C allocator reuses is not counted again). ``None`` where the
    reset is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return None
    base = _status_kb("VmRSS")
    fn()
    return max(0, _status_kb("VmHWM") - base) * 1024
