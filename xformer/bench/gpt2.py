"""Row 8 (opt-in): a GPT-2-small-shaped :class:`xformer.model.DecoderOnly` training step (Radford et
al. 2019: 12 layers, ``d_model`` 768, 12 heads, vocabulary 50 257; Pre-LN, GELU, learned positions,
dropout 0) and its MFU, beside nanoGPT's published 40–50 % (the method in full: ``docs/bench.md``,
row 8). FLOPs per token ``6N + 12·L·H·Q·T`` (PaLM App. B, as nanoGPT's ``estimate_mfu``; position
embeddings excluded); peak as row 7.
"""

from __future__ import annotations

import torch

from xformer.model import GELUFFN, DecoderOnly, Learned, PreNorm

from .config import BenchConfig
from .mfu import matmul_peak_flops
from .timing import interleaved, median
from .training import optimize

NANOGPT_MFU = (0.40, 0.50)
"""nanoGPT's reported MFU range for GPT-2 small (124M) training on A100 GPUs."""


def build(cfg: BenchConfig) -> torch.nn.Module:
    """The GPT-2-small-shaped (or, in the quick preset, shrunken) :class:`DecoderOnly`."""
    g = cfg.gpt2
    return DecoderOnly(
        src_vocab_size=g["vocab"],
        tgt_vocab_size=g["vocab"],
        d_model=g["d_model"],
        n_heads=g["n_heads"],
        d_ff=4 * g["d_model"],
        n_decoder_layers=g["n_layers"],
        n_encoder_layers=0,
        dropout=0.0,
        max_len=cfg.gpt2_seq_len,
        pad_id=None,
        norm=PreNorm,
        pe=Learned,
        ffn=GELUFFN,
    )


def step_flops(model: torch.nn.Module, cfg: BenchConfig) -> float:
    """``(6N + 12·L·H·Q·T) · B·T`` for one training step (see the module docstring)."""
    g = cfg.gpt2
    pe = sum(p.numel() for p in model.decoder.pe.parameters())  # a lookup, not a matmul (nanoGPT excludes it)
    n = sum(p.numel() for p in model.decoder.parameters()) - pe + g["d_model"] * g["vocab"]
    q = g["d_model"] // g["n_heads"]
    t = cfg.gpt2_seq_len
    return (6 * n + 12 * g["n_layers"] * g["n_heads"] * q * t) * cfg.gpt2_batch * t


def run(cfg: BenchConfig, mfu_section: dict | None = None) -> dict:
    """Row 8; returns the ``gpt2`` section of ``bench.json``. The matmul peak is row 7's (``mfu_section``,
    same device, dtype and size) when that row ran, else measured here."""
    dev = cfg.device
    cuda = torch.device(dev).type == "cuda"
    torch.manual_seed(cfg.seed)
    model = build(cfg).to(dev).train()
    flops = step_flops(model, cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)
    fwd = torch.compile(model) if cfg.gpt2_compile else model
    g = torch.Generator().manual_seed(cfg.seed)
    ids = torch.randint(0, cfg.gpt2["vocab"], (cfg.gpt2_batch, cfg.gpt2_seq_len + 1), generator=g).to(dev)
    inp, tgt = ids[:, :-1], ids[:, 1:]

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
            logits = fwd(inp)
        optimize(model, opt, logits, tgt)

    warmup = max(cfg.warmup, 3) if cfg.gpt2_compile else cfg.warmup
    ts = interleaved({"step": step}, warmup, cfg.repeats, dev)["step"]
    step_s = median(ts)
    dtype = torch.bfloat16 if cuda else torch.float32
    if mfu_section and mfu_section.get("status") == "ok":
        peak = mfu_section["peak_tflops"] * 1e12
    else:
        peak = matmul_peak_flops(dev, cfg.mfu_matmul_n, dtype=dtype)
    return {
        "status": "ok",
        "config": {
            **cfg.gpt2,
            "seq_len": cfg.gpt2_seq_len,
            "batch": cfg.gpt2_batch,
            "compiled": cfg.gpt2_compile,
            "precision": "bf16 autocast" if cuda else "fp32",
            "params": sum(p.numel() for p in model.parameters()),
        },
        "step_ms": step_s * 1e3,
        "tokens_per_s": cfg.gpt2_batch * cfg.gpt2_seq_len / step_s,
        "flops_per_step": flops,
        "achieved_tflops": flops / step_s / 1e12,
        "peak_tflops": peak / 1e12,
        "peak_method": f"median {str(dtype).removeprefix('torch.')} {cfg.mfu_matmul_n}² matmul",
        "mfu": flops / step_s / peak,
        "nanogpt_mfu": list(NANOGPT_MFU),
    }
