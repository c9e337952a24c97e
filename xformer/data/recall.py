"""A dependency at a controlled distance (Vaswani et al. 2017 §4, path length): recall the token ``k`` positions back.

Vaswani et al. 2017 §4 argue that "the shorter these paths between any combination of positions in
the input and output sequences, the easier it is to learn long-range dependencies": a path between
two positions ``k`` apart has ``O(1)`` steps through self-attention, ``O(k)`` through a recurrent
layer and ``O(k / kernel)`` (``O(log k)`` dilated) through convolutions. This task isolates that
distance: every example is ``k`` random symbols, and the answer is the first of them, so the
prediction made at the separator (decoder-only form) depends on one token exactly ``k`` positions
back and on nothing in between::

    [BOS] x_1 x_2 … x_k [SEP] x_1 [EOS]        loss on x_1 and EOS

Chance is ``1 / n_symbols`` for the answer. Every split has the same distance; train, val and test
draw from independent streams ``default_rng((seed, split))``. The batch holds ``batch_size``
examples whatever ``k`` (the token budget is ``batch_size · (k + 4)``), so a sweep over ``k`` keeps
the number of answers per step fixed.
"""

from __future__ import annotations

import numpy as np

from xformer.config_types import NonNegative, Positive
from xformer.data.base import XformerDataModule, base_args
from xformer.data.synthetic import SEP, SYMBOLS
from xformer.data.tokenizers import CharTokenizer


def recall_examples(distance: int, n: int, n_symbols: int, rng: np.random.Generator) -> list[tuple[str, str]]:
    """``n`` ``(source, answer)`` pairs: ``distance`` random symbols of the first ``n_symbols`` of
    ``0-9a-z``, and the first of them."""
    rows = rng.integers(0, n_symbols, size=(n, distance))
    return [("".join(SYMBOLS[i] for i in row), SYMBOLS[row[0]]) for row in rows]


class DistanceRecallDataModule(XformerDataModule):
    """Recall the token ``distance`` positions back (see the module docstring), decoder-only form.

    Args:
        distance: ``k``, positions between the recalled token and the one that must output it (>= 1).
        n_symbols: alphabet size (2..36).
        n_train, n_val, n_test: examples per split (test: the ``test`` split).
        batch_size: examples per batch per device.
        root, num_workers, pin_memory, seed: as :class:`~xformer.data.base.XformerDataModule`.

    Raises:
        ValueError: ``distance < 1``, ``n_symbols`` outside 2..36 or ``batch_size < 1``.
    """

    task = "lm"
    metrics = ["exact_match"]

    def __init__(
        self,
        distance: int = 32,
        n_symbols: int = 10,
        n_train: Positive = 20000,
        n_val: NonNegative = 500,
        n_test: NonNegative = 1000,
        batch_size: Positive = 32,
        root: str | None = None,
        num_workers: NonNegative = 0,
        pin_memory: bool = False,
        seed: int = 0,
    ) -> None:
        if distance < 1:
            raise ValueError(f"data.distance={distance}: must be >= 1")
        if not 2 <= n_symbols <= len(SYMBOLS):
            raise ValueError(f"data.n_symbols={n_symbols}: must be in [2, {len(SYMBOLS)}]")
        if batch_size < 1:
            raise ValueError(f"data.batch_size={batch_size}: must be >= 1")
        super().__init__(**base_args(XformerDataModule, locals()), tokens_per_batch=batch_size * (distance + 4))
        self.distance, self.n_symbols, self.batch_size = distance, n_symbols, batch_size
        self.n_train, self.n_val, self.n_test = n_train, n_val, n_test
        self.sep_id = 4

    def _build(self) -> None:
        self.tokenizer = CharTokenizer(SYMBOLS[: self.n_symbols], extra_specials=[SEP])
        assert self.tokenizer.token_to_id(SEP) == self.sep_id
        sizes = {"train": self.n_train, "val": self.n_val, "test": self.n_test}
        pairs = {
            split: recall_examples(self.distance, n, self.n_symbols, np.random.default_rng((self.seed, k)))
            for k, (split, n) in enumerate(sizes.items())
        }
        self._set_splits(pairs, f"recall at distance {self.distance}")
