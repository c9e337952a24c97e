"""Multi-head attention (self- and cross-), its key/value cache, and the attention patterns that
decide who may attend to whom.

* :class:`SelfAttention` is built with its pattern and positional scheme (as torchtune's
  ``MultiHeadAttention`` takes ``pos_embeddings``); a call passes the input, padding mask and cache.
* :class:`CrossAttention` attends from the decoder to the encoder output ("memory") with no pattern
  and no positional scheme (Vaswani et al. 2017 §3.2.3).
* :class:`KVCache` holds one layer's keys and values for incremental decoding (only the
  ``n_kv_heads`` heads under grouped-query attention).

Mask polarity, everywhere in xformer: a boolean mask is ``True`` where attention is **blocked**
(padding, future, outside the window), as ``torch.nn.Transformer``'s ``key_padding_mask``. Only
:func:`combine_masks` converts it to SDPA's polarity (``True`` = may attend).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xformer.config_types import Positive

from .dropout import keep_mask, uses_fast_mask
from .hooks import check_derived_flag, overrides
from .positional import PositionalEncoding


class AttentionPattern:
    """Base pattern: every query may see every key (the bidirectional encoder of §3.2.3).

    Contract for a new pattern (see the README's "Adding a variant"): override :meth:`blocked`.
    A decoder-only stack asks for :meth:`causal`, whose default also blocks every future key
    (:class:`CausalOf`); override it only to return a cheaper equivalent. ``is_causal`` is worked out
    from the class: true only for :class:`CausalAttention`'s own :meth:`blocked`.
    """

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "is_causal" in cls.__dict__:  # (checked only then: CausalAttention is not defined yet here)
            check_derived_flag(
                cls, "is_causal", _is_causal_class(cls), "whether the class keeps CausalAttention.blocked()"
            )

    @property
    def is_causal(self) -> bool:
        """True when the pattern is exactly the causal triangle (its class keeps
        :meth:`CausalAttention.blocked`), so SDPA's ``is_causal`` fast path may stand in for it."""
        return _is_causal_class(type(self))

    def blocked(self, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:  # noqa: ARG002 - interface default: subclasses read the positions
        """Boolean ``(Tq, Tk)`` mask, ``True`` = key ``k_pos[j]`` is hidden from query ``q_pos[i]``;
        ``None`` when nothing is blocked. ``q_pos``/``k_pos`` are ``(Tq,)``/``(Tk,)`` integer positions."""
        return None

    def causal(self) -> "AttentionPattern":
        """The same pattern with future keys blocked as well (used by decoder-only stacks):
        :class:`CausalAttention` when :meth:`blocked` is not overridden, else :class:`CausalOf` this."""
        return CausalOf(self) if overrides(type(self), AttentionPattern, "blocked") else CausalAttention()


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
    """The causal form of pattern ``base``: blocked where ``base.blocked(q, k)`` or ``k > q``."""

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
    when ``causal``), as in Longformer's local band (Beltagy et al. 2020)."""

    def __init__(self, window: Positive = 16, causal: bool = False) -> None:
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
        dtype: the dtype the attention computes its scores in (the float mask is built in it:
            float32 for a float32 attention on bf16 projections, never pre-rounded to bf16).

    Returns:
        ``None`` (nothing to mask), a bool mask broadcastable to ``(B, H, Tq, Tk)`` with ``True`` =
        may attend, or a float mask holding ``bias`` with ``-inf`` at blocked keys. The bool mask
        keeps its smallest broadcastable shape: ``(B, 1, 1, Tk)`` for padding alone,
        ``(1, 1, Tq, Tk)`` for a pattern alone, ``(B, 1, Tq, Tk)`` for both.

    A query row with every key blocked (a fully padded sequence) is opened to all keys instead, so
    softmax never sees a row of ``-inf``; such rows are padding, ignored by the loss. No finite fill
    (``-1e9``) is used, so fp16/bf16 never overflow. The fix is applied unconditionally: a
    ``bool(...)`` test would stall a GPU stream and break ``torch.compile`` graphs.
    """
    allowed = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]  # (B, 1, 1, Tk)
    if blocked is not None:
        pat = ~blocked[None, None]  # (1, 1, Tq, Tk)
        allowed = pat if allowed is None else allowed & pat
    if allowed is not None:
        allowed = allowed | ~allowed.any(-1, keepdim=True)
    if bias is None:
        return allowed
    bias = bias.to(dtype)
    bias = bias[None] if bias.dim() == 3 else bias
    return bias if allowed is None else bias.masked_fill(~allowed, float("-inf"))


def attention_with_dropout(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool, scale: float | None, p: float
) -> Tensor:
    """``Dropout(softmax(Q Kᵀ · s + mask)) V`` written out (eq. 1 with dropout on the weights, §5.4).

    SDPA's own CPU math fallback for ``dropout_p > 0``, with the mask from the cheaper
    :func:`xformer.model.dropout.keep_mask`; used for CPU training in eager mode only.

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


class KVCache:
    """Keys and values of one attention layer for incremental decoding, in pre-allocated buffers.

    The buffers ``(B, H, capacity, d_head)`` are allocated by the first :meth:`append` (room for
    ``capacity`` positions, or the first keys' length when ``None``); :attr:`size` (a host ``int``)
    counts the filled positions. :meth:`append` writes in place, so a decoding step allocates nothing;
    an append past the end moves the contents to a buffer twice as long. Self-attention appends each
    step's keys; cross-attention appends the memory's once. For inference only: a backward pass
    through values read before a later :meth:`append` fails (the buffer was written in place).

    Args:
        capacity: positions to allocate room for (e.g. the longest output a decoder may produce).
    """

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity
        self.size = 0
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store ``k`` and ``v`` ``(B, H, T, d_head)`` after the filled positions and return all keys
        and values so far, ``(B, H, size, d_head)`` views of the buffers."""
        end = self.size + k.shape[2]
        if self.k is None or end > self.k.shape[2]:
            self._grow(k, v, end)
        self.k[:, :, self.size : end] = k
        self.v[:, :, self.size : end] = v
        self.size = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def _grow(self, k: Tensor, v: Tensor, end: int) -> None:
        old = 0 if self.k is None else self.k.shape[2]
        room = max(end, self.capacity or 0, 2 * old)
        bsz, heads, _, d_k = k.shape
        new_k = k.new_empty(bsz, heads, room, d_k)
        new_v = v.new_empty(bsz, heads, room, v.shape[-1])  # d_v may differ from d_k (model.d_qk)
        if self.size:
            new_k[:, :, : self.size] = self.k[:, :, : self.size]
            new_v[:, :, : self.size] = self.v[:, :, : self.size]
        self.k, self.v = new_k, new_v

    @property
    def keys(self) -> Tensor:
        """The filled keys ``(B, H, size, d_head)``."""
        return self.k[:, :, : self.size]

    @property
    def values(self) -> Tensor:
        """The filled values ``(B, H, size, d_head)``."""
        return self.v[:, :, : self.size]

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` ``(B',)`` (beam search: each surviving hypothesis's parent row)."""
        if self.k is None:
            return
        if index.shape[0] == self.k.shape[0]:
            self.k[:, :, : self.size] = self.keys.index_select(0, index)
            self.v[:, :, : self.size] = self.values.index_select(0, index)
        else:
            self.k, self.v = self.k.index_select(0, index), self.v.index_select(0, index)


class MultiHeadAttention(nn.Module):
    """What self- and cross-attention share: the projections and eq. 1 of Vaswani et al. 2017
    (§3.2.2) over the heads.

    ``softmax(Q Kᵀ · s + bias) V`` per head with ``s = 1/√d_k`` (1 when ``scale=False``, §3.2.1), by
    :func:`torch.nn.functional.scaled_dot_product_attention` so fused kernels run where the mask
    allows. The input projection ``((H + H_kv)·d_k + H_kv·d_v, D)`` is laid out ``[W_q; W_k; W_v]``
    like ``torch.nn.MultiheadAttention.in_proj_weight`` (cross-attention applies the ``W_q`` rows to
    the queries, the rest to the memory); the output projection is ``(D, H·d_v)``.

    Grouped-query attention (Ainslie et al. 2023 §2.2; multi-query, Shazeer 2019, is
    ``n_kv_heads = 1``): query head ``h`` reads key/value head ``h // (H / H_kv)``; with
    ``H_kv = H`` (the default) this is exactly multi-head attention. ``d_qk`` sets the query/key size
    ``d_k`` apart from the value size ``d_v = d_head`` (Table 3 row B varies ``d_k`` alone).

    Args:
        d_model: model width ``D``.
        n_heads: number of heads ``H``.
        d_head: per-head value size ``d_v`` (and query/key size unless ``d_qk`` is given); ``H·d_head``
            need not equal ``D``.
        dropout: dropout on the attention weights (training only).
        scale: divide scores by √d_k.
        bias: use biases in the projections.
        n_kv_heads: key/value heads ``H_kv`` (``None`` = ``H``); must divide ``H``.
        d_qk: per-head query/key size ``d_k`` (``None`` = ``d_head``).

    Raises:
        ValueError: if ``n_kv_heads`` does not divide ``n_heads``.
    """

    #: Under CPU ``bf16-mixed`` autocast, eq. 1 (SDPA) runs on float32 copies of q, k, v (output cast
    #: back to bfloat16; the projections stay bfloat16): without AMX, PyTorch's CPU flash-attention
    #: backward is several times slower in bfloat16 (docs/results/nanogpt-cpu.md). ``False`` (on the
    #: class or an instance) keeps autocast's bfloat16 attention.
    cpu_bf16_in_float32: bool = True

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_head: int,
        dropout: float = 0.0,
        scale: bool = True,
        bias: bool = True,
        n_kv_heads: int | None = None,
        d_qk: int | None = None,
    ) -> None:
        super().__init__()
        n_kv = n_heads if n_kv_heads is None else n_kv_heads
        if n_kv < 1 or n_heads % n_kv:
            raise ValueError(
                f"model.n_kv_heads={n_kv_heads}: must divide model.n_heads={n_heads} "
                "(each kv head serves an equal group of query heads)"
            )
        self.n_heads, self.n_kv_heads, self.d_head, self.dropout = n_heads, n_kv, d_head, dropout
        self.d_qk = d_head if d_qk is None else d_qk
        if self.d_qk < 1:
            raise ValueError(f"model.d_qk={d_qk}: must be >= 1 (or null for d_head)")
        self.scale = None if scale else 1.0
        #: rows of W_q, W_k and W_v in the input projection
        self._rows = [n_heads * self.d_qk, n_kv * self.d_qk, n_kv * d_head]
        self.in_proj = nn.Linear(d_model, sum(self._rows), bias=bias)
        self.out_proj = nn.Linear(n_heads * d_head, d_model, bias=bias)

    def heads(self, t: Tensor, width: int | None = None) -> Tensor:
        """``(B, T, h·w)`` → ``(B, h, T, w)`` (``h`` = ``H`` for queries, ``H_kv`` for keys/values;
        ``w`` = ``width``, default ``d_head``)."""
        b, n, _ = t.shape
        return t.view(b, n, -1, self.d_head if width is None else width).transpose(1, 2)

    def project_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries ``(B, H, T, d_k)``, keys ``(B, H_kv, T, d_k)`` and values ``(B, H_kv, T, d_v)``
        of ``x`` ``(B, T, D)``."""
        if self._rows[0] == self._rows[1] == self._rows[2]:
            return tuple(self.heads(t) for t in self.in_proj(x).chunk(3, dim=-1))
        q, k, v = self.in_proj(x).split(self._rows, dim=-1)
        return self.heads(q, self.d_qk), self.heads(k, self.d_qk), self.heads(v)

    def _in_proj_rows(self, x: Tensor, rows: slice) -> Tensor:
        b = None if self.in_proj.bias is None else self.in_proj.bias[rows]
        return F.linear(x, self.in_proj.weight[rows], b)

    def project_q(self, x: Tensor) -> Tensor:
        """Queries ``(B, H, T, d_k)`` of ``x`` ``(B, T, D)`` (the first rows of the input projection)."""
        return self.heads(self._in_proj_rows(x, slice(self._rows[0])), self.d_qk)

    def project_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Keys ``(B, H_kv, S, d_k)`` and values ``(B, H_kv, S, d_v)`` of ``memory`` ``(B, S, D)``."""
        k, v = self._in_proj_rows(memory, slice(self._rows[0], None)).split(self._rows[1:], dim=-1)
        return self.heads(k, self.d_qk), self.heads(v)

    def merge_heads(self, out: Tensor) -> Tensor:
        """Per-head outputs ``(B, H, T, d_head)`` → the output projection of their concatenation ``(B, T, D)``."""
        bsz, _, tq, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(bsz, tq, self.n_heads * self.d_head))

    #: the decoding state :meth:`new_cache` makes
    cache_cls: type = KVCache

    def new_cache(self, capacity: int | None = None):
        """An empty cache for incremental decoding through this layer (``capacity`` positions of room)."""
        return self.cache_cls(capacity)

    def score_dtype(self, q: Tensor) -> torch.dtype:
        """The dtype eq. 1 computes its scores in for queries ``q``: float32 for bf16 queries on the
        CPU (see :attr:`cpu_bf16_in_float32`), else ``q``'s dtype. Score biases and float masks are
        built in it (:func:`combine_masks`), so a float32 attention never adds a bias already
        rounded to bfloat16."""
        return torch.float32 if self._cpu_float32(q) else q.dtype

    def _cpu_float32(self, q: Tensor) -> bool:
        return self.cpu_bf16_in_float32 and q.dtype == torch.bfloat16 and q.device.type == "cpu"

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool = False) -> Tensor:
        """Eq. 1 on ``q`` ``(B, H, Tq, d_head)`` and ``k``/``v`` ``(B, H_kv, Tk, d_head)`` with ``mask``
        from :func:`combine_masks` (or SDPA's causal fast path), then the output projection:
        ``(B, Tq, D)``. Attention-weight dropout applies in training mode."""
        if self.n_kv_heads != self.n_heads:  # each kv head serves its group of query heads
            group = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        p = self.dropout if self.training else 0.0
        low = q.dtype if self._cpu_float32(q) else None
        with torch.autocast("cpu", enabled=False) if low is not None else contextlib.nullcontext():
            if low is not None:  # see cpu_bf16_in_float32
                q, k, v = q.float(), k.float(), v.float()
                mask = mask if mask is None or mask.dtype == torch.bool else mask.float()  # built in score_dtype
            if p > 0.0 and uses_fast_mask(q):
                out = attention_with_dropout(q, k, v, mask, is_causal, self.scale, p)
            else:
                out = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=mask, dropout_p=p, is_causal=is_causal, scale=self.scale
                )
        return self.merge_heads(out if low is None else out.to(low))


class SelfAttention(MultiHeadAttention):
    """Multi-head self-attention with its attention pattern and positional scheme fixed at construction.

    The scheme acts through its relative hooks: :meth:`PositionalEncoding.rotate` on queries and keys
    (RoPE) and :meth:`PositionalEncoding.attn_bias` on the scores (ALiBi, T5). It is owned by the
    stack and only referenced here (its parameters appear once in the state dict).

    Args:
        d_model, n_heads, d_head, dropout, scale, bias, n_kv_heads, d_qk: as :class:`MultiHeadAttention`.
        pattern: which keys each query may see; default :class:`FullAttention`.
        pos_embeddings: the stack's positional scheme; default none.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_head: int,
        dropout: float = 0.0,
        scale: bool = True,
        bias: bool = True,
        pattern: AttentionPattern | None = None,
        pos_embeddings: PositionalEncoding | None = None,
        n_kv_heads: int | None = None,
        d_qk: int | None = None,
    ) -> None:
        super().__init__(d_model, n_heads, d_head, dropout, scale, bias, n_kv_heads, d_qk)
        self.pattern = FullAttention() if pattern is None else pattern
        object.__setattr__(self, "pos_embeddings", pos_embeddings)  # a reference, not a sub-module
        pe_cls = type(pos_embeddings)
        self._rotates = pos_embeddings is not None and pos_embeddings.rotates
        self._biased = pos_embeddings is not None and overrides(pe_cls, PositionalEncoding, "attn_bias")
        self._patterned = overrides(type(self.pattern), AttentionPattern, "blocked")

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None, cache: KVCache | None = None) -> Tensor:
        """Attend from ``x`` ``(B, T, D)`` to itself (and to the cached keys before it).

        Args:
            x: the inputs at positions ``past .. past+T-1``, ``past`` = ``cache.size`` (0 without cache).
            key_padding_mask: ``(B, past+T)`` bool, ``True`` = padding key; with a cache it covers
                the cached keys too.
            cache: incremental-decoding state; this call's keys and values are appended to it.

        Returns:
            ``(B, T, D)``.
        """
        tq = x.shape[1]
        q, k, v = self.project_qkv(x)
        past = 0 if cache is None else cache.size
        q_pos = k_pos = None
        if self._rotates or self._biased or self._patterned:
            q_pos = torch.arange(past, past + tq, device=x.device)
            k_pos = torch.arange(past + tq, device=x.device)
        if self._rotates:
            q, k = self.pos_embeddings.rotate(q, q_pos), self.pos_embeddings.rotate(k, q_pos)
        if cache is not None:
            k, v = cache.append(k, v)
        tk = k.shape[2]
        bias = self.pos_embeddings.attn_bias(q_pos, k_pos) if self._biased else None
        causal = self.pattern.is_causal
        blocked = None
        if self._patterned and not (causal and tq == 1):  # a single newest query sees every cached key
            blocked = self.pattern.blocked(q_pos, k_pos)
        is_causal = causal and key_padding_mask is None and bias is None and tq == tk and tq > 1
        if is_causal:
            blocked = None  # SDPA's fused causal path
        mask = combine_masks(key_padding_mask, blocked, bias, self.score_dtype(q))
        return self.attend(q, k, v, mask, is_causal)


class CrossAttention(MultiHeadAttention):
    """Multi-head attention from the decoder to the encoder output (§3.2.3, "encoder-decoder
    attention"). No pattern and no positional scheme: every query sees every non-padding memory key.

    Args: as :class:`MultiHeadAttention`.
    """

    def forward(
        self, x: Tensor, memory: Tensor, key_padding_mask: Tensor | None = None, cache: KVCache | None = None
    ) -> Tensor:
        """Attend from ``x`` ``(B, T, D)`` to ``memory`` ``(B, S, D)``.

        Args:
            key_padding_mask: ``(B, S)`` bool, ``True`` = padding in the memory.
            cache: when given, the memory's keys and values are projected at the first call, stored,
                and read back at later calls (``memory`` is then not projected again).

        Returns:
            ``(B, T, D)``.
        """
        q = self.project_q(x)
        if cache is not None and cache.size:
            k, v = cache.keys, cache.values
        else:
            k, v = self.project_kv(memory)
            if cache is not None:
                k, v = cache.append(k, v)
        mask = combine_masks(key_padding_mask, None, None, self.score_dtype(q))
        return self.attend(q, k, v, mask)
