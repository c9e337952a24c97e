"""The table of config rules: one rule per key, each kind of rule refusing with one line."""

import pytest
from omegaconf import OmegaConf

from xformer.jobs.validate import RULES, check_rules
from xformer.model import ConfigError


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("model.n_heads", "four", "model.n_heads=four: expected an integer >= 1"),
        ("model.d_head", 0, "model.d_head=0: must be >= 1"),
        ("model.dropout", 1.0, "model.dropout=1.0: must be in [0.0, 1.0)"),
        ("optim.lr", 0.0, "optim.lr=0.0: must be in (0.0, inf)"),
        ("loss.label_smoothing", "x", "loss.label_smoothing=x: expected a number"),
        ("model.attn_scale", 1, "model.attn_scale=1: expected true or false"),
        ("objective.mode", "best", "objective.mode=best: unknown. Fix: use min or max"),
        (
            "trainer.gradient_clip_algorithm",
            "max",
            "trainer.gradient_clip_algorithm=max: unknown. Fix: use norm or value",
        ),
    ],
)
def test_each_kind_of_rule_refuses_with_one_line(key, value, message):
    cfg = OmegaConf.create({})
    OmegaConf.update(cfg, key, value, force_add=True)
    with pytest.raises(ConfigError) as err:
        check_rules(cfg)
    assert str(err.value) == message


def test_null_absent_and_valid_values_pass():
    cfg = OmegaConf.create(
        {
            "model": {"d_head": None, "dropout": 0.1},
            "decode": {"val_batches": None},
            "trainer": {"gradient_clip_algorithm": None},
            "objective": {"mode": "max"},
        }
    )
    check_rules(cfg)


def test_keys_with_a_rule_include_those_once_checked_twice():
    assert {
        "model.dropout",
        "loss.label_smoothing",
        "optim.lr",
        "optim.warmup_steps",
        "decode.beam_size",
        "mode",
        "objective.mode",
    } <= set(RULES)


# -- issue 23: the attention mechanism against the stacks it serves ------------------------------------
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
    from xformer.jobs.validate import check_config

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
    from xformer.jobs.validate import check_config

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
