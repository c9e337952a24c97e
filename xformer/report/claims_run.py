"""``xformer claims``: run every claim's sweep that is not finished, publish its report, and rebuild
the claims table of docs/results/README.md -- one command per step, each resumable.

    xformer claims list  [--scale cpu|gpu|cpu_small] [NAMES ...]    # what exists, what would run
    xformer claims run   [--scale cpu|gpu|cpu_small] [--dry-run] [--no-report] [--rerun] [NAMES ...] [-- OVERRIDES ...]
    xformer claims report [--scale cpu|gpu|cpu_small] [NAMES ...]   # reports of the sweeps as they are
    xformer claims table [--check]                                  # docs/results/README.md table from docs/results/*/

NAMES are claim configs (``conf/experiment/claims/``) or declared claims (``claims/*.yaml``, standing for the
configs its ``sweeps`` name); none means every claim config. ``run`` starts, for each name in turn,

    python run.py experiment=claims/<name> scale=<scale> [OVERRIDES] -m

into the claim's sweep folder ``$XFORMER_RUNS/claims/<name>/<scale>`` (``XFORMER_RUNS`` defaults to
``multirun``). Sweeps resume (:mod:`xformer.jobs.sweep_resume`): finished jobs are skipped, an interrupted one
continues from its last checkpoint; a claim whose jobs have all finished, or whose report is published in
``--results``, is not started again (``--rerun`` runs it). ``--scale cpu_small`` is a claim's small form
(``conf/scale/cpu_small.yaml``: 2 seeds, a tenth to a fifth of the steps), its reports in
``$XFORMER_RUNS/claims/cpu_small_reports/<name>/``, never over the published ones. The CPU forms run two
one-thread jobs side by side (``hydra/launcher=joblib_cpu``). After each sweep it writes into
``docs/results/<name>/`` (``--results``) ``report.md`` and plots (``xformer report``), ``run.md`` (the
commands, the wall time of every invocation and their sum, the machine) and ``jobs.csv`` (one row per job).

Exit status: 0 when every named sweep finished and was reported; 1 when a job failed; 2 with one
``error:`` line for bad arguments, a missing ``XFORMER_DATA`` or a sweep refused (changed config).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from xformer.help import PlainHelpFormatter
from xformer.jobs.checkpoints import last_checkpoint
from xformer.jobs.record import RunRecord, Status, read_record

from .sweeps import REPO, claim_names

RESULTS = REPO / "docs" / "results"
SMALL = "cpu_small"  # the small form of a claim sweep: never published into RESULTS
RUNS_LOG = ".xformer/claims_runs.json"  # in the sweep folder: one entry per `claims run` invocation
JOBS_CSV_METRICS = tuple("test/loss val/loss test/bleu val/bleu test/ppl val/ppl test/exact_match".split())


class UsageError(Exception):
    """Bad input; the message becomes the ``error:`` line."""


@dataclass
class ClaimSweep:
    """One claim config at one scale: its sweep folder, each job's state (``states[num]``: ``finished``,
    ``resumable`` (has ``last.ckpt``), ``failed``, ``started`` (a folder without a checkpoint) or ``new``)
    and ``refused``: the config mismatch that stops it, if any."""

    name: str
    scale: str
    sweep_dir: Path
    overrides: list[list[str]]
    states: list[str] = field(default_factory=list)
    refused: str | None = None

    def count(self, state: str) -> int:
        return self.states.count(state)

    @property
    def complete(self) -> bool:
        return bool(self.states) and all(s == Status.FINISHED for s in self.states)

    def published(self, results: Path) -> Path | None:
        """The committed report of this claim config (``<results>/<name>/report.md``), if there is one."""
        report = results / self.name / "report.md"
        return report if report.is_file() else None

    def command(self, extra: list[str] = ()) -> list[str]:
        return ["python", "run.py", f"experiment=claims/{self.name}", f"scale={self.scale}", *extra, "-m"]


def resolve_names(names: list[str]) -> list[str]:
    """Claim config names for ``names`` (config names, or declared claims standing for the configs their
    ``sweeps`` name; case-insensitive), in catalogue order; all configs when empty. Raises UsageError: a
    name that is neither."""
    from .rules.engine import project_claims

    known = claim_names()
    if not names:
        return known
    declared = {c.name.lower(): c.sweeps for c in project_claims()}
    out: list[str] = []
    for n in names:
        low = n.lower().removeprefix("experiment=claims/")
        hits = [k for k in known if k == low] or [k for k in known if k in declared.get(low, ())]
        if not hits:
            raise UsageError(f"{n}: not a claim config or declared claim (known configs: {', '.join(known)})")
        out += [h for h in hits if h not in out]
    return out


def _job_state(job: Path) -> str:
    """``finished``, ``resumable`` (a ``last.ckpt``), ``failed``, ``started`` or ``new``."""
    status = record.status if (record := read_record(job)) is not None else None
    if status == Status.FINISHED:
        return status.value
    if last_checkpoint(job).is_file():
        return "resumable"
    if status == Status.FAILED:
        return status.value
    return "started" if (job / ".hydra").is_dir() else "new"


def inspect(name: str, scale: str, extra: list[str] = ()) -> ClaimSweep:
    """Compose ``experiment=claims/<name> scale=<scale> [extra]`` as ``-m`` would and read the state
    of each job's folder (and whether a recorded config differs, see
    :class:`xformer.jobs.hydra_callbacks.ResumeSweep`)."""
    from hydra import compose, initialize_config_dir

    from xformer.jobs.sweep import sweep_jobs, sweep_mismatches
    from xformer.jobs.sweep_resume import describe_diff, recorded_config

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            "config", overrides=[f"experiment=claims/{name}", f"scale={scale}", *extra], return_hydra_config=True
        )
        sweep_dir = Path(str(cfg.hydra.sweep.dir))
        jobs = sweep_jobs(cfg)
        out = ClaimSweep(name, scale, sweep_dir, jobs, [_job_state(sweep_dir / str(n)) for n in range(len(jobs))])
        recorded = {str(n): r for n in range(len(jobs)) if (r := recorded_config(sweep_dir / str(n))) is not None}
        if recorded:
            checked = sweep_mismatches(cfg, recorded)
            if checked and checked[1]:
                num, shown, diff = checked[1][0]
                out.refused = f"job {num} ({' '.join(shown)}): {describe_diff(diff)}"
    return out


def format_listing(sweeps: list[ClaimSweep], results: Path) -> str:
    """One line per claim sweep: jobs finished / to resume / to run, the folder and its report."""
    lines = [
        f"{'claim config':<24} {'scale':<5} {'jobs':>4} {'done':>4} {'resume':>6} {'to run':>6}  sweep dir -> report"
    ]
    for s in sweeps:
        todo = len(s.states) - s.count("finished") - s.count("resumable")
        lines.append(
            f"{s.name:<24} {s.scale:<5} {len(s.states):>4} {s.count('finished'):>4} "
            f"{s.count('resumable'):>6} {todo:>6}  {s.sweep_dir} -> {s.published(results) or '(no report yet)'}"
        )
        if s.refused:
            lines.append(f"  refused: the folder holds another config, {s.refused}")
        elif not s.complete and s.published(results):
            lines.append(
                f"  published: {s.published(results)}; `xformer claims run` leaves it (with --rerun it runs "
                f"{shlex.join(s.command())})"
            )
        elif not s.complete:
            lines.append(f"  would run: {shlex.join(s.command())}")
    if sweeps and sweeps[0].scale != SMALL:
        lines.append(
            f"small form of each (2 seeds, fewer steps: an effect's sign in minutes on one core; its own "
            f"folder .../claims/<name>/{SMALL}): xformer claims run --scale {SMALL} <name>, or python run.py "
            f"experiment=claims/<name> scale={SMALL} hydra.launcher.n_jobs=1 -m"
        )
    return "\n".join(lines)


def _read_json(path: Path, default: list | dict) -> list | dict:
    """The JSON in ``path``; ``default`` when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


def run_sweep(s: ClaimSweep, extra: list[str]) -> int:
    """Run the claim's sweep (``python run.py ... -m`` in a subprocess, output passed through) and
    log its wall time in ``<sweep dir>/.xformer/claims_runs.json``; return its exit status."""
    cmd = [sys.executable, str(REPO / "run.py"), *s.command(extra)[2:]]
    print(
        f"== {s.name}: {shlex.join(s.command(extra))}  ({s.count('finished')} of {len(s.states)} jobs "
        f"finished, {s.count('resumable')} to resume)",
        flush=True,
    )
    t0 = time.time()
    record = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "wall_s": None,  # filled in when the sweep ends, or when this process is stopped by SIGTERM
        "exit": "running",
        "command": shlex.join(s.command(extra)),
        "jobs_before": {"finished": s.count("finished"), "resumable": s.count("resumable"), "total": len(s.states)},
    }
    runs = [*_read_json(s.sweep_dir / RUNS_LOG, []), record]

    def save(exit_status) -> float:
        wall = time.time() - t0
        if exit_status != "running":
            record.update(wall_s=round(wall, 1), exit=exit_status)
        (s.sweep_dir / RUNS_LOG).parent.mkdir(parents=True, exist_ok=True)
        (s.sweep_dir / RUNS_LOG).write_text(json.dumps(runs, indent=2))
        return wall

    def on_sigterm(signum, _frame) -> None:  # a preempted or killed shell: keep this invocation's time
        save("SIGTERM")
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    save("running")
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        rc = subprocess.call(
            cmd,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))},
        )
    except KeyboardInterrupt:
        save("SIGINT")
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    wall = save(rc)
    print(f"== {s.name}: sweep exited {rc} after {wall:.0f} s", flush=True)
    return rc


def write_jobs_csv(sweep_dir: Path, path: Path) -> int:
    """``jobs.csv``: one row per job folder of the sweep (number, overrides, status, seed, objective,
    test/val loss, BLEU, ppl, exact match where present, wall time, steps); returns the row count."""
    rows = []
    for job in sorted((p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)):
        found = read_record(job)
        m = found or RunRecord()
        row = {
            "job": int(job.name),
            "overrides": " ".join(m.job.get("overrides") or []),
            "status": str(m.status) if found else _job_state(job),
            "seed": m.config.get("seed"),
            "objective": m.objective.get("metric"),
            "objective_value": m.objective.get("value"),
        }
        row |= {k: m.metrics.get(k) for k in JOBS_CSV_METRICS}
        rows.append(row | {"wall_time_s": m.wall_time_s, "global_step": m.global_step})
    if rows:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return len(rows)


def _commit() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() or "unknown"


def _wall(run: dict, unit: str = " s") -> str:
    """An invocation's wall time, ``?`` when it was killed before it could record it."""
    return "?" if run.get("wall_s") is None else f"{run['wall_s']:.0f}{unit}"


def write_run_md(s: ClaimSweep, out: Path, extra: list[str]) -> Path:
    """``run.md``: how the report was made (commands, wall time per invocation and in total, jobs,
    launcher, machine, commit)."""
    runs = _read_json(s.sweep_dir / RUNS_LOG, [])
    total = sum(r["wall_s"] for r in runs if r.get("wall_s") is not None)
    unknown = sum(1 for r in runs if r.get("wall_s") is None)  # killed (SIGKILL) before it could record
    jobs = _read_json(s.sweep_dir / "sweep_summary.json", {}).get("jobs") or []
    finished = sum(j.get("status") == Status.FINISHED for j in jobs)
    job_time = sum(float(r.wall_time_s or 0) for job in s.sweep_dir.iterdir() if (r := read_record(job)) is not None)
    launcher = (
        "two jobs side by side, one thread each (hydra/launcher=joblib_cpu)"
        if s.scale in ("cpu", SMALL)
        else "one job at a time (basic launcher)"
    )
    lines = [
        "# How this report was made",
        "",
        "    export XFORMER_DATA=/path/to/data   # tinyshakespeare/, multi30k/",
        f"    xformer claims run --scale {s.scale} {s.name}" + (f" -- {shlex.join(extra)}" if extra else ""),
        "",
        "which runs (resumably: a finished job is skipped, an interrupted one continues from its last.ckpt)",
        "",
        f"    {shlex.join(s.command(extra))}      # sweep folder {s.sweep_dir}",
        f"    xformer report {s.sweep_dir} --out {out}{''.join(' ' + a for a in bench_args(s))}",
        "",
        f"Jobs: {len(jobs)} ({finished} finished), {launcher}.",
        (
            f"Wall time of the sweep: {total:.0f} s ({total / 60:.1f} min) over {len(runs)} invocation(s)"
            + (": " + ", ".join(_wall(r) for r in runs) if len(runs) > 1 else "")
            + (f" ({unknown} killed without recording its time: not counted)" if unknown else "")
            if runs
            else "Wall time of the sweep: not recorded (it was not run by `xformer claims run`)"
        )
        + f"; the jobs' own wall times add up to {job_time:.0f} s ({job_time / 60:.1f} min).",
        f"Machine: {platform.node() or 'unknown'}, {os.cpu_count()} CPUs, {platform.platform()}; "
        f"commit {_commit()}. Per-job data: `jobs.csv`.",
        "",
        "| invocation started | wall time (s) | exit | jobs finished before / total |",
        "|---|---|---|---|",
        *(
            f"| {r['started']} | {_wall(r, unit='')} | {r['exit']} | {r['jobs_before']['finished']} / "
            f"{r['jobs_before']['total']} |"
            for r in runs
        ),
        "",
    ]
    path = out / "run.md"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    return path


def bench_args(s: ClaimSweep) -> list[str]:
    """``["--bench", <file>]`` for a sweep read by a claim declared with ``bench: true`` (measured by
    ``xformer bench``) when the committed ``docs/results/bench-<scale>.json`` exists, else ``[]``."""
    from .rules.engine import project_claims

    if not any(c.bench and s.name in c.sweeps for c in project_claims()):
        return []
    bench = RESULTS / f"bench-{s.scale}.json"
    return ["--bench", str(bench)] if bench.is_file() else []


def publish(s: ClaimSweep, results: Path, extra: list[str]) -> int:
    """Write report.md (``xformer report``), run.md and jobs.csv for the sweep; return the report's
    exit status."""
    from . import cli as report_cli

    out = results / s.name
    if not s.sweep_dir.is_dir():
        print(
            f"error: {s.name}: no sweep folder {s.sweep_dir} yet; run: xformer claims run --scale {s.scale} {s.name}",
            file=sys.stderr,
        )
        return 2
    rc = report_cli.main([str(s.sweep_dir), "--out", str(out), *bench_args(s)])
    if rc == 0:
        write_jobs_csv(s.sweep_dir, out / "jobs.csv")
        write_run_md(s, out, extra)
        print(f"== {s.name}: published {out}/report.md, run.md, jobs.csv", flush=True)
    return rc


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="xformer claims",
        description=__doc__.split("\n\n")[0],
        formatter_class=PlainHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    sub = p.add_subparsers(dest="command", required=True)
    for cmd, text in (
        ("list", "show each claim sweep's state and what `run` would start"),
        ("run", "run what is missing, then publish the reports"),
        ("report", "publish the reports of the sweeps as they are"),
    ):
        q = sub.add_parser(cmd, help=text)
        q.add_argument(
            "names",
            nargs="*",
            metavar="NAME",
            help="claim config (conf/experiment/claims/<name>) or declared claim (claims/<id>.yaml)",
        )
        q.add_argument(
            "--scale", choices=("cpu", "gpu", SMALL), default="cpu", help="CPU form (default), GPU form or small form"
        )
        q.add_argument(
            "--results", type=Path, default=None, help=f"where reports go (default {RESULTS}; small form: see above)"
        )
        if cmd == "run":
            q.add_argument("--dry-run", action="store_true", help="list what would run (same as `list`)")
            q.add_argument("--no-report", action="store_true", help="run the sweeps only")
            q.add_argument(
                "--rerun", action="store_true", help="also run claims whose report is already published in --results"
            )
    t = sub.add_parser("table", help="rebuild the claims table of docs/results/README.md from docs/results/*/")
    t.add_argument("--check", action="store_true", help="exit 1 when the README table differs (nothing written)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``xformer claims``; returns the exit status (module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    i = argv.index("--") if "--" in argv else len(argv)
    argv, extra = argv[:i], argv[i + 1 :]
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        if args.command == "table":
            from .claims_table import main as table_main

            return table_main(check=args.check)
        if args.results is None:
            small = Path(os.environ.get("XFORMER_RUNS", "multirun")) / "claims" / f"{SMALL}_reports"
            args.results = small if args.scale == SMALL else RESULTS
        sweeps = [inspect(n, args.scale, extra) for n in resolve_names(args.names)]
        if args.command == "list" or getattr(args, "dry_run", False):
            print(format_listing(sweeps, args.results))
            return 0
        status = 0
        if args.command == "run" and not os.environ.get("XFORMER_DATA"):
            raise UsageError(
                "XFORMER_DATA is not set: export XFORMER_DATA=/path/to/data (a folder with "
                "tinyshakespeare/input.txt and multi30k/)"
            )
        for s in sweeps:
            if args.command == "run":
                if s.refused:
                    print(
                        f"error: {s.name}: {s.sweep_dir} holds another config ({s.refused}); move that folder "
                        f"away or set XFORMER_RUNS to start a new one",
                        file=sys.stderr,
                    )
                    status = max(status, 2)
                    continue
                if not s.complete and s.published(args.results) and not args.rerun:
                    print(
                        f"== {s.name}: published ({s.published(args.results)}); not run again "
                        f"(--rerun runs it, into {s.sweep_dir})",
                        flush=True,
                    )
                    continue
                if not s.complete:
                    rc = run_sweep(s, extra)
                    if rc not in (0, 1):  # 1: some job failed, the rest is still worth reporting
                        status = max(status, 2)
                        continue
                    status = max(status, rc)
                else:
                    print(f"== {s.name}: all {len(s.states)} jobs finished in {s.sweep_dir}", flush=True)
                if args.no_report:
                    continue
            status = max(status, publish(s, args.results, extra))
        return status
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
