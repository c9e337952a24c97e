"""With ``model/init=gpt2`` the sinusoidal table enters at the token embeddings' scale (the mismatch
OpenNMT-py#1722 describes). Measured from the model's own embedding output: its positional part (output minus
the token part) against its token part, RMS over every position and width."""

from __future__ import annotations

import math

import pytest
import torch

from xformer.model import DecoderOnly, EncoderDecoder, Learned, Sinusoidal
from xformer.model.init import GPT2, Xavier


def parts(model, ids):
    """RMS of the token part and of the positional part of the decoder's embedding (no dropout)."""
    model.eval()
    tokens = model.tgt_embed(ids) * model.embed_scale
    out = model._embed(model.tgt_embed, model.decoder, ids)
    rms = lambda t: float(t.pow(2).mean().sqrt())  # noqa: E731
    return rms(tokens), rms(out - tokens)


@pytest.mark.parametrize("cls", [DecoderOnly, EncoderDecoder])
@pytest.mark.parametrize("scale_embeddings", [False, True])
def test_gpt2_init_puts_sinusoidal_positions_at_the_token_scale(cls, scale_embeddings):
    torch.manual_seed(0)
    model = cls(
        500,
        500,
        d_model=64,
        n_heads=4,
        n_encoder_layers=1,
        n_decoder_layers=1,
        max_len=256,
        init=GPT2(scale_embeddings=scale_embeddings),
        pe=Sinusoidal,
    )
    tok, pos = parts(model, torch.randint(0, 500, (8, 200)))
    assert pos / tok == pytest.approx(1.0, rel=0.1), (tok, pos)  # without the √D scale the ratio is far from 1
    want = 0.02 * (math.sqrt(64) if scale_embeddings else 1.0)
    assert pos == pytest.approx(want, rel=0.05)


def test_the_paper_scheme_and_learned_positions_are_unchanged():
    """Xavier (the paper): E·√D with E ~ N(0, 1/D) and the table at its own RMS 1/√2; GPT-2 learned
    positions are drawn N(0, std²) as before."""
    torch.manual_seed(0)
    model = DecoderOnly(500, 500, d_model=64, n_heads=4, n_decoder_layers=1, max_len=256, init=Xavier(), pe=Sinusoidal)
    _, pos = parts(model, torch.randint(0, 500, (8, 200)))
    assert pos == pytest.approx(1 / math.sqrt(2), rel=0.02)
    learned = DecoderOnly(500, 500, d_model=64, n_heads=4, n_decoder_layers=1, max_len=256, init=GPT2(), pe=Learned)
    tok, pos = parts(learned, torch.randint(0, 500, (8, 200)))
    assert pos == pytest.approx(0.02, rel=0.1) and tok == pytest.approx(0.02, rel=0.1)


def test_scaled_table_is_the_same_in_training_and_in_evaluation():
    """The training path (table rows) and the evaluation path (the formula) agree after scaling."""
    pe = Sinusoidal(16, 2, 8, max_len=32)
    pe.match_scale(0.02)
    x, pos = torch.zeros(1, 10, 16), torch.arange(10)
    pe.train()
    a = pe.embed(x, pos)
    pe.eval()
    torch.testing.assert_close(pe.embed(x, pos), a)
    assert float(a.pow(2).mean().sqrt()) == pytest.approx(0.02, rel=0.05)
