"""The three encoder–decoders of the training-step row (:data:`CONTENDERS`), all called as
``forward(src, tgt_in, src_pad, tgt_pad) -> logits (B, T, V)`` (pads ``(B, S)``/``(B, T)`` bool, ``True``
at padding); how each is configured alike, and what still differs: ``docs/bench.md``, row 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from xformer.model import EncoderDecoder
from xformer.model.positional import sinusoid_table


@dataclass
class ModelSize:
    """Sizes shared by every contender (defaults: the CPU target size)."""

    d_model: int = 256
    n_heads: int = 4
    n_layers: int = 3  # encoder and decoder each
    d_ff: int = 1024
    dropout: float = 0.1
    vocab: int = 8000
    max_len: int = 512


def build_xformer(size: ModelSize) -> EncoderDecoder:
    """xformer's encoder–decoder at ``size`` (library defaults for every variant)."""
    return EncoderDecoder(
        src_vocab_size=size.vocab,
        tgt_vocab_size=size.vocab,
        d_model=size.d_model,
        n_heads=size.n_heads,
        d_ff=size.d_ff,
        n_encoder_layers=size.n_layers,
        n_decoder_layers=size.n_layers,
        dropout=size.dropout,
        max_len=size.max_len,
        pad_id=0,
    )


class TorchTransformer(nn.Module):
    """``torch.nn.Transformer`` (Post-LN, ReLU: its defaults) inside xformer's embedding and tied output layer."""

    def __init__(self, size: ModelSize) -> None:
        super().__init__()
        self.d_model = d = size.d_model
        self.embed = nn.Embedding(size.vocab, d)
        nn.init.normal_(self.embed.weight, std=d**-0.5)
        self.register_buffer("pe", sinusoid_table(size.max_len, d), persistent=False)
        self.drop = nn.Dropout(size.dropout)
        self.core = nn.Transformer(
            d_model=d,
            nhead=size.n_heads,
            num_encoder_layers=size.n_layers,
            num_decoder_layers=size.n_layers,
            dim_feedforward=size.d_ff,
            dropout=size.dropout,
            batch_first=True,
        )
        self.head = nn.Linear(d, size.vocab, bias=False)
        self.head.weight = self.embed.weight

    def _emb(self, ids: Tensor) -> Tensor:
        return self.drop(self.embed(ids) * math.sqrt(self.d_model) + self.pe[: ids.shape[1]])

    def forward(self, src: Tensor, tgt_in: Tensor, src_pad: Tensor | None, tgt_pad: Tensor | None) -> Tensor:
        t = tgt_in.shape[1]
        # bool like the padding masks (mixing float and bool masks is deprecated in PyTorch)
        causal = torch.ones(t, t, dtype=torch.bool, device=tgt_in.device).triu_(1)
        out = self.core(
            self._emb(src),
            self._emb(tgt_in),
            tgt_mask=causal,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
            tgt_is_causal=True,
        )
        return self.head(out)


class _XTAdapter(nn.Module):
    def __init__(self, xt: nn.Module) -> None:
        super().__init__()
        self.xt = xt

    def forward(self, src: Tensor, tgt_in: Tensor, src_pad: Tensor | None, tgt_pad: Tensor | None) -> Tensor:
        src_keep = None if src_pad is None else ~src_pad  # x-transformers: True = keep
        tgt_keep = None if tgt_pad is None else ~tgt_pad
        enc = self.xt.encoder(src, mask=src_keep, return_embeddings=True)
        return self.xt.decoder.net(tgt_in, context=enc, context_mask=src_keep, mask=tgt_keep)


def build_x_transformers(size: ModelSize) -> nn.Module:
    """``x_transformers.XTransformer`` configured like xformer; ``ImportError`` without the ``bench`` extra."""
    from x_transformers import XTransformer

    p = size.dropout
    side = dict(
        depth=size.n_layers,
        heads=size.n_heads,
        ff_mult=size.d_ff / size.d_model,
        attn_dropout=p,
        attn_sublayer_dropout=p,
        ff_dropout=p,
        ff_sublayer_dropout=p,
        emb_dropout=p,
        pre_norm=False,
        attn_flash=True,
        scaled_sinu_pos_emb=True,
        num_tokens=size.vocab,
        max_seq_len=size.max_len,
    )
    kwargs = {f"{stack}_{k}": v for stack in ("enc", "dec") for k, v in side.items()}
    xt = XTransformer(dim=size.d_model, tie_token_emb=True, pad_value=0, **kwargs)
    net = xt.decoder.net  # tie the output layer to the (shared) token embedding, as the others do
    net.to_logits.weight = net.token_emb.emb.weight
    return _XTAdapter(xt)


CONTENDERS = {"xformer": build_xformer, "torch": TorchTransformer, "x_transformers": build_x_transformers}
"""Name → builder ``ModelSize -> nn.Module`` for the training-step row."""
