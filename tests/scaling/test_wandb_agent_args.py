"""Values from a W&B sweep agent arrive as the values the sweep file holds.

The agent's command is built with wandb's own ``create_sweep_command_args`` (what ``wandb agent``
calls) and its macro substitution; run.py expands the ``${args_json}`` argument
(:func:`xformer.config.overrides.expand_json_args`) and Hydra composes the config. Reference: the
sweep file's values as YAML reads them (the W&B CLI reads it the same way).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from xformer.config.overrides import expand_json_args, hydra_literal

REPO = Path(__file__).resolve().parents[2]

SWEEP = """
parameters:
  model.d_qk: {values: [null, 6]}
  trainer.deterministic: {value: true}
  trainer.enable_progress_bar: {value: false}
  optim.lr: {value: 3.0e-5}
  optim.optimizer.betas: {value: [0.8, 0.95]}
  tags: {value: ["a b, c=d", "x"]}
  +probe.negative: {value: -3}
  +probe.scientific: {value: -1.5e-12}
  +probe.text: {value: "a b, c=d"}
  +probe.quote: {value: "it's 'quoted' \\\\"}
  +probe.null_text: {value: "null"}
  +probe.number_text: {value: "4"}
  +probe.nested: {value: {a: [1, null], b: "two words"}}
  +probe.empty_list: {value: []}
command: [python, run.py, "${args_json}"]
"""


def agent_args(spec: dict, macro: str) -> list[str]:
    """The arguments after ``run.py`` that ``wandb agent`` passes for the first value of each
    parameter, with ``macro`` (``${args_json}`` or ``${args_no_hyphens}``) as the command's last item."""
    from wandb.sdk.launch.sweeps import utils as sweep_utils

    params = {k: {"value": v["values"][0] if "values" in v else v["value"]} for k, v in spec["parameters"].items()}
    sweep_vars = sweep_utils.create_sweep_command_args({"args": params})
    return list(sweep_vars[macro[2:-1]])


def _compose(overrides: list[str]):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=[o for o in overrides if not o.startswith("hydra.")])


def _value(cfg, key: str):
    node = OmegaConf.select(cfg, key.lstrip("+"))
    return OmegaConf.to_container(node) if OmegaConf.is_config(node) else node


def test_agent_values_arrive_as_the_sweep_files_values():
    """null, booleans, lists, scientific and negative numbers, strings with spaces, commas, ``=``,
    quotes and backslashes, strings that look like null or numbers, nested mappings."""
    spec = yaml.safe_load(SWEEP)
    args = agent_args(spec, "${args_json}")
    assert len(args) == 1 and args[0].startswith("{")  # one JSON argument
    cfg = _compose(expand_json_args(args))
    for key, param in spec["parameters"].items():
        want = param["values"][0] if "values" in param else param["value"]
        assert _value(cfg, key) == want, key
        assert type(_value(cfg, key)) is type(want), key


def test_args_no_hyphens_would_not_arrive_as_written():
    """The agent's ``${args_no_hyphens}`` (Python ``str()``): ``model.d_qk=None`` reads as the string
    ``'None'`` (run.py then refused it: "must be an integer"), the strings ``"null"`` and ``"4"`` as
    null and a number, and a string with a comma as a sweep of two values."""
    from hydra.errors import ConfigCompositionException, OverrideParseException

    spec = yaml.safe_load(SWEEP)
    args = agent_args(spec, "${args_no_hyphens}")
    assert "model.d_qk=None" in args and "+probe.empty_list=[]" in args and "+probe.text=a b, c=d" in args
    assert "+probe.null_text=null" in args and "+probe.number_text=4" in args
    cfg = _compose(["model.d_qk=None", "+probe.null_text=null", "+probe.number_text=4"])
    assert cfg.model.d_qk == "None"  # a string where null was meant
    assert cfg.probe.null_text is None and cfg.probe.number_text == 4  # strings that became null and a number
    with pytest.raises((ConfigCompositionException, OverrideParseException)):  # a comma (and `=`): not one value
        _compose(["+probe.text=a b, c=d"])


@pytest.mark.parametrize(
    "value",
    [None, True, False, 0, -7, 2.5, -1e-05, 1e21, math.inf, "", "mha", "a b", "a,b", "k=v", "null", "1e-3",
     "true", "it's", "end\\", "\\'", "${oc.env:HOME,x}/y", "é", [], [None, "a, b"], {"k": {"n": [1.5]}}],
)  # fmt: skip
def test_hydra_literal_reads_back_as_the_value(value):
    """The override text of each value parses (Hydra's grammar) and composes back to the value."""
    text = hydra_literal(value)
    cfg = _compose([f"+probe.v={text}"])
    got = _value(cfg, "probe.v")
    if isinstance(value, str) and "${" in value:
        assert OmegaConf.to_container(cfg.probe, resolve=False)["v"] == value  # kept as an interpolation
    else:
        assert got == value and type(got) is type(value), (text, got)


def test_every_shipped_sweep_runs_with_args_json_and_composes():
    """Each ``sweeps/*.yaml`` ends its command in ``${args_json}``; its first grid point, as the agent
    passes it, composes with the values of the file (``hydra.*`` and group choices aside)."""
    files = sorted((REPO / "sweeps").glob("*.yaml"))
    assert len(files) >= 10
    for path in files:
        spec = yaml.safe_load(path.read_text())
        assert spec["command"][-1] == "${args_json}", path.name
        fixed = [c for c in spec["command"] if "=" in str(c) and not str(c).startswith("${")]
        overrides = expand_json_args(agent_args(spec, "${args_json}"))
        cfg = _compose([*fixed, *overrides])
        for key, param in spec["parameters"].items():
            if key.startswith("hydra.") or "/" in key or key == "scale":
                continue
            want = param["values"][0] if "values" in param else param["value"]
            assert _value(cfg, key) == want, (path.name, key)
