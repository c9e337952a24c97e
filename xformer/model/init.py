"""Weight initialisation schemes, one class per option of the ``model/init`` config group.

A scheme is called once with the finished model (``scheme(model)``) and says by how much token
embeddings are multiplied before positions are added (:meth:`InitScheme.embed_scale`).
"""

from __future__ import annotations

import math

from torch import nn


class InitScheme:
    """Base: leaves the weights as the modules made them and keeps the paper's ``√D`` embedding scale."""

    def embed_scale(self, d_model: int) -> float:
        """Factor on the token embeddings ``E[ids]`` (Vaswani et al. 2017 §3.4 use ``√d_model``)."""
        return math.sqrt(d_model)

    def __call__(self, model: nn.Module) -> None:
        """Initialise ``model``'s parameters in place."""


class Xavier(InitScheme):
    """The paper-model default (``torch.nn.Transformer``'s): Xavier-uniform (Glorot & Bengio 2010) for
    every ``nn.Linear`` weight, zero biases; token embeddings keep the ``N(0, 1/D)`` they were made
    with, scaled by ``√D`` in the forward pass (so they enter at unit variance); norms at gain 1, bias 0."""

    def __call__(self, model: nn.Module) -> None:
        for m in model.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)


def residual_projections(model: nn.Module) -> list[tuple[nn.Linear, int]]:
    """The projections that write into the residual stream, each with its stack's depth ``L``: the
    last ``nn.Linear`` of every block's ``self_attn``, ``cross_attn`` and ``ffn`` (whatever the
    mechanism): the attention output projection ``W^O`` and the FFN's second matrix.
    """
    from .layers import Stack

    out = []
    for stack in (m for m in model.modules() if isinstance(m, Stack)):
        depth = len(stack.layers)
        for block in stack.layers:
            subs = [getattr(block, n) for n in ("self_attn", "cross_attn") if getattr(block, n, None) is not None]
            subs.append(block.ffn)
            for sub in subs:
                linears = [m for m in sub.modules() if isinstance(m, nn.Linear)]
                if linears:
                    out.append((linears[-1], depth))
    return out


class GPT2(InitScheme):
    """GPT-2's initialisation (Radford et al. 2019 §2.3; as nanoGPT's ``GPT._init_weights``):
    every ``nn.Linear`` weight and every embedding table (token embeddings, learned positions)
    ``N(0, std²)``, biases 0, norms at gain 1 and bias 0; then the residual projections
    (:func:`residual_projections`) ``N(0, (std / √(2L))²)`` with ``L`` the blocks of their stack.
    Embeddings are not scaled by ``√D`` (as GPT-2). A fixed table (``model/pe=sinusoidal``, RMS
    ``1/√2``) would enter 35× larger than tokens of ``std`` 0.02 (OpenNMT-py#1722), so it is scaled to
    the token embeddings' RMS (:meth:`~xformer.model.positional.PositionalEncoding.match_scale`).

    Args:
        std: standard deviation of the plain weights (0.02).
        scale_embeddings: multiply token embeddings by ``√D`` in the forward pass anyway.
    """

    def __init__(self, std: float = 0.02, scale_embeddings: bool = False) -> None:
        if not std > 0:
            raise ValueError(f"model.init.std={std}: must be > 0")
        self.std, self.scale_embeddings = float(std), bool(scale_embeddings)

    def embed_scale(self, d_model: int) -> float:
        return math.sqrt(d_model) if self.scale_embeddings else 1.0

    def __call__(self, model: nn.Module) -> None:
        from .positional import Learned, PositionalEncoding

        # relative-position tables (T5's bias) keep their own init; learned positions are redrawn below
        pe_parts = {id(x) for pe in model.modules() if isinstance(pe, PositionalEncoding) for x in pe.modules()}
        for m in model.modules():
            if id(m) in pe_parts and not isinstance(m, Learned):
                continue
            if isinstance(m, (nn.Linear, nn.Embedding, Learned)):
                nn.init.normal_(m.weight, mean=0.0, std=self.std)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.LayerNorm, nn.RMSNorm)) and m.weight is not None:
                nn.init.ones_(m.weight)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)
        for lin, depth in residual_projections(model):
            nn.init.normal_(lin.weight, mean=0.0, std=self.std / math.sqrt(2 * depth))
        token_rms = self.std * self.embed_scale(model.d_model)
        for pe in (m for m in model.modules() if isinstance(m, PositionalEncoding)):
            pe.match_scale(token_rms)
