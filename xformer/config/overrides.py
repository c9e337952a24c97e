"""Override strings read with Hydra's own ``OverridesParser`` (so ``key=[1,2]`` is one value, not a sweep),
and written back: :func:`hydra_literal`, :func:`expand_json_args` (a W&B agent's ``${args_json}``)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

#: Sweep functions of sweeper plugins that Hydra's grammar does not know (Optuna's ``tag(...)``, ...).
_SWEEP_FUNCS = ("range(", "choice(", "interval(", "glob(")


def parse(line: str):
    """The Hydra ``Override`` of one override string, or ``None`` when Hydra's grammar refuses it."""
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
    """The non-``hydra.*`` keys of ``overrides`` that sweep (not a list value); an override Hydra's grammar
    refuses counts only when its value calls a sweeper's function."""
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
    """The values of one key's sweep text (``"1,2,4"``, ``"choice(a,b)"``) as Python values; one value gives a
    list of one. Raises: ValueError for text Hydra refuses or an interval."""
    override = parse(f"k={text}")
    if override is None or override.is_interval_sweep():
        raise ValueError(f"{text!r}: not a list of sweep values")
    if override.is_sweep_override():
        return list(override.sweep_iterator())
    return [override.value()]


def override_values(overrides) -> dict[str, Any]:
    """``key -> value`` of the overrides that set one value; sweeps, deletions and unparsable ones left out."""
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


def quoted(text: str) -> str:
    """``text`` single-quoted for Hydra: quotes escaped, and backslash runs before a quote or the end doubled
    (the only places Hydra reads escapes)."""
    return "'" + re.sub(r"\\+(?='|\Z)", lambda m: m.group(0) * 2, text).replace("'", "\\'") + "'"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)  # shortest round-trip form: 0.001, 1e-05, -2.5, inf, nan
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_text(str(k))}: {_text(v)}" for k, v in value.items()) + "}"
    text = str(value)
    plain = parse(f"k={text}")  # a plain word, path or interpolation stays as written
    if plain is not None and not plain.is_sweep_override() and _same(plain.value(), text):
        return text
    return quoted(text)


def hydra_literal(value: Any) -> str:
    """The override text Hydra's grammar reads back as ``value`` (``null``, ``true``, ``1e-05``, ``[1, 2]``, a
    plain string as written, else quoted). Raises: ValueError when no text reads back as ``value``."""
    text = _text(value)
    back = parse(f"k={text}")
    if back is None or back.is_sweep_override() or not _same(_plain(back.value()), _plain(value)):
        raise ValueError(f"{value!r}: no Hydra override text reads back as this value")
    return text


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def expand_json_args(argv: list[str]) -> list[str]:
    """``argv`` with each JSON-object argument replaced by one ``key=value`` override per entry
    (:func:`hydra_literal`; a W&B agent's ``${args_no_hyphens}`` would write Python's ``str()``).
    Raises: ValueError from :func:`hydra_literal`."""
    out = []
    for arg in argv:
        if isinstance(arg, str) and arg.lstrip().startswith("{"):
            try:
                params = json.loads(arg)
            except ValueError:
                params = None
            if isinstance(params, dict):
                out += [f"{key}={hydra_literal(value)}" for key, value in params.items()]
                continue
        out.append(arg)
    return out


def sweep_without_multirun(args: list[str]) -> str | None:
    """The ``error:`` line (without ``error:``) for a command line ``args`` that sweeps a key (``key=a,b``,
    ``choice(...)``, ``range(...)``) without ``-m``/``--multirun``, which Hydra refuses in several lines; ``None``
    when no key is swept or the command runs in multirun mode."""
    import shlex

    if any(a in ("-m", "--multirun") or a.replace(" ", "") == "hydra.mode=MULTIRUN" for a in args):
        return None
    for arg in args:
        if arg.startswith("-") or not sweep_override_keys([arg]):  # a flag is Hydra's to read
            continue
        return f"{arg}: a sweep (one job per value) runs only with -m. Fix: python run.py {shlex.join(args)} -m"
    return None
