"""Residual connections with their normalisation placement, one class per placement.

Each class wraps one sub-layer ``f`` (attention or FFN) of width ``D`` and returns the block output
``(B, T, D)``; ``final_norm`` says whether a stack built from it must end with a norm of its own.
"""

from __future__ import annotations

from typing import Callable

from torch import Tensor, nn

from .dropout import Dropout


class Residual(nn.Module):
    """Base of the residual wrappers: holds ``norm_cls``, the dropout on the sub-layer output, and
    builds the stack's final norm.

    Args:
        d_model: width ``D``.
        dropout: dropout on the sub-layer output before the residual add (Vaswani et al. §5.4).
        eps: norm epsilon (1e-5, PyTorch's default, so outputs match ``nn.Transformer``).
        bias: give the norms an additive bias (LayerNorm's β; ``model.bias``). RMSNorm has none.
    """

    norm_cls: type[nn.Module] = nn.LayerNorm
    #: whether ``norm_cls`` takes a ``bias`` argument (LayerNorm does, RMSNorm has no bias at all)
    norm_has_bias: bool = True
    #: True when a stack of these blocks must end with a norm (Pre-LN style; Xiong et al. 2020).
    final_norm: bool = False
    #: attributes that each get a norm from :meth:`make_norm`, made in this order at construction
    norms: tuple[str, ...] = ()

    def __init__(self, d_model: int, dropout: float = 0.0, eps: float = 1e-5, bias: bool = True) -> None:
        super().__init__()
        self.d_model, self.eps, self.bias = d_model, eps, bias
        self.drop = Dropout(dropout)
        for name in self.norms:
            setattr(self, name, self.make_norm())

    def make_norm(self) -> nn.Module:
        """A fresh norm of this placement's kind over ``D`` features (without bias when ``bias=False``)."""
        if self.bias or not self.norm_has_bias:
            return self.norm_cls(self.d_model, eps=self.eps)
        return self.norm_cls(self.d_model, eps=self.eps, bias=False)

    def make_final_norm(self) -> nn.Module:
        """The norm that closes the stack, or ``nn.Identity`` when none is needed."""
        return self.make_norm() if self.final_norm else nn.Identity()

    def forward(self, x: Tensor, f: Callable[[Tensor], Tensor]) -> Tensor:  # pragma: no cover
        raise NotImplementedError


class PostNorm(Residual):
    """Post-LN, the original placement: ``LayerNorm(x + Dropout(f(x)))`` (Vaswani et al. 2017 §3.1)."""

    norms = ("norm",)

    def forward(self, x: Tensor, f: Callable[[Tensor], Tensor]) -> Tensor:
        return self.norm(x + self.drop(f(x)))


class PreNorm(Residual):
    """Pre-LN: ``x + Dropout(f(LayerNorm(x)))``, stack ends with a final LayerNorm (Xiong et al. 2020)."""

    final_norm = True
    norms = ("norm",)

    def forward(self, x: Tensor, f: Callable[[Tensor], Tensor]) -> Tensor:
        return x + self.drop(f(self.norm(x)))


class PreRMSNorm(PreNorm):
    """Pre-norm with RMSNorm (Zhang & Sennrich 2019) instead of LayerNorm; final RMSNorm on the stack."""

    norm_cls = nn.RMSNorm
    norm_has_bias = False


class SandwichNorm(Residual):
    """Sandwich-LN: ``x + Dropout(LN_out(f(LN_in(x))))`` (Ding et al. 2021, CogView §2.4), final LN."""

    final_norm = True
    norms = ("norm_in", "norm_out")

    def forward(self, x: Tensor, f: Callable[[Tensor], Tensor]) -> Tensor:
        return x + self.drop(self.norm_out(f(self.norm_in(x))))
