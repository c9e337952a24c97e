"""``xformer report DIR [DIR ...] [--out OUTDIR] [--claims FILE] [--metric KEY] [--bench FILE] [--wandb SPEC]``

Pools every job found below the DIRs (one sweep, or several sweeps of one study), writes
OUTDIR/report.md (default OUTDIR: the first DIR), its PNG plots (one beside each claim) and the
per-seed files seeds.csv, curves.csv, jobs.json and verdicts.json, prints one line per claim and,
last, the path of report.md. A DIR may also be a report folder written earlier (jobs.json and
curves.csv, no job folders): a committed report can be re-rendered and its verdicts recomputed.

Claims: the project's declarations (claims/*.yaml) that the sweep asks about (its jobs' experiment),
or with --claims FILE your own hypotheses in the same YAML form, every one decided on these jobs.
--metric KEY puts KEY first in the table and plots it. bench.json files below the DIRs (or given with
--bench) feed the claims measured by `xformer bench`. --wandb adds the runs of a W&B project when an
API key is present (otherwise says so in one line and uses the files only).

Exit status: 0 on success; 2 with one `error: ...` line on stderr for a DIR that does not exist or
holds no job, an unknown --metric, a --claims file that cannot be decided on these jobs (naming the
file, the claim, the key and the fix), or bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from xformer.help import PlainHelpFormatter
from xformer.jobs import preregister
from xformer.jobs.engines import wandb_has_api_key

from .aggregate import Job, NoJobsError, Sweep, aggregate_jobs, find_job_dirs, load_dirs, main_metrics
from .export import is_report_folder, portable, read_report_folder, write_seed_files, write_verdicts
from .markdown import render
from .plots import length_metrics, plot_claim, write_plots
from .rules.declare import Claim, DeclarationError, load_file
from .rules.engine import evaluate, project_claims
from .rules.results import ClaimResult

PREFERRED = ("test/loss", "val/loss", "test/bleu", "val/bleu", "test/ppl", "val/ppl")
"""The metric tabulated and plotted first when neither ``--metric`` nor a claim names one."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``xformer report``."""
    p = argparse.ArgumentParser(
        prog="xformer report",
        description=__doc__.split("\n\n")[1],
        formatter_class=PlainHelpFormatter,
    )
    p.add_argument(
        "dirs",
        nargs="*",
        type=Path,
        metavar="DIR",
        help="sweep folder(s) (multirun/<date>/<time>), searched recursively for jobs",
    )
    p.add_argument("--out", type=Path, metavar="OUTDIR", help="where report.md and the PNGs go (default: first DIR)")
    p.add_argument(
        "--claims",
        type=Path,
        metavar="FILE",
        help="your own hypotheses (YAML, as claims/*.yaml), decided on these jobs instead of the project's claims",
    )
    p.add_argument("--metric", metavar="KEY", help="metric to tabulate first and plot (e.g. val/bleu)")
    p.add_argument(
        "--bench",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="bench.json for the claims measured by `xformer bench` (default: any bench.json below the DIRs)",
    )
    p.add_argument("--wandb", metavar="ENTITY/PROJECT[:GROUP]", help="also read the runs of a W&B project")
    return p


class UsageError(Exception):
    """Bad input to the report; the message becomes the ``error:`` line."""


def find_bench_files(dirs: list[Path]) -> list[Path]:
    """``bench.json`` files at or below ``dirs`` (hidden folders, wandb and checkpoints skipped)."""
    out = []
    for d in dirs:
        for here, sub, files in os.walk(d):
            sub[:] = [s for s in sub if not s.startswith(".") and s not in ("wandb", "checkpoints")]
            if "bench.json" in files:
                out.append(Path(here) / "bench.json")
    return sorted(out)


def load_bench(paths: list[Path]) -> dict | None:
    """The first readable JSON object among ``paths`` (``bench.json``, written by ``xformer bench``); ``None``
    when there is none."""
    for p in paths:
        try:
            data = json.loads(Path(p).read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(data, dict):
            return data
    return None


def collect_jobs(dirs: list[Path], wandb_spec: str | None, has_bench: set[Path]) -> list[Job]:
    """Jobs below ``dirs`` (a report folder's from its files) plus W&B runs. Raises NoJobsError: a DIR does
    not exist, holds neither a job nor a bench.json, or its jobs.json is unreadable."""

    def without_jobs(d: Path) -> list[Job] | None:
        if is_report_folder(d):
            return read_report_folder(d)
        return [] if d in has_bench else None  # a folder with only a bench.json

    jobs = load_dirs(dirs, without_jobs)
    if wandb_spec:
        from .wandb_source import load_wandb_jobs

        if not wandb_has_api_key():
            print(f"wandb: no API key (WANDB_API_KEY or ~/.netrc); skipping {wandb_spec}, using the files only")
        else:
            try:
                runs = load_wandb_jobs(wandb_spec)
            except ValueError as e:
                raise UsageError(str(e)) from e
            except Exception as e:  # noqa: BLE001 - network/auth problems must not lose the file report
                print(f"wandb: could not read {wandb_spec} ({type(e).__name__}: {e}); using the files only")
            else:
                print(f"wandb: {len(runs)} runs from {wandb_spec}")
                jobs += runs
    return jobs


def preregistration(
    verdicts: list[ClaimResult], claims: list[Claim], dirs: list[Path], out: Path, own: bool, jobs: list[Job]
) -> dict:
    """Each verdict's pre-registration (``ClaimResult.preregistration``) against the declarations frozen
    in ``preregistration.json`` of ``dirs`` (and ``out``), which is written to ``out`` so a report
    folder carries it. A researcher's own declarations (``own``) are frozen the first time they decide
    a folder: into the sweep folder ``dirs[0]`` (into ``out`` when that is a report folder), with the
    jobs finished by then. Returns the merged record."""
    record: dict = {"format": 1, "claims": {}, "observations": []}

    def merge(got: dict) -> None:  # the first record of a claim wins; observations once each
        for name, frozen in got["claims"].items():
            record["claims"].setdefault(name, frozen)
        record["observations"] += [o for o in got["observations"] if o not in record["observations"]]

    for d in dict.fromkeys([*dirs, out]):  # each folder once
        merge(preregister.read(d))
    by_name = {c.name: c for c in claims}
    sweep_dir = dirs[0] if dirs and find_job_dirs(dirs[0]) else None
    if own:
        mine = {v.claim: (by_name[v.claim].file, by_name[v.claim].body) for v in verdicts if v.claim in by_name}
        merge(preregister.freeze(sweep_dir or out, mine, len(jobs), sum(j.finished for j in jobs)))
    for v in verdicts:
        c = by_name.get(v.claim)
        if c is None or not c.body:
            continue
        st = preregister.status(record, v.claim, c.body, sweep_dir)
        derived = (record["claims"].get(v.claim) or {}).get("derived")
        v.preregistration = {**st, **({"derived": derived} if derived else {})}
    if record["claims"] and (record["claims"] != preregister.read(out)["claims"] or own):
        preregister.write(out, record)
    return record


def run(args: argparse.Namespace, command: str) -> Path:
    """Build the report described by ``args``; return the path of report.md. Raises UsageError or
    NoJobsError on bad input (see :func:`collect_jobs`, an unknown ``--metric``, nothing to report)."""
    if not args.dirs and not args.wandb:
        raise UsageError("give at least one DIR (or --wandb ENTITY/PROJECT[:GROUP])")
    bench_files = [*args.bench, *find_bench_files([d for d in args.dirs if d.is_dir()])]
    for b in args.bench:
        if not b.is_file():
            raise UsageError(f"{b}: no such file")
    has_bench = {d for d in args.dirs if any(b.is_relative_to(d) for b in bench_files)}
    jobs = collect_jobs(args.dirs, args.wandb, has_bench)
    bench = load_bench(bench_files)
    if not jobs and bench is None:
        raise UsageError("no jobs found" + (f" in {args.wandb}" if args.wandb else ""))
    sweep = aggregate_jobs(jobs, args.dirs) if jobs else Sweep(list(args.dirs), [], [], {}, [], [], [])
    if args.metric and jobs and args.metric not in sweep.metric_keys:
        known = ", ".join(sweep.metric_keys[:12]) or "none"
        raise UsageError(f"--metric {args.metric}: not a metric of these jobs (known: {known})")

    try:
        own = load_file(args.claims) if args.claims is not None else None
        verdicts, note = evaluate(sweep, own, bench, strict=own is not None)
    except DeclarationError as e:
        raise UsageError(str(e)) from e
    out = args.out or (args.dirs[0] if args.dirs else Path("report"))
    out.mkdir(parents=True, exist_ok=True)
    preregistration(verdicts, own if own is not None else project_claims(), list(args.dirs), out, own is not None, jobs)
    declared = [p.metric for r in verdicts for p in r.parts if p.metric in sweep.metric_keys]
    decision = args.metric or next(iter(declared), None) or next((m for m in PREFERRED if m in sweep.metric_keys), None)
    metrics = main_metrics(sweep, decision)
    plot_metrics = list(dict.fromkeys(m for m in (decision, "val/loss") if m and m in sweep.metric_keys))
    base = args.metric.split("@")[0] if args.metric else None
    plots = write_plots(sweep, out, plot_metrics, length_metrics(sweep.metric_keys, base)) if sweep.groups else []
    notes = [f"bench: `{bench_files[0]}`"] if bench is not None else []
    notes += [note] if note else []
    vplots = [plot_claim(v, out, i) for i, v in enumerate(verdicts, start=1)]
    files = write_seed_files(sweep, out) if sweep.jobs else []
    files.append(write_verdicts(verdicts, out))
    path = out / "report.md"
    path.write_text(portable(render(command, sweep, metrics, verdicts, plots, out, decision, notes, vplots, files)))
    if note:
        print(f"note: {note}")
    for v in verdicts:
        print(v.line())
    return path


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``xformer report``; returns the exit status (0 ok, 2 bad input)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # argparse already printed usage and the error
        return int(e.code or 0)
    try:
        path = run(args, "xformer report " + shlex.join(argv))
    except (UsageError, NoJobsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
