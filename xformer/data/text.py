"""The user's own text: parallel corpora (seq2seq) or monolingual text (LM)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from xformer.config_types import NonNegative, Positive
from xformer.data.base import WindowLMDataModule, XformerDataModule, base_args
from xformer.data.download import resolve_cache_dir
from xformer.data.errors import DataError
from xformer.data.textfiles import read_parallel, read_text, read_tsv
from xformer.data.tokenizers import BPETokenizer, CharTokenizer, Tokenizer, train_or_load_bpe

log = logging.getLogger(__name__)


class TextDataModule(WindowLMDataModule):
    """Seq2seq or LM data from local UTF-8 text files (optionally ``.gz``).

    ``form="parallel"`` (``task="seq2seq"``, default ``metrics=["bleu"]``):

    * ``format="lines"``: ``train_src``/``train_tgt``, ``val_src``/``val_tgt`` and optionally
      ``test_src``/``test_tgt`` -- line-aligned files, one sentence per line.
    * ``format="tsv"``: ``train``, ``val`` and optionally ``test`` -- one file per split with
      ``source<TAB>target`` lines.

    Lines are whitespace-stripped; pairs with an empty side are skipped (count logged). One joint tokenizer
    covers source and target; batches as :func:`~xformer.data.batching.collate_seq2seq`, ``tokens_per_batch``
    padded tokens each.

    ``form="lm"`` (``task="lm"``, default ``metrics=[]``): ``train``, ``val`` and optionally ``test`` are plain
    text files, each read as one token stream (line ends kept); batches of ``max(1, tokens_per_batch //
    block_size)`` windows of ``block_size + 1`` tokens (:class:`~xformer.data.base.WindowLMDataModule`).

    Without test files there is no test split (``test_split_names == []``); otherwise it is named ``"test"``.

    Tokenizer (trained on train text only): ``"bpe"`` -- byte-level BPE of ``vocab_size``, cached under
    ``cache_dir/tokenizers``; ``"char"`` -- the characters of the train text (others map to UNK).

    Args:
        form: ``"parallel"`` or ``"lm"``.
        format: ``"lines"`` or ``"tsv"`` (parallel only).
        train_src, train_tgt, val_src, val_tgt, test_src, test_tgt: paths (parallel, lines format).
        train, val, test: paths (tsv format, or lm).
        root: if set, relative paths are taken relative to it.
        tokens_per_batch: padded-token budget per batch per device (LM: ``// block_size`` windows).
        block_size: LM context length.
        train_windows_per_epoch: LM training windows per epoch (None: ``len(train) // block_size``).
        num_workers, pin_memory: DataLoader options.
        seed: shuffling seed.
        tokenizer: ``"bpe"`` or ``"char"``.
        vocab_size: BPE vocabulary size.
        cache_dir: tokenizer cache (None: ``$XFORMER_CACHE`` or ``~/.cache/xformer``).
        metrics: sequence-level metrics to report (None: ``["bleu"]`` parallel, ``[]`` lm).

    Raises:
        DataError: a required path is unset or missing, parallel files differ in line count (both
            files and counts named), a line is not UTF-8 (file and line number named), a TSV line
            lacks its TAB, or an LM split is shorter than ``block_size + 1`` tokens.
        ValueError: bad ``form``/``format``/``tokenizer``.
    """

    def __init__(
        self,
        form: str = "parallel",
        format: str = "lines",
        train_src: str | None = None,
        train_tgt: str | None = None,
        val_src: str | None = None,
        val_tgt: str | None = None,
        test_src: str | None = None,
        test_tgt: str | None = None,
        train: str | None = None,
        val: str | None = None,
        test: str | None = None,
        root: str | None = None,
        tokens_per_batch: Positive = 4096,
        block_size: Positive = 64,
        train_windows_per_epoch: int | None = None,
        num_workers: NonNegative = 0,
        pin_memory: bool = False,
        seed: int = 0,
        tokenizer: str = "bpe",
        vocab_size: Positive = 8000,
        cache_dir: str | None = None,
        metrics: list[str] | None = None,
    ) -> None:
        if form not in ("parallel", "lm"):
            raise ValueError(f"TextDataModule: form must be 'parallel' or 'lm', got {form!r}")
        if format not in ("lines", "tsv"):
            raise ValueError(f"TextDataModule: format must be 'lines' or 'tsv', got {format!r}")
        if tokenizer not in ("bpe", "char"):
            raise ValueError(f"TextDataModule: tokenizer must be 'bpe' or 'char', got {tokenizer!r}")
        super().__init__(**base_args(WindowLMDataModule, locals()))
        self.tokens_per_batch = int(tokens_per_batch)  # parallel form: the padded-token budget
        self.form, self.format = form, format
        self.task = "lm" if form == "lm" else "seq2seq"
        self.metrics = list(metrics) if metrics is not None else (["bleu"] if form == "parallel" else [])
        files = ("train_src", "train_tgt", "val_src", "val_tgt", "test_src", "test_tgt", "train", "val", "test")
        self.paths = {k: v for k, v in locals().items() if k in files}  # argument name -> path
        self.tokenizer_kind, self.vocab_size, self.cache_dir = tokenizer, vocab_size, cache_dir

    def _path(self, arg: str, required: bool) -> Path | None:
        """Resolve the path given as argument ``arg`` (relative to ``root`` if set)."""
        value = self.paths[arg]
        if value is None:
            if required:
                raise DataError(
                    f"TextDataModule(form={self.form!r}, format={self.format!r}): {arg} is "
                    f"not set. Fix: set data.{arg} to a file path"
                )
            return None
        path = Path(value).expanduser()
        if self.root is not None and not path.is_absolute():
            path = Path(self.root).expanduser() / path
        if not path.is_file():
            raise DataError(
                f"TextDataModule: {arg} file not found: {path}. Fix: check data.{arg}"
                + (" and data.root" if self.root is not None else "")
            )
        return path

    def _name(self) -> str:
        first = self.paths["train_src"] if (self.form == "parallel" and self.format == "lines") else self.paths["train"]
        return "text-" + "".join(c if c.isalnum() else "_" for c in Path(str(first)).name)[:40]

    def _make_tokenizer(self, texts: list[str]) -> Tokenizer:
        if self.tokenizer_kind == "char":
            return CharTokenizer.from_texts(texts)
        return train_or_load_bpe(texts, self.vocab_size, resolve_cache_dir(self.cache_dir), self._name())

    def _read_pairs(self, split: str, required: bool) -> tuple[list[str], list[str]] | None:
        if self.format == "tsv":
            path = self._path(split, required)
            return None if path is None else read_tsv(path)
        src = self._path(f"{split}_src", required)
        tgt = self._path(f"{split}_tgt", required or src is not None)
        if src is None:
            if tgt is not None:
                raise DataError(f"TextDataModule: {split}_tgt is set but {split}_src is not. Fix: set both")
            return None
        return read_parallel(src, tgt)

    def _build(self) -> None:
        if self.form == "parallel":
            pairs = {s: self._read_pairs(s, s != "test") for s in ("train", "val", "test")}
            pairs = {k: v for k, v in pairs.items() if v is not None}
            self.tokenizer = self._make_tokenizer(pairs["train"][0] + pairs["train"][1])
            self._set_splits({k: list(zip(s, t, strict=True)) for k, (s, t) in pairs.items()}, self._name())
            return
        texts = {s: read_text(p) for s in ("train", "val", "test") if (p := self._path(s, s != "test")) is not None}
        self.tokenizer = self._make_tokenizer(texts["train"].splitlines(keepends=True))
        ids = {k: self._encode_stream(t) for k, t in texts.items()}
        self.train_ids, self.val_ids, self.test_ids = ids["train"], ids["val"], ids.get("test")
        WindowLMDataModule._build(self)
        if "test" not in texts:
            self.test_sets = {}

    def _encode_stream(self, text: str) -> np.ndarray:
        """Ids of a whole text; BPE encodes line by line (exact, as byte-level BPE round-trips)."""
        if isinstance(self.tokenizer, BPETokenizer):
            parts = self.tokenizer.encode_batch(text.splitlines(keepends=True))
            return np.fromiter((i for p in parts for i in p), dtype=np.int64)
        return self.tokenizer.encode_array(text)

    def setup(self, stage: str | None = None) -> None:
        """Build once (idempotent)."""
        (WindowLMDataModule if self.form == "lm" else XformerDataModule).setup(self, stage)

    def _loader(self, dataset, train: bool, persistent: bool = True):
        """Window loader (lm) or token-budget loader (parallel)."""
        return (WindowLMDataModule if self.form == "lm" else XformerDataModule)._loader(
            self, dataset, train, persistent
        )
