"""Fit the W&B run fields xformer fills from Hydra overrides into the lengths W&B accepts.

W&B rejects a run whose tag is empty or longer than 64 characters (``wandb.init`` raises, the job
exits 1), and its server limits run names, group names and project names to 128 characters and the
job type to 64. xformer builds these fields from the command line -- every override becomes a tag,
the overrides joined with commas are the run name, the sweep folder is the group -- so a long
``ckpt_path=...`` or ``data.root=...`` could end a run before it started. :func:`fit_wandb_fields`
shortens every over-long value to a prefix plus a hash of the whole text (the same text always gives
the same short value, so every job of a sweep lands in the same group) and returns the full texts,
which the driver stores in the run's config under ``wandb_full``.
"""

from __future__ import annotations

import hashlib
from typing import Any

TAG_MAX = 64
NAME_MAX = 128
GROUP_MAX = 128
PROJECT_MAX = 128
JOB_TYPE_MAX = 64


def shorten(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its first characters, ``~`` and 8 hex
    digits of its SHA-1 (``limit`` characters in all).

    Raises:
        ValueError: ``limit`` < 10 (no room for the hash).
    """
    if limit < 10:
        raise ValueError(f"limit must be >= 10, got {limit}")
    if len(text) <= limit:
        return text
    digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
    return f"{text[:limit - 9]}~{digest}"


def fit_wandb_fields(name: str | None = None, group: str | None = None, tags: list[str] | None = None,
                     project: str | None = None, job_type: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """W&B ``init`` arguments within W&B's limits, and the full values of those that were shortened.

    Tags: empty ones are dropped, long ones shortened, duplicates after shortening removed (order
    kept). ``None`` arguments are left out of the result.

    Returns:
        ``(kwargs, full)``: ``kwargs`` for the ``WandbLogger``; ``full`` maps each shortened field to
        its original value (empty when nothing was shortened).
    """
    kwargs: dict[str, Any] = {}
    full: dict[str, Any] = {}
    for key, value, limit in (("name", name, NAME_MAX), ("group", group, GROUP_MAX),
                              ("project", project, PROJECT_MAX), ("job_type", job_type, JOB_TYPE_MAX)):
        if value is None:
            continue
        value = str(value)
        kwargs[key] = shorten(value, limit)
        if kwargs[key] != value:
            full[key] = value
    if tags is not None:
        short: list[str] = []
        for tag in (str(t) for t in tags):
            if tag and shorten(tag, TAG_MAX) not in short:
                short.append(shorten(tag, TAG_MAX))
        kwargs["tags"] = short
        if any(len(str(t)) > TAG_MAX for t in tags):
            full["tags"] = [str(t) for t in tags]
    return kwargs, full
