"""How validation and test decode, the ``decode`` config group (``greedy``, ``beam``): one settings
class chosen by ``_target_``; ``beam_size = 1`` is greedy decoding (:mod:`xformer.model.decoding`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from xformer.config_types import Range


@dataclass(frozen=True)
class DecodeSettings:
    """Decoding settings for BLEU and exact match.

    Attributes:
        beam_size: live hypotheses per sentence (1 = greedy).
        alpha: length penalty ``((5 + |Y|) / 6)^α`` (Wu et al. 2016; Vaswani et al. §6.1 use 0.6; beam only).
        max_len_a, max_len_b: longest output ``max_len_a · source length + max_len_b``.
        val_batches: decode only this many validation batches (``None`` = all).
    """

    beam_size: Annotated[int, Range(ge=1)] = 1
    alpha: Annotated[float, Range(ge=0)] = 0.6
    max_len_a: Annotated[float, Range(ge=0)] = 1.5
    max_len_b: Annotated[float, Range(ge=0)] = 10
    val_batches: Annotated[int, Range(ge=0)] | None = None
