"""Linear (kernelised) attention: Katharopoulos et al. 2020, "Transformers are RNNs".

Softmax attention weighs value ``j`` for query ``i`` by ``exp(q_i·k_j)``; linear attention replaces
the exponential by a feature-map inner product ``ϕ(q_i)·ϕ(k_j)`` with ``ϕ(x) = elu(x) + 1`` (their
eq. 7), so the sums over keys factor out of the queries (their eq. 5-6)::

    out_i = ϕ(q_i)ᵀ (Σ_j ϕ(k_j) v_jᵀ) / ϕ(q_i)ᵀ (Σ_j ϕ(k_j))

and a layer costs ``O(T·d²)`` instead of ``O(T²·d)``. The causal form (their §3.4, eq. 8-10) sums
over ``j <= i`` only; its two running sums ``S = Σ ϕ(k_j) v_jᵀ`` ``(d, d)`` and ``z = Σ ϕ(k_j)``
``(d,)`` are the whole decoding state (:class:`RunningSumCache`), so a cached decoding step costs
``O(d²)`` whatever the position.

RoPE combines with it as in Su et al. 2021 §3.3 (eq. 19): features are rotated *after* the feature
map in the numerator only; the denominator keeps the unrotated (positive) ones. Score biases (ALiBi,
T5) and patterns other than full or causal need the ``(Tq, Tk)`` score matrix, which is never formed
(:meth:`LinearSelfAttention.refusal`).

The projections are :class:`~xformer.model.attention.MultiHeadAttention`'s (same parameter count).
No attention-weight dropout (no weights are formed) and no score scale (``ϕ`` has no temperature):
``dropout`` and ``scale`` are accepted for a uniform constructor and not used.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .attention import AttentionPattern, FullAttention, MultiHeadAttention
from .hooks import overrides
from .positional import PositionalEncoding

EPS = 1e-6
"""Added to the denominator (as in the authors' code), so a query whose every key is padding gets 0."""

CHUNK = 64
"""Positions per chunk of the causal form: inside a chunk the ``(C, C)`` masked products are formed,
between chunks only the running sums travel, so time and memory grow linearly in ``T``."""


def causal_linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_num: Tensor,
    k_num: Tensor,
    state: tuple[Tensor, Tensor] | None = None,
    eps: float = EPS,
    chunk: int = CHUNK,
) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """Causal linear attention (eq. 8-10): query ``i`` sees the keys ``j <= i`` and every key summed
    into ``state`` before it.

    Computed chunk by chunk: the masked ``(C, C)`` products within a chunk, the running sums of all
    earlier chunks, so the cost is ``O(T·(C·d + d²))``.

    Args:
        q, k: ``ϕ(Q)``, ``ϕ(K)`` ``(B, H, T, d)`` (padding keys zeroed); ``v``: ``(B, H, T, d_v)``.
        q_num, k_num: the features used in the numerator (RoPE-rotated ones, or ``q``, ``k`` themselves).
        state: ``(S, z)`` of earlier positions, ``S`` = ``Σ k_num_j v_jᵀ`` ``(B, H, d, d_v)`` and
            ``z`` = ``Σ k_j`` ``(B, H, d)``; ``None`` = no earlier positions.

    Returns:
        ``(out (B, H, T, d_v), (S, z))`` with the sums updated by this call's keys.
    """
    rotated = q_num is not q
    bsz, heads, t, d = q.shape
    if state is None:
        s_kv = q.new_zeros(bsz, heads, d, v.shape[-1])
        z = q.new_zeros(bsz, heads, d)
    else:
        s_kv, z = state
    outs = []
    for start in range(0, t, chunk):
        end = min(t, start + chunk)
        qc, kc, vc = q[:, :, start:end], k[:, :, start:end], v[:, :, start:end]
        qn, kn = q_num[:, :, start:end], k_num[:, :, start:end]
        future = torch.ones(end - start, end - start, dtype=torch.bool, device=q.device).triu_(1)
        a_num = (qn @ kn.transpose(-2, -1)).masked_fill(future, 0.0)  # (B, H, C, C)
        a_den = (qc @ kc.transpose(-2, -1)).masked_fill(future, 0.0) if rotated else a_num
        num = a_num @ vc + qn @ s_kv
        den = a_den.sum(-1, keepdim=True) + qc @ z[..., None]
        outs.append(num / (den + eps))
        s_kv = s_kv + kn.transpose(-2, -1) @ vc
        z = z + kc.sum(-2)
    return torch.cat(outs, dim=2), (s_kv, z)


class RunningSumCache:
    """Decoding state of one linear-attention layer: ``S`` ``(B, H, d, d_v)``, ``z`` ``(B, H, d)``
    (see :func:`causal_linear_attention`) and :attr:`size`, the positions summed so far.

    Self-attention adds each step's keys; cross-attention sums the memory once. The recurrent
    mixers' states (:mod:`.recurrent`) are kept the same way: a fixed-size ``state`` (a tensor or a
    tuple of them, batch at dim :attr:`batch_dim`) replaced at every step.

    Args:
        capacity: not used (the state has a fixed size); accepted so every cache is made alike.
    """

    batch_dim = 0  # of the state's tensors

    def __init__(self, capacity: int | None = None) -> None:  # noqa: ARG002 - uniform cache constructor
        self.size = 0
        self.state: tuple[Tensor, ...] | Tensor | None = None

    def update(self, state: tuple[Tensor, ...] | Tensor, n_new: int) -> None:
        """Replace the state by ``state`` after ``n_new`` more positions."""
        self.state, self.size = state, self.size + n_new

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` ``(B',)`` (beam search)."""
        if isinstance(self.state, Tensor):
            self.state = self.state.index_select(self.batch_dim, index)
        elif self.state is not None:
            self.state = tuple(t.index_select(self.batch_dim, index) for t in self.state)


def refuse_score_hooks(
    lacks: str, pattern: AttentionPattern | None, pe_cls: type | None, hooks: tuple[str, ...] = ("attn_bias", "rotate")
) -> str | None:
    """Why a mechanism without a ``(Tq, Tk)`` score matrix cannot serve ``pattern`` / ``pe_cls``, or ``None``.

    Refused: a scheme that overrides one of ``hooks`` (``attn_bias``: ALiBi, T5; ``rotate``: RoPE) and
    a pattern other than full or causal (a local window masks scores). ``lacks`` ends the reason
    (``"which a recurrent layer does not have"``).
    """
    acts = {"attn_bias": "adds a bias to the attention scores", "rotate": "rotates queries and keys"}
    for hook in hooks:
        if pe_cls is not None and overrides(pe_cls, PositionalEncoding, hook):
            fix = "sinusoidal, learned or none" if "rotate" in hooks else "sinusoidal, learned, rope or none"
            return f"positional scheme {pe_cls.__name__} {acts[hook]}, {lacks}. Fix: model/pe={fix}"
    if pattern is not None and overrides(type(pattern), AttentionPattern, "blocked") and not pattern.is_causal:
        return (
            f"pattern {type(pattern).__name__} masks attention scores, {lacks}. "
            "Fix: model/attention=full (bidirectional) or causal"
        )
    return None


def _wide(t: Tensor) -> Tensor:
    """``t`` in float32 when it is in a reduced precision: the sums over thousands of positions would
    lose the newest terms in bf16 (float32 and float64 stay as they are)."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _features(t: Tensor) -> Tensor:
    """``ϕ(t) = elu(t) + 1`` (Katharopoulos et al. 2020 eq. 7), elementwise and positive, at least float32."""
    return F.elu(_wide(t)) + 1.0


def _zero_padding(k: Tensor, key_padding_mask: Tensor | None) -> Tensor:
    """``k`` ``(B, H, T, d)`` with the rows of padding keys (``key_padding_mask`` ``(B, T)``, ``True`` = pad) zeroed."""
    return k if key_padding_mask is None else k * (~key_padding_mask)[:, None, :, None].to(k.dtype)


class LinearSelfAttention(MultiHeadAttention):
    """Linear self-attention with its pattern (full or causal) and positional scheme fixed at
    construction, a drop-in for :class:`~xformer.model.attention.SelfAttention`.

    Args:
        d_model, n_heads, d_head, bias: as :class:`~xformer.model.attention.MultiHeadAttention`.
        dropout, scale: accepted, not used (see the module docstring).
        pattern: :class:`~xformer.model.attention.FullAttention` (default) or the causal pattern.
        pos_embeddings: the stack's positional scheme; only its ``rotate`` hook acts here.

    Raises:
        ValueError: for a pattern or scheme this mechanism cannot apply (see :meth:`refusal`).
    """

    cache_cls = RunningSumCache

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
    ) -> None:
        del dropout  # accepted so every mechanism is built alike; there is no score matrix to drop from
        super().__init__(d_model, n_heads, d_head, 0.0, scale, bias)
        self.pattern = FullAttention() if pattern is None else pattern
        why = self.refusal(self.pattern, None if pos_embeddings is None else type(pos_embeddings))
        if why:
            raise ValueError(f"model/mixer=linear: {why}")
        object.__setattr__(self, "pos_embeddings", pos_embeddings)  # a reference, not a sub-module
        self.causal = self.pattern.is_causal
        self._rotates = pos_embeddings is not None and pos_embeddings.rotates

    @staticmethod
    def refusal(pattern: AttentionPattern | None, pe_cls: type | None) -> str | None:
        """Why this mechanism cannot serve ``pattern`` / ``pe_cls`` (:func:`refuse_score_hooks`; RoPE
        and absolute schemes apply), or ``None``."""
        return refuse_score_hooks("which linear attention never forms", pattern, pe_cls, hooks=("attn_bias",))

    def forward(
        self, x: Tensor, key_padding_mask: Tensor | None = None, cache: RunningSumCache | None = None
    ) -> Tensor:
        """Attend from ``x`` ``(B, T, D)`` to itself (and to the positions summed in ``cache``).

        Args:
            x: inputs at positions ``past .. past+T-1``, ``past`` = ``cache.size`` (0 without cache).
            key_padding_mask: ``(B, T)`` or, with a cache, ``(B, past+T)`` bool, ``True`` = padding
                (the cached positions' padding was applied when they were summed).
            cache: decoding state; this call's keys are added to it.

        Returns:
            ``(B, T, D)``.
        """
        tq = x.shape[1]
        q, k, v = self.project_qkv(x)
        with torch.autocast(x.device.type, enabled=False):  # the sums in float32 whatever the precision
            q, k, v_f = _features(q), _features(k), _wide(v)
            if key_padding_mask is not None:
                k = _zero_padding(k, key_padding_mask[:, -tq:])
            q_num, k_num = q, k
            past = 0 if cache is None else cache.size
            if self._rotates:
                pos = torch.arange(past, past + tq, device=q.device)
                q_num, k_num = self.pos_embeddings.rotate(q, pos), self.pos_embeddings.rotate(k, pos)
            state = None if cache is None else cache.state
            if self.causal:
                out, state = causal_linear_attention(q, k, v_f, q_num, k_num, state)
            else:  # every query sees every key so far, the cached ones included
                s_kv, z = k_num.transpose(-2, -1) @ v_f, k.sum(-2)
                if state is not None:
                    s_kv, z = s_kv + state[0], z + state[1]
                state = (s_kv, z)
                out = (q_num @ s_kv) / (q @ z[..., None] + EPS)
            if cache is not None:
                cache.update(state, tq)
        return self.merge_heads(out.to(v.dtype))


class LinearCrossAttention(MultiHeadAttention):
    """Linear attention from the decoder to the encoder output, a drop-in for
    :class:`~xformer.model.attention.CrossAttention`: the memory is summed once into ``(S, z)``.

    Args: as :class:`~xformer.model.attention.MultiHeadAttention` (``dropout`` and ``scale`` not used).
    """

    cache_cls = RunningSumCache

    def forward(
        self, x: Tensor, memory: Tensor, key_padding_mask: Tensor | None = None, cache: RunningSumCache | None = None
    ) -> Tensor:
        """Attend from ``x`` ``(B, T, D)`` to ``memory`` ``(B, S, D)`` (``key_padding_mask`` ``(B, S)``,
        ``True`` = padding); with ``cache`` the memory is summed at the first call and reused."""
        q = self.project_q(x)
        dtype = q.dtype
        kv = None if cache is not None and cache.size else self.project_kv(memory)
        with torch.autocast(x.device.type, enabled=False):  # as in LinearSelfAttention.forward
            q = _features(q)
            if kv is None:
                s_kv, z = cache.state
            else:
                k = _zero_padding(_features(kv[0]), key_padding_mask)
                s_kv, z = k.transpose(-2, -1) @ _wide(kv[1]), k.sum(-2)
                if cache is not None:
                    cache.update((s_kv, z), memory.shape[1])
            out = (q @ s_kv) / (q @ z[..., None] + EPS)
        return self.merge_heads(out.to(dtype))
