"""How the variant base classes tell which hooks a subclass implements.

A variant says what it does by overriding methods; nothing else is needed. The base classes compare
the subclass's method with their own (``type(obj).rotate is not PositionalEncoding.rotate``) to
decide, for instance, whether a positional scheme rotates queries and keys. Flags that describe a
hook (``rotates``, ``is_causal``) are worked out from the hooks, not set by hand; a subclass that sets
one to a value contradicting its methods is rejected when the class is defined.
"""

from __future__ import annotations


def overrides(cls: type, base: type, name: str) -> bool:
    """True when ``cls`` (or a class between it and ``base``) replaces ``base``'s method ``name``."""
    return getattr(cls, name) is not getattr(base, name)


def check_derived_flag(cls: type, flag: str, derived: bool, because: str) -> None:
    """Reject a class attribute ``flag`` (``"rotates"``, ``"is_causal"``) of the subclass ``cls`` that
    contradicts ``derived``, the value its hooks imply (TypeError saying ``because``: how it is
    derived), and drop a consistent one so the base class's property decides from then on."""
    if flag not in cls.__dict__ or isinstance(cls.__dict__[flag], property):
        return
    declared = cls.__dict__[flag]
    if bool(declared) != derived:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__}.{flag}={declared!r}: xformer works this out from "
            f"{because} (here {derived}); delete the assignment"
        )
    delattr(cls, flag)
