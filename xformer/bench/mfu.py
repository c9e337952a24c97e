"""Row 7: model FLOPs utilisation of row 1's xformer step (the method in full: ``docs/bench.md``, row 7):
FLOPs per step after PaLM (Chowdhery et al. 2022, App. B, :func:`step_flops`) / median step time / the
rate of a square matmul measured in the run (bf16 on a GPU, fp32 on a CPU, :func:`matmul_peak_flops`).
"""

from __future__ import annotations

import torch

from . import training
from .config import BenchConfig
from .models import build_xformer
from .timing import interleaved, median


def matmul_peak_flops(device: str, n: int, dtype=torch.bfloat16, repeats: int = 10) -> float:
    """Measured FLOP/s of an ``n × n`` by ``n × n`` matmul in ``dtype``."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    times = interleaved({"mm": lambda: torch.mm(a, b)}, warmup=3, repeats=repeats, device=device)["mm"]
    return 2 * n**3 / median(times)


def step_flops(cfg: BenchConfig) -> dict:
    """Model FLOPs of one row-1 training step (see the module docstring)."""
    s = cfg.size
    with torch.device("meta"):
        model = build_xformer(s)
    n_enc = sum(p.numel() for p in model.encoder.parameters())
    n_dec = sum(p.numel() for p in model.decoder.parameters())
    q = s.d_model // s.n_heads
    b, src, tgt = cfg.batch, cfg.seq_len, cfg.seq_len
    per_src = 6 * n_enc + 12 * s.n_layers * s.n_heads * q * src
    per_tgt = 6 * (n_dec + s.d_model * s.vocab) + 12 * s.n_layers * s.n_heads * q * (tgt + src)
    return {
        "flops_per_step": b * src * per_src + b * tgt * per_tgt,
        "n_encoder": n_enc,
        "n_decoder": n_dec,
        "output_layer": s.d_model * s.vocab,
        "flops_per_src_position": per_src,
        "flops_per_tgt_position": per_tgt,
    }


def run(cfg: BenchConfig, train_step: dict | None) -> dict:
    """Row 7: MFU of row 1's xformer step (and of the baselines) against a matmul peak measured in
    the same run: bf16 on a GPU (the step runs under bf16 autocast), fp32 on a CPU."""
    cuda = torch.device(cfg.device).type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    flops = step_flops(cfg)
    peak = matmul_peak_flops(cfg.device, cfg.mfu_matmul_n, dtype=dtype)
    if train_step is None or train_step.get("status") != "ok":
        train_step = training.run(cfg)  # row 1 did not run: measure it here
    step_s = train_step["contenders"]["xformer"]["step_ms"] / 1e3
    achieved = flops["flops_per_step"] / step_s
    out = {
        "status": "ok",
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        **flops,
        "step_ms": step_s * 1e3,
        "achieved_tflops": achieved / 1e12,
        "peak_tflops": peak / 1e12,
        "peak_method": f"median {str(dtype).removeprefix('torch.')} {cfg.mfu_matmul_n}x{cfg.mfu_matmul_n} matmul",
        "mfu": achieved / peak,
    }
    for name in ("torch", "x_transformers"):
        c = train_step["contenders"].get(name, {})
        if c.get("status") == "ok":
            out[f"mfu_{name}"] = flops["flops_per_step"] / (c["step_ms"] / 1e3) / peak
    return out
