"""The W&B API-key check looks for the key of the server W&B will talk to (``WANDB_BASE_URL``)."""

import os

import pytest

from xformer.jobs.wandb_run import wandb_has_api_key


@pytest.fixture
def netrc_file(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    path = tmp_path / ".netrc"

    def write(host: str, password: str = "k" * 40) -> None:
        path.write_text(f"machine {host}\n  login user\n  password {password}\n")
        os.chmod(path, 0o600)

    return write


@pytest.mark.usefixtures("netrc_file")
def test_key_in_the_environment_counts(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_has_api_key()


def test_default_server_key_is_found_in_netrc(netrc_file):
    assert not wandb_has_api_key()  # no .netrc yet
    netrc_file("api.wandb.ai")
    assert wandb_has_api_key()


def test_self_hosted_server_key_is_found_under_its_own_host(netrc_file, monkeypatch):
    netrc_file("wandb.example.org:8443")
    assert not wandb_has_api_key()  # default server: no key for it
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.org:8443")
    assert wandb_has_api_key()
    monkeypatch.setenv("WANDB_BASE_URL", "https://other.example.org")
    assert not wandb_has_api_key()


def test_netrc_variable_and_empty_password(netrc_file, tmp_path, monkeypatch):
    other = tmp_path / "elsewhere"
    other.write_text("machine api.wandb.ai\n  login user\n  password k\n")
    monkeypatch.setenv("NETRC", str(other))
    assert wandb_has_api_key()
    netrc_file("api.wandb.ai", password='""')
    monkeypatch.delenv("NETRC")
    assert not wandb_has_api_key()
