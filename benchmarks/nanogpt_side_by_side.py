"""nanoGPT's CPU recipe and ``experiment=shakespeare_char_cpu`` side by side, one core each, at the
same time; writes the table of ``docs/results/nanogpt-cpu.md``.

    python benchmarks/nanogpt_side_by_side.py /path/to/nanoGPT \\
        --text /work/shared/data/tinyshakespeare/input.txt [--rounds 2] [--max-iters 2000] \\
        [--out docs/results/nanogpt-cpu.md] [--work /tmp/nanogpt-side-by-side]

What it does:

1. Prepares nanoGPT's ``data/shakespeare_char`` from ``--text`` (copied to ``input.txt`` there, so
   nanoGPT's ``prepare.py`` does not download it), unless ``train.bin`` is already there.
2. Each round starts both trainers at once, each with ``OMP_NUM_THREADS=1`` and pinned to its own
   core (``taskset``, when the machine has two or more), the start order swapped every round:
   nanoGPT's ``train.py`` with its README's CPU command (``config/train_shakespeare_char.py
   --device=cpu --compile=False --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12
   --n_layer=4 --n_head=4 --n_embd=128 --max_iters=N --lr_decay_iters=N --dropout=0.0``), and
   ``python run.py experiment=shakespeare_char_cpu`` (``trainer.max_steps=N``, and
   ``data.full_val_at_end=false``: nanoGPT's recipe has no pass over the whole val split, so neither
   timed run makes one; ``--full-val-in-run`` keeps xformer's in its run, as the preset does by default).
3. Reads both outputs line by line, stamping each line with the time it arrived: start-up (launch to
   the end of the first training step), evaluation time, training steps/s outside evaluation, wall time
   to the step-N evaluation and to the process's exit, and the val losses: each trainer's own estimate
   at step N (nanoGPT: 20 fresh random batches; xformer: 20 fixed random batches) and the same full
   estimator for both (every contiguous 64-character window of the val split, token mean), computed
   after both runs, from each one's checkpoint: for nanoGPT with its own ``model.py``, for xformer by
   ``run.py mode=eval`` on its best checkpoint (``test/loss@val``). nanoGPT's checkpoint is its best by
   its own val estimate (the step is listed).
4. Names the CPU (model name, family/model, the flags that decide the kernels: AVX-512, AVX-512 BF16,
   AMX) and torch's ATen CPU capability above the table: a ratio holds for the CPU it was measured on.

Nothing is timed inside a test: this is a benchmark script (``tests/bench`` only checks it runs with
``--max-iters`` tiny).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NANOGPT_FLAGS = [
    "config/train_shakespeare_char.py",
    "--device=cpu",
    "--compile=False",
    "--eval_iters=20",
    "--log_interval=1",
    "--block_size=64",
    "--batch_size=12",
    "--n_layer=4",
    "--n_head=4",
    "--n_embd=128",
    "--dropout=0.0",
]


def prepare_nanogpt_data(nanogpt: Path, text: Path) -> Path:
    """nanoGPT's ``data/shakespeare_char`` (``train.bin``, ``val.bin``, ``meta.pkl``) made from ``text``."""
    data = nanogpt / "data" / "shakespeare_char"
    if not (data / "train.bin").is_file():
        shutil.copyfile(text, data / "input.txt")
        subprocess.run([sys.executable, "prepare.py"], cwd=data, check=True, stdout=subprocess.DEVNULL)
    return data


class Proc:
    """A child process whose output lines are kept with their arrival time (seconds after launch)."""

    def __init__(self, name: str, cmd: list[str], cwd: Path, env: dict, log: Path) -> None:
        self.name, self.lines = name, []
        self.t0 = time.perf_counter()
        self.p = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        self.log = log.open("w")
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.p.stdout:
            t = time.perf_counter() - self.t0
            self.lines.append((t, line.rstrip("\n")))
            self.log.write(f"{t:9.3f} {line}")
        self.p.wait()
        self.end = time.perf_counter() - self.t0  # the exit, whenever wait() is called
        self.log.flush()

    def wait(self) -> float:
        """Wait for the exit; ``wall`` is the time from launch to the exit (not to this call: the
        trainers are waited for one after the other)."""
        rc = self.p.wait()
        self.thread.join()
        self.wall = self.end
        if rc != 0:
            tail = "\n".join(line for _, line in self.lines[-20:])
            raise SystemExit(f"{self.name} failed (exit {rc}); last lines:\n{tail}")
        return self.wall


def _env(core: int | None) -> tuple[dict, list[str]]:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "WANDB_MODE": "offline",
        "PYTHONUNBUFFERED": "1",
    }
    pin = ["taskset", "-c", str(core)] if core is not None and shutil.which("taskset") else []
    return env, pin


def start_nanogpt(nanogpt: Path, n: int, every: int, out_dir: Path, core: int | None, log: Path) -> Proc:
    env, pin = _env(core)
    cmd = [
        *pin,
        sys.executable,
        "train.py",
        *NANOGPT_FLAGS,
        f"--max_iters={n}",
        f"--lr_decay_iters={n}",
        f"--out_dir={out_dir}",
    ] + ([f"--eval_interval={every}"] if every != 250 else [])
    return Proc("nanoGPT", cmd, nanogpt, env, log)


def start_xformer(
    text: Path,
    n: int,
    every: int,
    out_dir: Path,
    core: int | None,
    log: Path,
    extra: list[str] = (),
    full_val_in_run: bool = False,
) -> Proc:
    env, pin = _env(core)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "benchmarks"), env.get("PYTHONPATH", "")])
    cmd = [
        *pin,
        sys.executable,
        str(REPO / "run.py"),
        "experiment=shakespeare_char_cpu",
        f"data.root={text.parent}",
        f"trainer.max_steps={n}",
        f"optim.scheduler.total_steps={n}",
        f"trainer.val_check_interval={every}",
        "trainer.enable_progress_bar=false",
        f"hydra.run.dir={out_dir}",
        "+callbacks.side_by_side._target_=_side_by_side_marks.Marks",
        f"data.full_val_at_end={str(full_val_in_run).lower()}",
        *extra,
    ]
    return Proc("xformer", cmd, REPO, env, log)


def xformer_full_val(text: Path, run_dir: Path, extra: list[str] = ()) -> float:
    """``test/loss@val`` of the run's best checkpoint (every contiguous 64-character val window, token
    mean), from ``run.py mode=eval`` in a process of its own after the timed run."""
    best = sorted((run_dir / "checkpoints").glob("best-*.ckpt"))
    if not best:
        raise SystemExit(f"xformer wrote no best checkpoint under {run_dir / 'checkpoints'}")
    env, _ = _env(None)
    cmd = [
        sys.executable,
        str(REPO / "run.py"),
        "experiment=shakespeare_char_cpu",
        "mode=eval",
        f"ckpt_path={best[-1]}",
        f"data.root={text.parent}",
        "data.full_val_at_end=true",
        "trainer.enable_progress_bar=false",
        f"hydra.run.dir={run_dir / 'full_val'}",
        *[o for o in extra if o.startswith("trainer.precision=")],
    ]
    res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"xformer's evaluation failed (exit {res.returncode}): {res.stderr[-1500:]}")
    import json

    return float(json.loads((run_dir / "full_val" / "metrics.json").read_text())["metrics"]["test/loss@val"])


def cpu_description() -> str:
    """The CPU in one line: model name, family/model, the kernel-deciding flags it has, torch's ATen
    CPU capability and version (Linux ``/proc/cpuinfo``; "unknown CPU" elsewhere)."""
    import torch

    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    flags = set(info.get("flags", "").split())
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")
    have = [f for f in wanted if f in flags]
    lacks = [f for f in ("avx512_bf16", "amx_bf16") if f not in flags]
    name = info.get("model name", "unknown CPU")
    family = f"family {info['cpu family']} model {info['model']}" if "cpu family" in info else ""
    return (
        f"CPU: {name} ({family}; {os.cpu_count()} cores), flags {', '.join(have) or 'none of the listed'}"
        + (f", no {' or '.join(lacks)}" if lacks else "")
        + f"; torch {torch.__version__}, ATen CPU capability {torch.backends.cpu.get_cpu_capability()}."
    )


def nanogpt_numbers(proc: Proc, n: int, every: int) -> dict:
    """Timings and losses from nanoGPT's output (``step k: ... val loss v`` after each evaluation,
    ``iter k: loss l, time t ms`` after each step)."""
    lines = proc.lines
    evals, iters, first_step = [], {}, None
    prev_t = 0.0
    for t, line in lines:
        if m := re.match(r"step (\d+): train loss ([\d.]+), val loss ([\d.]+)", line):
            evals.append((int(m[1]), t - prev_t, float(m[3]), t))  # eval started after the previous line
        elif m := re.match(r"iter (\d+): loss ([\d.]+), time ([\d.]+)ms", line):
            iters[int(m[1])] = (t, float(m[3]))
            if first_step is None:
                first_step = t
        prev_t = t
    at_n = [e for e in evals if e[0] == n]
    step_ms = [ms for k, (_, ms) in iters.items() if k > 0 and k % every]  # steps timed without an eval
    return {
        "startup_s": first_step,
        "eval_s": sum(e[1] for e in evals),
        "n_evals": len(evals),
        "steps_per_s": 1000.0 / statistics.median(step_ms) if step_ms else math.nan,
        "to_eval_n_s": at_n[0][3] if at_n else math.nan,
        "val_estimate": at_n[0][2] if at_n else math.nan,
        "wall_s": proc.wall,
    }


def xformer_numbers(proc: Proc, run_dir: Path, n: int) -> dict:
    """Timings from the callback's markers, losses from the run's ``csv/metrics.csv``."""
    marks = [(t, line.split("] ", 1)[1]) for t, line in proc.lines if line.startswith("[side-by-side]")]
    first = next(t for t, m in marks if m == "first step")
    starts = [t for t, m in marks if m == "val start"]
    ends = [t for t, m in marks if m == "val end"]
    evals = [e - s for s, e in zip(starts, ends, strict=False)]
    rows = list(csv.DictReader((run_dir / "csv" / "metrics.csv").open()))
    val = [(int(r["step"]), float(r["val/loss"])) for r in rows if r.get("val/loss")]
    full = [float(r["test/loss@val"]) for r in rows if r.get("test/loss@val")]
    train_s = (ends[-1] if ends else proc.wall) - first - sum(evals[:-1]) - (evals[-1] if evals else 0.0)
    return {
        "startup_s": first,
        "eval_s": sum(evals),
        "n_evals": len(evals),
        "steps_per_s": (n - 1) / train_s if train_s > 0 else math.nan,
        "to_eval_n_s": ends[-1] if ends else math.nan,
        "val_estimate": val[-1][1] if val else math.nan,
        "val_full": full[-1] if full else math.nan,
        "wall_s": proc.wall,
    }


def nanogpt_full_val(nanogpt: Path, out_dir: Path, data: Path) -> tuple[float, int]:
    """Token-mean loss of nanoGPT's checkpoint over every contiguous 64-character val window (the
    estimator xformer logs as ``test/loss@val``), with nanoGPT's own model code; and the checkpoint's step."""
    import numpy as np
    import torch

    sys.path.insert(0, str(nanogpt))
    try:
        from model import GPT, GPTConfig  # nanoGPT's model.py
    finally:
        sys.path.pop(0)
    ckpt = torch.load(out_dir / "ckpt.pt", map_location="cpu", weights_only=False)
    model = GPT(GPTConfig(**ckpt["model_args"]))
    state = {k.removeprefix("_orig_mod."): v for k, v in ckpt["model"].items()}
    model.load_state_dict(state)
    model.eval()
    ids = torch.from_numpy(np.fromfile(data / "val.bin", dtype=np.uint16).astype(np.int64))
    T, B = 64, 12
    n_win = (len(ids) - 1) // T
    total, count = 0.0, 0
    with torch.no_grad():
        for s in range(0, n_win, B):
            idx = torch.arange(s, min(s + B, n_win))[:, None] * T + torch.arange(T + 1)[None, :]
            win = ids[idx]
            x, y = win[:, :-1].contiguous(), win[:, 1:].contiguous()
            logits, _ = model(x, y)
            nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum")
            total += float(nll)
            count += y.numel()
    return total / count, int(ckpt["iter_num"])


def table(rounds: list[dict], n: int, full_val_in_run: bool = False) -> str:
    """The Markdown table: one column per trainer (values of all rounds, "/"-separated) and the ratio."""

    def cell(key, who, fmt):
        return " / ".join(fmt.format(r[who][key]) for r in rounds)

    def ratio(key):
        vals = [r["xformer"][key] / r["nanogpt"][key] for r in rounds if r["nanogpt"][key]]
        return f"{min(vals):.3f}–{max(vals):.3f}" if len(vals) > 1 else f"{vals[0]:.3f}"

    rows = [
        ("val loss at step N, full val split (token mean)", "val_full", "{:.4f}"),
        ("val loss at step N, the trainer's own estimate (20 random batches)", "val_estimate", "{:.4f}"),
        ("training steps/s (outside evaluation)", "steps_per_s", "{:.2f}"),
        ("start to the end of the first training step (s)", "startup_s", "{:.1f}"),
        ("time spent evaluating (s)", "eval_s", "{:.1f}"),
        ("**wall time to the step-N evaluation (s)**", "to_eval_n_s", "{:.0f}"),
        ("wall time to exit (s)", "wall_s", "{:.0f}"),
    ]
    out = [
        f'N = {n} steps; {len(rounds)} round(s), values per round separated by "/" '
        f"(start order: {', '.join(r['order'] for r in rounds)}).",
        "",
        "| | nanoGPT | xformer | xformer / nanoGPT |",
        "|---|---|---|---|",
    ]
    for label, key, fmt in rows:
        out.append(
            f"| {label.replace('N', str(n)) if 'step N' in label or 'step-N' in label else label} | "
            f"{cell(key, 'nanogpt', fmt)} | {cell(key, 'xformer', fmt)} | {ratio(key)} |"
        )
    ck = ", ".join(str(r["nanogpt"]["ckpt_step"]) for r in rounds)
    out += [
        "",
        f"nanoGPT's full-split loss is that of its saved checkpoint (its best by its own estimate; step {ck}), "
        "computed after its run. "
        + (
            "xformer's is its run's own `test/loss@val`: its wall times include that pass."
            if full_val_in_run
            else "xformer's is that of its best checkpoint, by `run.py mode=eval` after its run "
            "(timed with `data.full_val_at_end=false`: neither run scores the whole split)."
        ),
        "",
    ]
    return "\n".join(out)


def write_section(path: Path, label: str, body: str) -> None:
    """Put ``body`` between ``<!-- side-by-side:label -->`` and ``<!-- /side-by-side:label -->`` in the
    Markdown file ``path``: replaced where the markers are, appended (with the markers) otherwise; the
    rest of the file is left as it is."""
    start, end = f"<!-- side-by-side:{label} -->", f"<!-- /side-by-side:{label} -->"
    old = path.read_text() if path.is_file() else ""
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in old and end in old:
        new = old[: old.index(start)] + block + old[old.index(end) + len(end) :]
    else:
        new = (old.rstrip() + "\n\n" if old else "") + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("nanogpt", type=Path, help="a karpathy/nanoGPT checkout")
    ap.add_argument(
        "--text",
        type=Path,
        default=Path("/work/shared/data/tinyshakespeare/input.txt"),
        help="tiny-shakespeare input.txt (nothing is downloaded)",
    )
    ap.add_argument("--max-iters", type=int, default=2000)
    ap.add_argument(
        "--eval-interval",
        type=int,
        default=250,
        help="nanoGPT's eval_interval and xformer's val_check_interval (250 = the recipe's; "
        "lower only for a smoke test with a tiny --max-iters)",
    )
    ap.add_argument("--rounds", type=int, default=2, help="rounds, the start order swapped each round")
    ap.add_argument("--work", type=Path, default=Path("/tmp/nanogpt-side-by-side"), help="logs and run folders")
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write the table into this Markdown file (e.g. docs/results/nanogpt-cpu.md): between the markers "
        "of --label when the file has them (the rest of the file is kept), else appended as a new section",
    )
    ap.add_argument(
        "--full-val-in-run",
        action="store_true",
        help="xformer scores the whole val split inside its timed run (the preset's default); nanoGPT never does",
    )
    ap.add_argument("--label", default="fp32", help="names the table's section in --out (one section per label)")
    ap.add_argument(
        "--xformer-override",
        action="append",
        default=[],
        help="extra run.py override for xformer, e.g. trainer.precision=bf16-mixed (repeatable)",
    )
    args = ap.parse_args(argv)
    nanogpt, n, every = args.nanogpt.resolve(), args.max_iters, args.eval_interval
    if n % every:
        ap.error(f"--max-iters={n} must be a multiple of --eval-interval={every} (both evaluate at step N)")
    data = prepare_nanogpt_data(nanogpt, args.text.resolve())
    cores = [0, 1] if (os.cpu_count() or 1) >= 2 else [None, None]
    rounds = []

    def make_starters(work: Path) -> list:
        """(name, start(core) -> process) for both trainers, writing under ``work``."""
        text = args.text.resolve()
        return [
            ("nanogpt", lambda c: start_nanogpt(nanogpt, n, every, work / "nanogpt", c, work / "nanogpt.log")),
            (
                "xformer",
                lambda c: start_xformer(
                    text,
                    n,
                    every,
                    work / "xformer",
                    c,
                    work / "xformer.log",
                    args.xformer_override,
                    args.full_val_in_run,
                ),
            ),
        ]

    for k in range(args.rounds):
        work = args.work / f"round{k}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        first_nano = k % 2 == 0
        starters = make_starters(work)
        if not first_nano:
            starters.reverse()
        procs = {name: start(core) for (name, start), core in zip(starters, cores, strict=False)}
        for p in procs.values():
            p.wait()
        res = {
            "order": " then ".join(name for name, _ in starters),
            "nanogpt": nanogpt_numbers(procs["nanogpt"], n, every),
            "xformer": xformer_numbers(procs["xformer"], work / "xformer", n),
        }
        res["nanogpt"]["val_full"], res["nanogpt"]["ckpt_step"] = nanogpt_full_val(nanogpt, work / "nanogpt", data)
        if not args.full_val_in_run:
            res["xformer"]["val_full"] = xformer_full_val(args.text.resolve(), work / "xformer", args.xformer_override)
        rounds.append(res)
        print(f"round {k}: {res}", flush=True)
    text = cpu_description() + "\n\n" + table(rounds, n, args.full_val_in_run)
    print(text)
    if args.out:
        cmd = (
            f"python benchmarks/nanogpt_side_by_side.py <nanoGPT checkout> --text {args.text} "
            f"--max-iters {n} --rounds {args.rounds} --out {args.out} --label {args.label}"
            + (f" --eval-interval {every}" if every != 250 else "")
            + "".join(f" --xformer-override {o}" for o in args.xformer_override)
            + (" --full-val-in-run" if args.full_val_in_run else "")
        )
        section = (
            f"Command: `{cmd}` (one core and one thread each, both at once; {time.strftime('%Y-%m-%d')}).\n\n{text}"
        )
        write_section(args.out, args.label, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
