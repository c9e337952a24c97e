"""Override strings (``key=value``, ``+key=value``, ``key=1,2,4``, ``key=range(1,5)``) read with Hydra's own
:class:`~hydra.core.override_parser.overrides_parser.OverridesParser`: the one reading of the command line and
of a sweep's parameters in xformer, so a list value ``key=[1,2]`` is one value, not a sweep of two."""

from __future__ import annotations

from typing import Any

#: Sweep functions of sweeper plugins that Hydra's grammar does not know (Optuna's ``tag(...)``, ...).
_SWEEP_FUNCS = ("range(", "choice(", "interval(", "glob(")


def parse(line: str):
    """The :class:`~hydra.core.override_parser.types.Override` of one override string, or ``None`` when
    Hydra's grammar refuses it (an extension's syntax)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        (override,) = OverridesParser.create().parse_overrides([str(line)])
    except Exception:  # not Hydra's grammar: the caller decides
        return None
    return override


def key_of(line: str) -> str:
    """The key (or config group) an override string sets, without its ``+``/``++``/``~`` prefix."""
    override = parse(line)
    return override.key_or_group if override is not None else str(line).partition("=")[0].lstrip("+~")


def sweep_override_keys(overrides) -> list[str]:
    """The keys of ``overrides`` that sweep: a comma list or a ``range``/``choice``/``interval``/``glob``
    sweep, not a list value such as ``key=[1,2]``. ``hydra.*`` keys are left out; an override Hydra's
    grammar refuses counts as a sweep only when its value calls a sweeper's function."""
    out = []
    for item in overrides:
        override, key = parse(item), key_of(item)
        if key.startswith("hydra."):
            continue
        if override is not None and override.is_sweep_override():
            out.append(key)
        elif override is None and str(item).partition("=")[2].startswith(_SWEEP_FUNCS):
            out.append(key)
    return out


def sweep_values(text: str) -> list[Any]:
    """The values of one swept key's sweep text (``"1,2,4"``, ``"pre,post"``, ``"choice(a,b)"``) as Python
    values (numbers as numbers); a text that is one value gives a list of one.

    Raises:
        ValueError: Hydra's grammar refuses ``text``, or it is an interval (no finite list of values).
    """
    override = parse(f"k={text}")
    if override is None or override.is_interval_sweep():
        raise ValueError(f"{text!r}: not a list of sweep values")
    if override.is_sweep_override():
        return list(override.sweep_iterator())
    return [override.value()]


def override_values(overrides) -> dict[str, Any]:
    """``key -> value`` of the overrides that set one value (``key=3``, ``+key=a``), as Python values;
    sweeps, deletions and what Hydra's grammar refuses are left out."""
    out: dict[str, Any] = {}
    for item in overrides:
        override = parse(item)
        if override is not None and not override.is_sweep_override() and not override.is_delete():
            out[override.key_or_group] = override.value()
    return out


def added_overrides(overrides) -> list[tuple[str, str]]:
    """``(key or group, value text)`` of the overrides added with ``+`` (not ``++``)."""
    out = []
    for item in overrides:
        override = parse(item)
        if override is not None and override.is_add():
            out.append((override.key_or_group, str(item).split("=", 1)[-1]))
    return out
