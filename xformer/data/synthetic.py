"""Synthetic length-generalisation tasks: ``copy``, ``reverse``, ``sort``, ``addition``.

Train and validate on short sequences, test on in-range, 2x and 4x longer ones.
"""

from __future__ import annotations

import numpy as np

from xformer.config_types import NonNegative, Positive
from xformer.data.base import XformerDataModule, base_args
from xformer.data.tokenizers import CharTokenizer

TASKS = ("copy", "reverse", "sort", "addition")
"""Supported ``task_name`` values."""
SYMBOLS = "0123456789abcdefghijklmnopqrstuvwxyz"
"""Symbol alphabet of copy/reverse/sort; the first ``n_symbols`` are used."""
SEP = "<sep>"
"""Name of the separator special token (id 4) between prompt and answer in LM form."""


def split_length_range(split: str, train_min_len: int, train_max_len: int) -> tuple[int, int]:
    """Inclusive ``(min, max)`` length of a split, with ``L = train_max_len``.

    ``train``/``val``: ``[train_min_len, L]``; ``"1x"``: ``(L/2, L]`` = ``[L//2 + 1, L]``;
    ``"2x"``: ``(L, 2L]`` = ``[L + 1, 2L]``; ``"4x"``: ``(2L, 4L]`` = ``[2L + 1, 4L]``.
    """
    L = train_max_len
    return {
        "train": (train_min_len, L),
        "val": (train_min_len, L),
        "1x": (L // 2 + 1, L),
        "2x": (L + 1, 2 * L),
        "4x": (2 * L + 1, 4 * L),
    }[split]


def make_example(task_name: str, length: int, rng: np.random.Generator, n_symbols: int = 10) -> tuple[str, str]:
    """One ``(source, target)`` string pair of the given length.

    * ``copy``: ``length`` random symbols -> the same string.
    * ``reverse``: -> the string reversed.
    * ``sort``: -> its symbols in ascending alphabet order (``0 < 1 < ... < 9 < a < ...``).
    * ``addition``: ``"a+b"`` -> decimal ``a + b``; ``length`` is the digit count of the longer
      operand: one operand (chosen at random) has exactly ``length`` digits, the other a uniform
      ``1..length`` digits; no leading zeros (a 1-digit operand can be 0). E.g. ``"123+45" -> "168"``.
    """
    if task_name == "addition":

        def number(d: int) -> str:
            """A random ``d``-digit decimal without leading zero."""
            if d == 1:
                return str(int(rng.integers(0, 10)))
            return str(int(rng.integers(1, 10))) + "".join(map(str, rng.integers(0, 10, d - 1)))

        a, b = number(length), number(int(rng.integers(1, length + 1)))
        if rng.integers(0, 2):
            a, b = b, a
        return f"{a}+{b}", str(int(a) + int(b))
    s = "".join(SYMBOLS[i] for i in rng.integers(0, n_symbols, length))
    if task_name == "copy":
        return s, s
    if task_name == "reverse":
        return s, s[::-1]
    if task_name == "sort":
        return s, "".join(sorted(s, key=SYMBOLS.index))
    raise ValueError(f"unknown synthetic task {task_name!r}; choose from {TASKS}")


class SyntheticDataModule(XformerDataModule):
    """Length-generalisation tasks as seq2seq or decoder-only (LM) data.

    Splits and lengths (``L = train_max_len``, lengths drawn uniformly from the range, then the
    sequence uniformly; see :func:`split_length_range` and :func:`make_example`):
    ``train`` (``n_train``) and ``val`` (``n_val``) on ``[train_min_len, L]``; test splits
    ``["1x", "2x", "4x"]`` (``n_test`` each) on ``(L/2, L]``, ``(L, 2L]``, ``(2L, 4L]``. Each split
    has its own random stream ``default_rng((seed, k))``, so changing one size leaves the other
    splits unchanged. ``"1x"`` examples whose source also occurs in train are redrawn (up to 100
    times), so it measures in-range generalisation rather than recall. ``metrics = ["exact_match"]``.

    Vocabulary: ``PAD, BOS, EOS, UNK``, ``<sep>`` (id 4), then the symbols (``n_symbols`` of
    ``0-9a-z`` for copy/reverse/sort; ``0-9`` and ``+`` for addition), one token per character.

    Forms: ``"seq2seq"`` (batches as :func:`~xformer.data.batching.collate_seq2seq`) or ``"lm"`` (``task="lm"``,
    ``max_src_len`` 0): ``tgt = [BOS] + src + [SEP] + target + [EOS]``, the loss on ``target`` and EOS
    (:class:`~xformer.data.base.PromptLMDataset`).

    Args:
        task_name: ``"copy"``, ``"reverse"``, ``"sort"`` or ``"addition"``.
        form: ``"seq2seq"`` or ``"lm"``.
        root (unused: generated data), tokens_per_batch, num_workers, pin_memory, seed (generation and
            shuffling): as :class:`~xformer.data.base.XformerDataModule`.
        train_max_len: ``L``, the longest training length.
        train_min_len: shortest training length.
        n_train, n_val, n_test: split sizes (``n_test`` per test split).
        n_symbols: alphabet size for copy/reverse/sort (2..36; ignored by addition).

    Raises:
        ValueError: unknown task/form, bad lengths or ``n_symbols``.
    """

    task = "seq2seq"
    metrics = ["exact_match"]

    @property
    def length_preserving(self) -> bool:
        """True when every target has its source's length (copy, reverse, sort in seq2seq form), so an
        encoder-only tagger can predict target token ``i`` at source position ``i``."""
        return self.form == "seq2seq" and self.task_name in ("copy", "reverse", "sort")

    def __init__(
        self,
        task_name: str = "copy",
        form: str = "seq2seq",
        root: str | None = None,
        tokens_per_batch: Positive = 2048,
        num_workers: NonNegative = 0,
        pin_memory: bool = False,
        seed: int = 0,
        train_max_len: int = 16,
        train_min_len: int = 1,
        n_train: Positive = 20000,
        n_val: NonNegative = 1000,
        n_test: NonNegative = 1000,
        n_symbols: int = 10,
    ) -> None:
        super().__init__(**base_args(XformerDataModule, locals()))
        if task_name not in TASKS:
            raise ValueError(f"SyntheticDataModule: task_name must be one of {TASKS}, got {task_name!r}")
        if form not in ("seq2seq", "lm"):
            raise ValueError(f"SyntheticDataModule: form must be 'seq2seq' or 'lm', got {form!r}")
        if not 1 <= train_min_len <= train_max_len:
            raise ValueError(f"need 1 <= train_min_len <= train_max_len, got {train_min_len}, {train_max_len}")
        if not 2 <= n_symbols <= len(SYMBOLS):
            raise ValueError(f"n_symbols must be in [2, {len(SYMBOLS)}], got {n_symbols}")
        self.task_name, self.form = task_name, form
        self.task = "lm" if form == "lm" else "seq2seq"
        self.train_max_len, self.train_min_len = train_max_len, train_min_len
        self.n_train, self.n_val, self.n_test = n_train, n_val, n_test
        self.n_symbols, self.sep_id = n_symbols, 4
        self.pairs: dict[str, list[tuple[str, str]]] = {}

    def generate(self) -> dict[str, list[tuple[str, str]]]:
        """``{"train", "val", "1x", "2x", "4x"} -> [(src, tgt), ...]`` (deterministic in ``seed``)."""
        sizes = {"train": self.n_train, "val": self.n_val, "1x": self.n_test, "2x": self.n_test, "4x": self.n_test}
        out: dict[str, list[tuple[str, str]]] = {}
        for k, (split, n) in enumerate(sizes.items()):
            rng = np.random.default_rng((self.seed, k))
            lo, hi = split_length_range(split, self.train_min_len, self.train_max_len)
            seen = {s for s, _ in out["train"]} if split == "1x" else set()
            pairs = []
            for _ in range(n):
                length = int(rng.integers(lo, hi + 1))
                for _try in range(100):
                    pair = make_example(self.task_name, length, rng, self.n_symbols)
                    if pair[0] not in seen:
                        break
                pairs.append(pair)
            out[split] = pairs
        return out

    def _build(self) -> None:
        self.pairs = self.generate()
        alphabet = "0123456789+" if self.task_name == "addition" else SYMBOLS[: self.n_symbols]
        self.tokenizer = CharTokenizer(alphabet, extra_specials=[SEP])
        assert self.tokenizer.token_to_id(SEP) == self.sep_id
        self._set_splits(self.pairs, f"synthetic {self.task_name} ({self.form})")
