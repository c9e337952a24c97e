"""Shared fixtures for the data-layer tests: data copies, a local HTTP server, a private cache."""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

import pytest

from .helpers import shared


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Never touch ~/.cache/xformer: point $XFORMER_CACHE at a temporary folder; no proxies."""
    monkeypatch.setenv("XFORMER_CACHE", str(tmp_path_factory.mktemp("xformer_cache")))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


class _Server:
    """A threaded ``http.server`` on 127.0.0.1 serving one folder; records request paths."""

    def __init__(self, directory: Path) -> None:
        self.requests: list[str] = []
        outer = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                outer.requests.append(self.path)
                super().do_GET()

            def log_message(self, *args):  # keep test output clean
                pass

        handler = functools.partial(Handler, directory=str(directory))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def data_server():
    """Local HTTP server over the shared data folder (skips when the folder is absent)."""
    server = _Server(shared())
    yield server
    server.close()


@pytest.fixture(scope="session")
def multi30k_dm(tmp_path_factory):
    """Multi30k (de->en, BPE 8000) read from the shared copy, set up once per session."""
    from xformer.data.multi30k import Multi30kDataModule

    root = shared("multi30k")
    dm = Multi30kDataModule(root=str(root), cache_dir=str(tmp_path_factory.mktemp("m30k_cache")))
    dm.setup()
    return dm
