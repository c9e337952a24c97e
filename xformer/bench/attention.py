"""Rows 5 and 6 (Vaswani et al. 2017, Table 1 and §4; the method in full: ``docs/bench.md``).

Row 5: one :class:`~xformer.model.attention.SelfAttention` layer over sequence length ``n`` by the
paths of :func:`_paths`: time (ms, interleaved medians), peak memory (MiB) and their log-log exponents.
Row 6: the same layer against ``model/mixer=lstm``'s LSTM and ``model/mixer=conv``'s convolution, and
the ``n`` where attention becomes the slower (Table 1: ``n = d``).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import torch

from xformer.model.attention import CausalAttention, SelfAttention
from xformer.model.linear_attention import LinearSelfAttention
from xformer.model.mixer import ConvMixer, LSTMMixer

from .config import BenchConfig
from .timing import fit_exponent, interleaved, median, rss_peak_bytes, time_once

TIME_FLOOR_S = 1e-3
MEM_FLOOR_B = 1 << 20
CLAIM_TABLE = [(1_000, "2 MB"), (10_000, "200 MB"), (100_000, "20 GB")]
"""The fp16 n×n score matrix sizes stated for n = 1 k, 10 k, 100 k (``claim_table`` of ``bench.json``)."""


def explicit_forward(mha: SelfAttention, x: torch.Tensor) -> torch.Tensor:
    """``mha(x)`` with the attention written out (scores and probabilities materialised)."""
    q, k, v = mha.project_qkv(x)
    scale = mha.d_head**-0.5 if mha.scale is None else mha.scale
    probs = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * scale, dim=-1)  # (B, H, n, n)
    return mha.merge_heads(torch.matmul(probs, v))


def _cuda_peak_bytes(fn) -> int:
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def _call(fn, x: torch.Tensor, bf16: bool = False):
    """A no-argument ``fn(x)`` under ``no_grad`` (and CUDA bf16 autocast when ``bf16``), to time."""

    def run():
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            return fn(x)

    return run


def _paths(d: int, h: int, device: str) -> dict:
    """Row 5's measured paths, built in a fixed order (after ``torch.manual_seed``): ``explicit``
    materialises the ``H × n × n`` scores, ``sdpa`` is the layer's fused forward, ``linear`` and
    ``linear_causal`` are ``model/mixer=linear``'s layer (Katharopoulos et al. 2020)."""
    mha = SelfAttention(d, h, d // h, dropout=0.0).to(device).eval()
    return {
        "explicit": lambda x: explicit_forward(mha, x),
        "sdpa": mha,
        "linear": LinearSelfAttention(d, h, d // h).to(device).eval(),
        "linear_causal": LinearSelfAttention(d, h, d // h, pattern=CausalAttention()).to(device).eval(),
    }


GLIBC_TUNABLES = "glibc.malloc.mmap_threshold=65536:glibc.malloc.trim_threshold=0"
"""Fixed malloc thresholds for the CPU memory worker: every block of 64 KiB or more is its own
mapping, returned to the OS when freed, so the peak RSS rise of a call is what the call held at once."""


def cpu_peak_memory(d: int, h: int, ns: list[int], seed: int, timeout: float = 900) -> dict:
    """Peak RSS rise (bytes) of each path at each ``n``, ``{path: [...]}`` (``None`` where not measurable)
    or ``{"error": msg}``, measured in a fresh subprocess with :data:`GLIBC_TUNABLES`."""
    env = {
        **os.environ,
        "GLIBC_TUNABLES": GLIBC_TUNABLES,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]),
    }
    args = json.dumps({"d": d, "h": h, "ns": ns, "seed": seed})
    code = "import sys; from xformer.bench.attention import _memory_main; _memory_main(sys.argv[1])"
    try:
        res = subprocess.run(
            [sys.executable, "-c", code, args], env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": "memory worker timed out"}
    if res.returncode != 0:
        return {"error": (res.stderr.strip().splitlines() or ["memory worker failed"])[-1][:200]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def _memory_main(arg: str) -> None:
    """Entry of the CPU memory worker (see :func:`cpu_peak_memory`); prints one JSON line."""
    a = json.loads(arg)
    torch.manual_seed(a["seed"])
    paths = _paths(a["d"], a["h"], "cpu")
    out: dict[str, list] = {p: [] for p in paths}
    warm = torch.randn(1, 8, a["d"])
    for f in paths.values():  # first calls touch one-time buffers (thread pools, kernels' tables)
        _call(f, warm)()
    for n in a["ns"]:
        x = torch.randn(1, n, a["d"])
        for name, f in paths.items():
            out[name].append(rss_peak_bytes(_call(f, x)))
    print(json.dumps(out))


def _adaptive_repeats(fns: dict, base: int, device: str, budget_s: float = 0.3, cap: int = 30) -> dict:
    """Interleaved timing with more repeats where a call is short (noise matters more there)."""
    for f in fns.values():  # warm-up (first calls pay one-time set-up)
        f()
    est = max(time_once(f, device) for f in fns.values())
    reps = max(base, min(cap, int(budget_s / max(est, 1e-6))))
    return interleaved(fns, warmup=0, repeats=reps, device=device)


def _fit(ns: list[int], ys: list, floor: float) -> tuple[float | None, list[int], float | None]:
    """Exponent over the upper half of the ``n`` range (points above ``floor``), and the local
    exponent of the last two points."""
    pts = [(n, y) for n, y in zip(ns, ys, strict=False) if y is not None and y >= floor]
    upper = pts[len(pts) // 2 :] if len(pts) >= 4 else pts
    last = fit_exponent([n for n, _ in pts[-2:]], [y for _, y in pts[-2:]])
    return fit_exponent([n for n, _ in upper], [y for _, y in upper]), [n for n, _ in upper], last


def run_cost(cfg: BenchConfig) -> dict:
    """Row 5; returns the ``attention`` section of ``bench.json``."""
    dev = cfg.device
    d, h = cfg.attn_d_model, cfg.attn_heads
    cuda = torch.device(dev).type == "cuda"
    torch.manual_seed(cfg.seed)
    paths = _paths(d, h, dev)
    rows: dict[str, dict[str, list]] = {p: {"time_ms": [], "peak_mb": []} for p in paths}
    done_n: list[int] = []
    notes: list[str] = []
    alive = list(paths)
    for n in cfg.attn_ns:
        x = torch.randn(1, n, d, device=dev)
        fns = {p: _call(f, x, cuda) for p, f in paths.items()}
        mem: dict[str, int | None] = {}
        for p in list(alive):  # a path that runs out of memory is dropped; the other goes on
            try:
                mem[p] = _cuda_peak_bytes(fns[p]) if cuda else None
            except torch.OutOfMemoryError as err:
                notes.append(f"{p}: out of memory at n={n} ({str(err).splitlines()[0][:100]})")
                alive.remove(p)
                torch.cuda.empty_cache()
        if not alive:
            break
        times = _adaptive_repeats({p: fns[p] for p in alive}, cfg.attn_repeats, dev)
        done_n.append(n)
        for p in rows:
            rows[p]["time_ms"].append(median(times[p]) * 1e3 if p in times else None)
            rows[p]["peak_mb"].append(mem[p] / 2**20 if mem.get(p) is not None else None)
    if not cuda and done_n:
        mem = cpu_peak_memory(d, h, done_n, cfg.seed)
        if "error" in mem:
            notes.append(f"CPU memory not measured: {mem['error']}")
        else:
            for p in rows:
                rows[p]["peak_mb"] = [None if b is None else b / 2**20 for b in mem.get(p, [None] * len(done_n))]
    for r in rows.values():
        for kind, key, floor in (("time", "time_ms", TIME_FLOOR_S * 1e3), ("memory", "peak_mb", MEM_FLOOR_B / 2**20)):
            r[f"{kind}_exponent"], r[f"{kind}_fit_n"], r[f"{kind}_exponent_last"] = _fit(done_n, r[key], floor)
    score_mb = [h * n * n * (2 if cuda else 4) / 2**20 for n in done_n]  # bf16 on CUDA, fp32 on CPU
    ratio = [None if m is None else m / sc for m, sc in zip(rows["explicit"]["peak_mb"], score_mb, strict=False)]
    return {
        "status": "ok",
        "config": {
            "d_model": d,
            "heads": h,
            "batch": 1,
            "pass": "forward, no_grad",
            "precision": "bf16 autocast" if cuda else "fp32",
            "min_repeats": cfg.attn_repeats,
            "memory_method": "torch.cuda.max_memory_allocated above the allocated baseline"
            if cuda
            else "peak RSS rise of one call (VmHWM after /proc/self/clear_refs) in a subprocess with "
            "fixed malloc thresholds (" + GLIBC_TUNABLES + ")",
            "fit": "least squares of log y on log n over the upper half of the n range, points "
            f">= {TIME_FLOOR_S * 1e3:g} ms / {MEM_FLOOR_B / 2**20:g} MiB; *_last: last two points",
        },
        "n": done_n,
        **rows,
        "score_matrices_mb": score_mb,
        "explicit_peak_over_scores": ratio,
        "claim_table": [
            {"n": n, "claimed": claimed, "fp16_nxn_bytes": 2 * n * n, "fp16_nxn_mb": 2 * n * n / 1e6}
            for n, claimed in CLAIM_TABLE
        ],
        "fp16_nxn_mb_at_n": [2 * n * n / 1e6 for n in done_n],
        "notes": notes,
    }


def _crossover(ns: list[int], ratio: list[float]) -> float | None:
    """First ``n`` where ``ratio`` (attention / LSTM time) reaches 1, interpolated in log-log."""
    for (n0, a), (n1, b) in itertools.pairwise(zip(ns, ratio, strict=True)):
        if a < 1.0 <= b:
            return n0 * (n1 / n0) ** (math.log(a) / (math.log(a) - math.log(b)))
    return None


def run_recurrence(cfg: BenchConfig) -> dict:
    """Row 6; returns the ``recurrence`` section of ``bench.json``."""
    dev = cfg.device
    d, h, b = cfg.rec_d, cfg.rec_heads, cfg.rec_batch
    torch.manual_seed(cfg.seed)
    causal = dict(d_model=d, n_heads=h, d_head=d // h, dropout=0.0, scale=True, pattern=CausalAttention())
    mods = {  # the model's own layers
        "attention": SelfAttention(d, h, d // h, dropout=0.0),
        "lstm": LSTMMixer().self_attention(**causal, pos_embeddings=None),
        "conv": ConvMixer().self_attention(**causal, pos_embeddings=None),
    }
    mods = {k: m.to(dev).eval() for k, m in mods.items()}
    ms: dict[str, list[float]] = {k: [] for k in mods}
    for n in cfg.rec_ns:
        x = torch.randn(b, n, d, device=dev)
        times = _adaptive_repeats({k: _call(m, x) for k, m in mods.items()}, cfg.rec_repeats, dev)
        for k in mods:
            ms[k].append(median(times[k]) * 1e3)
    att_ms, lstm_ms, conv_ms = ms["attention"], ms["lstm"], ms["conv"]
    ratio = [a / r for a, r in zip(att_ms, lstm_ms, strict=True)]
    cross = _crossover(cfg.rec_ns, ratio)
    if cross is not None:
        notes = []
    elif ratio[0] >= 1:
        notes = ["attention slower than the LSTM at every n"]
    else:
        notes = ["attention faster than the LSTM over the whole range (crossover beyond the largest n)"]
    return {
        "status": "ok",
        "config": {
            "d": d,
            "heads": h,
            "batch": b,
            "pass": "forward, no_grad",
            "precision": "fp32",
            "attention": "xformer MultiHeadAttention (projections + fused SDPA)",
            "recurrent": "model/mixer=lstm: RecurrentMixing(d) (torch.nn.LSTM(d, d), 1 layer, left to right)",
            "convolutional": f"model/mixer=conv: ConvMixing(d, kernel={mods['conv'].kernel}), causal",
            "repeats": cfg.rec_repeats,
        },
        "n": list(cfg.rec_ns),
        "attention_ms": att_ms,
        "lstm_ms": lstm_ms,
        "attention_over_lstm": ratio,
        "conv_ms": conv_ms,
        "attention_over_conv": [a / c for a, c in zip(att_ms, conv_ms, strict=True)],
        "crossover_n": cross,
        "claim_crossover_n": d,
        "macs_crossover_n": 2 * d,
        "attention_time_exponent": fit_exponent(cfg.rec_ns, att_ms),
        "lstm_time_exponent": fit_exponent(cfg.rec_ns, lstm_ms),
        "notes": notes,
    }
