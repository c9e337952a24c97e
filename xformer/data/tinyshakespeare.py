"""Tiny-shakespeare character-level language modelling (Karpathy's char-rnn data set).

Source: https://github.com/karpathy/char-rnn, ``data/tinyshakespeare/input.txt`` (1 115 394
characters). Split in text order: first 90 % train (nanoGPT's ``shakespeare_char`` train split), next
5 % val, last 5 % test, so the text that scores a checkpoint chosen on val is never seen by that choice.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from xformer.config_types import NonNegative, Positive
from xformer.data.base import WindowLMDataModule, base_args
from xformer.data.download import fetch, resolve_cache_dir
from xformer.data.errors import DataError
from xformer.data.textfiles import read_text
from xformer.data.tokenizers import CharTokenizer

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
"""Download address of ``input.txt``."""
SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
"""SHA-256 of ``input.txt``."""
TRAIN_FRACTION = 0.90
"""Share of the text (from the start) used for training."""
VAL_FRACTION = 0.05
"""Share after the training text used for validation (checkpoint choice); the rest is test."""


def input_file(root: str | None, cache_dir: str | None = None, url: str = URL) -> Path:
    """The local tiny-shakespeare ``input.txt``: ``<root>/input.txt``, or (``root`` None) downloaded
    once from ``url`` and sha256-checked into ``<cache>/tinyshakespeare/``.

    Raises:
        DataError: missing under ``root``, or download/checksum failure.
    """
    if root is not None:
        path = Path(root).expanduser() / "input.txt"
        if not path.is_file():
            raise DataError(
                f"tiny-shakespeare file not found: {path}. Fix: put input.txt "
                f"(char-rnn's tinyshakespeare) there, or set data.root=null to download it"
            )
        return path
    return fetch(url, SHA256, resolve_cache_dir(cache_dir) / "tinyshakespeare", "input.txt")


class TinyShakespeareDataModule(WindowLMDataModule):
    """Character-level LM on tiny-shakespeare (``task="lm"``, ``metrics=[]``).

    Text: :func:`input_file`. Split in text order as the module says (``test_split_names = ["test"]``;
    on ``input.txt``: 1 003 854 / 55 770 / 55 770 characters); validation picks the checkpoint, test
    is held out and only scored. The vocabulary is the characters of the train split (65 on this
    text) after the 4 specials, ``vocab_size = 69``. Batches: random windows for training,
    contiguous ones for val/test (:class:`~xformer.data.base.WindowLMDataModule`).

    Args:
        root: folder containing ``input.txt``, or None to download.
        tokens_per_batch, block_size, batch_size, train_windows_per_epoch, num_workers, pin_memory, seed,
            val_estimate_batches: as :class:`~xformer.data.base.WindowLMDataModule`.
        cache_dir: download cache (None: ``$XFORMER_CACHE`` or ``~/.cache/xformer``).
        url: download address (override for a mirror or a local test server).

    Raises:
        DataError: ``input.txt`` missing under ``root``, checksum/download failure, not UTF-8.
    """

    def __init__(
        self,
        root: str | None = None,
        tokens_per_batch: Positive | None = None,
        block_size: Positive = 64,
        batch_size: Positive = 64,
        train_windows_per_epoch: int | None = None,
        num_workers: NonNegative = 0,
        pin_memory: bool = False,
        seed: int = 0,
        cache_dir: str | None = None,
        url: str = URL,
        val_estimate_batches: int | None = None,
    ) -> None:
        super().__init__(**base_args(WindowLMDataModule, locals()))
        self.cache_dir, self.url = cache_dir, url
        self.train_text = self.val_text = self.test_text = ""

    def file_path(self) -> Path:
        """Local ``input.txt`` (:func:`input_file`)."""
        return input_file(self.root, self.cache_dir, self.url)

    def prepare_data(self) -> None:
        """Download ``input.txt`` if needed (one process per node)."""
        self.file_path()

    def _build(self) -> None:
        text = read_text(self.file_path())
        n_train, n_val = int(TRAIN_FRACTION * len(text)), int((TRAIN_FRACTION + VAL_FRACTION) * len(text))
        self.train_text, self.val_text, self.test_text = text[:n_train], text[n_train:n_val], text[n_val:]
        self.tokenizer = CharTokenizer.from_texts([self.train_text])
        self.train_ids = np.asarray(self.tokenizer.encode(self.train_text), dtype=np.int64)
        self.val_ids = np.asarray(self.tokenizer.encode(self.val_text), dtype=np.int64)
        self.test_ids = np.asarray(self.tokenizer.encode(self.test_text), dtype=np.int64)
        super()._build()
