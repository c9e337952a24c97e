"""Timing helpers shared by the benchmark rows.

Every comparison is *interleaved*: after warm-up, repeat ``r`` times "run each contender once",
rotating which contender goes first, so a burst of load from other processes hits all contenders
alike; each contender's figure is the median of its repeats. Ratios are taken between those medians.
"""

from __future__ import annotations

import functools
import math
import os
import re
import statistics
import time
from collections.abc import Callable

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
    """Time each of ``fns`` ``repeats`` times, interleaved and rotated, after ``warmup`` untimed calls.

    Returns:
        ``{name: [seconds per repeat]}``.
    """
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    sync(device)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            out[name].append(time_once(fns[name], device))
    return out


def median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def fit_exponent(ns: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of ``log y`` against ``log n`` (the ``k`` of ``y ∝ n^k``); ``None`` with
    fewer than two usable (positive) points."""
    pts = [(math.log(n), math.log(y)) for n, y in zip(ns, ys, strict=False) if n > 0 and y is not None and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    if sxx == 0:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx


def loadavg() -> list[float] | None:
    """The 1/5/15-minute load averages (``None`` where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


class RSSPeak:
    """Peak resident memory of this process during a block, on Linux, from ``/proc/self/status``.

    Entering resets the kernel's high-water mark (``echo 5 > /proc/self/clear_refs``); leaving reads
    ``VmHWM`` and reports ``peak_bytes = VmHWM - VmRSS at entry``: the memory newly touched by the
    block at its peak, whatever allocated it (PyTorch tensors, kernel workspaces, the allocator's
    own slack). Freed memory that the C allocator keeps and reuses is *not* counted again, so small
    allocations (below glibc's ~128 KiB mmap threshold, or below what an earlier step freed) can be
    under-counted; page granularity is 4 KiB. ``available`` is False where the reset is not allowed.
    """

    def __init__(self) -> None:
        self.available = _hwm_supported()
        self.peak_bytes: int | None = None
        self._base = 0

    def __enter__(self) -> "RSSPeak":
        if self.available:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
            self._base = _status_kb("VmRSS")
        return self

    def __exit__(self, *exc) -> None:
        if self.available:
            self.peak_bytes = max(0, _status_kb("VmHWM") - self._base) * 1024


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as fh:
        m = re.search(rf"^{key}:\s+(\d+)\s+kB", fh.read(), re.M)
    return int(m.group(1)) if m else 0


@functools.cache
def _hwm_supported() -> bool:
    """Whether this kernel lets the peak RSS be reset (``/proc/self/clear_refs``) and read (``VmHWM``)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return _status_kb("VmHWM") > 0
    except OSError:
        return False
