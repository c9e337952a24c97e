"""Positional schemes against their papers' formulas and defining properties."""

import math

import pytest
import torch

from xformer.model import ALiBi, RoPE, T5RelativeBias
from xformer.model.positional import alibi_slopes, sinusoid_table

# Press et al. 2022, §3: for H a power of two the slopes are 2^(-8/H), 2^(-16/H), ..., 2^(-8);
# otherwise the 2^k slopes of the nearest lower power of two followed by the odd-indexed
# (1st, 3rd, ...) slopes of the 2^(k+1) sequence. Written out as exponents of 2, by hand:
ALIBI_EXPONENTS = {
    1: [-8],
    2: [-4, -8],
    4: [-2, -4, -6, -8],
    6: [-2, -4, -6, -8, -1, -3],
    8: [-1, -2, -3, -4, -5, -6, -7, -8],
    12: [-1, -2, -3, -4, -5, -6, -7, -8, -0.5, -1.5, -2.5, -3.5],
    16: [-0.5 * i for i in range(1, 17)],
}


@pytest.mark.parametrize("heads", sorted(ALIBI_EXPONENTS))
def test_alibi_slopes_match_press_et_al(heads):
    expected = torch.tensor([2.0**e for e in ALIBI_EXPONENTS[heads]], dtype=torch.float64)
    torch.testing.assert_close(alibi_slopes(heads), expected, rtol=1e-12, atol=0)


def test_alibi_bias_is_minus_slope_times_distance():
    pos = torch.arange(5)
    bias = ALiBi(16, 2, 8).attn_bias(pos, pos)
    assert bias.shape == (2, 5, 5)
    assert bias[0, 4, 1].item() == pytest.approx(-(2**-4) * 3)
    assert bias[1, 2, 2].item() == 0


def test_sinusoid_table_is_section_3_5():
    table = sinusoid_table(50, 16, torch.float64)
    for pos in (0, 7, 49):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-12)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-12)


@pytest.mark.parametrize("k", [1, 5, 17])
def test_sinusoid_shift_is_a_linear_map(k):
    """§3.5: PE(pos + k) = M_k · PE(pos) with M_k block-diagonal 2×2 rotations independent of pos."""
    d = 16
    table = sinusoid_table(100, d, torch.float64)
    m = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        w = 1 / 10000 ** (2 * i / d)
        c, s = math.cos(k * w), math.sin(k * w)
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, s], [-s, c]], dtype=torch.float64)
    torch.testing.assert_close(table[:-k] @ m.T, table[k:], rtol=0, atol=1e-10)


def test_rope_scores_depend_only_on_relative_offset():
    rope = RoPE(32, 4, 8).double()
    q = torch.randn(1, 4, 1, 8, dtype=torch.float64)
    k = torch.randn(1, 4, 1, 8, dtype=torch.float64)
    scores = []
    for shift in (0, 3, 40):
        qm = rope.rotate(q, torch.tensor([5 + shift]))
        kn = rope.rotate(k, torch.tensor([2 + shift]))
        scores.append((qm * kn).sum(-1))
    torch.testing.assert_close(scores[0], scores[1], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(scores[0], scores[2], rtol=1e-10, atol=1e-12)
    other = (rope.rotate(q, torch.tensor([6])) * rope.rotate(k, torch.tensor([2]))).sum(-1)
    assert not torch.allclose(scores[0], other)


def test_rope_preserves_norms_and_rejects_odd_head_size():
    rope = RoPE(32, 4, 8)
    t = torch.randn(2, 4, 6, 8)
    torch.testing.assert_close(rope.rotate(t, torch.arange(6)).norm(dim=-1), t.norm(dim=-1))
    with pytest.raises(ValueError, match="even"):
        RoPE(28, 4, 7)


def test_t5_buckets():
    bi = T5RelativeBias(16, 2, 8, causal=False, num_buckets=32, max_distance=128)
    rel = torch.arange(-300, 301)
    b = bi.bucket(rel)
    assert b[rel == 0].item() == 0
    assert (b[(rel > 0)] >= 16).all() and (b[(rel < 0)] < 16).all()  # directions use separate halves
    small = torch.arange(1, 8)
    assert torch.equal(bi.bucket(-small), small)  # exact buckets for small offsets
    assert b.max().item() == 31 and bi.bucket(torch.tensor([-1000])).item() == 15  # saturation
    causal = T5RelativeBias(16, 2, 8, causal=True)
    assert (causal.bucket(torch.arange(0, 50)) == 0).all()  # future offsets collapse (masked anyway)
    past = causal.bucket(-torch.arange(0, 500))
    assert (past.diff() >= 0).all() and past.max().item() == 31
    assert causal.attn_bias(torch.arange(4), torch.arange(4)).shape == (2, 4, 4)
