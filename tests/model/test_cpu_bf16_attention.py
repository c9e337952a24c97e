"""Under CPU bf16-mixed autocast, eq. 1 runs in float32 on the bf16 projections (MultiHeadAttention.
cpu_bf16_in_float32), which the CPU profile asked for; the result stays bf16 for what follows."""

from __future__ import annotations

import math

import torch

from xformer.model.attention import SelfAttention


def test_attention_under_cpu_autocast_is_float32_math_on_the_bf16_projections():
    torch.manual_seed(0)
    attn = SelfAttention(32, 4, 8)
    x = torch.randn(2, 6, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attn(x)
        q, k, v = attn.project_qkv(x)  # bf16 under autocast
    assert out.dtype == torch.bfloat16 and q.dtype == torch.bfloat16
    # the reference: float32 softmax(QKᵀ/√d_k)V of the bf16 q, k, v, then the bf16 output projection
    ref = torch.softmax(q.float() @ k.float().transpose(-1, -2) / math.sqrt(8), -1) @ v.float()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = attn.merge_heads(ref.to(torch.bfloat16))
    torch.testing.assert_close(out.float(), ref.float(), rtol=0, atol=0)


def test_the_flag_off_keeps_autocasts_bf16_attention_and_both_train():
    torch.manual_seed(0)
    attn = SelfAttention(32, 4, 8)
    x = torch.randn(2, 6, 32, requires_grad=True)
    outs = {}
    for flag in (True, False):
        attn.cpu_bf16_in_float32 = flag
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = attn(x)
        out.float().square().mean().backward()
        outs[flag] = out.float()
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in attn.parameters())
        attn.zero_grad()
    # the two differ by bf16 rounding of the scores only
    assert 0 < (outs[True] - outs[False]).abs().max() < 0.05
    attn.cpu_bf16_in_float32 = True
    with torch.no_grad():
        full = attn(x)  # no autocast: plain float32, untouched by the flag
    assert full.dtype == torch.float32
