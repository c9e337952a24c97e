"""The config checked against the code it configures
(``xformer/config/check.py``).

Through ``run.py`` as a user runs it: the mistakes that would otherwise train silently (a ``+`` typo of a group,
of a root key, of a key of a node without ``_target_``) and the extension mistakes that would end in a
long traceback (a module not on the path, a misspelt class) are each one ``error:`` line, all of a
config's mistakes at once, before anything is built; and a throwaway option -- one class and one YAML in
a temporary folder, nothing else touched -- has the range annotated on its parameter enforced.
"""

from __future__ import annotations

import textwrap

import pytest

from tests.scaling.common import TINY, run_py

ERR = "error: "


def _errors(res) -> list[str]:
    return [line for line in res.stderr.splitlines() if line.startswith(ERR)]


@pytest.mark.parametrize(
    "override,needle",
    [
        (
            "+model/nrm=pre",
            "there is no config group model/nrm (no folder conf/model/nrm/ in the config search path). "
            "Fix: did you mean model/norm? (then model/norm=pre, without +)",
        ),
        ("+sed=3", "+sed=3: the root config has no key 'sed', and 'sed' is read by nothing. Fix: did you mean seed?"),
        pytest.param(
            "+optim.weight_decya=0.1",
            "+optim.weight_decya=0.1: the optim node has no key 'weight_decya'",
            marks=pytest.mark.slow,
        ),
        (
            "+model.ffn_ratoi=4",
            "model.ffn_ratoi (from the command line): not a parameter of xformer.model.EncoderDecoder. "
            "Fix: drop it, or did you mean model.ffn_ratio?",
        ),
        pytest.param(
            "+model.pe.max_lne=9",
            "model.pe.max_lne (from the command line): not a parameter of xformer.model.Sinusoidal",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "+trainer.max_stpes=3",
            "trainer.max_stpes (from the command line): not a parameter of lightning.Trainer. "
            "Fix: drop it, or did you mean trainer.max_steps?",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "+data.n_trian=5",
            "data.n_trian (from the command line): not a parameter of xformer.data.numbers.NumbersDataModule",
            marks=pytest.mark.slow,
        ),
        pytest.param("model.mixer.stacks=bth", "model.mixer.stacks=bth", marks=pytest.mark.slow),
    ],
)
def test_a_typo_is_one_error_line_before_training(override, needle, tmp_path):
    res = run_py([*TINY, "logger=none", override, f"hydra.run.dir={tmp_path / 'job'}"], cwd=tmp_path, tmp_path=tmp_path)
    assert res.returncode == 2, res.stderr[-2000:]
    errors = _errors(res)
    assert len(errors) == 1 and needle in errors[0], res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "job" / "metrics.json").exists()


def test_every_mistake_of_a_config_is_reported_at_once(tmp_path):
    res = run_py(
        [
            *TINY,
            "logger=none",
            "model/mixer=conv",
            "model.mixer.kernel=abc",
            "+model.ffn_ratoi=4",
            "+model.mixer.dilaton_growth=2",
        ],
        cwd=tmp_path,
        tmp_path=tmp_path,
    )
    errors = _errors(res)
    assert res.returncode == 2 and len(errors) == 3, res.stderr[-2000:]
    assert any("model.mixer.kernel=abc (from the command line): must be an integer" in e for e in errors)
    assert any("did you mean model.ffn_ratio?" in e for e in errors)
    assert any("did you mean model.mixer.dilation_growth?" in e for e in errors)


def _pkg(tmp_path, target: str, body: str):
    pkg = tmp_path / "my_pkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "my_ffn.py").write_text(textwrap.dedent(body))
    conf = tmp_path / "my_conf" / "model" / "ffn"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "gated.yaml").write_text(f"_target_: {target}\n_partial_: true\ngate: 0.5\n")
    return [f"hydra.searchpath=[file://{tmp_path / 'my_conf'}]", "model/ffn=gated"]


FFN = '''
    from typing import Annotated

    import torch

    from xformer.config_types import Range


    class Gated(torch.nn.Module):
        """A throwaway FFN with one parameter of its own, its range annotated."""

        def __init__(self, d_model, d_ff, dropout=0.0, gate: Annotated[float, Range(ge=0, lt=1)] = 0.5):
            super().__init__()
            self.gate = gate
            self.lin = torch.nn.Linear(d_model, d_model)

        def forward(self, x):
            return self.gate * self.lin(x)
'''


@pytest.mark.parametrize(
    "target,pythonpath,needle",
    [
        ("my_pkg.my_ffn.Gated", False, "cannot import module my_pkg"),
        ("my_pkg.my_ffn.Gatd", True, "module my_pkg.my_ffn has no Gatd. Fix: did you mean my_pkg.my_ffn.Gated?"),
    ],
    ids=["not-on-pythonpath", "misspelt-class"],
)
def test_an_extension_mistake_is_one_line_naming_the_yaml_and_the_cause(target, pythonpath, needle, tmp_path):
    args = _pkg(tmp_path, target, FFN)
    extra = {"PYTHONPATH": str(tmp_path)} if pythonpath else {}
    res = run_py([*TINY, "logger=none", *args], cwd=tmp_path.parent, tmp_path=tmp_path, **extra)
    errors = _errors(res)
    assert res.returncode == 2 and len(errors) == 1, res.stderr[-2000:]
    assert f"model.ffn._target_={target} (model/ffn/gated.yaml in the config search path): {needle}" in errors[0]
    if not pythonpath:
        assert "is the package on PYTHONPATH" in errors[0]
    assert "Traceback" not in res.stderr


@pytest.mark.slow  # 30-60 s: in `make test-slow`, out of `make test`'s 10-minute budget
def test_a_throwaway_option_has_its_annotated_range_enforced(tmp_path):
    """One class and one YAML outside the repository: the range on its own parameter is enforced
    with no other file touched; a value inside it trains."""
    args = _pkg(tmp_path, "my_pkg.my_ffn.Gated", FFN)
    env = {"PYTHONPATH": str(tmp_path)}
    bad = run_py([*TINY, "logger=none", *args, "model.ffn.gate=1.5"], cwd=tmp_path, tmp_path=tmp_path, **env)
    errors = _errors(bad)
    assert bad.returncode == 2 and len(errors) == 1, bad.stderr[-2000:]
    assert (
        "model.ffn.gate=1.5 (from the command line): must be < 1. Fix: give a number in [0, 1) "
        "(my_pkg.my_ffn.Gated gate)" in errors[0]
    )
    ok = run_py(
        [*TINY, "logger=none", *args, "model.ffn.gate=0.25", "trainer.max_steps=1", f"hydra.run.dir={tmp_path / 'ok'}"],
        cwd=tmp_path,
        tmp_path=tmp_path,
        **env,
    )
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert (tmp_path / "ok" / "metrics.json").is_file()


def test_a_callback_choice_is_read_from_its_literal_annotation():
    """``ValidationLine(mode: Literal["min", "max"])``: a wrong mode is refused from the annotation alone."""
    from hydra import compose, initialize_config_dir

    from tests.conftest import REPO
    from xformer.config.check import check_targets
    from xformer.errors import ConfigError

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["callbacks.validation_line.mode=maximum"])
    with pytest.raises(ConfigError, match=r"callbacks.validation_line.mode=maximum: must be one of min, max"):
        check_targets(cfg, early=False)
