"""Reading text files (plain or gzip) with errors that name the file and line."""

from __future__ import annotations

import gzip
import logging
import zlib
from pathlib import Path

from xformer.data.errors import DataError

log = logging.getLogger(__name__)


def read_text(path: str | Path) -> str:
    """The whole text of a UTF-8 file, unchanged (line ends included); names ending in ``.gz`` are gunzipped.

    Raises:
        DataError: the file is missing, is not a readable gzip stream (corrupt or truncated), or
            contains bytes that are not valid UTF-8 (the message names the 1-based line number).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"file not found: {path}. Fix: check the path (or the data.root setting)")
    if path.name.endswith(".gz"):
        try:
            with gzip.open(path, "rb") as f:
                raw = f.read()
        except (OSError, EOFError, zlib.error) as e:
            raise DataError(
                f"{path} is not a valid gzip file ({type(e).__name__}: {e}). Fix: delete it and "
                f"download it again (or re-compress it with gzip)"
            ) from None
    else:
        raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise DataError(
            f"{path}: line {line} is not valid UTF-8 (byte offset {e.start}). Fix: re-encode the "
            f"file as UTF-8, e.g. `iconv -f latin1 -t utf-8`"
        ) from None


def read_lines(path: str | Path) -> list[str]:
    """The lines of a UTF-8 (optionally gzipped) file without their ``\\n`` or ``\\r\\n`` ends (a final line
    end adds no empty line; other whitespace is kept). Raises: DataError as :func:`read_text`."""
    lines = read_text(path).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> tuple[list[str], list[str]]:
    """``(src_lines, tgt_lines)`` of two line-aligned files (plain or ``.gz``, one sentence per line), each line
    whitespace-stripped; pairs with an empty side are skipped (their count logged as a warning).

    Raises:
        DataError: a file is missing/corrupt/not UTF-8 (see :func:`read_text`), or the two files
            have different line counts (the message names both files and their counts).
    """
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise DataError(
            f"parallel files are not aligned: {src_path} has {len(src)} lines but {tgt_path} has "
            f"{len(tgt)} lines. Fix: give line-aligned files (line i of one translates line i of "
            f"the other)"
        )
    return _drop_empty_pairs([s.strip() for s in src], [t.strip() for t in tgt], f"{src_path} / {tgt_path}")


def read_tsv(path: str | Path) -> tuple[list[str], list[str]]:
    """``(src_lines, tgt_lines)`` of a parallel corpus stored as ``source<TAB>target`` lines, each side
    whitespace-stripped; blank lines and pairs with an empty side are skipped (count logged as a warning).

    Raises:
        DataError: the file is missing/corrupt/not UTF-8, or a non-blank line does not contain
            exactly one TAB (the message names the file and the line number).
    """
    src, tgt = [], []
    for i, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            src.append("")
            tgt.append("")
            continue
        parts = line.split("\t")
        if len(parts) != 2:
            raise DataError(
                f"{path}: line {i} has {len(parts) - 1} TAB characters, expected exactly 1 "
                f"(format: source<TAB>target). Fix: remove or escape extra TABs"
            )
        src.append(parts[0].strip())
        tgt.append(parts[1].strip())
    return _drop_empty_pairs(src, tgt, str(path))


def _drop_empty_pairs(src: list[str], tgt: list[str], what: str) -> tuple[list[str], list[str]]:
    """Remove pairs where either side is empty, logging how many were removed."""
    keep = [i for i, (s, t) in enumerate(zip(src, tgt, strict=True)) if s and t]
    n_empty = len(src) - len(keep)
    if n_empty:
        log.warning("%s: skipped %d pair(s) with an empty side", what, n_empty)
        src, tgt = [src[i] for i in keep], [tgt[i] for i in keep]
    return src, tgt
