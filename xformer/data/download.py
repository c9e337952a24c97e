"""Checksummed, cached downloads of public data files (thin wrapper around ``pooch``)."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import pooch

from xformer.data.errors import DataError

log = logging.getLogger(__name__)

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def resolve_cache_dir(cache_dir: str | Path | None) -> Path:
    """``cache_dir`` as a ``Path`` (``~`` expanded); when None, ``$XFORMER_CACHE`` if set and non-empty, else
    ``~/.cache/xformer`` (not created here)."""
    if cache_dir is None:
        cache_dir = os.environ.get("XFORMER_CACHE") or Path.home() / ".cache" / "xformer"
    return Path(cache_dir).expanduser()


def fetch(url: str, sha256: str, cache_dir: str | Path, fname: str) -> Path:
    """Download ``url`` once to ``cache_dir/fname`` (folder created if missing) and verify its SHA-256 (64 hex
    digits, of the file as stored at ``url``); return the local path. ``pooch.retrieve`` downloads nothing when the
    cached file has the right hash, else hashes the download in a temporary file before moving it into place, so an
    interrupted or corrupt download never leaves a file under ``fname``.

    Raises:
        DataError: a malformed ``sha256``; a failed download (no network, HTTP error); a hash mismatch (the
            message names the file, both hashes and the fix).
    """
    sha256 = sha256.lower().removeprefix("sha256:")
    if not _SHA256.match(sha256):
        raise DataError(f"fetch({fname!r}): {sha256!r} is not a SHA-256 hex digest (64 hex digits)")
    cache_dir = Path(cache_dir).expanduser()
    cache_dir.mkdir(parents=True, exist_ok=True)
    try:
        path = pooch.retrieve(url, known_hash=f"sha256:{sha256}", fname=fname, path=cache_dir, progressbar=False)
    except ValueError as e:  # pooch.hashes.hash_matches: "... expected X but got Y ..."
        if "does not match the known hash" not in str(e):
            raise
        got = re.search(r"but got ([0-9a-fA-F]+)", str(e))
        actual = got.group(1) if got else "unknown"
        raise DataError(
            f"checksum mismatch for {fname} downloaded from {url}: expected sha256 {sha256}, "
            f"got {actual}; the download was deleted. Fix: retry (the download may be corrupt), "
            f"or if the upstream file changed on purpose, update the sha256 in xformer/data, or "
            f"put a verified copy in a folder and set data.root to it"
        ) from None
    except Exception as e:  # requests.HTTPError, ConnectionError, ftp errors ...
        raise DataError(
            f"could not download {fname} from {url} into {cache_dir}: {type(e).__name__}: {e}. "
            f"Fix: check the network, or download the file yourself and set data.root to its folder"
        ) from e
    return Path(path)
