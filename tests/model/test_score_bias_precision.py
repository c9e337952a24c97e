"""Score biases and masks reach the attention in the dtype the attention computes in.

Under CPU ``bf16-mixed`` (and ``bf16-true``) the projections are bfloat16 but eq. 1 runs in float32
(``MultiHeadAttention.cpu_bf16_in_float32``); an ALiBi or T5 bias must then arrive in float32, not
rounded to bfloat16 first (ALiBi's ``-m·|i - j|`` reaches ``-320`` at 640 positions, where bf16
steps by 2). Under ``16-mixed`` the attention computes in float16 and the bias arrives in float16.

Each case records what :func:`torch.nn.functional.scaled_dot_product_attention` receives and
compares it with a float64 evaluation: the bias formula (ALiBi's slopes times the distance, T5's
table at its buckets), ``-inf`` at keys blocked by padding or a local window, and the attention
weights ``softmax(q·kᵀ/√d + bias)`` recomputed in float64 from the same ``q`` and ``k``.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.plugins.precision import HalfPrecision

from xformer.model import (
    ALiBi,
    CausalAttention,
    FullAttention,
    Learned,
    LocalAttention,
    NoPE,
    RoPE,
    SelfAttention,
    Sinusoidal,
    T5RelativeBias,
)

H, DH, T = 12, 8, 640  # 12 heads, 640 positions
SCHEMES = {
    "none": NoPE,
    "sinusoidal": Sinusoidal,
    "learned": Learned,
    "rope": RoPE,
    "alibi": ALiBi,
    "t5": T5RelativeBias,
}
PATTERNS = {
    "full": lambda: FullAttention(),
    "causal": lambda: CausalAttention(),
    "local": lambda: LocalAttention(window=96),
}
PRECISIONS = ["bf16-mixed", "bf16-true", "16-mixed"]


def _layer(scheme: str, pattern: str, precision: str):
    torch.manual_seed(11)
    causal = pattern == "causal"
    pe = SCHEMES[scheme](H * DH, H, DH, max_len=T, causal=causal)
    if scheme == "t5":
        torch.nn.init.normal_(pe.bias.weight, std=2.0)  # a trained-looking table (it starts at zero)
    layer = SelfAttention(H * DH, H, DH, pattern=PATTERNS[pattern](), pos_embeddings=pe).eval()
    if precision == "bf16-true":
        plugin = HalfPrecision("bf16-true")
        layer, pe = plugin.convert_module(layer), plugin.convert_module(pe)
    return layer, pe


def _context(precision: str):
    if precision == "bf16-mixed":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    if precision == "16-mixed":
        return torch.autocast("cpu", dtype=torch.float16)
    return torch.autocast("cpu", enabled=False)


def _bias64(pe, scheme: str) -> torch.Tensor | None:
    """The scheme's ``(H, T, T)`` score bias in float64 from its formula (``None`` for no bias)."""
    pos = torch.arange(T)
    if scheme == "alibi":
        return -pe.slopes.double()[:, None, None] * (pos[:, None] - pos[None, :]).abs().double()
    if scheme == "t5":
        return pe.bias.weight.double()[pe.bucket(pos[None, :] - pos[:, None])].permute(2, 0, 1)
    return None


def _run(scheme, pattern, precision, monkeypatch):
    layer, pe = _layer(scheme, pattern, precision)
    seen = {}
    sdpa = F.scaled_dot_product_attention

    def record(q, k, v, attn_mask=None, **kw):
        seen.update(q=q, k=k, mask=attn_mask, scale=kw.get("scale"), is_causal=kw.get("is_causal"))
        return sdpa(q, k, v, attn_mask=attn_mask, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", record)
    x = torch.randn(2, T, H * DH, dtype=torch.bfloat16 if precision == "bf16-true" else torch.float32)
    pad = torch.zeros(2, T, dtype=torch.bool)
    pad[1, T - 100 :] = True  # a padded row: the padding mask joins the bias
    with _context(precision):
        layer(x, key_padding_mask=pad)
    return seen, pe, pad


CASES = [(s, "local") for s in SCHEMES] + [(s, p) for s in ("alibi", "t5") for p in ("full", "causal")]


def _mark(scheme: str, pattern: str, precision: str):
    """Suite time: the biased schemes with a local window under each precision, and each biased
    pattern under bf16-mixed, run in the fast set; the rest is slow."""
    fast = scheme in ("alibi", "t5") and (pattern == "local" or precision == "bf16-mixed")
    return pytest.param(scheme, pattern, precision, marks=() if fast else pytest.mark.slow)


@pytest.mark.parametrize(("scheme", "pattern", "precision"), [_mark(*c, p) for c in CASES for p in PRECISIONS])
def test_bias_and_masks_reach_the_attention_in_its_compute_dtype(scheme, pattern, precision, monkeypatch):
    seen, pe, pad = _run(scheme, pattern, precision, monkeypatch)
    q, k, mask = seen["q"], seen["k"], seen["mask"]
    compute = {"bf16-mixed": torch.float32, "bf16-true": torch.float32, "16-mixed": torch.float16}[precision]
    assert q.dtype == compute
    assert mask is not None and mask.dtype in (torch.bool, compute)
    pos = torch.arange(T)
    blocked = pad[:, None, None, :].expand(2, 1, T, T)
    if pattern != "full":
        blocked = blocked | PATTERNS[pattern]().blocked(pos, pos)
    blocked = blocked & ~blocked.all(-1, keepdim=True)  # a fully blocked row is opened (combine_masks)
    bias = _bias64(pe, scheme)
    if bias is None:
        assert mask.dtype == torch.bool
        torch.testing.assert_close(mask.expand(2, 1, T, T), ~blocked)
        full = torch.zeros(2, 1, T, T, dtype=torch.float64).masked_fill(blocked, -math.inf)
    else:
        full = bias[None].masked_fill(blocked, -math.inf)
        # the bias arrives rounded once, to the compute dtype, from its exact value
        torch.testing.assert_close(mask.double(), full.to(compute).double(), rtol=0, atol=0)
        if compute == torch.float32:
            rel = (mask.double() - full).abs().nan_to_num(0) / full.abs().clamp(min=1)
            assert rel.max() <= 2**-23
    # the attention weights against a float64 recomputation from the same q and k
    s = DH**-0.5 if seen["scale"] is None else seen["scale"]
    w = torch.softmax(q.float() @ k.float().transpose(-2, -1) * s + mask_as_float(mask, compute), -1)
    # (the bias rounded once to the compute dtype: float32 here is within 2**-23 of exact, float16
    # is the precision 16-mixed asks for)
    w64 = torch.softmax(q.double() @ k.double().transpose(-2, -1) * s + full.to(compute).double(), -1)
    assert (w.double() - w64).abs().max() < 1e-5


def mask_as_float(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An SDPA mask as the additive float mask it stands for, in ``dtype`` (as the attention adds it)."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=torch.float32).masked_fill(~mask, -math.inf)
    return mask.to(dtype).float()
