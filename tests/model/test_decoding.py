"""Greedy and beam search: cache equivalence, beam 1 = greedy, beam beats greedy where it should."""

import math

import torch

from xformer.model import EncoderDecoder, decoding
from xformer.model.layers import StackCache

BOS, EOS, PAD = 1, 2, 0


class ScriptedModel:
    """A stand-in "model" whose next-token distribution depends only on the prefix so far.

    Step 0: token 5 (p=.6) or token 6 (p=.4). After 5 every token is equally unlikely (EOS .3);
    after 6, EOS has p=.99. Greedy takes 5 → best total .6·.3 = .18; beam 2 finds 6 EOS = .396.
    The prefix is kept in the cache (as keys) so beam search's reordering is exercised.
    """

    V = 8

    def encode(self, src, mask=None):  # noqa: ARG002 - the model's signature
        return torch.zeros(src.shape[0], 1, 1)

    def new_cache(self, capacity=None):
        return StackCache(1, capacity)

    def decode(self, tok, memory, memory_key_padding_mask=None, cache=None, tgt_key_padding_mask=None):  # noqa: ARG002
        hist = tok[:, None, :, None].float()
        keys, _ = cache.self_attn[0].append(hist, hist)
        prefix = keys[:, 0, 1:, 0].long()  # drop BOS
        probs = torch.full((tok.shape[0], self.V), 1e-3)
        for b in range(tok.shape[0]):
            p = prefix[b].tolist()
            if not p:
                probs[b, 5], probs[b, 6] = 0.6, 0.4
            elif p[-1] == 5:
                probs[b, EOS], probs[b, 3], probs[b, 4] = 0.3, 0.35, 0.35 - 1e-3
            elif p[-1] == 6:
                probs[b, EOS] = 0.99
            else:
                probs[b, EOS] = 0.9
        return torch.log(probs / probs.sum(-1, keepdim=True))[:, None, :]


def sequence_logprob(model, ids):
    cache, lp, tok = model.new_cache(), 0.0, torch.tensor([[BOS]])
    for t in ids + [EOS]:
        logp = model.decode(tok, None, cache=cache)[0, -1]
        lp += float(logp[t])
        tok = torch.tensor([[t]])
    return lp


def test_beam_finds_a_higher_scoring_sequence_than_greedy():
    model, src = ScriptedModel(), torch.ones(1, 3, dtype=torch.long)
    greedy = decoding.greedy(model, src, BOS, EOS, PAD, max_len=5)
    beam = decoding.beam_search(model, src, BOS, EOS, PAD, max_len=5, beam_size=2, alpha=0.0)
    assert greedy[0][0] == 5 and beam[0] == [6]
    assert sequence_logprob(model, beam[0]) > sequence_logprob(model, greedy[0])
    assert math.isclose(sequence_logprob(model, beam[0]), math.log(0.4) + math.log(0.99), rel_tol=1e-2)


def test_beam_size_one_equals_greedy_on_a_real_model():
    torch.manual_seed(0)
    model = EncoderDecoder(30, 30, d_model=32, n_heads=4, n_encoder_layers=1, n_decoder_layers=2, dropout=0.0).eval()
    src = torch.randint(4, 30, (5, 7))
    src[2, 4:] = PAD
    greedy = decoding.greedy(model, src, BOS, EOS, PAD, max_len=12)
    assert decoding.beam_search(model, src, BOS, EOS, PAD, max_len=12, beam_size=1, alpha=0.6) == greedy
    assert decoding.greedy_recompute(model, src, BOS, EOS, PAD, max_len=12) == greedy


def test_length_penalty_is_wu_et_al():
    assert decoding.length_penalty(1, 0.6) == 1.0
    assert math.isclose(decoding.length_penalty(10, 0.6), (15 / 6) ** 0.6)
    assert decoding.max_output_len(10, 1.5, 10, 20) == 20 and decoding.max_output_len(4, 1.5, 10, None) == 16
