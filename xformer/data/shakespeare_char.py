"""nanoGPT's ``shakespeare_char`` data set, as its ``data/shakespeare_char/prepare.py`` makes it.

The text is char-rnn's tiny-shakespeare ``input.txt`` (the file :mod:`xformer.data.tinyshakespeare`
reads). nanoGPT's preparation: the vocabulary is the sorted characters of the *whole* text (65 on
this file) with no special tokens, train = the first ``int(0.9 · n)`` characters, val = the last
10 %. This module reproduces that, whatever split the claim tasks' ``data=tinyshakespeare`` uses, so
``experiment=shakespeare_char_cpu`` trains and validates on exactly nanoGPT's tokens.
"""

from __future__ import annotations

from xformer.config_types import NonNegative, Positive
from xformer.data.base import WindowLMDataModule, base_args
from xformer.data.errors import DataError
from xformer.data.textfiles import read_text
from xformer.data.tinyshakespeare import URL, TinyShakespeareDataModule  # the file nanoGPT's prepare.py fetches
from xformer.data.tokenizers import CharTokenizer

NO_TOKEN = -100
"""The special ids of this vocabulary-without-specials: no character has this id, so nothing is
padding (the model builds no padding mask) and the loss ignores nothing (it is also PyTorch's
``ignore_index`` default)."""


class ShakespeareCharDataModule(TinyShakespeareDataModule):
    """Character LM on tiny-shakespeare with nanoGPT's vocabulary and split (``task="lm"``); the same
    ``input.txt`` (and download) as :class:`~xformer.data.tinyshakespeare.TinyShakespeareDataModule`.

    Ids ``0..64`` are the characters in code-point order (nanoGPT's ``stoi``); ``pad_id``, ``bos_id``
    and ``eos_id`` are :data:`NO_TOKEN` (so :meth:`detokenize` never stops early: every id is a
    character). Training batches are random windows (``{"tgt": (B, block_size+1), "idx": (B,)}``, as
    nanoGPT's ``get_batch``); validation is the full contiguous pass over the last 10 %, or, with
    ``val_estimate_batches = k``, ``k`` fixed batches of random val windows (nanoGPT's ``eval_iters``; see
    :class:`~xformer.data.base.WindowLMDataModule`). There is no test text: with ``full_val_at_end`` the test
    stage scores the full val pass once after training, logged as ``test/loss@val``, else it has no split.

    Args:
        root: folder with ``input.txt``, or None to download it into ``cache_dir``.
        block_size, batch_size, tokens_per_batch, train_windows_per_epoch, num_workers, pin_memory,
        seed, val_estimate_batches: as :class:`~xformer.data.base.WindowLMDataModule`.
        full_val_at_end: score the whole val split once after training (``test/loss@val``).
        val_fraction: share of the text at its end that is validation (nanoGPT: 0.1).
        cache_dir, url: download cache and address.

    Raises:
        DataError: ``input.txt`` missing under ``root``, download/checksum failure, bad ``val_fraction``.
    """

    def __init__(
        self,
        root: str | None = None,
        tokens_per_batch: Positive | None = None,
        block_size: Positive = 64,
        batch_size: Positive = 12,
        train_windows_per_epoch: int | None = None,
        num_workers: NonNegative = 0,
        pin_memory: bool = False,
        seed: int = 0,
        val_estimate_batches: int | None = None,
        full_val_at_end: bool = True,
        val_fraction: float = 0.1,
        cache_dir: str | None = None,
        url: str = URL,
    ) -> None:
        super().__init__(**base_args(TinyShakespeareDataModule, locals()))
        if not 0.0 < val_fraction < 1.0:
            raise DataError(f"data.val_fraction={val_fraction}: must be in (0, 1) (nanoGPT: 0.1)")
        self.pad_id = self.bos_id = self.eos_id = NO_TOKEN
        self.full_val_at_end, self.val_fraction = bool(full_val_at_end), float(val_fraction)

    def _build(self) -> None:
        text = read_text(self.file_path())
        n = int((1.0 - self.val_fraction) * len(text))  # nanoGPT: int(n * 0.9)
        self.tokenizer = CharTokenizer.from_texts([text], specials=False)
        ids = self.tokenizer.encode_array(text)
        self.train_ids, self.val_ids = ids[:n], ids[n:]
        WindowLMDataModule._build(self)  # the windows (not tiny-shakespeare's own three-way split)
        self.test_sets = {"val": self.val_full_set} if self.full_val_at_end else {}


__all__ = ["ShakespeareCharDataModule", "NO_TOKEN"]
