"""``python run.py --help`` (Hydra's ``hydra.help.template``, filled by ``${xformer.help:}``): what xformer
is, every config group's options, each with the first comment line of its YAML from every folder of the
config search path, example commands and where results land."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

INTRO = """xformer: the design claims of the Transformer (Vaswani et al. 2017) as sweepable, reproducible ablations.

  python run.py [group=option ...] [key=value ...] [-m]

Examples:
  python run.py                                         train the default model (the numbers task)
  python run.py model/norm=pre model.n_heads=8          pick options (group=option) and values (key=value)
  python run.py model.ffn_ratio=2,4,8 seed=1,2,3 -m     a sweep: one job per setting and seed
  xformer report multirun/<date>/<time>                 the sweep's table, curves and claim verdicts
  xformer claims run c1_ffn_ratio                       a claim's sweep and its published report
  python run.py hydra.run.dir=<run folder> ckpt_path=last   resume a stopped run where it stopped

Results: a run in outputs/<date>/<time>-<id>/, a sweep's jobs in multirun/<date>/<time>/<n>/; each holds
metrics.json (status, config, metrics), csv/metrics.csv (the history), checkpoints/ and run.log.
Sweeps run one job after another; hydra/launcher=joblib_cpu runs them side by side on this machine's
cores, hydra/launcher=slurm on a cluster. Add a key that is not in the config with +key=value.
"""

OUTRO = """The composed config: python run.py [overrides] --cfg job.   Hydra's own flags: python run.py --hydra-help
The README and docs/ say more: docs/running.md, docs/scaling.md, docs/mixers.md, docs/claims.md.
"""

SKIP_GROUPS = ("hydra", "scale/task")


def _description(path: Path) -> str:
    """The first comment line of a YAML file, without ``# @package`` lines; ``""`` when none."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return ""
    for text in map(str.strip, lines):
        if text and not text.startswith("#"):
            break
        text = text.lstrip("#").strip()
        if text and not text.startswith("@package"):
            return text
    return ""


def _roots(searchpath: list[str] = ()) -> list[Path]:
    """The folders of the config search path: ``conf/`` and the ``file://`` entries of the user's
    ``hydra.searchpath`` (given here: Hydra applies them to each composition, not to its loader)."""
    from hydra.core.global_hydra import GlobalHydra

    out = [Path(__file__).resolve().parents[1] / "conf"]
    gh = GlobalHydra.instance()
    entries = list(searchpath)
    if gh.is_initialized():
        entries += [element.path for element in gh.config_loader().get_search_path().get_path()]
    for entry in entries:
        if entry.startswith("file://"):
            path = Path(entry[len("file://") :])
            if path not in out:
                out.append(path)
    return out


def groups_text(searchpath: list[str] = (), width: int = 100) -> str:
    """One block per config group: ``group: opt1 opt2 ...`` and a line per option from its YAML."""
    roots = _roots(searchpath)
    options: dict[str, dict[str, str]] = {}
    for root in roots:
        for yaml in sorted(root.rglob("*.yaml")):
            rel = yaml.relative_to(root)
            group = rel.parent.as_posix()
            if group == "." or group.split("/")[0] in SKIP_GROUPS or group in SKIP_GROUPS:
                continue
            options.setdefault(group, {}).setdefault(rel.with_suffix("").name, _description(yaml))
    lines = []
    for group in sorted(options):
        opts = options[group]
        lines.append(f"  {group}: {' '.join(sorted(opts))}")
        for name in sorted(opts):
            text = opts[name] or "(no description line in its YAML)"
            line = f"      {name:<22} {text}"
            lines.append(line if len(line) <= width else line[: width - 1] + "…")
    return "\n".join(lines)


def help_text(searchpath: list[str] = ()) -> str:
    """The whole ``--help`` text (``$`` doubled: Hydra passes it through ``string.Template``)."""
    head = "Config groups (group=option), each option with the first line of its YAML:"
    text = f"{INTRO}\n{head}\n{groups_text(searchpath)}\n\n{OUTRO}"
    return text.replace("$", "$$")


_ROLE = re.compile(r":[a-z]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")
_LITERAL = re.compile(r"``(.+?)``", re.S)


def plain(text: str) -> str:
    """``text`` (a docstring, reStructuredText) as a terminal shows it: ``:mod:`a.b``` and ``:func:`~a.b```
    become ``a.b``, double-backquoted literals lose their quotes."""
    return _LITERAL.sub(r"\1", _ROLE.sub(r"\1", text))


class PlainHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The ``xformer`` sub-commands' argparse formatter: line breaks kept, every text :func:`plain`."""

    def _fill_text(self, text, width, indent):
        return super()._fill_text(plain(text), width, indent)

    def _split_lines(self, text, width):
        return super()._split_lines(plain(text), width)
