"""The table of config rules: one rule per key, each kind of rule refusing with one line."""

import pytest
from omegaconf import OmegaConf

from xformer.model import ConfigError
from xformer.jobs.validate import RULES, check_rules


@pytest.mark.parametrize("key,value,message", [
    ("model.n_heads", "four", "model.n_heads=four: expected an integer >= 1"),
    ("model.d_head", 0, "model.d_head=0: must be >= 1"),
    ("model.dropout", 1.0, "model.dropout=1.0: must be in [0.0, 1.0)"),
    ("optim.lr", 0.0, "optim.lr=0.0: must be in (0.0, inf)"),
    ("loss.label_smoothing", "x", "loss.label_smoothing=x: expected a number"),
    ("model.attn_scale", 1, "model.attn_scale=1: expected true or false"),
    ("objective.mode", "best", "objective.mode=best: unknown. Fix: use min or max"),
    ("trainer.gradient_clip_algorithm", "max",
     "trainer.gradient_clip_algorithm=max: unknown. Fix: use norm or value"),
])
def test_each_kind_of_rule_refuses_with_one_line(key, value, message):
    cfg = OmegaConf.create({})
    OmegaConf.update(cfg, key, value, force_add=True)
    with pytest.raises(ConfigError) as err:
        check_rules(cfg)
    assert str(err.value) == message


def test_null_absent_and_valid_values_pass():
    cfg = OmegaConf.create({"model": {"d_head": None, "dropout": 0.1}, "decode": {"val_batches": None},
                            "trainer": {"gradient_clip_algorithm": None}, "objective": {"mode": "max"}})
    check_rules(cfg)


def test_keys_with_a_rule_include_those_once_checked_twice():
    assert {"model.dropout", "loss.label_smoothing", "optim.lr", "optim.warmup_steps", "decode.beam_size",
            "mode", "objective.mode"} <= set(RULES)
