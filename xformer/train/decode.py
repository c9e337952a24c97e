"""How validation and test decode, the ``decode`` config group (``greedy``, ``beam``): one settings
class chosen by ``_target_``; ``beam_size = 1`` is greedy decoding (:mod:`xformer.model.decoding`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DecodeSettings:
    """Decoding settings for BLEU and exact match.

    Attributes:
        beam_size: live hypotheses per sentence (1 = greedy).
        alpha: length penalty ``((5 + |Y|) / 6)^α`` (Wu et al. 2016; Vaswani et al. §6.1 use 0.6; beam only).
        max_len_a, max_len_b: longest output ``max_len_a · source length + max_len_b``.
        val_batches: decode only this many validation batches (``None`` = all).
    """

    beam_size: int = 1
    alpha: float = 0.6
    max_len_a: float = 1.5
    max_len_b: float = 10
    val_batches: int | None = None

    def generate_kwargs(self) -> dict:
        """The settings :meth:`xformer.model.ModelBase.generate` takes."""
        return {
            "beam_size": self.beam_size,
            "alpha": self.alpha,
            "max_len_a": self.max_len_a,
            "max_len_b": self.max_len_b,
        }
