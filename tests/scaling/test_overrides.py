"""Override strings are read with Hydra's own parser (xformer/jobs/overrides.py), so a
list value is one value, a quoted comma is no sweep, and numbers come back as numbers."""

import pytest

from xformer.config.overrides import added_overrides, key_of, override_values, sweep_override_keys, sweep_values


def test_sweep_keys_values_and_single_values():
    lines = ["x=[1,2]", "y=1,2", "z=range(3)", "s='a,b'", "hydra.a=1,2", "+model/norm=pre,post"]
    assert sweep_override_keys(lines) == ["y", "z", "model/norm"]
    assert sweep_values("1,2,4") == [1, 2, 4] and sweep_values("pre,post") == ["pre", "post"]
    assert sweep_values("range(1,4)") == [1, 2, 3] and sweep_values("0.1") == [0.1]
    assert override_values(["a=1", "+b=x", "c=1,2", "d=[1,2]", "~e"]) == {"a": 1, "b": "x", "d": [1, 2]}
    assert added_overrides(["+a=1", "++b=2", "c=3", "+g/h=x"]) == [("a", "1"), ("g/h", "x")]
    assert key_of("++trainer.max_steps=5") == "trainer.max_steps" and key_of("~seed") == "seed"


def test_an_interval_has_no_list_of_values():
    with pytest.raises(ValueError, match="not a list of sweep values"):
        sweep_values("interval(0,1)")
