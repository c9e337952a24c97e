"""Autoregressive decoding: greedy and beam search (Wu et al. 2016 length penalty), with the models'
incremental key/value caches.

All functions take token ids ``(B, S)`` and return lists of token-id lists without BOS/EOS. PAD and
BOS are never generated: their scores are set to ``-inf`` before a token is chosen (as fairseq does
for PAD), so greedy decoding and beam search with ``beam_size=1`` give the same output.
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor


def clip_source(ids: list[int], limit: int | None, eos: int) -> tuple[list[int], bool]:
    """Fit one source (ids ending in ``eos``) into ``limit`` positions.

    Returns ``(ids, clipped)``: ``ids`` unchanged when it fits (or ``limit`` is ``None``), else its
    first ``limit - 1`` tokens followed by ``eos`` (sources always end in EOS, as in training), and
    whether it was cut.

    Raises:
        ValueError: if ``limit < 1``.
    """
    if limit is None or len(ids) <= limit:
        return ids, False
    if limit < 1:
        raise ValueError(f"limit={limit}: must be >= 1")
    return ids[: limit - 1] + [eos], True


def max_output_len(src_len: int, a: float, b: int, cap: int | None) -> int:
    """Longest hypothesis for a source of ``src_len`` tokens: ``a·src_len + b``, at most ``cap``."""
    n = int(a * src_len + b)
    return max(1, min(n, cap) if cap else n)


def ban(scores: Tensor, *ids: int | None) -> Tensor:
    """A copy of ``scores`` (``(..., V)``) with the vocabulary entries ``ids`` set to ``-inf``.

    ``None`` entries are skipped. Used to keep PAD and BOS out of every decoder's choices.

    Raises:
        IndexError: if an id is outside ``0..V-1``.
    """
    keep = [i for i in ids if i is not None]
    if not keep:
        return scores
    vocab = scores.shape[-1]
    for i in keep:
        if not 0 <= i < vocab:
            raise IndexError(f"special id {i} outside the vocabulary of {vocab} entries")
    out = scores.clone()
    out[..., keep] = float("-inf")
    return out


def step_logprobs(logits: Tensor, pad: int, bos: int | None) -> Tensor:
    """Next-token log-probabilities ``(N, V)`` (float32) from last-position logits ``(N, V)``, with
    ``pad`` and ``bos`` at ``-inf``: greedy decoding and beam search rank tokens from these numbers."""
    return ban(torch.log_softmax(logits.float(), -1), pad, bos)


DONE_CHECK_EVERY = 8
"""Greedy loops read "has every row ended?" on the host (a wait for the accelerator) only every this
many steps; rows that ended emit ``pad`` until then, so the returned tokens are the same."""


@torch.no_grad()
def greedy(model, src: Tensor, bos: int, eos: int, pad: int, max_len: int) -> list[list[int]]:
    """Greedy decoding for an encoder–decoder model, one token per step with cached keys/values.

    Args:
        src: ``(B, S)`` source ids padded with ``pad``.
        max_len: maximum number of generated tokens (EOS included).

    Returns:
        ``B`` lists of generated ids (never ``pad`` or ``bos``), EOS and anything after it removed.
    """
    src_mask = src == pad
    memory = model.encode(src, src_mask)
    bsz = src.shape[0]
    cache = model.new_cache(max_len)
    tok = torch.full((bsz, 1), bos, dtype=torch.long, device=src.device)
    out = torch.full((bsz, max_len), pad, dtype=torch.long, device=src.device)
    done = torch.zeros(bsz, dtype=torch.bool, device=src.device)
    for t in range(max_len):
        logits = model.decode(tok, memory, memory_key_padding_mask=src_mask, cache=cache)
        nxt = step_logprobs(logits[:, -1], pad, bos).argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
        out[:, t] = nxt
        done |= nxt == eos
        if (t + 1) % DONE_CHECK_EVERY == 0 and bool(done.all()):
            break
        tok = nxt[:, None]
    return [_strip(row, eos, pad) for row in out.tolist()]


@torch.no_grad()
def greedy_recompute(model, src: Tensor, bos: int, eos: int, pad: int, max_len: int) -> list[list[int]]:
    """Greedy decoding that re-runs the decoder over the whole prefix each step (no cache): the same
    output as :func:`greedy`, the O(T²) baseline of the decoding benchmark."""
    src_mask = src == pad
    memory = model.encode(src, src_mask)
    bsz = src.shape[0]
    seq = torch.full((bsz, 1), bos, dtype=torch.long, device=src.device)
    done = torch.zeros(bsz, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        logits = model.decode(
            seq, memory, memory_key_padding_mask=src_mask, tgt_key_padding_mask=torch.zeros_like(seq, dtype=torch.bool)
        )
        nxt = step_logprobs(logits[:, -1], pad, bos).argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
        seq = torch.cat((seq, nxt[:, None]), dim=1)
        done |= nxt == eos
        if seq.shape[1] % DONE_CHECK_EVERY == 1 and bool(done.all()):
            break
    return [_strip(row, eos, pad) for row in seq[:, 1:].tolist()]


@torch.no_grad()
def greedy_lm(
    model, prompt: Tensor, prompt_len: Tensor, eos: int, pad: int, max_len: int, bos: int | None = None
) -> list[list[int]]:
    """Greedy continuation for a decoder-only model of right-padded prompts of different lengths, each
    at its own positions (as in training); the full sequence is re-run each step.

    Args:
        prompt: ``(B, P)`` ids, example ``b`` occupying ``prompt[b, :prompt_len[b]]``.
        prompt_len: ``(B,)`` prompt lengths.
        bos: BOS id, kept out of the continuation like ``pad`` (``None``: only ``pad`` is kept out).

    Returns:
        ``B`` lists of generated ids, EOS and anything after it removed.
    """
    bsz = prompt.shape[0]
    total = int(prompt_len.max()) + max_len
    seq = torch.full((bsz, total), pad, dtype=torch.long, device=prompt.device)
    width = min(prompt.shape[1], total)  # columns past the longest prompt are padding; a short output cap
    seq[:, :width] = prompt[:, :width]  # can leave `total` narrower than the padded prompt tensor
    lens = prompt_len.clone().to(prompt.device)
    ar = torch.arange(bsz, device=prompt.device)
    done = torch.zeros(bsz, dtype=torch.bool, device=prompt.device)
    gen = torch.full((bsz, max_len), pad, dtype=torch.long, device=prompt.device)
    longest = int(prompt_len.max())  # one host read; every later width is known on the host
    for t in range(max_len):
        width = longest + t  # >= every row's length (rows grow by at most one token a step)
        x = seq[:, :width]
        pad_mask = torch.arange(width, device=x.device)[None, :] >= lens[:, None]
        logits = model(x, tgt_key_padding_mask=pad_mask)
        nxt = step_logprobs(logits[ar, lens - 1], pad, bos).argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
        gen[:, t] = nxt
        seq[ar, lens] = nxt
        lens = lens + (~done).long()
        done |= nxt == eos
        if (t + 1) % DONE_CHECK_EVERY == 0 and bool(done.all()):
            break
    return [_strip(row, eos, pad) for row in gen.tolist()]


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ``((5 + |Y|) / 6)^α`` (Wu et al. 2016, eq. 14)."""
    return ((5.0 + length) / 6.0) ** alpha


@torch.no_grad()
def beam_search(
    model, src: Tensor, bos: int, eos: int, pad: int, max_len: int, beam_size: int = 4, alpha: float = 0.6
) -> list[list[int]]:
    """Beam search for an encoder–decoder model; hypotheses ranked by ``log P(Y|X) / lp(Y)``.

    Each source sentence keeps ``beam_size`` live hypotheses (batched as ``B·beam_size`` rows, caches
    reordered each step). A hypothesis ends at EOS; a sentence stops once it holds ``beam_size``
    finished hypotheses (fairseq's rule), the search at ``max_len``. With ``beam_size=1`` it returns
    exactly :func:`greedy`'s output.

    Args:
        src: ``(B, S)`` source ids padded with ``pad``.
        max_len: maximum number of generated tokens (EOS included).
        beam_size: live hypotheses per sentence (``>= 1``).
        alpha: length-penalty exponent (0 = none).

    Returns:
        ``B`` lists of ids (the best finished hypothesis, or the best live one at ``max_len``), never
        containing ``pad`` or ``bos``.

    Raises:
        ValueError: if ``beam_size < 1``.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size={beam_size}: must be >= 1")
    bsz, k = src.shape[0], beam_size
    src_mask = src == pad
    memory = model.encode(src, src_mask)
    memory = memory.repeat_interleave(k, 0)
    mem_mask = src_mask.repeat_interleave(k, 0)
    cache = model.new_cache(max_len)
    tok = torch.full((bsz * k, 1), bos, dtype=torch.long, device=src.device)
    scores = torch.zeros(bsz, k, dtype=torch.float64, device=src.device)
    scores[:, 1:] = float("-inf")  # only one live copy of the empty hypothesis at the start
    hist = torch.empty(bsz, k, 0, dtype=torch.long, device=src.device)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(bsz)]
    for t in range(max_len):
        logits = model.decode(tok, memory, memory_key_padding_mask=mem_mask, cache=cache)
        # float64 sums keep the token order of the float32 step scores (beam 1 = greedy)
        logp = step_logprobs(logits[:, -1], pad, bos).double().view(bsz, k, -1)
        vocab = logp.shape[-1]
        cand = (scores[:, :, None] + logp).view(bsz, -1)  # (B, k·V)
        top, idx = cand.topk(2 * k, dim=-1)
        # equal scores: lower flat index first, the tie rule of argmax in greedy decoding
        idx, perm = idx.sort(-1)
        top, perm = top.gather(-1, perm).sort(dim=-1, descending=True, stable=True)
        idx = idx.gather(-1, perm)
        beam_idx, tok_idx = idx // vocab, idx % vocab
        new_scores = torch.full((bsz, k), float("-inf"), dtype=torch.float64, device=src.device)
        new_beam = torch.zeros(bsz, k, dtype=torch.long, device=src.device)
        new_tok = torch.full((bsz, k), pad, dtype=torch.long, device=src.device)
        for b in range(bsz):
            n = 0
            for j in range(2 * k):
                s, bi, ti = float(top[b, j]), int(beam_idx[b, j]), int(tok_idx[b, j])
                if s == float("-inf"):
                    break
                if ti == eos:
                    if j < k:  # only hypotheses ranked in the top k may finish (as in fairseq)
                        finished[b].append((s / length_penalty(t + 1, alpha), hist[b, bi].tolist()))
                    continue
                new_scores[b, n], new_beam[b, n], new_tok[b, n] = s, bi, ti
                n += 1
                if n == k:
                    break
        done = [b for b in range(bsz) if len(finished[b]) >= k]
        if len(done) == bsz:
            break
        new_scores[done] = float("-inf")
        flat = (torch.arange(bsz, device=src.device)[:, None] * k + new_beam).view(-1)
        cache.reorder(flat)
        hist = torch.cat(
            (hist.gather(1, new_beam[:, :, None].expand(-1, -1, hist.shape[2])), new_tok[:, :, None]), dim=2
        )
        scores = new_scores
        tok = new_tok.view(-1, 1)
    return [
        max(f, key=lambda h: h[0])[1] if f else hist[b, int(scores[b].argmax())].tolist()
        for b, f in enumerate(finished)
    ]


def _strip(row: list[int], eos: int, pad: int) -> list[int]:
    """``row`` up to its first ``eos`` or ``pad``."""
    return list(itertools.takewhile(lambda tok: tok not in (eos, pad), row))
