"""Encoder and decoder blocks and the stacks built from them (Vaswani et al. 2017 §3.1).

A block is attention and FFN sub-layers, each inside a residual wrapper from :mod:`.norm`; the
mechanism (:mod:`.mixer`), FFN and norm placement arrive as modules and factories by keyword, never
as flags. Both block kinds take ``key_padding_mask`` and ``cache`` for their self-attention; a
decoder block adds ``memory``, ``memory_key_padding_mask`` and ``memory_cache``.
"""

from __future__ import annotations

import inspect
from typing import Callable

from torch import Tensor, nn

from .attention import AttentionPattern, KVCache
from .norm import Residual
from .positional import PositionalEncoding


def accepts(fn: Callable, name: str, unknown: bool = False) -> bool:
    """Whether ``fn`` takes a keyword ``name`` (or ``**kwargs``); ``unknown`` when it has no signature
    to read (a builtin)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return unknown
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def no_bias(bias: bool, factory: Callable | None = None, group: str = "model/norm") -> dict:
    """Keyword arguments for a norm or FFN factory: ``{"bias": False}`` when biases are off, else none
    (so a user's variant without a ``bias`` argument works as long as ``model.bias=true``).

    Raises:
        ValueError: ``bias`` is off and ``factory`` (a class, function or ``functools.partial``) takes
            no ``bias`` argument -- naming the group, the class and the fix.
    """
    if bias:
        return {}
    if factory is not None and not accepts(factory, "bias", unknown=True):  # no signature: the call decides
        target = getattr(factory, "func", factory)
        name = getattr(target, "__qualname__", repr(target))
        raise ValueError(
            f"model.bias=false: {group} {name} takes no bias argument. Fix: give its __init__ a "
            f"`bias: bool = True` parameter (False: no bias parameters), or model.bias=true"
        )
    return {"bias": False}


class EncoderLayer(nn.Module):
    """Self-attention → FFN, each with residual + norm. Input and output ``(B, S, D)``.

    Also the block of decoder-only stacks (with a causal self-attention). The sub-layers arrive built,
    by keyword (as torchtune's ``TransformerSelfAttentionLayer`` takes ``attn=`` and ``mlp=``).

    Args:
        self_attn: ``forward(x, key_padding_mask, cache) -> (B, T, D)`` (see :mod:`.mixer`).
        ffn: the position-wise FFN, ``forward(x) -> (B, T, D)``.
        residual: factory ``(d_model, dropout) -> Residual`` (one per sub-layer).
        d_model: model width ``D``.
        dropout: dropout on each sub-layer's output (in the residual wrapper).
        bias: biases in the block's norms (``model.bias``); ``False`` is passed to ``residual`` as
            ``bias=False`` (only then, so factories without a ``bias`` argument keep working).
    """

    def __init__(
        self,
        *,
        self_attn: nn.Module,
        ffn: nn.Module,
        residual: Callable[..., Residual],
        d_model: int,
        dropout: float,
        bias: bool = True,
    ) -> None:
        super().__init__()
        nb = no_bias(bias, residual)
        self.self_attn = self_attn
        self.ffn = ffn
        self.res_attn = residual(d_model=d_model, dropout=dropout, **nb)
        self.res_ffn = residual(d_model=d_model, dropout=dropout, **nb)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None, cache: KVCache | None = None) -> Tensor:
        """Run the block on ``x`` ``(B, T, D)``; ``key_padding_mask`` and ``cache`` as
        :meth:`~.attention.SelfAttention.forward`."""
        x = self.res_attn(x, lambda h: self.self_attn(h, key_padding_mask, cache))
        return self.res_ffn(x, self.ffn)


class DecoderLayer(nn.Module):
    """Masked self-attention → cross-attention over the encoder output → FFN. ``(B, T, D)`` in and out.

    Args:
        self_attn: causal self-attention module (see :class:`EncoderLayer`).
        cross_attn: attention over the memory, ``forward(x, memory, memory_key_padding_mask, cache)``.
        ffn, residual, d_model, dropout, bias: as :class:`EncoderLayer`.
    """

    def __init__(
        self,
        *,
        self_attn: nn.Module,
        cross_attn: nn.Module,
        ffn: nn.Module,
        residual: Callable[..., Residual],
        d_model: int,
        dropout: float,
        bias: bool = True,
    ) -> None:
        super().__init__()
        nb = no_bias(bias, residual)
        self.self_attn = self_attn
        self.cross_attn = cross_attn
        self.ffn = ffn
        self.res_self = residual(d_model=d_model, dropout=dropout, **nb)
        self.res_cross = residual(d_model=d_model, dropout=dropout, **nb)
        self.res_ffn = residual(d_model=d_model, dropout=dropout, **nb)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        cache: KVCache | None = None,
        memory_cache: KVCache | None = None,
    ) -> Tensor:
        """Run the block on ``x`` ``(B, T, D)`` with encoder output ``memory`` ``(B, S, D)``; the masks
        (``True`` = padding) and caches as :meth:`SelfAttention.forward` and :meth:`CrossAttention.forward`."""
        x = self.res_self(x, lambda h: self.self_attn(h, key_padding_mask, cache))
        x = self.res_cross(x, lambda h: self.cross_attn(h, memory, memory_key_padding_mask, memory_cache))
        return self.res_ffn(x, self.ffn)


class StackCache:
    """The caches of one stack for incremental decoding: one per layer for self-attention and, with
    cross-attention, one per layer for the memory.

    Args:
        n_layers: blocks in the stack.
        capacity: positions to pre-allocate in each self-attention cache (``None``: grow as needed).
        cross: also keep memory caches (encoder–decoder models).
    """

    def __init__(self, n_layers: int, capacity: int | None = None, cross: bool = False) -> None:
        self.self_attn = [KVCache(capacity) for _ in range(n_layers)]
        self.cross_attn = [KVCache() for _ in range(n_layers)] if cross else None

    @classmethod
    def of(cls, self_attn: list, cross_attn: list | None = None) -> "StackCache":
        """A stack cache holding the given per-layer caches (each from its module's ``new_cache``)."""
        out = cls(0)
        out.self_attn, out.cross_attn = list(self_attn), None if cross_attn is None else list(cross_attn)
        return out

    @property
    def size(self) -> int:
        """Positions decoded so far (the first position of the next call)."""
        return self.self_attn[0].size if self.self_attn else 0

    def reorder(self, index: Tensor) -> None:
        """Keep rows ``index`` ``(B,)`` of every self-attention cache (beam search). Memory caches are
        left alone: ``index`` must map each row to one with the same memory (as beam search does)."""
        for c in self.self_attn:
            c.reorder(index)


class Stack(nn.Module):
    """``n_layers`` blocks sharing one positional scheme, plus the final norm that Pre-LN-style
    placements need.

    Args:
        layers: the blocks (:class:`EncoderLayer` or :class:`DecoderLayer`), built with ``pe`` and
            ``pattern``.
        pe: positional scheme of this stack, owned here (the model applies ``embed``, the blocks'
            self-attention its relative hooks).
        pattern: the blocks' self-attention pattern (kept for inspection).
        final_norm: module applied to the last block's output (``nn.Identity`` for Post-LN).
    """

    def __init__(
        self, layers: list[nn.Module], pe: PositionalEncoding, pattern: AttentionPattern, final_norm: nn.Module
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.pe, self.pattern, self.final_norm = pe, pattern, final_norm

    def forward(
        self,
        x: Tensor,
        key_padding_mask: Tensor | None = None,
        cache: StackCache | None = None,
        memory: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        """Run all blocks on embedded ``x`` ``(B, T, D)`` at positions ``cache.size ..`` (0 without a cache).
        ``key_padding_mask`` ``(B, cache.size + T)`` covers the cached keys too; decoder blocks need
        ``memory`` ``(B, S, D)`` and ``memory_key_padding_mask`` ``(B, S)``."""
        for i, layer in enumerate(self.layers):
            own = None if cache is None else cache.self_attn[i]
            if memory is None:
                x = layer(x, key_padding_mask, own)
            else:
                mem_cache = None if cache is None else cache.cross_attn[i]
                x = layer(x, memory, key_padding_mask, memory_key_padding_mask, own, mem_cache)
        return self.final_norm(x)

    def new_cache(self, capacity: int | None = None) -> StackCache:
        """Empty caches for this stack, each made by its attention module (memory caches when the
        blocks have cross-attention)."""
        own = [layer.self_attn.new_cache(capacity) for layer in self.layers]
        cross = [layer.cross_attn.new_cache() for layer in self.layers if hasattr(layer, "cross_attn")]
        return StackCache.of(own, cross or None)
