"""fetch(): checksummed, cached, atomic downloads (served from a local HTTP server)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from xformer.data.download import fetch, resolve_cache_dir
from xformer.data.errors import DataError
from xformer.data.multi30k import SHA256
from xformer.data.tinyshakespeare import SHA256 as SHAKESPEARE_SHA256

from .helpers import shared

FNAME = "val.en.gz"


def test_fetch_downloads_once_and_verifies(data_server, tmp_path):
    url = data_server.url + "multi30k/" + FNAME
    path = fetch(url, SHA256[FNAME], tmp_path, FNAME)
    assert path == tmp_path / FNAME
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SHA256[FNAME]
    assert data_server.requests == ["/multi30k/" + FNAME]
    assert fetch(url, SHA256[FNAME], tmp_path, FNAME) == path
    assert len(data_server.requests) == 1, "a cached file with the right hash is not downloaded again"


def test_wrong_checksum_raises_and_leaves_nothing(data_server, tmp_path):
    url = data_server.url + "multi30k/" + FNAME
    wrong = "0" * 64
    with pytest.raises(DataError) as err:
        fetch(url, wrong, tmp_path / "cache", FNAME)
    msg = str(err.value)
    assert FNAME in msg and wrong in msg and SHA256[FNAME] in msg and "Fix" in msg
    assert "\n" not in msg
    assert isinstance(err.value, ValueError)
    assert list((tmp_path / "cache").iterdir()) == [], "no partial or unverified file may remain"


def test_corrupted_cached_file_is_replaced(data_server, tmp_path):
    (tmp_path / FNAME).write_bytes(b"garbage")
    path = fetch(data_server.url + "multi30k/" + FNAME, SHA256[FNAME], tmp_path, FNAME)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SHA256[FNAME]
    assert len(data_server.requests) == 1


def test_http_error_is_data_error(data_server, tmp_path):
    with pytest.raises(DataError, match="could not download nope.gz"):
        fetch(data_server.url + "multi30k/nope.gz", "1" * 64, tmp_path, "nope.gz")


def test_bad_hash_format(tmp_path):
    with pytest.raises(DataError, match="SHA-256"):
        fetch("http://127.0.0.1:1/x", "abc", tmp_path, "x")


def test_default_cache_dir(monkeypatch):
    monkeypatch.setenv("XFORMER_CACHE", "/some/where")
    assert resolve_cache_dir(None) == Path("/some/where")
    monkeypatch.delenv("XFORMER_CACHE")
    assert resolve_cache_dir(None) == Path.home() / ".cache" / "xformer"


def test_checksums_match_the_shared_readme():
    readme = (shared("README.md")).read_text()
    listed = dict(
        reversed(line.split()) for line in readme.splitlines() if len(line.split()) == 2 and len(line.split()[0]) == 64
    )
    assert {f"multi30k/{k}": v for k, v in SHA256.items()} | {"tinyshakespeare/input.txt": SHAKESPEARE_SHA256} == listed
    for rel, sha in listed.items():  # and the shared copies are what the README says
        assert hashlib.sha256(shared(*rel.split("/")).read_bytes()).hexdigest() == sha
