"""model.d_qk: a query/key head width d_k apart from the value width d_v = d_head (Vaswani et al. 2017
§3.2.2 name both; Table 3 row B varies d_k alone, claim C11)."""

from __future__ import annotations

import math

import pytest
import torch

from xformer.errors import ConfigError
from xformer.model import DecoderOnly, EncoderDecoder, decoding
from xformer.model.attention import SelfAttention
from xformer.model.positional import RoPE

PAD, BOS, EOS = 0, 1, 2


def _reference(attn: SelfAttention, x: torch.Tensor, d_k: int, d_v: int, n_heads: int, n_kv: int) -> torch.Tensor:
    """Eq. 1 per head in float64 from the projection weights, written out without the module."""
    w, b = attn.in_proj.weight, attn.in_proj.bias
    rows = [n_heads * d_k, n_kv * d_k, n_kv * d_v]
    q, k, v = (x @ part_w.T + part_b for part_w, part_b in zip(w.split(rows), b.split(rows), strict=True))
    bsz, t, _ = x.shape
    q = q.view(bsz, t, n_heads, d_k).transpose(1, 2)
    k = k.view(bsz, t, n_kv, d_k).transpose(1, 2).repeat_interleave(n_heads // n_kv, dim=1)
    v = v.view(bsz, t, n_kv, d_v).transpose(1, 2).repeat_interleave(n_heads // n_kv, dim=1)
    out = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d_k), dim=-1) @ v
    return attn.out_proj(out.transpose(1, 2).reshape(bsz, t, n_heads * d_v))


@pytest.mark.parametrize(("d_k", "n_kv"), [(3, 4), (12, 4), (4, 2)])
def test_attention_with_a_separate_key_width_is_eq_1_scaled_by_d_k(d_k, n_kv):
    torch.manual_seed(0)
    attn = SelfAttention(32, 4, 8, n_kv_heads=n_kv, d_qk=d_k).double()
    x = torch.randn(2, 5, 32, dtype=torch.float64)
    assert attn.in_proj.weight.shape == (4 * d_k + n_kv * d_k + n_kv * 8, 32)
    torch.testing.assert_close(attn(x), _reference(attn, x, d_k, 8, 4, n_kv), rtol=1e-10, atol=1e-12)


def test_d_qk_changes_only_the_query_key_rows():
    """Table 3 row B: fewer key dimensions, the same value and output sizes."""
    base = DecoderOnly(50, 50, d_model=32, n_heads=4, n_decoder_layers=2, max_len=16)
    small = DecoderOnly(50, 50, d_model=32, n_heads=4, n_decoder_layers=2, max_len=16, d_qk=2)
    a = next(m for m in base.modules() if isinstance(m, SelfAttention))
    s = next(m for m in small.modules() if isinstance(m, SelfAttention))
    assert s.out_proj.weight.shape == a.out_proj.weight.shape
    size = lambda m: m.in_proj.weight.numel() + m.in_proj.bias.numel()  # noqa: E731
    per_layer = size(a) - size(s)
    assert per_layer == 2 * 4 * (8 - 2) * (32 + 1)  # W_q and W_k lose 4 heads x 6 rows (weights + bias)
    assert sum(p.numel() for p in base.parameters()) - sum(p.numel() for p in small.parameters()) == 2 * per_layer


def test_incremental_and_beam_decoding_match_full_recompute_with_d_qk():
    """The key/value cache holds keys of width d_k and values of width d_v."""
    torch.manual_seed(0)
    model = EncoderDecoder(30, 30, d_model=32, n_heads=4, n_encoder_layers=1, n_decoder_layers=2, dropout=0.0, d_qk=3)
    model.eval()
    src = torch.randint(4, 30, (4, 7))
    src[1, 5:] = PAD
    greedy = decoding.greedy(model, src, BOS, EOS, PAD, max_len=10)
    assert decoding.greedy_recompute(model, src, BOS, EOS, PAD, max_len=10) == greedy
    assert decoding.beam_search(model, src, BOS, EOS, PAD, max_len=10, beam_size=1, alpha=0.6) == greedy


def test_rope_rotates_the_query_key_width():
    model = DecoderOnly(40, 40, d_model=32, n_heads=4, n_decoder_layers=1, max_len=16, d_qk=6, pe=RoPE)
    assert model.decoder.pe.d_head == 6
    ids = torch.randint(4, 40, (2, 9))
    assert model(ids).shape == (2, 9, 40)
    with pytest.raises(ConfigError, match="rope needs an even head size"):
        DecoderOnly(40, 40, d_model=32, n_heads=4, n_decoder_layers=1, max_len=16, d_qk=5, pe=RoPE)


def test_d_qk_is_refused_by_a_mixer_without_queries_and_keys():
    from xformer.model.mixer import LSTMMixer

    with pytest.raises(ConfigError, match=r"model.d_qk=4: LSTMMixer has no separate query/key width"):
        DecoderOnly(40, 40, d_model=32, n_heads=4, n_decoder_layers=1, max_len=16, d_qk=4, mixer=LSTMMixer())
    with pytest.raises(ConfigError, match="model.d_qk=0: must be >= 1"):
        DecoderOnly(40, 40, d_model=32, n_heads=4, n_decoder_layers=1, max_len=16, d_qk=0)


def test_a_language_model_with_small_d_qk_learns():
    torch.manual_seed(0)
    model = DecoderOnly(12, 12, d_model=32, n_heads=4, n_decoder_layers=2, max_len=16, d_qk=2, dropout=0.0)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    seq = torch.arange(4, 12).repeat(4, 2)[:, :15]  # a periodic sequence: predictable from the last tokens
    first = None
    for _ in range(60):
        logits = model(seq[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 12), seq[:, 1:].reshape(-1))
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.3 * first
