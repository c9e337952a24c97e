"""Multi30k task 1 (Flickr30k captions with German/English translations), raw untokenised text.

Source: https://github.com/multi30k/dataset, ``data/task1/raw/``. Splits: ``train`` (29 000
pairs), ``val`` (1 014), ``test_2016_flickr`` (1 000), one sentence per line, gzipped.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

from xformer.config_types import NonNegative, Positive, Range
from xformer.data.base import XformerDataModule, base_args
from xformer.data.download import fetch, resolve_cache_dir
from xformer.data.errors import DataError
from xformer.data.textfiles import read_parallel
from xformer.data.tokenizers import train_or_load_bpe

log = logging.getLogger(__name__)

BASE_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
"""Where the raw task-1 files are downloaded from (``<BASE_URL><file>``)."""

SPLIT_FILES = {"train": "train", "val": "val", "test": "test_2016_flickr"}
"""Split name -> file stem; files are ``<stem>.<lang>.gz``."""

SHA256 = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
}
"""SHA-256 of the gzipped files as stored upstream (see ``shared/data/README.md``)."""


class Multi30kDataModule(XformerDataModule):
    """Multi30k task 1 translation (default German -> English) with a joint byte-level BPE.

    Files: with ``root`` set, ``<root>/<stem>.<lang>.gz`` (or uncompressed ``<stem>.<lang>``) are read; with
    ``root=None`` each gzipped file is downloaded once from ``base_url`` into ``cache_dir/multi30k`` and checked
    against :data:`SHA256`. Lines are whitespace-stripped; pairs with an empty side are skipped (count logged as a
    warning). The BPE is trained on the train split (source + target) and cached under ``cache_dir/tokenizers``.
    Splits: ``train``, ``val`` and ``"test"`` (``test_2016_flickr``). ``metrics = ["bleu"]``.

    Args:
        root: folder with the raw files, or None to download.
        tokens_per_batch, num_workers, pin_memory, seed: as :class:`~xformer.data.base.XformerDataModule`.
        src_lang, tgt_lang: language codes (``"de"``, ``"en"``; other task-1 languages only with
            ``root``, as no checksums are known for them).
        vocab_size: joint BPE vocabulary size.
        cache_dir: downloads and tokenizer cache (None: ``$XFORMER_CACHE`` or ``~/.cache/xformer``).
        base_url: download location (override to use a mirror or a local test server).
        train_limit: train on the first ``train_limit`` train pairs only (None: all 29 000), to make
            over-fitting visible at CPU budgets (a dropout ablation); the BPE, and so the vocabulary and the
            val/test sets, stay those of the whole train split.

    Raises:
        DataError: a file is missing under ``root`` (message names it and the fix), fails its
            checksum, is not valid gzip or UTF-8, or parallel files differ in line count.
    """

    task = "seq2seq"
    metrics = ["bleu"]

    def __init__(
        self,
        root: str | None = None,
        tokens_per_batch: Positive = 4096,
        num_workers: NonNegative = 0,
        pin_memory: bool = False,
        seed: int = 0,
        src_lang: str = "de",
        tgt_lang: str = "en",
        vocab_size: Positive = 8000,
        cache_dir: str | None = None,
        base_url: str = BASE_URL,
        train_limit: Annotated[int, Range(ge=1)] | None = None,
    ) -> None:
        super().__init__(**base_args(XformerDataModule, locals()))
        if src_lang == tgt_lang:
            raise ValueError(f"Multi30kDataModule: src_lang and tgt_lang are both {src_lang!r}")
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self.vocab_size, self.cache_dir = vocab_size, cache_dir
        self.base_url = base_url if base_url.endswith("/") else base_url + "/"
        self.train_limit = train_limit

    def file_path(self, split: str, lang: str) -> Path:
        """Local path of a split's file: found under ``root`` or fetched into the cache.

        Raises:
            DataError: missing under ``root``; no checksum for a download; download/checksum failure.
        """
        fname = f"{SPLIT_FILES[split]}.{lang}.gz"
        if self.root is not None:
            root = Path(self.root).expanduser()
            for cand in (root / fname, root / fname[: -len(".gz")]):
                if cand.is_file():
                    return cand
            raise DataError(
                f"Multi30k file not found: {root / fname} (nor {fname[:-3]} uncompressed). Fix: put "
                f"the task-1 raw files ({', '.join(f'{s}.{{de,en}}.gz' for s in SPLIT_FILES.values())}) "
                f"in {root}, or set data.root=null to download them"
            )
        if fname not in SHA256:
            raise DataError(f"no checksum known for Multi30k file {fname}; download it yourself and set data.root")
        return fetch(self.base_url + fname, SHA256[fname], resolve_cache_dir(self.cache_dir) / "multi30k", fname)

    def prepare_data(self) -> None:
        """Download missing files (``root=None``) and train/cache the BPE; run on one process per node."""
        src, tgt = read_parallel(self.file_path("train", self.src_lang), self.file_path("train", self.tgt_lang))
        for split in ("val", "test"):
            for lang in (self.src_lang, self.tgt_lang):
                self.file_path(split, lang)
        self._tokenizer_for(src, tgt)

    def _tokenizer_for(self, src: list[str], tgt: list[str]):
        return train_or_load_bpe(
            src + tgt, self.vocab_size, resolve_cache_dir(self.cache_dir), f"multi30k-{self.src_lang}-{self.tgt_lang}"
        )

    def _build(self) -> None:
        sets = {}
        for split in SPLIT_FILES:
            sets[split] = read_parallel(self.file_path(split, self.src_lang), self.file_path(split, self.tgt_lang))
        self.tokenizer = self._tokenizer_for(*sets["train"])
        pairs = {k: list(zip(s, t, strict=True)) for k, (s, t) in sets.items()}
        if self.train_limit is not None:
            if self.train_limit > len(pairs["train"]):
                log.warning(
                    "multi30k: data.train_limit=%d exceeds the %d train pairs", self.train_limit, len(sets["train"][0])
                )
            pairs["train"] = pairs["train"][: self.train_limit]
        self._set_splits(pairs, f"multi30k {self.src_lang}-{self.tgt_lang}")
