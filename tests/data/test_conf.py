"""conf/data/*.yaml: every file instantiates its DataModule and lists every constructor argument."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

CONF = Path(__file__).resolve().parents[2] / "conf" / "data"
#: every option of the data group, discovered (a new data set is one class and one YAML: nothing to list here)
OPTIONS = sorted(p.stem for p in CONF.glob("*.yaml"))


def _compose(name: str, tmp_path):
    top = OmegaConf.create({"seed": 7, "paths": {"cache_dir": str(tmp_path)}})
    top.data = OmegaConf.load(CONF / f"{name}.yaml")
    return top


def test_the_group_is_discovered():
    assert {"numbers", "multi30k", "tinyshakespeare", "recall"} <= set(OPTIONS)


@pytest.mark.parametrize("name", OPTIONS)
def test_yaml_instantiates_with_all_arguments(name, tmp_path):
    from xformer.data.base import XformerDataModule

    cfg = _compose(name, tmp_path)
    cls = get_class(cfg.data._target_)
    assert issubclass(cls, XformerDataModule)
    params = {p for p in inspect.signature(cls.__init__).parameters if p != "self"}
    keys = set(cfg.data) - {"_target_"}
    assert keys == params, f"{name}.yaml: missing {params - keys}, unknown {keys - params}"
    for line in (CONF / f"{name}.yaml").read_text().splitlines():
        if line and not line.startswith(("#", " ", "_target_")):
            assert "#" in line, f"{name}.yaml: key without a comment: {line}"
    dm = instantiate(cfg.data)
    assert type(dm) is cls and dm.seed == 7
    if hasattr(dm, "cache_dir"):
        assert dm.cache_dir == str(tmp_path)
    if cls.__name__ == "SyntheticDataModule":
        assert dm.task_name == name
