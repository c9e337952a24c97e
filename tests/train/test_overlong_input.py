"""Input longer than the model's positions.

``xformer translate`` gives every input line an output line; a line longer than ``model.max_len``
(for learned or sinusoidal positions) is cut to fit and named, by line number, in a warning on stderr.
Evaluation (``mode=eval`` and the test splits after training) cuts over-long examples the same way,
for every model shape, instead of failing.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO
from tests.train.test_run import TINY, run
from xformer.model import DecoderOnly, EncoderDecoder, EncoderOnly, Learned, RoPE, Sinusoidal, decoding
from xformer.train.module import TransformerLitModule

PAD, BOS, EOS = 0, 1, 2
LONG = " ".join(["three hundred and twenty-one"] * 30)


@pytest.fixture(scope="module")
def learned_ckpt(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("learned")
    job = tmp / "job"
    res = run(
        [
            *TINY,
            "model/pe=learned",
            "model.max_len=64",
            "trainer.max_steps=2",
            "trainer.val_check_interval=2",
            "logger=csv",
            f"hydra.run.dir={job}",
        ],
        tmp,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return job / "checkpoints" / "last.ckpt"


@pytest.mark.slow  # 30-60 s: in `make test-slow`, out of `make test`'s 10-minute budget
def test_translate_cli_gives_every_line_an_output_and_names_the_long_one(learned_ckpt):
    from xformer.train.translate import load_checkpoint, translate

    lines = [LONG, "twelve", "", LONG + " again", "seven"]
    cli = subprocess.run(
        [sys.executable, "-m", "xformer.cli", "translate", "--ckpt", str(learned_ckpt)],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert "Traceback" not in cli.stderr
    out = cli.stdout.split("\n")
    assert out[-1] == "" and len(out[:-1]) == len(lines)
    warnings = [ln for ln in cli.stderr.splitlines() if ln.startswith("warning: line ")]
    assert [w.split(":")[1].strip() for w in warnings] == ["line 1", "line 4"]
    assert "model's 64 positions" in warnings[0]

    # each output line is what the model gives for that line alone (the short ones are unaffected),
    # and the long line's output is the translation of its first 63 tokens
    model, tokenizer, _ = load_checkpoint(learned_ckpt)
    for n in (1, 2, 4):
        assert out[n] == translate(model, tokenizer, [lines[n]])[0]
    ids = tokenizer.encode(LONG)[:63] + [EOS]
    src = torch.tensor([ids])
    want = decoding.greedy(model, src, BOS, EOS, PAD, decoding.max_output_len(64, 1.5, 10, 64))
    assert out[0] == tokenizer.decode(want[0])


class CharTok:
    """A one-character-per-token tokenizer (ids 4..) for in-process checks."""

    def encode(self, text):
        return [4 + (ord(c) % 20) for c in text]

    def decode(self, ids):
        return "".join(chr(ord("a") + i - 4) for i in ids)


@pytest.mark.parametrize("pe,limited", [(Learned, True), (Sinusoidal, True), (RoPE, False)])
def test_translate_cuts_only_where_positions_stop(pe, limited):
    from xformer.train.translate import translate

    torch.manual_seed(0)
    model = EncoderDecoder(
        24, 24, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, dropout=0.0, max_len=12, pe=pe
    ).eval()
    lines = ["abc", "x" * 11, "y" * 12, "z" * 40]
    warnings: list[str] = []
    out = translate(model, CharTok(), lines, warn=warnings.append)
    assert len(out) == len(lines)
    if limited:
        assert [w.split(":")[0] for w in warnings] == ["line 3", "line 4"]  # 11 chars + EOS fit; 12 do not
    else:
        assert warnings == []


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only", "encoder_only"])
@pytest.mark.parametrize("pe", [Learned, Sinusoidal])
def test_evaluation_cuts_overlong_examples_for_every_shape(arch, pe, caplog):
    cls = {"encoder_decoder": EncoderDecoder, "decoder_only": DecoderOnly, "encoder_only": EncoderOnly}[arch]
    torch.manual_seed(0)
    limit = 10
    model = cls(
        24, 24, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, dropout=0.0, max_len=limit, pe=pe
    ).eval()
    assert model.position_limit == limit
    module = TransformerLitModule(
        model, optimizer=None, lr_lambda=None, pad_id=PAD, bos_id=BOS, eos_id=EOS, metrics=["exact_match"]
    ).eval()
    lens = [4, 30, 9]  # source tokens incl. EOS; the second one is far too long
    src = torch.full((3, max(lens)), PAD)
    tgt = torch.full((3, max(lens) + 1), PAD)
    for b, n in enumerate(lens):
        src[b, :n] = torch.randint(4, 24, (n,))
        src[b, n - 1] = EOS
        tgt[b, 0], tgt[b, 1:n] = BOS, src[b, : n - 1]
        tgt[b, n] = EOS
    batch = {"src": src, "tgt": tgt, "idx": torch.arange(3), "tgt_text": ["a", "b", "c"]}

    fitted, cut = model.fit_to_positions(batch, PAD, EOS)
    s_len, t_len = (fitted["src"] != PAD).sum(1), (fitted["tgt"] != PAD).sum(1)
    if arch == "decoder_only":
        assert int((s_len + t_len).max()) <= limit
    else:
        assert int(s_len.max()) <= limit and int(t_len.max()) - 1 <= limit
    assert (fitted["src"][cut, s_len[cut] - 1] == EOS).all()
    assert cut[1] and not cut[0]
    assert torch.equal(fitted["src"][0, :4], src[0, :4])  # short examples untouched

    with torch.no_grad(), caplog.at_level("WARNING", logger="xformer"):
        module._eval_step(batch, "test", decode=True)
        out = module._eval_end("test", "@long")
    assert set(out) >= {"test/loss@long", "test/exact_match@long"}
    assert any("test@long: " in r.message and "example ids (0-based): 1" in r.message for r in caplog.records)


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_eval_mode_accepts_data_longer_than_the_checkpoint_and_train_mode_refuses(arch, caplog):
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from xformer.config.check import check_with_data
    from xformer.model import ConfigError

    cls = EncoderDecoder if arch == "encoder_decoder" else DecoderOnly
    model = cls(24, 24, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, max_len=10, pe=Learned)
    dm = SimpleNamespace(
        task="seq2seq",
        metrics=[],
        src_vocab_size=24,
        tgt_vocab_size=24,
        max_src_len=30,
        max_tgt_len=31,
        length_preserving=False,
    )
    with pytest.raises(ConfigError, match="model.max_len=10"):
        check_with_data(OmegaConf.create({"mode": "train", "objective": {"metric": "val/loss"}}), dm, model)
    with caplog.at_level("WARNING", logger="xformer"):
        check_with_data(OmegaConf.create({"mode": "eval", "objective": {"metric": "val/loss"}}), dm, model)
    assert any("cut to fit" in r.message for r in caplog.records)
