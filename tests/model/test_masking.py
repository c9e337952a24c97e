"""Causality, padding and precision, for every positional scheme and attention pattern."""

import functools

import pytest
import torch

from xformer.model import (
    ALiBi,
    CausalAttention,
    DecoderOnly,
    EncoderDecoder,
    EncoderOnly,
    FullAttention,
    Learned,
    LocalAttention,
    NoPE,
    PostNorm,
    PreNorm,
    PreRMSNorm,
    RoPE,
    SandwichNorm,
    Sinusoidal,
    T5RelativeBias,
)
from xformer.train.module import TransformerLitModule

PES = {"sinusoidal": Sinusoidal, "learned": Learned, "rope": RoPE, "alibi": ALiBi, "t5": T5RelativeBias, "none": NoPE}
PATTERNS = {"full": FullAttention, "causal": CausalAttention, "local": functools.partial(LocalAttention, 3)}
V = 40


def small(cls, **kw):
    torch.manual_seed(0)
    args = dict(d_model=32, n_heads=4, ffn_ratio=2, n_encoder_layers=2, n_decoder_layers=2, dropout=0.0, max_len=64)
    args.update(kw)
    return cls(V, V, **args).double().eval()


def tokens(b, t, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, V, (b, t), generator=g)


@pytest.mark.parametrize("pe", PES)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_decoder_only_never_sees_the_future(pe, pattern):
    model = small(DecoderOnly, pe=PES[pe], attention=PATTERNS[pattern])
    x = tokens(2, 10)
    y = x.clone()
    y[:, 6:] = tokens(2, 4, seed=7)
    a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :6], b[:, :6], rtol=0, atol=1e-12)
    assert not torch.allclose(a[:, 6:], b[:, 6:])


@pytest.mark.parametrize("pe", PES)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_encoder_decoder_decoder_is_causal(pe, pattern):
    model = small(EncoderDecoder, pe=PES[pe], attention=PATTERNS[pattern])
    src, tgt = tokens(2, 8), tokens(2, 9, seed=3)
    tgt2 = tgt.clone()
    tgt2[:, 5:] = tokens(2, 4, seed=9)
    a, b = model(src, tgt), model(src, tgt2)
    torch.testing.assert_close(a[:, :5], b[:, :5], rtol=0, atol=1e-12)


@pytest.mark.parametrize("pe", PES)
def test_causal_encoder_blocks_future_and_full_encoder_does_not(pe):
    src = tokens(2, 8)
    src2 = src.clone()
    src2[:, -1] = (src2[:, -1] + 1 - 4) % (V - 4) + 4
    causal = small(EncoderOnly, pe=PES[pe], attention=CausalAttention)
    full = small(EncoderOnly, pe=PES[pe], attention=FullAttention)
    torch.testing.assert_close(causal(src)[:, :-1], causal(src2)[:, :-1], rtol=0, atol=1e-12)
    assert not torch.allclose(full(src)[:, 0], full(src2)[:, 0])


def test_local_encoder_sees_only_its_window():
    model = small(EncoderOnly, pe=Sinusoidal, attention=functools.partial(LocalAttention, 2), n_encoder_layers=1)
    src = tokens(1, 10)
    src2 = src.clone()
    src2[0, 9] = 4 if src[0, 9] != 4 else 5
    a, b = model(src), model(src2)
    torch.testing.assert_close(a[:, :8], b[:, :8], rtol=0, atol=1e-12)  # one layer: |i - 9| >= 2 unaffected
    assert not torch.allclose(a[:, 8], b[:, 8])


NORMS = {"post": PostNorm, "pre": PreNorm, "pre_rms": PreRMSNorm, "sandwich": SandwichNorm}


@pytest.mark.parametrize("pe", PES)
@pytest.mark.parametrize("norm", NORMS)
def test_appending_or_changing_padding_leaves_real_positions_unchanged(pe, norm):
    model = small(EncoderDecoder, pe=PES[pe], norm=NORMS[norm])
    src, tgt = tokens(2, 6), tokens(2, 5, seed=2)
    base = model(src, tgt)
    src_p = torch.cat([src, torch.zeros(2, 4, dtype=torch.long)], 1)
    tgt_p = torch.cat([tgt, torch.zeros(2, 3, dtype=torch.long)], 1)
    padded = model(src_p, tgt_p)  # masks derived from pad_id=0
    torch.testing.assert_close(padded[:, :5], base, rtol=1e-10, atol=1e-10)
    # different ids under an explicit mask must not matter either
    src_kpm = torch.cat([torch.zeros(2, 6, dtype=torch.bool), torch.ones(2, 4, dtype=torch.bool)], 1)
    tgt_kpm = torch.cat([torch.zeros(2, 5, dtype=torch.bool), torch.ones(2, 3, dtype=torch.bool)], 1)
    src_j = src_p.clone()
    src_j[:, 6:] = 7
    tgt_j = tgt_p.clone()
    tgt_j[:, 5:] = 9
    junk = model(src_j, tgt_j, src_key_padding_mask=src_kpm, tgt_key_padding_mask=tgt_kpm)
    torch.testing.assert_close(junk[:, :5], base, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("pe", PES)
def test_fully_padded_sequence_gives_finite_loss_and_grads(pe):
    model = small(EncoderDecoder, pe=PES[pe]).float().train()
    module = TransformerLitModule(model, optimizer=None, lr_lambda=None)
    src = tokens(2, 6)
    src[1] = 0  # the whole second source is padding
    tgt = torch.cat(
        [torch.ones(2, 1, dtype=torch.long), tokens(2, 4, seed=4), 2 * torch.ones(2, 1, dtype=torch.long)], 1
    )
    logits, labels = module.logits_and_labels({"src": src, "tgt": tgt})
    loss = module.loss(logits, labels, 0.1)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def _half_ok(dtype):
    try:
        a = torch.randn(4, 4, dtype=dtype)
        (a @ a).sum()
        torch.nn.functional.scaled_dot_product_attention(
            a[None, None], a[None, None], a[None, None], attn_mask=torch.ones(4, 4, dtype=torch.bool)
        )
        return True
    except RuntimeError:
        return False


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("pe", ["sinusoidal", "alibi", "t5", "rope"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_half_precision_forward_backward_is_finite(dtype, pe, pattern):
    if not _half_ok(dtype):
        pytest.skip(f"{dtype} matmul/SDPA not supported on this CPU")
    model = small(EncoderDecoder, pe=PES[pe], attention=PATTERNS[pattern]).float().train()
    src, tgt = tokens(3, 9), tokens(3, 7, seed=5)
    src[1, 5:] = 0
    src[2] = 0  # fully padded source
    tgt[0, 4:] = 0
    with torch.autocast("cpu", dtype=dtype):
        logits = model(src, tgt)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), tgt.flatten(), ignore_index=0)
    loss.backward()
    assert torch.isfinite(logits.float()).all() and torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.to(dtype)
    with torch.no_grad():
        out = model(src, tgt)
    assert torch.isfinite(out.float()).all()


@pytest.mark.parametrize("pe", PES)
def test_incremental_decoding_equals_full_forward(pe):
    model = small(EncoderDecoder, pe=PES[pe])
    src, tgt = tokens(2, 6), tokens(2, 7, seed=6)
    src[1, 4:] = 0
    mem = model.encode(src)
    full = model.decode(tgt, mem, memory_key_padding_mask=src == 0)
    cache = model.new_cache()
    steps = [model.decode(tgt[:, i : i + 1], mem, memory_key_padding_mask=src == 0, cache=cache) for i in range(7)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-9, atol=1e-9)
    lm = small(DecoderOnly, pe=PES[pe])
    cache = lm.new_cache()
    steps = [lm(tgt[:, i : i + 1], cache=cache) for i in range(7)]
    torch.testing.assert_close(torch.cat(steps, 1), lm(tgt), rtol=1e-9, atol=1e-9)
