"""xformer's CPU dropout against its definition (Srivastava et al. 2014): each element is dropped
independently with probability p, survivors are scaled by 1/(1-p), the gradient is the same mask;
and the attention path that uses it against a float64 recomputation of eq. 1 with that mask."""

import math

import pytest
import torch
import torch.nn.functional as F

from xformer.model import SelfAttention
from xformer.model.attention import attention_with_dropout, combine_masks
from xformer.model.dropout import Dropout, dropout, keep_mask

N = 1 << 20


def _z(count: float, n: int, p: float) -> float:
    """How many standard deviations a Binomial(n, p) count is from its mean."""
    return abs(count - n * p) / math.sqrt(n * p * (1 - p))


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.9])
def test_drop_rate_and_scale(p):
    torch.manual_seed(1)
    x = torch.rand(N) + 0.5
    y = dropout(x, p)
    dropped = y == 0
    k = 1 - round(p * 65536) / 65536
    assert abs(k - (1 - p)) < 1e-5
    assert _z(float(dropped.sum()), N, p) < 5
    # survivors are exactly x / k
    torch.testing.assert_close(y[~dropped], x[~dropped] / k, rtol=1e-6, atol=0)


def test_every_lane_of_a_random_word_is_uniform():
    """Four masks come from one 64-bit word; each 16-bit lane (position mod 4) must drop at rate p.
    (A generator giving only non-negative int64 would leave the top lane almost never dropped.)"""
    torch.manual_seed(2)
    p = 0.25
    dropped = (dropout(torch.ones(N), p) == 0).view(-1, 4)
    for lane in range(4):
        assert _z(float(dropped[:, lane].sum()), N // 4, p) < 5, lane


def test_neighbouring_elements_are_independent():
    torch.manual_seed(3)
    p = 0.5
    d = (dropout(torch.ones(N), p) == 0).view(-1, 2)
    both = float((d[:, 0] & d[:, 1]).sum())
    assert _z(both, N // 2, p * p) < 5


def test_mean_is_preserved():
    torch.manual_seed(4)
    x = torch.full((N,), 3.0, dtype=torch.float64)
    assert abs(float(dropout(x, 0.2).mean()) - 3.0) < 5 * 3.0 * math.sqrt(0.2 / 0.8 / N)


def test_gradient_is_the_same_mask():
    torch.manual_seed(5)
    x = torch.randn(64, 33, requires_grad=True)
    y = dropout(x, 0.3)
    y.sum().backward()
    mask = y.detach() / x.detach()
    torch.testing.assert_close(x.grad, mask)


def test_seeded_and_varies():
    torch.manual_seed(6)
    a = keep_mask((1000,), 0.1, torch.float32)
    torch.manual_seed(6)
    b = keep_mask((1000,), 0.1, torch.float32)
    c = keep_mask((1000,), 0.1, torch.float32)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_noop_and_errors():
    x = torch.randn(10)
    assert dropout(x, 0.5, training=False) is x
    assert dropout(x, 0.0) is x
    for bad in (-0.1, 1.0, 1.5):
        with pytest.raises(ValueError, match="dropout p="):
            dropout(x, bad)
    m = Dropout(0.5).eval()
    assert torch.equal(m(x), x)
    assert isinstance(m, torch.nn.Dropout)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_dtypes(dtype):
    torch.manual_seed(7)
    x = torch.ones(4096, dtype=dtype)
    y = dropout(x, 0.5)
    assert y.dtype == dtype
    assert set(torch.unique(y).tolist()) == {0.0, 2.0}


@pytest.mark.parametrize("case", ["none", "padding", "causal", "bias"])
def test_attention_with_dropout_matches_float64_formula(case):
    b, h, tq, tk, d = 3, 2, 5, 5, 4
    torch.manual_seed(8)
    q, k, v = (torch.randn(b, h, t, d, dtype=torch.float64) for t in (tq, tk, tk))
    pad = torch.zeros(b, tk, dtype=torch.bool)
    pad[1, 3:] = True
    mask, causal = None, False
    if case == "padding":
        mask = combine_masks(pad, None, None, q.dtype)
    elif case == "causal":
        causal = True
    elif case == "bias":
        mask = combine_masks(pad, None, torch.randn(h, tq, tk), q.dtype)
    torch.manual_seed(9)
    out = attention_with_dropout(q, k, v, mask, causal, None, 0.25)
    torch.manual_seed(9)
    m = keep_mask((b, h, tq, tk), 0.25, torch.float64)
    s = q @ k.transpose(-1, -2) / math.sqrt(d)
    if case == "padding":
        s = s.masked_fill(pad[:, None, None, :], float("-inf"))
    if case == "causal":
        s = s.masked_fill(torch.ones(tq, tk, dtype=torch.bool).triu(1), float("-inf"))
    if case == "bias":
        s = s + mask
    ref = (torch.softmax(s, -1) * m) @ v
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)


def test_multihead_attention_training_uses_the_same_math_as_sdpa():
    """With dropout on, the training path's expected output equals SDPA without dropout: averaged
    over many masks, the outputs converge to the dropout-free attention."""
    torch.manual_seed(10)
    mha = SelfAttention(16, 2, 8, dropout=0.5).double()
    x = torch.randn(1, 6, 16, dtype=torch.float64)
    pad = torch.tensor([[False] * 4 + [True] * 2])
    mha.eval()
    want = mha(x, key_padding_mask=pad)
    mha.train()
    runs = 4000
    got = sum(mha(x, key_padding_mask=pad) for _ in range(runs)) / runs
    assert (got - want).abs().max() < 0.05
    # and a single training call is not the eval output (dropout is really applied)
    assert not torch.allclose(mha(x, key_padding_mask=pad), want)


def test_f_dropout_is_used_under_torch_compile_tracing(monkeypatch):
    """Under torch.compile (and on non-CPU devices) the call goes to F.dropout."""
    calls = []
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    monkeypatch.setattr(F, "dropout", lambda x, p, training: calls.append(p) or x)  # noqa: ARG005 - F.dropout's names
    dropout(torch.ones(3), 0.2)
    assert calls == [0.2]
