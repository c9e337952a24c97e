"""Positional math stays in float32 under ``trainer.precision=bf16-true``.

Lightning's ``bf16-true`` plugin converts the model with ``module.to(torch.bfloat16)``; every scheme
(and a user's scheme built on the base class) must still compute its positions, angles and biases in
float32 and round only the result. Each scheme is converted by Lightning's own plugin and compared
with a float64 evaluation of its formula at every position up to ``model.max_len`` (the configured
default and a longer one); the allowed error is a few bf16 roundings of the result (bf16 keeps 8
significant bits: unit roundoff ``u = 2**-8``).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from lightning.pytorch.plugins.precision import HalfPrecision
from omegaconf import OmegaConf

from xformer.model import ALiBi, RoPE, T5RelativeBias
from xformer.model.positional import Learned, PositionalEncoding, Sinusoidal, alibi_slopes

U = 2.0**-8  # bf16 unit roundoff
DEFAULT_MAX_LEN = int(OmegaConf.load(Path(__file__).parents[2] / "conf/model/transformer.yaml").max_len)
MAX_LENS = [DEFAULT_MAX_LEN, 1024]


def _bf16(module: torch.nn.Module) -> torch.nn.Module:
    return HalfPrecision("bf16-true").convert_module(module)


def _rope64(t: torch.Tensor, pos: torch.Tensor, d_head: int, base: float = 10000.0) -> torch.Tensor:
    """Su et al. 2021 eq. 34 in float64: pair (2i, 2i+1) rotated by pos * base^(-2i/d_head)."""
    i = torch.arange(0, d_head, 2, dtype=torch.float64)
    ang = pos.double()[:, None] * base ** (-i / d_head)
    t = t.double()
    t1, t2 = t[..., 0::2], t[..., 1::2]
    return torch.stack((t1 * ang.cos() - t2 * ang.sin(), t1 * ang.sin() + t2 * ang.cos()), -1).flatten(-2)


@pytest.mark.parametrize("max_len", MAX_LENS)
def test_rope_angles_are_float32_under_bf16_true(max_len):
    d_head = 64
    pe = _bf16(RoPE(128, 2, d_head, max_len=max_len))
    pos = torch.arange(max_len)
    t = torch.randn(2, 2, max_len, d_head, generator=torch.Generator().manual_seed(0)).bfloat16()
    out = pe.rotate(t, pos)
    assert out.dtype == torch.bfloat16
    ref = _rope64(t, pos, d_head)
    # each output is t1*cos -/+ t2*sin: three bf16 roundings of terms bounded by |t1| + |t2|
    scale = (t.double()[..., 0::2].abs() + t.double()[..., 1::2].abs()).repeat_interleave(2, -1)
    err = (out.double() - ref).abs()
    assert (err <= 4 * U * scale).all(), f"max error {err.max():.4f} at bf16 rounding {U:.4f}"


@pytest.mark.parametrize("max_len", MAX_LENS)
@pytest.mark.parametrize("training", [True, False], ids=["table", "formula"])
def test_sinusoidal_under_bf16_true(max_len, training):
    d = 64
    pe = _bf16(Sinusoidal(d, 2, 32, max_len=max_len)).train(training)
    pos = torch.arange(max_len)
    out = pe.embed(torch.zeros(1, max_len, d, dtype=torch.bfloat16), pos)[0]
    assert out.dtype == torch.bfloat16
    p = pos.double()[:, None]
    inv = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ref = torch.stack(((p * inv).sin(), (p * inv).cos()), -1).flatten(-2)  # Vaswani et al. §3.5
    assert ((out.double() - ref).abs() <= 2 * U * ref.abs() + 1e-30).all()


@pytest.mark.parametrize("max_len", MAX_LENS)
@pytest.mark.parametrize("causal", [False, True])
def test_alibi_bias_under_bf16_true(max_len, causal):
    heads = 8
    pe = _bf16(ALiBi(64, heads, 8, max_len=max_len, causal=causal))
    pos = torch.arange(max_len)
    out = pe.attn_bias(pos, pos)
    ref = -alibi_slopes(heads)[:, None, None] * (pos[:, None] - pos[None, :]).abs().double()
    # one rounding of the result to bf16 (the attention casts the bias to the scores' dtype)
    assert ((out.to(torch.bfloat16).double() - ref).abs() <= U * ref.abs()).all()


@pytest.mark.parametrize("max_len", MAX_LENS)
@pytest.mark.parametrize("causal", [False, True])
def test_t5_buckets_under_bf16_true(max_len, causal):
    nb, md, heads = 32, 128, 4
    pe = T5RelativeBias(64, heads, 16, max_len=max_len, causal=causal, num_buckets=nb, max_distance=md)
    torch.nn.init.normal_(pe.bias.weight, generator=torch.Generator().manual_seed(1))
    pe = _bf16(pe)
    pos = torch.arange(max_len)
    out = pe.attn_bias(pos, pos)
    rel = (pos[None, :] - pos[:, None]).tolist()

    def bucket(r: int) -> int:  # Raffel et al. 2020 §2.1 / the T5 reference code, in float64
        n, off = nb, 0
        if not causal:
            n //= 2
            off = n if r > 0 else 0
            r = abs(r)
        else:
            r = max(-r, 0)
        exact = n // 2
        if r < exact:
            return off + r
        return off + min(n - 1, exact + int(math.log(r / exact) / math.log(md / exact) * (n - exact)))

    ids = torch.tensor([[bucket(r) for r in row] for row in rel])
    ref = pe.bias.weight.double()[ids].permute(2, 0, 1)
    assert torch.equal(out.double(), ref)


def test_learned_lookup_under_bf16_true():
    pe = _bf16(Learned(32, 2, 16, max_len=DEFAULT_MAX_LEN))
    pos = torch.arange(DEFAULT_MAX_LEN)
    out = pe.embed(torch.zeros(1, DEFAULT_MAX_LEN, 32, dtype=torch.bfloat16), pos)[0]
    assert torch.equal(out, pe.weight)  # the learned rows themselves, no arithmetic on positions


class _ScaledPositions(PositionalEncoding):
    """A user's scheme: adds ``pos * freq`` (a float buffer of frequencies) to every channel."""

    def __init__(self, d_model, n_heads, d_head, max_len=None, causal=False):
        super().__init__(d_model, n_heads, d_head, max_len, causal)
        self.register_buffer("freq", 1.0 / (1.0 + torch.arange(d_model, dtype=torch.float32)), persistent=False)

    def embed(self, x, pos):
        return x + (pos.to(self.freq.dtype)[:, None] * self.freq).to(x.dtype)


@pytest.mark.parametrize("precision", ["bf16-true", "16-true"])
def test_a_user_scheme_keeps_its_buffers_in_float32(precision):
    max_len, d = 1024, 16
    pe = HalfPrecision(precision).convert_module(_ScaledPositions(d, 2, 8, max_len=max_len))
    assert pe.freq.dtype == torch.float32
    pos = torch.arange(max_len)
    dtype = torch.bfloat16 if precision == "bf16-true" else torch.float16
    out = pe.embed(torch.zeros(1, max_len, d, dtype=dtype), pos)[0]
    ref = pos.double()[:, None] / (1.0 + torch.arange(d, dtype=torch.float64))
    u = 2.0**-8 if precision == "bf16-true" else 2.0**-11
    assert ((out.double() - ref).abs() <= 2 * u * ref.abs()).all()


def test_device_moves_and_upcasts_still_apply():
    pe = RoPE(32, 2, 16).double()
    assert pe.inv_freq.dtype == torch.float64
    pe = ALiBi(32, 2, 16).to(torch.float64)
    assert pe.slopes.dtype == torch.float64  # a conversion to more precision is not refused
    pe = ALiBi(32, 2, 16).to("meta")
    assert pe.slopes.device.type == "meta" and pe.slopes.dtype == torch.float32
