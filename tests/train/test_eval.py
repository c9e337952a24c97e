"""mode=eval reproduces a run's test metrics from its checkpoint; xformer translate decodes the same."""

import json
import os
import subprocess
import sys

import pytest
from hydra.utils import instantiate

from tests.conftest import REPO
from tests.train.test_run import TINY, run
from xformer.train.translate import load_checkpoint, translate


@pytest.mark.slow  # suite time: ~20 s
def test_eval_mode_and_translate_reproduce_the_test_metrics(tmp_path):
    job = tmp_path / "job"
    res = run(
        [*TINY, "trainer.max_steps=30", "trainer.val_check_interval=15", "logger=csv", f"hydra.run.dir={job}"], tmp_path
    )
    assert res.returncode == 0, res.stderr[-2000:]
    trained = json.loads((job / "metrics.json").read_text())
    best = trained["best"]["checkpoint"]
    res = run(["mode=eval", f"ckpt_path={best}", "logger=csv", f"hydra.run.dir={tmp_path / 'eval'}"], tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    evaluated = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    for key in ("test/loss", "test/acc", "test/exact_match", "test/exact_match@long"):
        assert abs(evaluated["metrics"][key] - trained["metrics"][key]) < 1e-6, key
    assert evaluated["config"]["model"]["d_model"] == 32  # taken from the checkpoint, not the defaults

    model, tokenizer, cfg = load_checkpoint(best)
    os.environ.setdefault("XFORMER_CACHE", str(tmp_path / "cache"))
    dm = instantiate(cfg.data)
    dm.setup("test")
    pairs = [
        (ex["src_text"], ex["tgt_text"]) for ex in (dm.test_sets["test"][i] for i in range(len(dm.test_sets["test"])))
    ]
    hyps = translate(model, tokenizer, [s for s, _ in pairs])
    exact = sum(h.strip() == r.strip() for h, (_, r) in zip(hyps, pairs, strict=False)) / len(pairs)
    assert abs(exact - trained["metrics"]["test/exact_match"]) < 1e-9

    cli = subprocess.run(
        [sys.executable, "-m", "xformer.cli", "translate", "--ckpt", best],
        input="\n".join(s for s, _ in pairs[:5]) + "\n",
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.splitlines() == hyps[:5]
    bad = subprocess.run(
        [sys.executable, "-m", "xformer.cli", "translate", "--ckpt", str(tmp_path / "nope.ckpt")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert bad.returncode == 2 and "no such file" in bad.stderr


def test_translate_rejects_a_corrupt_checkpoint_in_one_line(tmp_path, capsys):
    from xformer.cli import main

    trunc = tmp_path / "trunc.ckpt"
    trunc.write_bytes(b"PK\x03\x04" + b"\x00" * 100)  # the start of a zip, cut short
    assert main(["translate", "--ckpt", str(trunc)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a readable checkpoint" in err[0], err


@pytest.mark.parametrize("flag", [["--beam", "0"], ["--alpha", "-1"]])
def test_translate_rejects_bad_decoding_flags(flag, tmp_path, capsys):
    from xformer.cli import main

    assert main(["translate", "--ckpt", str(tmp_path / "any.ckpt"), *flag]) == 2
    assert capsys.readouterr().err.startswith(f"error: {flag[0]}=")


def test_unknown_xformer_command_says_so(capsys):
    from xformer.cli import main

    assert main(["frobnicate"]) == 2
    assert "error: unknown command 'frobnicate'" in capsys.readouterr().err


def test_translate_refuses_a_decoder_only_checkpoint_in_one_line(capsys, monkeypatch):
    import io

    from omegaconf import OmegaConf

    from xformer.cli import main
    from xformer.model import DecoderOnly
    from xformer.train import translate

    model = DecoderOnly(src_vocab_size=20, tgt_vocab_size=20, d_model=8, n_heads=2, n_decoder_layers=1)
    cfg = OmegaConf.create({"decode": {"beam_size": 1, "alpha": 0.6, "max_len_a": 1.0, "max_len_b": 2}})
    monkeypatch.setattr(translate, "load_checkpoint", lambda _path: (model, None, cfg))
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))
    assert main(["translate", "--ckpt", "lm.ckpt"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "encoder_decoder" in err[0] and "DecoderOnly" in err[0], err
