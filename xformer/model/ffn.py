"""Position-wise feed-forward networks, one class per variant.

All take ``(B, T, D)`` and return ``(B, T, D)``. ``d_ff`` is the inner width of the paper's FFN
(``ffn_ratio · d_model``); gated variants shrink their hidden size so the parameter count stays that
of a two-matrix FFN of width ``d_ff``.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .dropout import Dropout


class ReLUFFN(nn.Module):
    """``W2 · Dropout(ReLU(W1 x + b1)) + b2`` (Vaswani et al. 2017 §3.3, eq. 2).

    Parameters: ``2·D·d_ff + d_ff + D`` (``2·D·d_ff`` with ``bias=False``).
    """

    activation = staticmethod(F.relu)

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        self.drop = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.drop(self.activation(self.linear1(x))))


class GELUFFN(ReLUFFN):
    """As :class:`ReLUFFN` with GELU (Hendrycks & Gimpel 2016), the BERT/GPT choice."""

    activation = staticmethod(F.gelu)


class SwiGLUFFN(nn.Module):
    """``W2 · Dropout(SiLU(W1 x) ⊙ W3 x)`` without biases (Shazeer 2020, eq. 6 with Swish₁).

    Hidden width ``round(2·d_ff/3)``: three ``D × hidden`` matrices then hold ``2·D·d_ff`` weights,
    the same as the two matrices of :class:`ReLUFFN`, so an ``ffn_ratio`` sweep stays comparable.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, bias: bool = False) -> None:  # noqa: ARG002
        super().__init__()  # ``bias`` is accepted for model.bias; this FFN never has biases
        hidden = max(1, round(2 * d_ff / 3))
        self.w1 = nn.Linear(d_model, hidden, bias=False)
        self.w3 = nn.Linear(d_model, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d_model, bias=False)
        self.drop = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.drop(F.silu(self.w1(x)) * self.w3(x)))
