"""Claims as data: reading and checking the YAML declarations that :mod:`.engine` decides (the keys:
docs/report.md § Declaring a claim). A file maps claim names to claims: the project's, one file per
claim in ``claims/``; a researcher's, any file given to ``xformer report DIR --claims FILE``. Each
part's keys beyond the common ones depend on its test type (:mod:`.tests`). Every problem is a
:class:`DeclarationError` whose message names the file, the claim, the key and the fix, as one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import tests
from .part import Part

ROLES = ("claim", "precondition", "descriptive")
"""A part decides the claim (``claim``), says whether this setting can show it (``precondition``, a
positive control: failing it makes the claim "cannot show it"), or is printed only (``descriptive``)."""

CLAIM_KEYS = ("statement", "source", "published", "headline", "sweeps", "bench", "rule", "at", "parts")
AT = ("budget", "stable ranking")
"""What a claim states (``at``; docs/report.md § What a claim states)."""
PART_KEYS = tuple(
    "test label says role metric better a b terms axis at values shape per margin margin_source "
    "published_effect level mode need expect factor from_value to_value versus measure args target "
    "tolerance refute_beyond at_least sweep note unbalanced equal_params".split()
)


class DeclarationError(ValueError):
    """A declaration that cannot be decided; the message is one line naming file, claim, key and fix."""


@dataclass(frozen=True)
class Claim:
    """A declared claim: its statement, source, the sweeps it reads and its parts."""

    name: str
    statement: str
    parts: tuple[Part, ...]
    source: str = ""
    published: str = ""
    headline: str = ""
    sweeps: tuple[str, ...] = ()
    bench: bool = False
    rule: str = ""
    file: str = ""
    at: str = "budget"
    body: dict = field(default_factory=dict, hash=False, compare=False)


class _UniqueKeys(yaml.SafeLoader):
    """A safe YAML loader that refuses a mapping key given twice (PyYAML keeps the last silently)."""


def _unique_mapping(loader: _UniqueKeys, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def load_file(path: Path, at: str = "budget") -> list[Claim]:
    """The claims declared in ``path``, checked for shape and meaning (not yet against a sweep); ``at``:
    what a claim states when it does not say (:data:`AT`).

    Raises:
        DeclarationError: unreadable file, YAML syntax error, a claim id or key given twice, or a claim
            or part of the wrong shape or meaning (no claim part, unbalanced contrast weights, a margin
            its test type cannot use or cannot take a percentage of).
    """
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise DeclarationError(f"{path}: cannot read it ({e.strerror}); fix: give the path of a YAML file") from e
    try:
        data = yaml.load(text, Loader=_UniqueKeys)  # noqa: S506 - a SafeLoader subclass
    except yaml.constructor.ConstructorError as e:
        mark = e.problem_mark
        where = f"line {mark.line + 1}" if mark is not None else "somewhere"
        raise DeclarationError(
            f"{path}: {e.problem} at {where} (a claim id or a key declared twice: YAML would keep the last "
            f"silently); fix: rename or remove one of them"
        ) from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "somewhere"
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise DeclarationError(
            f"{path}: YAML syntax error at {where}: {problem}; fix: correct the YAML there "
            f"(indentation, a missing ':' or an unclosed bracket)"
        ) from e
    if not isinstance(data, dict) or not data:
        raise DeclarationError(
            f"{path}: expected a mapping of claim names to claims (e.g. 'H1: {{statement: ..., parts: [...]}}'); "
            f"fix: start the file with a claim name followed by ':'"
        )
    return [_claim(str(name), body, str(path), at) for name, body in data.items()]


def _claim(name: str, body: Any, file: str, default_at: str = "budget") -> Claim:
    if not isinstance(body, dict):
        raise DeclarationError(
            f"{file}: claim {name}: expected a mapping with 'statement' and 'parts'; fix: indent them"
        )
    unknown = [k for k in body if k not in CLAIM_KEYS]
    if unknown:
        raise DeclarationError(
            f"{file}: claim {name}, key '{unknown[0]}': not a claim key; fix: use one of {', '.join(CLAIM_KEYS)}"
        )
    if not body.get("statement"):
        raise DeclarationError(f"{file}: claim {name}, key 'statement': missing; fix: add 'statement: <the claim>'")
    raw_parts = body.get("parts")
    if not isinstance(raw_parts, list) or not raw_parts:
        raise DeclarationError(
            f"{file}: claim {name}, key 'parts': missing or empty; fix: add 'parts:' with at least one "
            f"'- test: superiority' (or another test type)"
        )
    at = body.get("at", default_at)
    if at not in AT:
        raise DeclarationError(
            f"{file}: claim {name}, key 'at': {at!r} is not what a claim can state; fix: use one of "
            f"{', '.join(repr(a) for a in AT)}"
        )
    parts = []
    for i, spec in enumerate(raw_parts):
        if not isinstance(spec, dict):
            raise DeclarationError(
                f"{file}: claim {name}, part {i + 1}: expected a mapping; fix: start it with '- test: ...'"
            )
        part = Part(name, i, dict(spec), file, at)
        _check_part(part)
        parts.append(part)
    if not any(p.role == "claim" for p in parts):
        raise DeclarationError(
            f"{file}: claim {name}, key 'parts': no claim part (only preconditions or descriptive parts), so "
            f"nothing can decide it; fix: give at least one part 'role: claim' (the default when 'role' is omitted)"
        )
    sweeps = body.get("sweeps") or ()
    if isinstance(sweeps, str):
        sweeps = (sweeps,)
    return Claim(
        name=name,
        statement=str(body["statement"]).strip(),
        parts=tuple(parts),
        source=str(body.get("source") or "").strip(),
        published=str(body.get("published") or "").strip(),
        headline=str(body.get("headline") or "").strip(),
        sweeps=tuple(str(s) for s in sweeps),
        bench=bool(body.get("bench")),
        rule=str(body.get("rule") or "").strip(),
        file=file,
        at=at,
        body=body,
    )


def _check_part(part: Part) -> None:
    """Shape checks common to every part, then the test type's own (its ``check`` attribute)."""
    unknown = [k for k in part.spec if k not in PART_KEYS]
    if unknown:
        raise DeclarationError(f"{part.where(unknown[0])}: not a part key; fix: use one of {', '.join(PART_KEYS)}")
    if "test" not in part.spec:
        raise DeclarationError(f"{part.where('test')}: missing; fix: add 'test: <one of {', '.join(tests.NAMES)}>'")
    fn = tests.test_type(part.test)
    if fn is None:
        raise DeclarationError(
            f"{part.where('test')}: unknown test type '{part.test}'; fix: use one of {', '.join(tests.NAMES)}"
        )
    if part.role not in ROLES:
        raise DeclarationError(f"{part.where('role')}: '{part.role}' is not a role; fix: use one of {', '.join(ROLES)}")
    try:
        part.margin  # noqa: B018 - parsed for its error
    except ValueError as e:
        raise DeclarationError(
            f"{part.where('margin')}: {e}; fix: give a number (0.01) or a percentage ('1.5%')"
        ) from e
    if part.margin is not None and part.test in tests.NAMES and part.test not in tests.MARGIN_TESTS:
        raise DeclarationError(
            f"{part.where('margin')}: a {part.test} part does not read a margin (it would be ignored); fix: remove "
            f"it, or state the limit with the test's own key ("
            + {
                "trend": "a trend decides each step against 0",
                "threshold": "'level' or 'factor'",
                "quantity": "'tolerance'",
            }.get(part.test, "see docs/report.md")
            + ")"
        )
    for key in ("a", "b", "at", "versus"):
        if key in part.spec and not isinstance(part.spec[key], dict):
            raise DeclarationError(
                f"{part.where(key)}: expected an override selector such as {{model.ffn_ratio: 4}}; "
                "fix: write it as a mapping"
            )
    check = getattr(fn, "check", None)
    if check is not None:
        problem = check(part)
        if problem:
            key, fix = problem
            raise DeclarationError(f"{part.where(key)}: {fix}")


def load_dir(folder: Path, at: str = "stable ranking") -> list[Claim]:
    """Every claim declared in the ``*.yaml`` files of ``folder`` (sorted by name, numbers numerically);
    ``at``: what a claim states when it does not say (the project's claims: a stable ranking).

    Raises:
        DeclarationError: as :func:`load_file`, or one name declared twice.
    """
    out: list[Claim] = []
    files = sorted(
        Path(folder).glob("*.yaml"), key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.stem)]
    )
    for f in files:
        for c in load_file(f, at):
            if any(o.name == c.name for o in out):
                raise DeclarationError(f"{f}: claim {c.name}: declared twice; fix: rename one of them")
            out.append(c)
    return out
