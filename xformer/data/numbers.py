"""English number words -> German number words, generated with ``num2words`` (no download).

The default, self-contained seq2seq task: ``321`` gives the pair
``"three hundred and twenty-one" -> "dreihunderteinundzwanzig"``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from importlib.metadata import version

import numpy as np
from num2words import num2words

from xformer.config_types import NonNegative, Positive
from xformer.data.base import XformerDataModule, base_args
from xformer.data.download import resolve_cache_dir
from xformer.data.tokenizers import CharTokenizer, _atomic_write_text, train_or_load_bpe

log = logging.getLogger(__name__)


def number_pair(n: int, src_lang: str = "en", tgt_lang: str = "de") -> tuple[str, str]:
    """``(num2words(n, lang=src_lang), num2words(n, lang=tgt_lang))``, e.g.
    ``(321) -> ("three hundred and twenty-one", "dreihunderteinundzwanzig")``."""
    return num2words(int(n), lang=src_lang), num2words(int(n), lang=tgt_lang)


def sample_by_digits(rng: np.random.Generator, count: int, min_digits: int, max_digits: int) -> np.ndarray:
    """``count`` distinct integers spread evenly over digit counts ``min_digits..max_digits`` (int64, random order).

    Every digit count gets an equal share of ``count`` ("water-filling"): one with fewer numbers than its share
    (e.g. the ten 1-digit numbers 0-9) gives all of them and the others share the rest. Within digit count ``d``
    numbers are uniform without replacement over ``[10**(d-1), 10**d)`` (``[0, 10)`` for ``d = 1``), so small and
    large numbers both appear, roughly log-uniformly.

    Raises:
        ValueError: fewer than ``count`` numbers exist with these digit counts.
    """
    ranges = {d: (0 if d == 1 else 10 ** (d - 1), 10**d) for d in range(min_digits, max_digits + 1)}
    caps = {d: hi - lo for d, (lo, hi) in ranges.items()}
    if count > sum(caps.values()):
        raise ValueError(f"only {sum(caps.values())} numbers have {min_digits}-{max_digits} digits, asked for {count}")
    quota: dict[int, int] = {}
    left, open_ds = count, sorted(caps, key=lambda d: caps[d])
    while open_ds:
        share = left // len(open_ds)
        d = open_ds[0]
        if caps[d] <= share:
            quota[d] = caps[d]
            left -= caps[d]
            open_ds.pop(0)
        else:  # every remaining digit count can take its share; spread the remainder
            for j, d in enumerate(open_ds):
                quota[d] = share + (1 if j < left - share * len(open_ds) else 0)
            break
    parts = [lo + rng.choice(caps[d], size=quota[d], replace=False) for d, (lo, _) in ranges.items() if quota.get(d)]
    out = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
    rng.shuffle(out)
    return out


class NumbersDataModule(XformerDataModule):
    """English -> German number words (``num2words``), the embedded default seq2seq task.

    Splits, drawn with ``numpy.random.default_rng(seed)`` by :func:`sample_by_digits`, disjoint:
    ``train``/``val``/``test`` (``n_train``/``n_val``/``n_test`` numbers below 10**6, equal share per digit count
    1..6, cut from one shuffled draw) and ``long`` (``n_long`` numbers in ``[10**6, 10**9)``, digit counts 7..9,
    words never seen in training: "million", "Millionen"). ``test_split_names = ["test", "long"]``;
    ``metrics = ["exact_match"]``.

    Tokenizer: ``"bpe"`` -- joint byte-level BPE of ``vocab_size`` trained on train source and
    target text and cached under ``cache_dir/tokenizers``; ``"char"`` -- one id per character of
    the task alphabet (the characters of all generated splits: a property of the generator, not
    of the sample, and it makes the ``M`` of "Million" known).

    Args:
        root (unused: the data is generated), tokens_per_batch, num_workers, pin_memory, seed (data and
            shuffling): as :class:`~xformer.data.base.XformerDataModule`.
        n_train, n_val, n_test, n_long: split sizes.
        tokenizer: ``"bpe"`` or ``"char"``.
        vocab_size: BPE vocabulary size (specials and 256 bytes included).
        cache_dir: tokenizer cache (None: ``$XFORMER_CACHE`` or ``~/.cache/xformer``).
        src_lang, tgt_lang: ``num2words`` language codes.

    Raises:
        ValueError: unknown ``tokenizer`` or impossible split sizes.
    """

    task = "seq2seq"
    metrics = ["exact_match"]

    def __init__(
        self,
        root: str | None = None,
        tokens_per_batch: Positive = 2048,
        num_workers: NonNegative = 0,
        pin_memory: bool = False,
        seed: int = 0,
        n_train: Positive = 20000,
        n_val: NonNegative = 1000,
        n_test: NonNegative = 1000,
        n_long: NonNegative = 500,
        tokenizer: str = "bpe",
        vocab_size: Positive = 600,
        cache_dir: str | None = None,
        src_lang: str = "en",
        tgt_lang: str = "de",
    ) -> None:
        super().__init__(**base_args(XformerDataModule, locals()))
        if tokenizer not in ("bpe", "char"):
            raise ValueError(f"NumbersDataModule: tokenizer must be 'bpe' or 'char', got {tokenizer!r}")
        self.n_train, self.n_val, self.n_test, self.n_long = n_train, n_val, n_test, n_long
        self.tokenizer_kind, self.vocab_size, self.cache_dir = tokenizer, vocab_size, cache_dir
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self.numbers: dict[str, np.ndarray] = {}

    def sample_numbers(self) -> dict[str, np.ndarray]:
        """The numbers of every split, ``{"train", "val", "test", "long"} -> int64 array`` (seeded)."""
        rng = np.random.default_rng(self.seed)
        main = sample_by_digits(rng, self.n_train + self.n_val + self.n_test, 1, 6)
        a, b = self.n_train, self.n_train + self.n_val
        return {"train": main[:a], "val": main[a:b], "test": main[b:], "long": sample_by_digits(rng, self.n_long, 7, 9)}

    def _texts(self) -> dict[str, list[tuple[str, str]]]:
        """Word pairs of every split; cached as JSON under ``cache_dir/numbers/`` (``num2words`` is slow).

        The cache key hashes the split numbers, languages and the ``num2words`` version.
        """
        key = hashlib.sha256(
            json.dumps(
                [version("num2words"), self.src_lang, self.tgt_lang, {k: v.tolist() for k, v in self.numbers.items()}]
            ).encode()
        ).hexdigest()[:16]
        path = resolve_cache_dir(self.cache_dir) / "numbers" / f"numbers-{self.src_lang}-{self.tgt_lang}-{key}.json"
        if path.is_file():
            try:
                return {k: [tuple(p) for p in v] for k, v in json.loads(path.read_text("utf-8")).items()}
            except (ValueError, OSError) as e:
                log.warning("could not read %s (%s); regenerating", path, e)
        texts = {k: [number_pair(n, self.src_lang, self.tgt_lang) for n in v] for k, v in self.numbers.items()}
        try:
            _atomic_write_text(path, json.dumps(texts, ensure_ascii=False))
        except OSError as e:  # a read-only cache only costs time
            log.warning("could not write %s (%s)", path, e)
        return texts

    def _build(self) -> None:
        self.numbers = self.sample_numbers()
        texts = self._texts()
        if self.tokenizer_kind == "bpe":
            self.tokenizer = train_or_load_bpe(
                [p[0] for p in texts["train"]] + [p[1] for p in texts["train"]],
                self.vocab_size,
                resolve_cache_dir(self.cache_dir),
                f"numbers-{self.src_lang}-{self.tgt_lang}",
            )
        else:
            self.tokenizer = CharTokenizer.from_texts(s for split in texts.values() for p in split for s in p)
        self._set_splits(texts, "numbers")
