"""The training loss, the ``loss`` config group: one class per option, chosen by ``_target_``."""

from __future__ import annotations

from typing import Annotated

import torch
import torch.nn.functional as F
from torch import Tensor

from xformer.config_types import Range


class CrossEntropy:
    """Token cross-entropy over the non-padding labels (their mean, or their sum for the training
    step's token-weighted gradient), with label smoothing ``ε_ls`` (Szegedy et al. 2016; Vaswani et
    al. 2017 §5.4 use 0.1). Logits are read in at least float32.
    """

    def __init__(self, label_smoothing: Annotated[float, Range(ge=0, lt=1)] = 0.1) -> None:
        self.label_smoothing = label_smoothing

    def __call__(
        self, logits: Tensor, labels: Tensor, pad_id: int, label_smoothing: float | None = None, reduction: str = "mean"
    ) -> Tensor:
        """The loss of ``logits`` ``(B, T, V)`` against ``labels`` ``(B, T)`` (``pad_id`` = no loss);
        ``label_smoothing`` replaces the configured ``ε_ls`` for this call; ``reduction`` ``"mean"``
        or ``"sum"`` over the non-padding tokens."""
        eps = self.label_smoothing if label_smoothing is None else label_smoothing
        logits = logits if logits.dtype == torch.float64 else logits.float()
        return F.cross_entropy(
            logits.flatten(0, 1), labels.flatten(), ignore_index=pad_id, label_smoothing=eps, reduction=reduction
        )

    def sum_and_nll(self, logits: Tensor, labels: Tensor, pad_id: int) -> tuple[Tensor, Tensor]:
        """``(summed loss, summed unsmoothed NLL, detached)`` over the non-padding tokens from one log-softmax
        (the step's objective and ``train/nll`` without a second pass over the ``(B·T, V)`` logits).

        With ``ε_ls > 0``: ATen's ``cross_entropy_loss_label_smoothing`` (``LossNLL.cpp``) written out op for
        op, so loss and gradient are bit for bit ``F.cross_entropy``'s (``tests/train/test_losses.py``).
        """
        eps = self.label_smoothing
        logits = logits if logits.dtype == torch.float64 else logits.float()
        flat, target = logits.flatten(0, 1), labels.flatten()
        if not eps:
            loss = F.cross_entropy(flat, target, ignore_index=pad_id, reduction="sum")
            return loss, loss.detach()
        logp = F.log_softmax(flat, dim=1)
        nll = F.nll_loss(logp, target, ignore_index=pad_id, reduction="sum")
        smooth = (-logp.sum(1)).masked_fill_(target == pad_id, 0.0).sum()
        return (1 - eps) * nll + smooth * (eps / flat.shape[1]), nll.detach()
