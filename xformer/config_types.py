"""Annotations the config check (:mod:`xformer.config.check`) reads from a component's signature
(``Annotated[float, Range(ge=0, lt=1)]``, ``Literal["a", "b"]``), and the helpers that read them."""

from __future__ import annotations

import difflib
import importlib
import inspect
import typing
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Range:
    """Bounds of a number: ``ge`` / ``gt`` (lower, inclusive / exclusive), ``le`` / ``lt`` (upper)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def __repr__(self) -> str:
        return f"Range({', '.join(f'{k}={v:g}' for k, v in vars(self).items() if v is not None)})"

    def problem(self, value: float) -> str | None:
        """Why ``value`` is outside the range, or ``None``."""
        for bound, ok, word in (
            (self.ge, lambda b: value >= b, ">="),
            (self.gt, lambda b: value > b, ">"),
            (self.le, lambda b: value <= b, "<="),
            (self.lt, lambda b: value < b, "<"),
        ):
            if bound is not None and not ok(bound):
                return f"must be {word} {bound:g}"
        return None


Positive = typing.Annotated[int, Range(ge=1)]
"""An integer >= 1 (sizes, counts, batch budgets)."""
NonNegative = typing.Annotated[int, Range(ge=0)]
"""An integer >= 0 (worker processes, optional counts)."""


def value_problem(value: Any, hint: Any) -> str | None:
    """Why ``value`` does not fit annotation ``hint`` (``None``: it fits, or the hint is not one checked)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        why = value_problem(value, args[0])
        if why:
            return why
        for meta in args[1:]:
            if isinstance(meta, Range) and isinstance(value, (int, float)) and not isinstance(value, bool):
                why = meta.problem(value)
                if why:
                    return why
        return None
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        if value is None and type(None) in args:
            return None
        if value == "None" and type(None) in args and all(value_problem(value, a) for a in args if a is not type(None)):
            return "is the text 'None', not null"
        whys = [value_problem(value, a) for a in args if a is not type(None)]
        if any(w is None for w in whys):
            return None
        choices = [w.removeprefix("must be one of ") for w in whys if w.startswith("must be one of ")]
        unique = dict.fromkeys(c for group in choices for c in group.split(", "))
        return f"must be one of {', '.join(unique)}" if len(choices) == len(whys) else whys[0]
    if origin is tuple and isinstance(value, (list, tuple)) and args and args[-1] is not Ellipsis:
        if len(value) != len(args):
            return f"must be {len(args)} values"
        return next((why for v, a in zip(value, args, strict=True) if (why := value_problem(v, a))), None)
    if origin is typing.Literal:
        return None if value in args else f"must be one of {', '.join(map(str, args))}"
    if value is None:
        return None if hint in (Any, type(None)) else "must not be null"
    if hint is bool:
        return None if isinstance(value, bool) else "must be true or false"
    if hint is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else "must be an integer"
    if hint is float:
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "must be a number"
    if hint is str:
        return None if isinstance(value, str) else "must be a string"
    return None


def describe(hint: Any) -> str:
    """An annotation as the error lines show it: ``int``, ``float Range(ge=0, lt=1)``, ``Literal[...]``."""
    if isinstance(hint, type):
        return hint.__name__
    if typing.get_origin(hint) is typing.Annotated:
        base, *meta = typing.get_args(hint)
        return " ".join([describe(base), *map(repr, meta)])
    text = str(hint).replace("typing.", "")
    return text.replace("xformer.config_types.", "")


def _range_words(r: Range) -> str:
    """``≥ 1``, ``in [0, 1)``: a :class:`Range` as people write it."""
    lo = (f"{r.ge:g}", "[") if r.ge is not None else (f"{r.gt:g}", "(") if r.gt is not None else None
    hi = (f"{r.le:g}", "]") if r.le is not None else (f"{r.lt:g}", ")") if r.lt is not None else None
    if lo and hi:
        return f"in {lo[1]}{lo[0]}, {hi[0]}{hi[1]}"
    if lo:
        return f"{'≥' if lo[1] == '[' else '>'} {lo[0]}"
    return f"{'≤' if hi[1] == ']' else '<'} {hi[0]}" if hi else ""


def readable(hint: Any) -> str:
    """An annotation in words for a fix line (``an integer ≥ 1, or null``), else :func:`describe`'s text."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    words = {bool: "true or false", int: "an integer", float: "a number", str: "a string", type(None): "null"}
    if hint in words:
        return words[hint]
    if origin is typing.Annotated:
        ranges = [_range_words(m) for m in args[1:] if isinstance(m, Range)]
        return " ".join([readable(args[0]), *filter(None, ranges)])
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        parts = [readable(a) for a in args if a is not type(None)]
        text = " or ".join(dict.fromkeys(parts))
        return f"{text}, or null" if type(None) in args else text
    if origin is typing.Literal:
        return "one of " + ", ".join("null" if a is None else str(a) for a in args)
    if origin in (list, tuple) or (origin is not None and getattr(origin, "__name__", "") == "Sequence"):
        if origin is tuple and args and args[-1] is not Ellipsis:
            return f"a list of {len(args)} values ({', '.join(readable(a) for a in args)})"
        return f"a list, each {readable(args[0])}" if args else "a list"
    if origin is dict:
        return "a mapping (key: value)"
    return describe(hint)


def fix_for(value: Any, hint: Any, key: str) -> str:
    """The ``Fix:`` text for a ``value`` of ``key`` that does not fit ``hint``: ``key=null`` for the text ``None``
    where null is allowed (a W&B agent's ``${args_no_hyphens}``), else :func:`readable`."""
    if value == "None" and value_problem(None, hint) is None:
        return (
            f"{key}=null (None is read as text; a W&B sweep's command should end in ${{args_json}}, which writes "
            f"null: docs/scaling.md)"
        )
    return f"give {readable(hint)}"


def parameters(fn: Any) -> tuple[dict[str, inspect.Parameter], dict[str, Any], bool]:
    """``(parameters, type hints, open)`` of a class's constructor (following ``**kwargs`` up its bases)
    or a function; ``open`` when every level passes ``**kwargs`` on (nothing can be refused)."""
    params: dict[str, inspect.Parameter] = {}
    hints: dict[str, Any] = {}
    levels = [k.__dict__["__init__"] for k in fn.__mro__ if "__init__" in k.__dict__] if inspect.isclass(fn) else [fn]
    for level in levels:
        try:
            sig = inspect.signature(level).parameters
        except (TypeError, ValueError):
            return params, hints, True
        try:
            hints = {**typing.get_type_hints(level, include_extras=True), **hints}
        except Exception:  # annotations that do not resolve here: check names only
            pass
        params.update(
            {k: v for k, v in sig.items() if v.kind not in (v.VAR_KEYWORD, v.VAR_POSITIONAL) and k not in params}
        )
        if not any(v.kind is v.VAR_KEYWORD for v in sig.values()):
            params.pop("self", None)
            return params, hints, False
    return params, hints, True


def closest(word: str, options) -> str | None:
    """The option closest to ``word`` (the best score of at least 0.6), or ``None``: ``difflib``'s similarity
    ratio, plus 0.3 when one contains the other and the shorter has 3+ characters (``pre`` for ``prenorm``)."""
    word, best, best_score = str(word), None, 0.6
    for option in dict.fromkeys(str(o) for o in options):
        a, b = word.lower(), option.lower()
        score = difflib.SequenceMatcher(None, a, b).ratio()
        if min(len(a), len(b)) >= 3 and (a in b or b in a):
            score += 0.3
        if score > best_score or (best is None and score >= best_score):
            best, best_score = option, score
    return best


def hint(word: str, options, prefix: str = "") -> str:
    """``did you mean <prefix><closest>?``, or the known options."""
    close = closest(word, options)
    return f"did you mean {prefix}{close}?" if close else f"known: {', '.join(sorted(map(str, options)))}"


def import_target(target: str) -> tuple[Any, str | None]:
    """``(object, None)`` for an importable ``_target_``, else ``(None, why)`` with the likely cause."""
    module_name, _, attr = str(target).rpartition(".")
    if not module_name:
        return None, f"{target!r} is not a dotted path (package.module.Name)"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        missing = err.name or module_name
        return None, (
            f"cannot import module {missing} ({err}). Fix: is the package on PYTHONPATH (e.g. run from its "
            "parent folder, or PYTHONPATH=. python run.py ...), or installed?"
        )
    except Exception as err:  # the module itself fails to import: say so, briefly
        return None, f"importing {module_name} failed: {type(err).__name__}: {str(err).splitlines()[0]}"
    try:
        return getattr(module, attr), None
    except AttributeError:
        names = [n for n in dir(module) if not n.startswith("_") and not inspect.ismodule(getattr(module, n, None))]
        return None, f"module {module_name} has no {attr}. Fix: {hint(attr, names, module_name + '.')}"
