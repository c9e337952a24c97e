"""Single-key ranges and choices come from annotations: one home per range, one line per mistake."""

import re

import pytest
from hydra import compose, initialize_config_dir

from tests.conftest import REPO
from xformer.config.check import check_config_first, check_static
from xformer.model import ConfigError


def _compose(overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=overrides)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            ["model.n_heads=four"],
            r"^model.n_heads=four: must be an integer\. Fix: give an integer ≥ 1 "
            r"\(xformer.model.\w+ n_heads\)$",
        ),
        (["model.attn_scale=1"], r"^model.attn_scale=1: must be true or false"),
        (["loss.label_smoothing=x"], r"^loss.label_smoothing=x: must be a number"),
        (
            ["loss.label_smoothing=1.0"],
            r"^loss.label_smoothing=1.0: must be < 1\. Fix: give a number in \[0, 1\) \(.*\)$",
        ),
        (["optim.lr=0"], r"^optim.lr=0: must be > 0"),
        (["objective.mode=best"], r"^objective.mode=best: must be one of min, max"),
        (["seed=-1"], r"^seed=-1: must be >= 0"),
        (["mode=evaluate"], r"^mode=evaluate: must be one of train, eval"),
        (["decode.beam_size=0"], r"^decode.beam_size=0: must be >= 1\. Fix: .* \(xformer.train.decode.DecodeSettings"),
        (
            ["optim.warmup_steps=-1"],
            r"^optim.scheduler.warmup_steps=-1 \(from \$\{optim.warmup_steps\}\): must be >= 0",
        ),
    ],
)
def test_each_range_and_choice_comes_from_an_annotation(overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        check_config_first(_compose(overrides))
    assert "\n" not in str(err.value)


def test_keys_without_a_class_are_checked_in_stage_one():
    """The root's ``seed``/``mode``, ``objective.*`` and ``optim.lr`` are declared as signatures in
    :mod:`xformer.config.check`, so their mistakes come before torch is imported."""
    with pytest.raises(ConfigError) as err:
        check_static(_compose(["seed=-1", "objective.mode=best", "optim.lr=0"]))
    assert str(err.value).count("\nerror: ") == 2  # all three at once


def test_the_config_check_names_no_option_of_a_config_group():
    """No central list: no option of any group under conf/ is named in the config check,
    except the package names of the logger-package rule."""
    conf = REPO / "conf"
    skip = ("experiment", "hydra", "scale", "hparams_search")
    options = {
        p.stem for p in conf.rglob("*.yaml") if p.parent != conf and p.relative_to(conf).parts[0] not in skip
    } - {"default", "none", "full"}  # ordinary words of Python code
    path = REPO / "xformer" / "config" / "check.py"
    # pip package names and Lightning's accelerator names, not options of a group
    text = re.sub(r"_(LOGGER_PACKAGES|ACCELERATORS) = \{.*?\n\}", "", path.read_text(), flags=re.S)
    assert "def check_static" in text  # the module that holds the rules
    named = sorted(o for o in options if re.search(rf"\b{re.escape(o)}\b", text))
    assert not named, (path.name, named)


# -- the attention mechanism against the stacks it serves ---------------------------------------------
@pytest.mark.parametrize(
    "overrides,message",
    [
        (["model/mixer=linear", "model/pe=alibi"], "positional scheme ALiBi adds a bias"),
        (["model/mixer=linear", "model/pe=t5"], "positional scheme T5RelativeBias adds a bias"),
        (["model/mixer=linear", "model/attention=local"], "pattern LocalAttention masks"),
        (["model/mixer=linear", "model/arch=decoder_only", "model/attention=local"], "on the decoder: pattern"),
        (
            ["model/mixer=gqa", "model/arch=decoder_only", "model.mixer.stacks=encoder"],
            "model.mixer.stacks=encoder: model/arch=decoder_only has no encoder stack",
        ),
        (["model/mixer=gqa", "model.n_kv_heads=3"], "model.n_kv_heads=3: must divide model.n_heads=4"),
        (["model.n_kv_heads=2"], "model.n_kv_heads=2: only model/mixer=gqa uses it"),
        (["model.mixer.stacks=all"], "model.mixer.stacks=all: unknown"),
    ],
)
def test_a_mixer_that_cannot_apply_is_refused_before_training(overrides, message, tmp_path):
    from hydra import compose, initialize_config_dir

    from tests.conftest import REPO
    from xformer.config.check import check_config

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                *overrides,
                f"paths.output_dir={tmp_path}",
                f"paths.root_dir={tmp_path}",
                f"paths.cache_dir={tmp_path / 'cache'}",
            ],
        )
    with pytest.raises(ConfigError) as err:
        check_config(cfg)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "overrides",
    [
        ["model/mixer=linear", "model/pe=rope"],
        ["model/mixer=linear", "model/attention=local", "model.mixer.stacks=decoder"],
        ["model/mixer=mqa"],
        ["model/mixer=gqa", "model.n_kv_heads=2"],
    ],
)
def test_mixers_that_apply_pass(overrides, tmp_path):
    from hydra import compose, initialize_config_dir

    from tests.conftest import REPO
    from xformer.config.check import check_config

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                *overrides,
                f"paths.output_dir={tmp_path}",
                f"paths.root_dir={tmp_path}",
                f"paths.cache_dir={tmp_path / 'cache'}",
            ],
        )
    check_config(cfg)
