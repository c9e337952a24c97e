"""The Transformer in plain PyTorch (no Lightning): blocks, variants and the three model shapes.

See :mod:`.base` and :mod:`.transformer` for the public contract.
"""

from .attention import (
    AttentionPattern,
    CausalAttention,
    CrossAttention,
    FullAttention,
    KVCache,
    LocalAttention,
    MultiHeadAttention,
    SelfAttention,
)
from .base import ConfigError, ModelBase
from .ffn import GELUFFN, ReLUFFN, SwiGLUFFN
from .linear_attention import LinearCrossAttention, LinearSelfAttention
from .mixer import (
    ConvMixer,
    GroupedQueryMixer,
    LayerMixer,
    LinearMixer,
    LSTMMixer,
    Mixer,
    MultiHeadMixer,
    MultiQueryMixer,
)
from .norm import PostNorm, PreNorm, PreRMSNorm, Residual, SandwichNorm
from .positional import ALiBi, Learned, NoPE, PositionalEncoding, RoPE, Sinusoidal, T5RelativeBias
from .recurrent import ConvMixing, RecurrentMixing
from .transformer import DecoderOnly, EncoderDecoder, EncoderOnly

__all__ = [
    "AttentionPattern",
    "CausalAttention",
    "FullAttention",
    "LocalAttention",
    "MultiHeadAttention",
    "SelfAttention",
    "CrossAttention",
    "KVCache",
    "LinearSelfAttention",
    "LinearCrossAttention",
    "Mixer",
    "MultiHeadMixer",
    "GroupedQueryMixer",
    "MultiQueryMixer",
    "LinearMixer",
    "LayerMixer",
    "LSTMMixer",
    "ConvMixer",
    "RecurrentMixing",
    "ConvMixing",
    "GELUFFN",
    "ReLUFFN",
    "SwiGLUFFN",
    "PostNorm",
    "PreNorm",
    "PreRMSNorm",
    "Residual",
    "SandwichNorm",
    "ALiBi",
    "Learned",
    "NoPE",
    "PositionalEncoding",
    "RoPE",
    "Sinusoidal",
    "T5RelativeBias",
    "ConfigError",
    "ModelBase",
    "DecoderOnly",
    "EncoderDecoder",
    "EncoderOnly",
]
