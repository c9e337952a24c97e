"""Encoder and decoder blocks and the stacks built from them (Vaswani et al. 2017 §3.1).

A block is attention and FFN sub-layers, each inside a residual wrapper from :mod:`.norm`; which
attention pattern, positional scheme, FFN and norm placement are used is decided by the objects
passed in, never by flags here.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from .attention import AttentionPattern, CausalAttention, MultiHeadAttention
from .norm import Residual
from .positional import PositionalEncoding


class EncoderLayer(nn.Module):
    """Self-attention → FFN, each with residual + norm. Input and output ``(B, S, D)``.

    Args:
        d_model, n_heads, d_head: attention sizes.
        d_ff: FFN inner width.
        dropout: used on attention weights, sub-layer outputs and inside the FFN.
        attn_scale: scale scores by 1/√d_head.
        residual: factory ``(d_model, dropout) -> Residual``.
        ffn: factory ``(d_model, d_ff, dropout) -> nn.Module``.
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int, d_ff: int, dropout: float,
                 attn_scale: bool, residual: Callable[..., Residual], ffn: Callable[..., nn.Module]) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, d_head, dropout, attn_scale)
        self.ffn = ffn(d_model=d_model, d_ff=d_ff, dropout=dropout)
        self.res_attn = residual(d_model=d_model, dropout=dropout)
        self.res_ffn = residual(d_model=d_model, dropout=dropout)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None,
                pattern: AttentionPattern | None = None, pos: Tensor | None = None,
                bias: Tensor | None = None, rotate: Callable | None = None,
                cache: dict | None = None, k_pos: Tensor | None = None) -> Tensor:
        """Run the block. ``key_padding_mask`` ``(B, S)`` is ``True`` at padding; see
        :meth:`MultiHeadAttention.forward` for the other arguments."""
        x = self.res_attn(x, lambda h: self.self_attn(
            h, key_padding_mask=key_padding_mask, pattern=pattern, q_pos=pos, k_pos=k_pos,
            bias=bias, rotate=rotate, cache=cache))
        return self.res_ffn(x, self.ffn)


class DecoderLayer(nn.Module):
    """Masked self-attention → cross-attention over the encoder output → FFN. ``(B, T, D)`` in and out.

    Arguments as :class:`EncoderLayer`.
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int, d_ff: int, dropout: float,
                 attn_scale: bool, residual: Callable[..., Residual], ffn: Callable[..., nn.Module]) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, d_head, dropout, attn_scale)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, d_head, dropout, attn_scale)
        self.ffn = ffn(d_model=d_model, d_ff=d_ff, dropout=dropout)
        self.res_self = residual(d_model=d_model, dropout=dropout)
        self.res_cross = residual(d_model=d_model, dropout=dropout)
        self.res_ffn = residual(d_model=d_model, dropout=dropout)

    def forward(self, x: Tensor, memory: Tensor | None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None, pattern: AttentionPattern | None = None,
                pos: Tensor | None = None, bias: Tensor | None = None, rotate: Callable | None = None,
                cache: dict | None = None, k_pos: Tensor | None = None) -> Tensor:
        """Run the block; ``cache`` (incremental decoding) holds ``"self"`` and ``"cross"`` dicts."""
        x = self.res_self(x, lambda h: self.self_attn(
            h, key_padding_mask=tgt_key_padding_mask, pattern=pattern, q_pos=pos, k_pos=k_pos,
            bias=bias, rotate=rotate, cache=None if cache is None else cache.setdefault("self", {})))
        x = self.res_cross(x, lambda h: self.cross_attn(
            h, memory=memory, key_padding_mask=memory_key_padding_mask,
            cache=None if cache is None else cache.setdefault("cross", {"cross": True})))
        return self.res_ffn(x, self.ffn)


class Stack(nn.Module):
    """``n_layers`` blocks sharing one positional scheme and attention pattern, plus the final norm
    that Pre-LN-style placements need.

    Args:
        layers: the blocks (:class:`EncoderLayer` or :class:`DecoderLayer`).
        pe: positional scheme of this stack (its relative hooks apply to self-attention).
        pattern: self-attention pattern (decoders pass :class:`CausalAttention` or a causal variant).
        final_norm: module applied to the last block's output (``nn.Identity`` for Post-LN).
    """

    def __init__(self, layers: list[nn.Module], pe: PositionalEncoding, pattern: AttentionPattern,
                 final_norm: nn.Module) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.pe, self.pattern, self.final_norm = pe, pattern, final_norm

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None, start: int = 0,
                caches: list[dict] | None = None, **kwargs) -> Tensor:
        """Run all blocks on ``x`` ``(B, T, D)`` (already embedded) whose first position is ``start``.

        ``key_padding_mask`` ``(B, start + T)`` covers every key (cached ones too). Extra keyword
        arguments (``memory``, ``memory_key_padding_mask``) go to decoder blocks.
        """
        t = x.shape[1]
        pos = torch.arange(start, start + t, device=x.device)
        k_pos = torch.arange(0, start + t, device=x.device)
        bias = self.pe.attn_bias(pos, k_pos)
        rotate = self.pe.rotate if self.pe.rotates else None
        pad_name = "tgt_key_padding_mask" if kwargs else "key_padding_mask"
        for i, layer in enumerate(self.layers):
            x = layer(x, **{pad_name: key_padding_mask}, pattern=self.pattern, pos=pos, k_pos=k_pos,
                      bias=bias, rotate=rotate, cache=None if caches is None else caches[i], **kwargs)
        return self.final_norm(x)


__all__ = ["EncoderLayer", "DecoderLayer", "Stack", "CausalAttention"]
