"""``python run.py --help`` is xformer's own text through Hydra's help template: what it
is, example commands (a run, a sweep with seeds, a report, a claim, resume), where results land, every
config group with its options and each option's own first YAML line -- an option a user adds in their
own search path too -- and no config dump."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def _help(tmp_path, *args):
    res = subprocess.run(
        [sys.executable, str(REPO / "run.py"), *args, "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def test_help_lists_groups_options_examples_and_no_config_dump(tmp_path):
    out = _help(tmp_path)
    assert out.startswith("xformer: the design claims of the Transformer")
    for example in ("seed=1,2,3 -m", "xformer report multirun/", "xformer claims run", "ckpt_path=last"):
        assert example in out, example
    assert "metrics.json" in out and "hydra/launcher=joblib_cpu" in out
    mixers = " ".join(sorted(p.stem for p in (REPO / "conf" / "model" / "mixer").glob("*.yaml")))
    assert f"  model/mixer: {mixers}" in out
    assert "      lstm                   An LSTM in place of self-attention" in out
    assert "      post                   Post-LN: LayerNorm(x + sublayer(x)), the original placement" in out
    assert "is powered by Hydra" not in out and "d_model: 128" not in out  # Hydra's template and the dump are gone
    assert len(out.splitlines()) < 160


def test_an_option_of_the_users_own_shows_up_with_its_line(tmp_path):
    conf = tmp_path / "my_conf" / "model" / "pe"
    conf.mkdir(parents=True)
    (conf / "mine.yaml").write_text("# My positional scheme: a learned slope per head\n_target_: x.Y\n")
    out = _help(tmp_path, f"hydra.searchpath=[file://{tmp_path / 'my_conf'}]")
    assert "  model/pe: alibi learned mine none rope sinusoidal t5" in out
    assert "      mine                   My positional scheme: a learned slope per head" in out


def test_every_xformer_command_help_is_plain_text(capsys):
    """The sub-commands' help comes from their docstrings (reStructuredText); what the terminal shows
    has no ``literal`` quotes and no :role:`target` markup."""
    import re

    from xformer.cli import COMMANDS, main

    for command in COMMANDS:
        try:
            code = main([command, "--help"])
        except SystemExit as done:  # argparse's own exit; some commands return its code instead
            code = done.code
        assert code in (0, None), command
        out = capsys.readouterr().out
        assert out.strip() and not re.search(r"``|:[a-z]+:`", out), (command, out)


def test_plain_drops_roles_and_literal_quotes():
    from xformer.help import plain

    text = "see :mod:`xformer.report.export` and :func:`~xformer.jobs.sweep.write` in ``report.md``"
    assert plain(text) == "see xformer.report.export and xformer.jobs.sweep.write in report.md"
