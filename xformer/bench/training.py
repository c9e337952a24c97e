"""Row 1: one training step (forward + backward + optimizer) of xformer vs ``torch.nn.Transformer`` vs
x-transformers, same sizes, same batch, same loss, same optimizer, timed interleaved in one process.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import asdict, replace

import torch
import torch.nn.functional as F
from torch import Tensor

from . import models
from .config import BenchConfig
from .timing import interleaved, median


def make_batch(
    batch: int, seq_len: int, vocab: int, min_len_frac: float, seed: int, device: str = "cpu"
) -> dict[str, Tensor]:
    """``batch`` random sentence pairs, each side of a length uniform in ``[ceil(min_len_frac·seq_len),
    seq_len]`` (one pair at exactly ``seq_len``), right-padded with 0: ``src``, ``tgt_in``, ``tgt_out``
    ``(B, L)`` (BOS = 1 first), ``src_pad``/``tgt_pad`` (``True`` at padding), ``n_tokens`` (non-pad source
    + target-output tokens, as the training module counts them) and ``pad_fraction``."""
    g = torch.Generator().manual_seed(seed)
    lo = max(1, math.ceil(min_len_frac * seq_len))
    src_len, tgt_len = (torch.randint(lo, seq_len + 1, (batch,), generator=g) for _ in range(2))
    src_len[0] = tgt_len[0] = seq_len
    src_pad = torch.arange(seq_len)[None] >= src_len[:, None]
    src = torch.randint(4, vocab, (batch, seq_len), generator=g).masked_fill(src_pad, 0)
    tgt = torch.randint(4, vocab, (batch, seq_len + 1), generator=g)
    tgt[:, 0] = 1
    tgt = tgt.masked_fill(torch.arange(seq_len + 1)[None] > tgt_len[:, None], 0)
    tgt_in, tgt_out = tgt[:, :-1].contiguous(), tgt[:, 1:].contiguous()
    out = {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out, "src_pad": src_pad, "tgt_pad": tgt_in == 0}
    out = {k: v.to(device) for k, v in out.items()}
    out["n_tokens"] = int((~src_pad).sum()) + int((tgt_out != 0).sum())
    out["pad_fraction"] = 1.0 - out["n_tokens"] / (src.numel() + tgt_out.numel())
    return out


def optimize(model: torch.nn.Module, opt, logits: Tensor, labels: Tensor, clip: float | None = None, **ce) -> None:
    """One optimizer step on ``F.cross_entropy(logits (B, T, V), labels (B, T), **ce)`` in fp32, with the
    gradients of ``model`` clipped to norm ``clip`` when given."""
    loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), **ce)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()


def make_step(model: torch.nn.Module, batch: dict, device: str):
    """A closure running one step of ``model`` on ``batch``: cross-entropy with label smoothing 0.1, padding
    ignored, fused Adam (β 0.9/0.98, ε 1e-9, as ``conf/optim/adam.yaml``), bf16 autocast on CUDA."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
    cuda = torch.device(device).type == "cuda"

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
            logits = model(batch["src"], batch["tgt_in"], batch["src_pad"], batch["tgt_pad"])
        optimize(model, opt, logits, batch["tgt_out"], ignore_index=0, label_smoothing=0.1)

    return step


def run(cfg: BenchConfig, dropout: float | None = None, compiled: bool = False) -> dict:
    """Row 1 (rows 1b/1c: ``dropout`` for every contender, or every contender ``torch.compile``d with
    the compiling steps as warm-up); returns the ``train_step`` section of ``bench.json``."""
    dev = cfg.device
    size = cfg.size if dropout is None else replace(cfg.size, dropout=dropout)
    batch = make_batch(cfg.batch, cfg.seq_len, size.vocab, cfg.min_len_frac, cfg.seed, dev)
    notes: list[str] = []
    contenders: dict[str, dict] = {}
    steps = {}
    for name, build in models.CONTENDERS.items():
        if name == "x_transformers" and importlib.util.find_spec("x_transformers") is None:
            contenders[name] = {"status": "skipped", "note": "x-transformers not installed (pip install -e '.[bench]')"}
            notes.append("x-transformers column skipped: package not installed")
            continue
        torch.manual_seed(cfg.seed)
        model = build(size).to(dev).train()
        steps[name] = make_step(torch.compile(model) if compiled else model, batch, dev)
        contenders[name] = {"status": "ok", "params": sum(p.numel() for p in model.parameters())}
    warmup = max(cfg.warmup, 3) if compiled else cfg.warmup  # compiling (and recompiling once) is warm-up
    times = interleaved(steps, warmup, cfg.repeats, dev)
    for name, ts in times.items():
        med = median(ts)
        contenders[name].update(
            step_ms=med * 1e3, tokens_per_s=batch["n_tokens"] / med, step_ms_all=[t * 1e3 for t in ts]
        )
    ours = contenders["xformer"]["tokens_per_s"]
    ratios = {name: ours / c["tokens_per_s"] if c["status"] == "ok" else None for name, c in contenders.items()}
    return {
        "status": "ok",
        "config": {
            **asdict(size),
            "batch": cfg.batch,
            "seq_len": cfg.seq_len,
            "tokens_per_step": batch["n_tokens"],
            "pad_fraction": round(batch["pad_fraction"], 4),
            "precision": "bf16 autocast" if torch.device(dev).type == "cuda" else "fp32",
            "optimizer": "Adam(fused=True)",
            "loss": "cross-entropy, label smoothing 0.1, padding ignored",
            "compiled": compiled,
            "warmup": warmup,
            "repeats": cfg.repeats,
        },
        "contenders": contenders,
        "ratio_vs_torch": ratios["torch"],
        "ratio_vs_x_transformers": ratios["x_transformers"],
        "notes": notes,
    }
