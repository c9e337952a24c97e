"""Opt-in rows (the method in full: ``docs/bench.md``): ``compile``, row 1's xformer step eager vs
``torch.compile(model)`` (compile time of the first step, Dynamo graph breaks, speed-up); ``ddp``,
``run.py trainer=ddp trainer.devices=N`` for each ``N`` in ``--ddp-devices`` with the overhead row's
data and model, a fixed per-device batch (weak scaling), ``efficiency = tokens/s(N) / (N · tokens/s(1))``.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch

from . import overhead
from .config import BenchConfig
from .models import build_xformer
from .timing import interleaved, median, time_once
from .training import make_batch, make_step


def run_compile(cfg: BenchConfig) -> dict:
    dev = cfg.device
    batch = make_batch(cfg.batch, cfg.seq_len, cfg.size.vocab, cfg.min_len_frac, cfg.seed, dev)
    torch.manual_seed(cfg.seed)
    eager = build_xformer(cfg.size).to(dev).train()
    torch.manual_seed(cfg.seed)
    base = build_xformer(cfg.size).to(dev).train()
    steps = {"eager": make_step(eager, batch, dev), "compiled": make_step(torch.compile(base), batch, dev)}
    breaks = None
    try:
        import torch._dynamo as dynamo

        explained = dynamo.explain(base)(batch["src"], batch["tgt_in"], batch["src_pad"], batch["tgt_pad"])
        breaks = int(explained.graph_break_count)
        reasons = sorted({str(b.reason).splitlines()[0][:160] for b in explained.break_reasons})
        dynamo.reset()
    except Exception as err:  # explain is best effort
        reasons = [f"explain failed: {type(err).__name__}: {err}"[:200]]
    t0 = time.perf_counter()
    compile_s = time_once(steps["compiled"], dev)
    times = interleaved(steps, cfg.warmup, cfg.repeats, dev)
    out = {
        "status": "ok",
        "compile_s": compile_s,
        "graph_breaks": breaks,
        "graph_break_reasons": reasons,
        "setup_s": time.perf_counter() - t0,
    }
    for name, ts in times.items():
        med = median(ts)
        out[name] = {"step_ms": med * 1e3, "tokens_per_s": batch["n_tokens"] / med}
    out["speedup"] = out["compiled"]["tokens_per_s"] / out["eager"]["tokens_per_s"]
    return out


def run_ddp(cfg: BenchConfig, data_root: Path | None) -> dict:
    if not cfg.ddp_devices:
        return {"status": "skipped", "note": "no device counts given (--ddp-devices 1,2,4)"}
    base, data_desc = overhead.run_overrides(cfg, data_root, cfg.ddp_steps)
    rows = []
    with tempfile.TemporaryDirectory(prefix="xformer-ddp-") as tmp:
        for n in cfg.ddp_devices:
            rec = overhead.run_py(["trainer=ddp", f"trainer.devices={n}", *base], Path(tmp) / f"ddp{n}")
            s = overhead.steady_state(rec["times"], rec["tokens"], cfg.ddp_skip)
            rows.append({"devices": n, "world_size": rec.get("world_size"), "wall_s": rec["wall_s"], **s})
    one = next((r["tokens_per_s"] for r in rows if r["devices"] == 1), None)
    for r in rows:
        r["speedup"] = r["tokens_per_s"] / one if one else None
        r["efficiency"] = r["tokens_per_s"] / (r["devices"] * one) if one else None
    return {
        "status": "ok",
        "config": {
            "data": data_desc,
            "model": asdict(cfg.size),
            "steps": cfg.ddp_steps,
            "skip": cfg.ddp_skip,
            "tokens_per_batch_per_device": cfg.overhead_tokens_per_batch,
            "overrides": base,
            "scaling": "weak (fixed per-device batch)",
        },
        "runs": rows,
    }
