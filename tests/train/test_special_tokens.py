"""No decoder emits PAD or BOS, and beam search with one beam is greedy decoding.

The models are random, with the output layer scaled up and the PAD and/or BOS rows of the output
layer copied (×1.2) from the ordinary tokens the model picks most, so PAD or BOS is the model's top
choice at many steps. The reference is a plain loop written here: re-run the full model on the prefix,
take the best token other than PAD and BOS, stop at EOS.
"""

from __future__ import annotations

import collections

import pytest
import torch

from xformer.model import DecoderOnly, EncoderDecoder, EncoderOnly, decoding
from xformer.train.module import TransformerLitModule

PAD, BOS, EOS = 0, 1, 2
V = 12
MAX_LEN = 10


def reference_greedy(model, src: torch.Tensor, max_len: int) -> tuple[list[list[int]], set[int]]:
    """Outputs of the reference loop, and which special ids were the raw argmax at some step."""
    outs, raw_top = [], set()
    for b in range(src.shape[0]):
        s = src[b : b + 1, : int((src[b] != PAD).sum())]
        prefix, out = [BOS], []
        for _ in range(max_len):
            logits = model(s, torch.tensor([prefix]))[0, -1]
            if int(logits.argmax()) in (PAD, BOS):
                raw_top.add(int(logits.argmax()))
            allowed = [i for i in range(logits.shape[0]) if i not in (PAD, BOS)]
            tok = allowed[int(logits[allowed].argmax())]
            if tok == EOS:
                break
            out.append(tok)
            prefix.append(tok)
        outs.append(out)
    return outs, raw_top


def special_topped_model(cls, seed: int, specials: tuple[int, ...], **kw):
    """A random ``cls`` model whose output rows for ``specials`` beat its favourite ordinary tokens
    (the ones it predicts most often on random inputs)."""
    torch.manual_seed(seed)
    model = cls(
        V, V, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, dropout=0.0, tie_embeddings=False, **kw
    ).eval()
    with torch.no_grad():
        model.head.weight.mul_(10)
        probe = torch.randint(3, V, (16, 8))
        logits = model(probe, probe) if cls is EncoderDecoder else model(probe)
        logits[..., [PAD, BOS, EOS]] = float("-inf")
        counts = collections.Counter(logits.argmax(-1).flatten().tolist())
        for sp, (tok, _) in zip(specials, counts.most_common(len(specials)), strict=False):
            model.head.weight[sp] = 1.2 * model.head.weight[tok]
    return model


def sources(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, V, (6, 5), generator=g)
    src[:, -1] = EOS
    src[1, 3:] = PAD
    src[1, 2] = EOS
    return src


CASES = (
    [
        (
            seed,
            (PAD,),
        )
        for seed in range(3)
    ]
    + [(seed, (BOS,)) for seed in range(3, 6)]
    + [(seed, (PAD, BOS)) for seed in range(6, 9)]
    + [(seed, ()) for seed in range(9, 11)]
)


@pytest.mark.parametrize("seed,specials", CASES)
def test_greedy_and_beam_one_match_the_reference_and_skip_pad_and_bos(seed, specials):
    model = special_topped_model(EncoderDecoder, seed, specials)
    src = sources(seed)
    want, raw_top = reference_greedy(model, src, MAX_LEN)
    if specials:  # the case under test really happens: PAD/BOS is the model's own top choice
        assert raw_top, "precondition: no step where PAD or BOS is the raw top choice"
    greedy = decoding.greedy(model, src, BOS, EOS, PAD, MAX_LEN)
    assert greedy == want
    assert decoding.greedy_recompute(model, src, BOS, EOS, PAD, MAX_LEN) == want
    assert decoding.beam_search(model, src, BOS, EOS, PAD, MAX_LEN, beam_size=1, alpha=0.6) == want
    assert decoding.beam_search(model, src, BOS, EOS, PAD, MAX_LEN, beam_size=1, alpha=0.0) == want


@pytest.mark.parametrize("beam_size", [2, 3, 5])
@pytest.mark.parametrize("seed,specials", [(0, (PAD,)), (4, (BOS,)), (7, (PAD, BOS))])
def test_wider_beams_never_emit_pad_or_bos(seed, specials, beam_size):
    model = special_topped_model(EncoderDecoder, seed, specials)
    for hyp in decoding.beam_search(model, sources(seed), BOS, EOS, PAD, MAX_LEN, beam_size=beam_size):
        assert PAD not in hyp and BOS not in hyp and EOS not in hyp


def test_beam_search_rejects_zero_beams():
    model = special_topped_model(EncoderDecoder, 0, ())
    with pytest.raises(ValueError, match="beam_size=0"):
        decoding.beam_search(model, sources(0), BOS, EOS, PAD, MAX_LEN, beam_size=0)


@pytest.mark.parametrize(
    "seed,specials", [(0, (PAD,)), (3, (PAD,)), (7, (BOS,)), (4, (BOS,)), (2, (PAD, BOS)), (5, (PAD, BOS))]
)
def test_decoder_only_continuation_skips_pad_and_bos(seed, specials):
    model = special_topped_model(DecoderOnly, seed, specials)
    g = torch.Generator().manual_seed(seed)
    lens = torch.tensor([4, 2, 3])
    prompt = torch.full((3, 4), PAD)
    for b, n in enumerate(lens.tolist()):
        prompt[b, :n] = torch.randint(3, V, (n,), generator=g)
        prompt[b, n - 1] = BOS  # prefix-LM prompts end with the BOS separator
    want, raw_top = [], set()
    for b, n in enumerate(lens.tolist()):
        seq, out = prompt[b, :n].tolist(), []
        for _ in range(MAX_LEN):
            logits = model(torch.tensor([seq]))[0, -1]
            if int(logits.argmax()) in (PAD, BOS):
                raw_top.add(int(logits.argmax()))
            allowed = [i for i in range(V) if i not in (PAD, BOS)]
            tok = allowed[int(logits[allowed].argmax())]
            if tok == EOS:
                break
            out.append(tok)
            seq.append(tok)
        want.append(out)
    assert raw_top, "precondition: no step where PAD or BOS is the raw top choice"
    assert decoding.greedy_lm(model, prompt, lens, EOS, PAD, MAX_LEN, bos=BOS) == want


def test_tagger_predicts_only_ordinary_labels():
    model = special_topped_model(EncoderOnly, 3, (PAD, BOS))
    with torch.no_grad():
        model.head.weight[EOS] = 2.0 * model.head.weight[5]
    module = TransformerLitModule(
        model, optimizer=None, lr_lambda=lambda _s: 1.0, pad_id=PAD, bos_id=BOS, eos_id=EOS, detokenize=lambda ids: ids
    )
    src = sources(3)
    logits = model(src)
    assert set(logits.argmax(-1).flatten().tolist()) & {PAD, BOS, EOS}  # precondition
    allowed = torch.tensor([i for i in range(V) if i not in (PAD, BOS, EOS)])
    want_ids = allowed[logits[..., allowed].argmax(-1)]
    got = module.generate({"src": src}, logits)
    lens = (src != PAD).sum(1).tolist()
    assert got == [want_ids[b, : lens[b]].tolist() for b in range(src.shape[0])]


def test_ban_sets_only_the_named_ids_to_minus_infinity():
    scores = torch.arange(6.0).repeat(2, 1)
    out = decoding.ban(scores, 0, None, 4)
    assert out[:, [0, 4]].eq(float("-inf")).all() and torch.equal(out[:, [1, 2, 3, 5]], scores[:, [1, 2, 3, 5]])
    assert torch.equal(scores, torch.arange(6.0).repeat(2, 1))  # input untouched
    with pytest.raises(IndexError, match="special id 6"):
        decoding.ban(scores, 6)
