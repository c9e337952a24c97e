"""Batch helpers of the model shapes' task glue (:meth:`xformer.model.base.ModelBase.logits_and_labels`
and friends): sequence-to-sequence pairs packed as one prefix-LM sequence, tagger labels, and batches
cut to the model's positions.
"""

from __future__ import annotations

import torch
from torch import Tensor


def prefix_lm_batch(src: Tensor, tgt: Tensor, pad: int, trim: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """Pack seq2seq pairs as one causal-LM sequence each: ``src + tgt`` (``tgt``'s BOS doubles as the
    separator), with ``gather`` on the device and no length read on the host (no device sync).

    Args:
        src: ``(B, S)`` right-padded source ids; tgt: ``(B, T)`` right-padded ``[BOS] + y + [EOS]``.
        pad: the padding id.
        trim: cut the result to the longest packed pair (reads that length on the host: one device
            sync). ``False`` keeps the static width ``S + T``; the extra columns are padding with
            ``pad`` labels, so the loss is unchanged.

    Returns:
        ``seq`` ``(B, L)`` right-padded, ``labels`` ``(B, L)`` (next token on the target part,
        ``pad`` elsewhere), ``prompt_len`` ``(B,)`` = source length + 1 (the BOS).
    """
    src_len = (src != pad).sum(1, keepdim=True)  # (B, 1)
    tgt_len = (tgt != pad).sum(1, keepdim=True)
    S, T = src.shape[1], tgt.shape[1]
    j = torch.arange(S + T, device=src.device).unsqueeze(0)  # (1, S+T) packed position
    k = j - src_len  # position inside the target part (negative on the source part)
    src_tok = src.gather(1, j.clamp(max=S - 1).expand(src.shape[0], -1))
    tgt_tok = tgt.gather(1, k.clamp(0, T - 1))
    nxt_tok = tgt.gather(1, (k + 1).clamp(0, T - 1))
    pad_t = torch.full_like(src_tok, pad)
    seq = torch.where(j < src_len, src_tok, torch.where(k < tgt_len, tgt_tok, pad_t))
    labels = torch.where((k >= 0) & (k < tgt_len - 1), nxt_tok, pad_t)
    if trim:
        width = int((src_len + tgt_len).max())
        seq, labels = seq[:, :width], labels[:, :width]
    return seq, labels, src_len.squeeze(1) + 1


def tagger_labels(src: Tensor, tgt: Tensor, pad: int, eos: int) -> Tensor:
    """Labels ``(B, S)`` of a tagger on a length-preserving task: label ``i`` is target token ``i``
    (``tgt`` without its BOS), ``pad`` (no loss) at source padding and where the target has EOS.

    Args:
        src: ``(B, S)`` right-padded source ids; tgt: ``(B, T)`` right-padded ``[BOS] + y + [EOS]``.
    """
    labels = torch.full_like(src, pad)
    n = min(src.shape[1], tgt.shape[1] - 1)
    labels[:, :n] = tgt[:, 1 : 1 + n]
    return labels.masked_fill_((labels == eos) | (src == pad), pad)


def fit_batch_to_positions(
    batch: dict, limit: int | None, pad: int, eos: int, prefix_lm: bool = False
) -> tuple[dict, Tensor]:
    """Cut a sequence-to-sequence batch so the model never sees a position ``>= limit``.

    Longer sources keep their first ``limit - 1`` tokens and end in ``eos``; targets keep what fits:
    ``limit`` decoder inputs (encoder–decoder, tagger) or ``limit - source length`` tokens after the
    source (decoder-only, whose source is cut to ``limit - 2`` tokens). ``tgt_text`` is left whole.

    Args:
        batch: ``{"src": (B, S), "tgt": (B, T), ...}`` right-padded; LM batches (no ``src``) pass through.
        limit: the model's ``position_limit`` (``None``: nothing to do).
        prefix_lm: the model reads source and target as one sequence (decoder-only).

    Returns:
        The (possibly new) batch and a ``(B,)`` bool tensor marking the examples that were cut.
    """
    if limit is None or "src" not in batch:
        return batch, torch.zeros(batch["tgt"].shape[0], dtype=torch.bool)
    src, tgt = batch["src"], batch["tgt"]
    src_cap = max(1, limit - 2) if prefix_lm else limit
    src_len, tgt_len = (src != pad).sum(1), (tgt != pad).sum(1)
    cut_src = src_len > src_cap
    if prefix_lm:
        tgt_cap = limit - torch.clamp(src_len, max=src_cap)  # per example: what is left after the source
    else:
        tgt_cap = torch.full_like(tgt_len, limit + 1)  # decoder input is tgt[:, :-1]
    cut = cut_src | (tgt_len > tgt_cap)
    if not bool(cut.any()):
        return batch, cut
    src = src[:, :src_cap].clone()
    src[cut_src, src_cap - 1] = eos
    cols = torch.arange(tgt.shape[1], device=tgt.device)[None, :]
    tgt = torch.where(cols < tgt_cap[:, None], tgt, torch.full_like(tgt, pad))
    tgt = tgt[:, : int((tgt != pad).sum(1).max())]
    return {**batch, "src": src, "tgt": tgt}, cut.cpu()
