"""Attention against a float64 reference written from softmax(QKᵀ/√d_k + bias)V, for every mask."""

import math

import pytest
import torch

from xformer.model import (
    ALiBi,
    CausalAttention,
    CrossAttention,
    FullAttention,
    KVCache,
    LocalAttention,
    MultiHeadAttention,
    SelfAttention,
)
from xformer.model.attention import combine_masks

torch.manual_seed(0)


def reference(mha: MultiHeadAttention, x, mem, blocked_bhqk, bias, scale):
    """Per-head loops in float64, straight from eq. 1 of Vaswani et al. 2017."""
    h, dh = mha.n_heads, mha.d_head
    w, b = mha.in_proj.weight.double(), mha.in_proj.bias.double()
    inner = h * dh
    kv_src = x if mem is None else mem
    q = x.double() @ w[:inner].T + b[:inner]
    k = kv_src.double() @ w[inner : 2 * inner].T + b[inner : 2 * inner]
    v = kv_src.double() @ w[2 * inner :].T + b[2 * inner :]
    outs = []
    for head in range(h):
        sl = slice(head * dh, (head + 1) * dh)
        s = q[..., sl] @ k[..., sl].transpose(-1, -2)
        if scale:
            s = s / math.sqrt(dh)
        if bias is not None:
            s = s + bias[head].double()
        if blocked_bhqk is not None:
            s = s.masked_fill(blocked_bhqk[:, head], float("-inf"))
        outs.append(torch.softmax(s, -1) @ v[..., sl])
    o = torch.cat(outs, -1)
    return o @ mha.out_proj.weight.double().T + mha.out_proj.bias.double()


def make(d=16, h=4, scale=True, cls=SelfAttention, **kwargs):
    mha = cls(d, h, d // h, dropout=0.0, scale=scale, **kwargs).double()
    for p in mha.parameters():
        torch.nn.init.normal_(p, std=0.3)
    return mha.eval()


@pytest.mark.parametrize("scale", [True, False])
@pytest.mark.parametrize("case", ["none", "padding", "causal", "causal+padding", "local", "alibi+causal+padding"])
def test_attention_matches_float64_formula(case, scale):
    b, t = 3, 7
    x = torch.randn(b, t, 16, dtype=torch.float64)
    kpm = torch.zeros(b, t, dtype=torch.bool)
    kpm[1, 5:] = True
    kpm[2, 3:] = True
    pos = torch.arange(t)
    pattern, pe, bias, use_kpm = None, None, None, "padding" in case
    if "causal" in case:
        pattern = CausalAttention()
    if case == "local":
        pattern = LocalAttention(window=2)
    if "alibi" in case:
        pe = ALiBi(16, 4, 4)
        bias = pe.attn_bias(pos, pos).double()
    mha = make(scale=scale, pattern=pattern, pos_embeddings=pe)
    out = mha(x, key_padding_mask=kpm if use_kpm else None)
    blocked = torch.zeros(b, 4, t, t, dtype=torch.bool)
    if use_kpm:
        blocked |= kpm[:, None, None, :]
    if pattern is not None:
        blocked |= pattern.blocked(pos, pos)[None, None]
    ref = reference(mha, x, None, blocked, bias, scale)
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-9)


def test_cross_attention_with_memory_padding_matches_formula():
    mha = make(cls=CrossAttention)
    x = torch.randn(2, 4, 16, dtype=torch.float64)
    mem = torch.randn(2, 6, 16, dtype=torch.float64)
    kpm = torch.tensor([[False] * 6, [False] * 3 + [True] * 3])
    out = mha(x, mem, key_padding_mask=kpm)
    ref = reference(mha, x, mem, kpm[:, None, None, :].expand(2, 4, 4, 6), None, True)
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-9)


def test_unscaled_attention_differs_from_scaled():
    mha = make()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    scaled = mha(x)
    mha.scale = 1.0
    assert not torch.allclose(scaled, mha(x))


def test_fully_padded_row_is_finite_and_mask_has_no_large_fill():
    kpm = torch.ones(2, 5, dtype=torch.bool)
    mask = combine_masks(kpm, None, torch.zeros(1, 5, 5), torch.float16)
    assert torch.isfinite(mask).all()  # rows with nothing allowed are opened, never -inf everywhere
    mask = combine_masks(kpm, None, None, torch.float16)
    assert mask.dtype == torch.bool
    mha = make()
    out = mha(torch.randn(2, 5, 16, dtype=torch.float64), key_padding_mask=kpm)
    assert torch.isfinite(out).all()


def test_local_window_blocks_far_keys():
    pos = torch.arange(6)
    blocked = LocalAttention(window=2).blocked(pos, pos)
    assert not blocked[3, 2] and not blocked[3, 4] and blocked[3, 1] and blocked[3, 5]
    assert LocalAttention(window=2).causal().blocked(pos, pos)[3, 4]
    import typing

    from xformer.config_types import value_problem

    window = typing.get_type_hints(LocalAttention.__init__, include_extras=True)["window"]
    assert value_problem(0, window) == "must be >= 1" and value_problem(2, window) is None  # checked with the config
    assert FullAttention().blocked(pos, pos) is None


def test_self_and_cross_attention_share_the_projection_layout():
    assert isinstance(make(), MultiHeadAttention) and isinstance(make(cls=CrossAttention), MultiHeadAttention)
    assert make().in_proj.weight.shape == make(cls=CrossAttention).in_proj.weight.shape == (48, 16)


def test_kv_cache_writes_in_place_into_preallocated_buffers():
    cache = KVCache(capacity=5)
    k1, v1 = torch.randn(2, 3, 2, 4), torch.randn(2, 3, 2, 4)
    keys, values = cache.append(k1, v1)
    buffer = cache.k
    assert buffer.shape == (2, 3, 5, 4) and cache.size == 2
    torch.testing.assert_close(keys, k1)
    k2, v2 = torch.randn(2, 3, 1, 4), torch.randn(2, 3, 1, 4)
    keys, values = cache.append(k2, v2)
    assert cache.k is buffer and cache.size == 3  # no new allocation
    torch.testing.assert_close(keys, torch.cat((k1, k2), 2))
    torch.testing.assert_close(values, torch.cat((v1, v2), 2))
    cache.reorder(torch.tensor([1, 1]))
    torch.testing.assert_close(cache.keys, torch.cat((k1, k2), 2)[[1, 1]])


def test_kv_cache_grows_past_its_capacity_and_keeps_its_contents():
    cache = KVCache()
    ks = [torch.randn(1, 2, 1, 4) for _ in range(5)]
    for k in ks:
        cache.append(k, k)
    assert cache.size == 5 and cache.k.shape[2] >= 5
    torch.testing.assert_close(cache.keys, torch.cat(ks, 2))


@pytest.mark.parametrize("case", ["causal", "alibi", "local"])
def test_cached_self_attention_equals_full_attention(case):
    pattern = {"causal": CausalAttention(), "alibi": CausalAttention(), "local": LocalAttention(window=2).causal()}[
        case
    ]
    pe = ALiBi(16, 4, 4) if case == "alibi" else None
    mha = make(pattern=pattern, pos_embeddings=pe)
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    cache = KVCache(capacity=6)
    steps = torch.cat([mha(x[:, i : i + 1], cache=cache) for i in range(6)], 1)
    torch.testing.assert_close(steps, mha(x), rtol=1e-9, atol=1e-9)
