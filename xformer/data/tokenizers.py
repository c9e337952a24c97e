"""Tokenizers with a shared interface and fixed special ids (``PAD=0, BOS=1, EOS=2, UNK=3``).

* :class:`CharTokenizer` -- one id per character (also used, with a fixed alphabet and an extra
  ``<sep>`` special, as the symbol tokenizer of the synthetic tasks).
* :class:`BPETokenizer` -- byte-level BPE from Hugging Face ``tokenizers``; trained on training text
  only and cached on disk by :func:`train_or_load_bpe`.

Common interface: ``encode(text) -> list[int]`` (no BOS/EOS added), ``encode_batch(texts)``,
``decode(ids) -> str`` (special ids dropped, no stop at EOS), ``vocab_size``, ``save(path)`` (JSON, atomically)
and the class method ``load(path)``; :func:`load_tokenizer` loads either kind from its JSON file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

PAD: int = 0
"""Padding id (every tokenizer)."""
BOS: int = 1
"""Beginning-of-sequence id (every tokenizer)."""
EOS: int = 2
"""End-of-sequence id (every tokenizer)."""
UNK: int = 3
"""Unknown-symbol id (every tokenizer)."""
SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<s>", "</s>", "<unk>")
"""Strings of the special tokens; ``SPECIAL_TOKENS[i]`` has id ``i``."""


class Tokenizer:
    """Base of the tokenizers, with the common interface of this module's docstring (``vocab_size`` counts
    every id, specials included). Ids ``0..3`` are ``PAD, BOS, EOS, UNK``; subclasses may add special ids after
    them."""

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Encode many strings; same result as ``[self.encode(t) for t in texts]``."""
        return [self.encode(t) for t in texts]


class CharTokenizer(Tokenizer):
    """One id per character.

    Ids: ``0..3`` = ``PAD, BOS, EOS, UNK``, then ``extra_specials`` (e.g. ``"<sep>"``), then the
    characters in the given order. Characters outside the alphabet encode to ``UNK``. Extra
    specials are never produced by :meth:`encode`; use :meth:`token_to_id` to get their ids.

    With ``specials=False`` there are no special ids at all: ids ``0..len(chars)-1`` are the
    characters (nanoGPT's ``shakespeare_char`` vocabulary, for a character LM that never pads, starts
    or ends a sequence); a character outside the alphabet is then a ``KeyError``.

    Args:
        chars: the alphabet; duplicates are removed, first occurrence wins.
        extra_specials: names of additional special tokens (dropped by :meth:`decode`).
        specials: reserve ``PAD, BOS, EOS, UNK`` (and ``extra_specials``) before the characters.
    """

    def __init__(self, chars: Iterable[str], extra_specials: Sequence[str] = (), specials: bool = True) -> None:
        alphabet = list(dict.fromkeys(chars))
        if any(len(c) != 1 for c in alphabet):
            raise ValueError("CharTokenizer: every entry of `chars` must be a single character")
        if not specials and extra_specials:
            raise ValueError("CharTokenizer: extra_specials need specials=True")
        self.specials = bool(specials)
        self.extra_specials = list(extra_specials)
        names = SPECIAL_TOKENS + tuple(self.extra_specials) if specials else ()
        self.n_special = len(names)
        self.chars = alphabet
        self._itos = list(names) + alphabet
        self._stoi = {c: i + self.n_special for i, c in enumerate(alphabet)}
        self._special_ids = {s: i for i, s in enumerate(names)}

    @classmethod
    def from_texts(
        cls, texts: Iterable[str], extra_specials: Sequence[str] = (), specials: bool = True
    ) -> CharTokenizer:
        """Build the alphabet from the characters of ``texts`` (sorted by code point)."""
        return cls(sorted(set().union(*texts)), extra_specials, specials)

    @property
    def vocab_size(self) -> int:
        """Number of ids: 4 specials + extra specials + alphabet size (the alphabet alone without specials)."""
        return len(self._itos)

    def token_to_id(self, token: str) -> int:
        """Id of a special token name (e.g. ``"<sep>"``) or of a character.

        Raises:
            KeyError: unknown token.
        """
        return self._special_ids[token] if token in self._special_ids else self._stoi[token]

    def encode(self, text: str) -> list[int]:
        """Ids of the characters of ``text`` (``UNK`` for characters outside the alphabet)."""
        stoi = self._stoi
        if not self.specials:
            return [stoi[c] for c in text]
        return [stoi.get(c, UNK) for c in text]

    def encode_array(self, text: str):
        """:meth:`encode` as one ``int64`` numpy array, by a table lookup over the text's code points
        (vectorised, not a per-character Python loop: it runs on the whole corpus at a run's start-up).

        Raises:
            KeyError: a character outside the alphabet of a tokenizer without specials (as :meth:`encode`).
        """
        import numpy as np

        points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        top = max([ord(c) for c in self._stoi] + [int(points.max()) if points.size else 0])
        table = np.full(top + 1, UNK if self.specials else -1, dtype=np.int64)
        for c, i in self._stoi.items():
            table[ord(c)] = i
        ids = table[points]
        if not self.specials and (ids < 0).any():
            raise KeyError(chr(int(points[np.argmax(ids < 0)])))
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """Concatenate the characters of ``ids``, dropping special ids (``< n_special``)."""
        ns, itos = self.n_special, self._itos
        return "".join(itos[i] for i in map(int, ids) if ns <= i < len(itos))

    def save(self, path: str | Path) -> None:
        """Write ``{"type": "char", "chars": [...], "extra_specials": [...]}`` (plus ``"specials": false``
        without specials) to ``path``."""
        data = {"type": "char", "chars": self.chars, "extra_specials": self.extra_specials}
        if not self.specials:
            data["specials"] = False
        _atomic_write_text(Path(path), json.dumps(data, ensure_ascii=False))

    @classmethod
    def load(cls, path: str | Path) -> CharTokenizer:
        """Read a file written by :meth:`save`."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if data.get("type") != "char":
            raise ValueError(f"{path} is not a CharTokenizer file")
        return cls(data["chars"], data.get("extra_specials", ()), data.get("specials", True))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CharTokenizer) and self._itos == other._itos

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


class BPETokenizer(Tokenizer):
    """Byte-level BPE (Hugging Face ``tokenizers``), with ``decode(encode(s)) == s`` for any text.

    Uses the GPT-2 style ``ByteLevel`` pre-tokenizer (no prefix space) and decoder, with all 256
    byte symbols in the initial alphabet, so every string is encodable without ``UNK`` and decodes
    back exactly (whitespace included). Caveat: the literal strings ``<pad>``, ``<s>``, ``</s>``,
    ``<unk>`` in input text are read as the special tokens.

    Build one with :meth:`train` (or :func:`train_or_load_bpe`, which caches the result) or
    :meth:`load`.

    Args:
        tokenizer: a trained ``tokenizers.Tokenizer`` whose ids 0..3 are ``SPECIAL_TOKENS``.
    """

    def __init__(self, tokenizer) -> None:  # tokenizers.Tokenizer
        for i, s in enumerate(SPECIAL_TOKENS):
            if tokenizer.token_to_id(s) != i:
                raise ValueError(f"BPETokenizer: special token {s!r} must have id {i}")
        self._tok = tokenizer

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int, min_frequency: int = 2) -> BPETokenizer:
        """Train byte-level BPE on ``texts``.

        Args:
            texts: training sentences (for a joint vocabulary pass source and target text).
            vocab_size: target vocabulary size, specials and the 256 byte symbols included; the
                result can be smaller when the text has too few distinct pairs to merge.
            min_frequency: minimum pair count for a merge.
        """
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers, trainers

        if vocab_size < len(SPECIAL_TOKENS) + 256:
            raise ValueError(f"BPETokenizer: vocab_size must be >= 260 (4 specials + 256 bytes), got {vocab_size}")
        tok = HFTokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=list(SPECIAL_TOKENS),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(texts, trainer=trainer)
        return cls(tok)

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials included."""
        return self._tok.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """BPE ids of ``text`` (no BOS/EOS)."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """BPE ids of many strings (parallel inside ``tokenizers``)."""
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` with special ids dropped."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=True)

    def save(self, path: str | Path) -> None:
        """Write the ``tokenizers`` JSON (plus ``"xformer_type": "bpe"``) to ``path`` atomically."""
        data = {**json.loads(self._tok.to_str()), "xformer_type": "bpe"}
        _atomic_write_text(Path(path), json.dumps(data, ensure_ascii=False))

    @classmethod
    def load(cls, path: str | Path) -> BPETokenizer:
        """Read a file written by :meth:`save` (or any ``tokenizers`` JSON with our specials)."""
        from tokenizers import Tokenizer as HFTokenizer

        data = json.loads(Path(path).read_text(encoding="utf-8"))
        data.pop("xformer_type", None)
        return cls(HFTokenizer.from_str(json.dumps(data)))

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size})"


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load a :class:`CharTokenizer` or :class:`BPETokenizer` from a JSON file written by ``save``."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return (CharTokenizer if data.get("type") == "char" else BPETokenizer).load(path)


def train_or_load_bpe(texts: Sequence[str], vocab_size: int, cache_dir: str | Path, name: str) -> BPETokenizer:
    """Load the BPE trained on exactly ``texts`` from ``cache_dir/tokenizers/bpe-<name>-v<vocab_size>-<hash>.json``,
    or train it (:meth:`BPETokenizer.train`) and write it there atomically (concurrent processes, e.g. DDP ranks,
    at worst train twice). ``hash``: 16 hex digits of a SHA-256 over the vocabulary size, a format version and
    every text in order, so different data or sizes never share a file.

    Args:
        texts: training sentences (train split only; source and target for a joint vocabulary).
        name: short data-set name for the file name (e.g. ``"multi30k-de-en"``).
    """
    h = hashlib.sha256(f"xformer-bpe-v1|{vocab_size}|{len(texts)}|".encode())
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\x00")
    path = Path(cache_dir).expanduser() / "tokenizers" / f"bpe-{name}-v{vocab_size}-{h.hexdigest()[:16]}.json"
    if path.is_file():
        try:
            return BPETokenizer.load(path)
        except Exception as e:  # a damaged cache file is rebuilt, not fatal
            log.warning("could not read cached tokenizer %s (%s); retraining", path, e)
    log.info("training BPE (vocab_size=%d) on %d texts -> %s", vocab_size, len(texts), path)
    tok = BPETokenizer.train(texts, vocab_size)
    tok.save(path)
    return tok


def _atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same folder and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; cache files are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
