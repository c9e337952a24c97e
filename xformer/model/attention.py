"""Multi-head attention and the attention patterns that decide who may attend to whom.

Mask polarity, everywhere in xformer: a boolean mask is ``True`` where attention is **blocked**
(padding, future, outside the window), the convention of ``torch.nn.Transformer``'s
``key_padding_mask``. Only :func:`combine_masks` converts it to what
:func:`torch.nn.functional.scaled_dot_product_attention` wants (``True`` = may attend).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .dropout import keep_mask, uses_fast_mask
from .hooks import check_derived_flag, overrides


class AttentionPattern:
    """Base pattern: every query may see every key (the bidirectional encoder of §3.2.3).

    Contract for a new pattern (see the README's "Adding a variant"): override :meth:`blocked`.
    That is enough for every model shape: a decoder-only stack asks for :meth:`causal`, whose default
    blocks what :meth:`blocked` blocks plus every future key (:class:`CausalOf`); override
    :meth:`causal` only to return a cheaper equivalent. ``is_causal`` (the pattern is exactly the
    causal triangle, so SDPA's ``is_causal`` fast path may replace :meth:`blocked`) is worked out from
    the class: true only for :class:`CausalAttention`'s own :meth:`blocked`.
    """

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "is_causal" in cls.__dict__:  # (checked only then: CausalAttention is not defined yet here)
            check_derived_flag(cls, "is_causal", _is_causal_class(cls),
                               "whether the class keeps CausalAttention.blocked()")

    @property
    def is_causal(self) -> bool:
        """True when the pattern is exactly the causal triangle (its class keeps
        :meth:`CausalAttention.blocked`), so SDPA's ``is_causal`` fast path may stand in for it."""
        return _is_causal_class(type(self))

    def blocked(self, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """Boolean ``(Tq, Tk)`` mask, ``True`` = key ``k_pos[j]`` is hidden from query ``q_pos[i]``;
        ``None`` when nothing is blocked. ``q_pos``/``k_pos`` are ``(Tq,)``/``(Tk,)`` integer positions."""
        return None

    def causal(self) -> "AttentionPattern":
        """The same pattern with future keys blocked as well (used by decoder-only stacks).

        Default: :class:`CausalAttention` when :meth:`blocked` is not overridden (nothing else is
        blocked), otherwise :class:`CausalOf` this pattern.
        """
        if not overrides(type(self), AttentionPattern, "blocked"):
            return CausalAttention()
        return CausalOf(self)


def _is_causal_class(cls: type) -> bool:
    return getattr(cls, "blocked", None) is CausalAttention.blocked


class FullAttention(AttentionPattern):
    """Bidirectional attention: nothing blocked (Vaswani et al. 2017 §3.2.3, encoder)."""


class CausalAttention(AttentionPattern):
    """Causal attention: key ``j`` is hidden from query ``i`` when ``j > i`` (§3.2.3, decoder)."""

    def blocked(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return k_pos[None, :] > q_pos[:, None]

    def causal(self) -> "AttentionPattern":
        return self


class CausalOf(AttentionPattern):
    """The causal form of any pattern: ``base.blocked(q, k)`` or ``k > q``.

    Args:
        base: the pattern whose blocked keys stay blocked.
    """

    def __init__(self, base: AttentionPattern) -> None:
        self.base = base

    def blocked(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        future = k_pos[None, :] > q_pos[:, None]
        inner = self.base.blocked(q_pos, k_pos)
        return future if inner is None else inner | future

    def causal(self) -> "AttentionPattern":
        return self

    def __repr__(self) -> str:
        return f"CausalOf({self.base!r})"


class LocalAttention(AttentionPattern):
    """Sliding-window attention: query ``i`` sees keys with ``|i - j| < window`` (and ``j <= i``
    when ``causal``), as in Longformer's local band (Beltagy et al. 2020).

    Raises:
        ValueError: if ``window < 1``.
    """

    def __init__(self, window: int = 16, causal: bool = False) -> None:
        if window < 1:
            raise ValueError(f"model.attention.window={window}: must be >= 1")
        self.window, self.is_causal_band = window, causal

    def blocked(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        diff = q_pos[:, None] - k_pos[None, :]
        out = diff.abs() >= self.window
        if self.is_causal_band:
            out = out | (diff < 0)
        return out

    def causal(self) -> "AttentionPattern":
        return LocalAttention(self.window, causal=True)


def combine_masks(
    batch: int,
    tq: int,
    tk: int,
    key_padding_mask: Tensor | None,
    blocked: Tensor | None,
    bias: Tensor | None,
    dtype: torch.dtype,
) -> Tensor | None:
    """Merge padding, pattern and score bias into one SDPA ``attn_mask``.

    Args:
        key_padding_mask: ``(B, Tk)`` bool, ``True`` = padding key.
        blocked: ``(Tq, Tk)`` bool, ``True`` = blocked by the pattern.
        bias: ``(H, Tq, Tk)`` or ``(B, H, Tq, Tk)`` float score bias.
        dtype: dtype of the scores (the float mask is built in it).

    Returns:
        ``None`` (nothing to mask), a bool mask broadcastable to ``(B, H, Tq, Tk)`` with ``True`` =
        may attend, or a float mask holding ``bias`` with ``-inf`` at blocked keys. The bool mask
        keeps its smallest broadcastable shape: ``(B, 1, 1, Tk)`` for padding alone,
        ``(1, 1, Tq, Tk)`` for a pattern alone, ``(B, 1, Tq, Tk)`` for both.

    A query row with every key blocked (a fully padded sequence) is opened to all keys instead, so
    softmax never sees a row of ``-inf`` and outputs stay finite; such rows belong to padding and are
    ignored by the loss. No large finite fill (``-1e9``) is used, so fp16/bf16 never overflow.

    Performance: the mask is not expanded to ``(B, 1, Tq, Tk)`` when padding alone is masked (SDPA
    broadcasts it, and converts and reads a ``Tq`` times smaller mask), and the empty-row fix is
    applied unconditionally (OR-ing an all-``False`` tensor changes nothing) instead of behind a
    ``bool(...)`` test, which would stall a GPU stream and break ``torch.compile`` graphs.
    """
    allowed = None
    if key_padding_mask is not None:
        allowed = ~key_padding_mask[:, None, None, :]  # (B, 1, 1, Tk)
    if blocked is not None:
        pat = ~blocked[None, None]  # (1, 1, Tq, Tk)
        allowed = pat if allowed is None else allowed & pat
    if allowed is not None:
        allowed = allowed | ~allowed.any(-1, keepdim=True)
    if bias is None:
        return allowed
    bias = bias.to(dtype)
    if bias.dim() == 3:
        bias = bias[None]
    if allowed is None:
        return bias
    return bias.masked_fill(~allowed, float("-inf"))


def attention_with_dropout(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool,
                           scale: float | None, p: float) -> Tensor:
    """``Dropout(softmax(Q Kᵀ · s + mask)) V`` written out (eq. 1 with dropout on the weights, §5.4).

    This is what SDPA itself computes on the CPU whenever ``dropout_p > 0`` (its fused CPU kernel
    takes no dropout, so it falls back to the same math), except that the dropout mask comes from
    :func:`xformer.model.dropout.keep_mask`, about 2× cheaper than SDPA's ``bernoulli_``.
    :class:`MultiHeadAttention` uses it only for CPU training in eager mode.

    Args:
        q: ``(B, H, Tq, d)``; k, v: ``(B, H, Tk, d)``.
        mask: as from :func:`combine_masks`: bool (``True`` = may attend) or float (added), or ``None``.
        is_causal: block keys after the query (``Tq == Tk``).
        scale: score scale, ``None`` for ``1/√d``.
        p: dropout probability on the attention weights.

    Returns:
        ``(B, H, Tq, d)``.
    """
    s = q.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.matmul(q * s, k.transpose(-2, -1))  # (B, H, Tq, Tk)
    if is_causal:
        tq, tk = scores.shape[-2:]
        mask = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril_()
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(weights * keep_mask(weights.shape, p, weights.dtype, weights.device), v)


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention (Vaswani et al. 2017 §3.2.2, eq. 1).

    ``softmax(Q Kᵀ · s + bias) V`` per head with ``s = 1/√d_head`` (or 1 when ``scale=False``, for
    claim C9), computed by :func:`torch.nn.functional.scaled_dot_product_attention` so fused kernels
    run where the mask allows. Projections: one ``(3·H·d_head, D)`` input projection laid out
    ``[W_q; W_k; W_v]`` like ``torch.nn.MultiheadAttention.in_proj_weight``, and an output projection
    ``(D, H·d_head)``.

    Args:
        d_model: model width ``D``.
        n_heads: number of heads ``H``.
        d_head: per-head size; ``H·d_head`` need not equal ``D``.
        dropout: dropout on the attention weights (training only).
        scale: divide scores by √d_head.
        bias: use biases in the projections.
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int, dropout: float = 0.0,
                 scale: bool = True, bias: bool = True) -> None:
        super().__init__()
        self.n_heads, self.d_head, self.dropout = n_heads, d_head, dropout
        self.scale = None if scale else 1.0
        inner = n_heads * d_head
        self.in_proj = nn.Linear(d_model, 3 * inner, bias=bias)
        self.out_proj = nn.Linear(inner, d_model, bias=bias)

    def _heads(self, t: Tensor) -> Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, T, d_head)

    def project_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values ``(B, H, Tk, d_head)`` of ``memory`` ``(B, Tk, D)`` (for cross-attention caches)."""
        inner = self.n_heads * self.d_head
        w, b = self.in_proj.weight[inner:], None if self.in_proj.bias is None else self.in_proj.bias[inner:]
        k, v = F.linear(memory, w, b).chunk(2, dim=-1)
        return self._heads(k), self._heads(v)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        pattern: AttentionPattern | None = None,
        q_pos: Tensor | None = None,
        k_pos: Tensor | None = None,
        bias: Tensor | None = None,
        rotate: Callable[[Tensor, Tensor], Tensor] | None = None,
        cache: dict | None = None,
    ) -> Tensor:
        """Attend from ``x`` ``(B, Tq, D)`` to itself (``memory=None``) or to ``memory`` ``(B, Tk, D)``.

        Args:
            key_padding_mask: ``(B, Tk)`` bool, ``True`` = padding key (for self-attention with a
                cache: the mask of all keys so far).
            pattern: which keys each query may see (by position); ``None`` = all.
            q_pos, k_pos: ``(Tq,)`` / ``(Tk,)`` positions; default ``arange`` (plus the cache length).
            bias: additive score bias ``(H, Tq, Tk)`` (ALiBi, T5).
            rotate: RoPE hook applied to q and k at their positions (self-attention only).
            cache: incremental-decoding state. Self-attention: a dict that gains/extends ``"k"``,
                ``"v"`` ``(B, H, T_so_far, d_head)``. Cross-attention: keys/values of the memory,
                computed once (``memory`` may then be ``None``).

        Returns:
            ``(B, Tq, D)``.
        """
        bsz, tq, _ = x.shape
        inner = self.n_heads * self.d_head
        cross = memory is not None or (cache is not None and cache.get("cross", False))
        if not cross:
            q, k, v = (self._heads(t) for t in self.in_proj(x).chunk(3, dim=-1))
            past = 0 if cache is None or "k" not in cache else cache["k"].shape[2]
            if q_pos is None:
                q_pos = torch.arange(past, past + tq, device=x.device)
            if rotate is not None:
                q, k = rotate(q, q_pos), rotate(k, q_pos)
            if cache is not None:
                if past:
                    k = torch.cat((cache["k"], k), dim=2)
                    v = torch.cat((cache["v"], v), dim=2)
                cache["k"], cache["v"] = k, v
            if k_pos is None:
                k_pos = torch.arange(k.shape[2], device=x.device)
        else:
            w, b = self.in_proj.weight[:inner], None if self.in_proj.bias is None else self.in_proj.bias[:inner]
            q = self._heads(F.linear(x, w, b))
            if cache is not None and "k" in cache:
                k, v = cache["k"], cache["v"]
            else:
                k, v = self.project_kv(memory)
                if cache is not None:
                    cache.update(k=k, v=v, cross=True)
        tk = k.shape[2]
        blocked = None
        if pattern is not None:
            if q_pos is None:
                q_pos = torch.arange(tq, device=x.device)
            if k_pos is None:
                k_pos = torch.arange(tk, device=x.device)
            blocked = pattern.blocked(q_pos, k_pos)
        is_causal = False
        if (pattern is not None and pattern.is_causal and key_padding_mask is None and bias is None
                and tq == tk and tq > 1):
            blocked, is_causal = None, True  # fused causal path
        if pattern is not None and pattern.is_causal and tq == 1:
            blocked = None  # a single newest query sees every cached key
        mask = combine_masks(bsz, tq, tk, key_padding_mask, blocked, bias, q.dtype)
        p = self.dropout if self.training else 0.0
        if p > 0.0 and uses_fast_mask(q):
            out = attention_with_dropout(q, k, v, mask, is_causal, self.scale, p)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=is_causal,
                                                 scale=self.scale)
        return self.out_proj(out.transpose(1, 2).reshape(bsz, tq, inner))
