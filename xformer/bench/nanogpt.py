"""Row 9: the training step of ``experiment=shakespeare_char_cpu`` (nanoGPT's CPU recipe), built as
``run.py`` builds it, against :class:`PlainGPT`, the same model in nanoGPT's layout with nanoGPT's AdamW
groups and the same clip, on one random batch (the method in full: ``docs/bench.md``, row 9).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import BenchConfig
from .timing import interleaved, median
from .training import optimize


class PlainBlock(nn.Module):
    """One GPT-2 block: ``x + c_proj(attn(ln_1 x))``, then ``x + mlp(ln_2 x)``; ``(B, T, D)`` in and out."""

    def __init__(self, d: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d, bias=False), nn.LayerNorm(d, bias=False)
        self.c_attn, self.attn_proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        B, T, D = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, self.n_heads, D // self.n_heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, D))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class PlainGPT(nn.Module):
    """nanoGPT's GPT in plain PyTorch: ``forward(idx (B, T)) -> logits (B, T, V)``; GPT-2 init."""

    def __init__(self, vocab: int, block_size: int, d: int, n_heads: int, n_layers: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block_size, d)
        self.blocks = nn.ModuleList(PlainBlock(d, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d, bias=False)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * n_layers) if name.endswith("_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx: Tensor) -> Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def run(cfg: BenchConfig) -> dict:
    """Measure row 9; returns the ``nanogpt_step`` section of ``bench.json``."""
    from hydra.utils import instantiate

    from xformer.data.shakespeare_char import NO_TOKEN
    from xformer.train.optim import build_optimizer

    from .overhead import compose

    pc = compose(["experiment=shakespeare_char_cpu"])  # the config run.py sees
    dev = cfg.device
    vocab, T, B = 65, int(pc.data.block_size), int(pc.data.batch_size)
    m, o = pc.model, pc.optim
    clip = float(pc.trainer.gradient_clip_val or 0.0)
    torch.manual_seed(cfg.seed)
    ours = instantiate(m, src_vocab_size=vocab, tgt_vocab_size=vocab, pad_id=NO_TOKEN).to(dev).train()
    ours_opt = build_optimizer(instantiate(o.optimizer), ours)
    ref = PlainGPT(vocab, T, int(m.d_model), int(m.n_heads), int(m.n_decoder_layers)).to(dev).train()
    inner = o.optimizer.optimizer
    decay = [p for p in ref.parameters() if p.dim() >= 2]
    no_decay = [p for p in ref.parameters() if p.dim() < 2]
    ref_opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": float(o.weight_decay)}, {"params": no_decay, "weight_decay": 0.0}],
        lr=float(o.lr),
        betas=tuple(inner.betas),
        eps=float(inner.eps),
        fused=bool(inner.fused),
    )
    g = torch.Generator().manual_seed(cfg.seed)
    batch = {"tgt": torch.randint(0, vocab, (B, T + 1), generator=g).to(dev)}
    ids = batch["tgt"]
    steps = {
        "xformer": lambda: optimize(
            ours, ours_opt, *ours.logits_and_labels(batch, NO_TOKEN, NO_TOKEN), clip, ignore_index=NO_TOKEN
        ),
        "plain": lambda: optimize(ref, ref_opt, ref(ids[:, :-1]), ids[:, 1:], clip),
    }
    repeats = 3 * cfg.repeats  # a step is short: more repeats than the other rows for a steady median
    ts = interleaved(steps, max(cfg.warmup, 3), repeats, dev)
    res = {
        name: {
            "step_ms": median(t) * 1e3,
            "tokens_per_s": B * T / median(t),
            "params": sum(p.numel() for p in model.parameters()),
        }
        for name, t, model in (("xformer", ts["xformer"], ours), ("plain", ts["plain"], ref))
    }
    return {
        "status": "ok",
        "config": {
            "preset": "experiment=shakespeare_char_cpu",
            "d_model": int(m.d_model),
            "n_heads": int(m.n_heads),
            "n_layers": int(m.n_decoder_layers),
            "block_size": T,
            "batch": B,
            "vocab": vocab,
            "grad_clip": clip,
            "repeats": repeats,
        },
        "contenders": res,
        "ratio": res["xformer"]["tokens_per_s"] / res["plain"]["tokens_per_s"],
    }
