"""The attention mechanism as a config group (``model/mixer``): one class per option, each building
the self- and cross-attention modules that the blocks receive by keyword (as torchtune's
``TransformerSelfAttentionLayer`` receives ``attn=``).

* :class:`MultiHeadMixer` (``mha``, the default): softmax multi-head attention (Vaswani et al. 2017 §3.2).
* :class:`GroupedQueryMixer` (``gqa``): ``model.n_kv_heads`` key/value heads shared by groups of
  query heads (Ainslie et al. 2023); the decoding cache holds only the kv heads.
* :class:`MultiQueryMixer` (``mqa``): one key/value head (Shazeer 2019).
* :class:`LinearMixer` (``linear``): kernelised linear attention, ``ϕ = elu + 1`` (Katharopoulos et al. 2020).
* :class:`LSTMMixer` (``lstm``): a recurrent layer in place of self-attention (the RNN the paper
  compares against, §4 and Table 1); cross-attention stays attention (the RNN-with-attention design).
* :class:`ConvMixer` (``conv``): a gated depthwise-separable convolution (Wu et al. 2019), dilation
  optionally growing per layer (ByteNet, WaveNet); cross-attention stays attention.

``stacks`` (``model.mixer.stacks``: ``encoder``, ``decoder`` or ``both``) names the stacks that use
the mechanism (in a decoder, for self- and cross-attention); the others keep :class:`MultiHeadMixer`.

Contract for a new mechanism (see the README's "Adding a variant"): subclass :class:`Mixer` and
override :meth:`Mixer.self_attention` (and :meth:`Mixer.cross_attention` for encoder-decoder
models). Their modules take ``forward(x, key_padding_mask, cache)`` (self) or
``forward(x, memory, key_padding_mask, cache)`` (cross), return ``(B, T, D)`` and make their
decoding state with ``new_cache(capacity)`` (an object with ``size`` and ``reorder(index)``).
``self_attention`` may take ``layer`` (the block's index, from 0), passed only where accepted.
"""

from __future__ import annotations

from typing import Annotated

from torch import nn
from typing_extensions import override

from xformer.config_types import Range

from .attention import AttentionPattern, CrossAttention, SelfAttention
from .linear_attention import LinearCrossAttention, LinearSelfAttention, refuse_score_hooks
from .positional import PositionalEncoding
from .recurrent import ConvMixing, RecurrentMixing

STACKS = ("encoder", "decoder", "both")


class Mixer:
    """Base of the mechanisms: softmax multi-head attention, built for a stack's blocks.

    Args:
        stacks: ``"encoder"``, ``"decoder"`` or ``"both"`` (ValueError otherwise): the stacks that use it.
    """

    def __init__(self, stacks: str = "both") -> None:
        if stacks not in STACKS:
            raise ValueError(f"model.mixer.stacks={stacks}: unknown. Fix: use encoder, decoder or both")
        self.stacks = stacks

    def applies_to(self, stack: str) -> bool:
        """Whether the stack named ``stack`` (``"encoder"`` or ``"decoder"``) uses this mechanism."""
        return self.stacks in (stack, "both")

    def kv_heads(self, n_heads: int, n_kv_heads: int | None) -> int | None:
        """The key/value heads to build with, given ``model.n_kv_heads``: one per query head here
        (ValueError when ``n_kv_heads`` is set to anything but ``n_heads``)."""
        if n_kv_heads is not None and n_kv_heads != n_heads:
            raise ValueError(
                f"model.n_kv_heads={n_kv_heads}: only model/mixer=gqa uses it (this mixer has "
                f"one kv head per query head). Fix: model/mixer=gqa or model.n_kv_heads=null"
            )
        return None

    def refusal(self, pattern: AttentionPattern | None, pe_cls: type | None) -> str | None:  # noqa: ARG002 - interface default: subclasses read both
        """Why this mechanism cannot serve a stack with ``pattern`` and positional scheme class
        ``pe_cls`` (``None``: it can). Softmax attention serves every pattern and scheme."""
        return None

    def self_attention(
        self,
        d_model: int,
        n_heads: int,
        d_head: int,
        dropout: float,
        scale: bool,
        pattern: AttentionPattern | None,
        pos_embeddings: PositionalEncoding | None,
        n_kv_heads: int | None = None,
        bias: bool = True,
        layer: int = 0,  # noqa: ARG002 - softmax attention is the same at every depth
        d_qk: int | None = None,
    ) -> nn.Module:
        """One block's self-attention (arguments as :class:`~xformer.model.attention.SelfAttention`;
        ``layer``: the block's index in its stack)."""
        return SelfAttention(d_model, n_heads, d_head, dropout, scale, bias, pattern, pos_embeddings, n_kv_heads, d_qk)

    def cross_attention(
        self,
        d_model: int,
        n_heads: int,
        d_head: int,
        dropout: float,
        scale: bool,
        n_kv_heads: int | None = None,
        bias: bool = True,
        d_qk: int | None = None,
    ) -> nn.Module:
        """One decoder block's attention over the encoder output."""
        return CrossAttention(d_model, n_heads, d_head, dropout, scale, bias=bias, n_kv_heads=n_kv_heads, d_qk=d_qk)

    def __repr__(self) -> str:  # the constructor's arguments, as the instance keeps them
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"


class MultiHeadMixer(Mixer):
    """Multi-head softmax attention (Vaswani et al. 2017 §3.2.2), the default mechanism."""


class GroupedQueryMixer(Mixer):
    """Grouped-query attention (Ainslie et al. 2023 §2.2): ``model.n_kv_heads`` key/value heads, each
    shared by ``n_heads / n_kv_heads`` query heads; ``n_kv_heads = null`` means ``n_heads`` (plain MHA)."""

    def kv_heads(self, n_heads: int, n_kv_heads: int | None) -> int | None:
        if n_kv_heads is not None and (n_kv_heads < 1 or n_heads % n_kv_heads):
            raise ValueError(
                f"model.n_kv_heads={n_kv_heads}: must divide model.n_heads={n_heads} (model/mixer=gqa sets "
                f"n_kv_heads=2 unless given). Fix: pick a divisor of n_heads, or model.n_kv_heads=null (= n_heads)"
            )
        return n_kv_heads


class MultiQueryMixer(GroupedQueryMixer):
    """Multi-query attention (Shazeer 2019): one key/value head shared by every query head."""

    @override
    def kv_heads(self, n_heads: int, n_kv_heads: int | None) -> int | None:
        if n_kv_heads not in (None, 1):
            raise ValueError(
                f"model.n_kv_heads={n_kv_heads}: model/mixer=mqa has one kv head. "
                "Fix: model/mixer=gqa for more, or model.n_kv_heads=null"
            )
        return 1


class LinearMixer(Mixer):
    """Linear attention with ``ϕ = elu + 1`` (Katharopoulos et al. 2020; see
    :mod:`xformer.model.linear_attention`); refuses score biases and masking patterns."""

    def refusal(self, pattern: AttentionPattern | None, pe_cls: type | None) -> str | None:
        return LinearSelfAttention.refusal(pattern, pe_cls)

    @override
    def self_attention(  # the types are Mixer.self_attention's; no layer, no d_qk
        self, d_model, n_heads, d_head, dropout, scale, pattern, pos_embeddings, n_kv_heads=None, bias=True
    ) -> nn.Module:
        return LinearSelfAttention(
            d_model, n_heads, d_head, dropout, scale, bias=bias, pattern=pattern, pos_embeddings=pos_embeddings
        )

    @override
    def cross_attention(self, d_model, n_heads, d_head, dropout, scale, n_kv_heads=None, bias=True) -> nn.Module:
        return LinearCrossAttention(d_model, n_heads, d_head, dropout, scale, bias=bias)


class LayerMixer(Mixer):
    """Base of the mixers that are not attention: one module per block from :meth:`layer`, causal in
    a causal stack and bidirectional in a full-attention encoder. Heads, score scale and attention
    dropout do not apply; schemes that act inside attention (ALiBi, T5, RoPE) and local windows are
    refused (:func:`~xformer.model.linear_attention.refuse_score_hooks`). Cross-attention stays attention.
    """

    kind = "sequence-mixing"  # the layer's name in refusals

    def refusal(self, pattern: AttentionPattern | None, pe_cls: type | None) -> str | None:
        return refuse_score_hooks(f"which a {self.kind} layer does not have", pattern, pe_cls)

    def layer(self, d_model: int, causal: bool, bias: bool, layer: int) -> nn.Module:  # noqa: ARG002 - the hook's signature
        """The mixing module of block ``layer`` (from 0) of a stack of width ``d_model``."""
        raise NotImplementedError

    @override
    def self_attention(  # the types are Mixer.self_attention's; no d_qk
        self, d_model, n_heads, d_head, dropout, scale, pattern, pos_embeddings, n_kv_heads=None, bias=True, layer=0
    ) -> nn.Module:
        del n_heads, d_head, dropout, scale, pos_embeddings, n_kv_heads  # no heads or scores
        return self.layer(d_model, pattern is not None and pattern.is_causal, bias, layer)


class LSTMMixer(LayerMixer):
    """An LSTM in place of each block's self-attention (:class:`~xformer.model.recurrent.RecurrentMixing`):
    left to right in a causal stack, bidirectional (``d_model / 2`` per direction) in a full-attention
    encoder. The block's residual, norm and FFN and a decoder's cross-attention are unchanged."""

    kind = "recurrent"

    def layer(self, d_model: int, causal: bool, bias: bool, layer: int) -> nn.Module:  # noqa: ARG002 - the same at every depth
        return RecurrentMixing(d_model, bidirectional=not causal, bias=bias)


class ConvMixer(LayerMixer):
    """A gated depthwise-separable convolution in place of each block's self-attention
    (:class:`~xformer.model.recurrent.ConvMixing`): causal in a causal stack, centred in a
    full-attention encoder.

    Args:
        stacks: as :class:`Mixer`.
        kernel: kernel size ``k`` (``model.mixer.kernel``).
        dilation_growth: the block at depth ``l`` (from 0) uses dilation ``dilation_growth**l``:
            1 = contiguous kernels (path length ``O(n/k)``), 2 = doubling as ByteNet and WaveNet
            (receptive field ``(k - 1)·(2^L - 1) + 1``, path length ``O(log_k n)``).

    Raises:
        ValueError: ``kernel`` or ``dilation_growth`` below 1.
    """

    kind = "convolutional"

    def __init__(
        self,
        stacks: str = "both",
        kernel: Annotated[int, Range(ge=1)] = 5,
        dilation_growth: Annotated[int, Range(ge=1)] = 1,
    ) -> None:
        super().__init__(stacks)
        if kernel < 1 or dilation_growth < 1:
            raise ValueError(
                f"model.mixer.kernel={kernel}, model.mixer.dilation_growth={dilation_growth}: both must be >= 1"
            )
        self.kernel, self.dilation_growth = kernel, dilation_growth

    def layer(self, d_model: int, causal: bool, bias: bool, layer: int) -> nn.Module:
        return ConvMixing(d_model, self.kernel, self.dilation_growth**layer, causal=causal, bias=bias)
