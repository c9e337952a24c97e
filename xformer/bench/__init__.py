"""``xformer bench``: xformer against ``torch.nn.Transformer`` and x-transformers, and the costs
of self-attention that Vaswani et al.'s Table 1 states, measured side by side in one run; prints a
table and writes ``bench.json`` (every row and key: ``docs/bench.md``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import re
import sys
import time
import traceback
from dataclasses import asdict, replace
from pathlib import Path

import torch

from xformer.help import PlainHelpFormatter

from .config import BenchConfig, preset
from .timing import loadavg

DEFAULT_SECTIONS = (
    "train_step train_step_dropout0 overhead padding decoding attention recurrence mfu nanogpt_step"
).split()
OPTIONAL_SECTIONS = ["train_step_compiled", "gpt2", "compile", "ddp"]
ALL_SECTIONS = DEFAULT_SECTIONS + OPTIONAL_SECTIONS
SCHEMA_VERSION = 1

TARGETS = {
    # (section, key): (description, comparison, threshold)
    ("train_step", "ratio_vs_torch"): ("training tokens/s, xformer / torch.nn.Transformer", ">=", 1.2),
    ("train_step", "ratio_vs_x_transformers"): ("training tokens/s, xformer / x-transformers", ">=", 1.2),
    ("train_step_compiled", "ratio_vs_torch"): ("compiled training tokens/s, xformer / torch", ">=", 1.0),
    ("train_step_compiled", "ratio_vs_x_transformers"): ("compiled tokens/s, xformer / x-transformers", ">=", 1.0),
    ("mfu", "mfu"): ("model FLOPs utilisation of xformer's step (GPU target)", ">=", 0.40),
    ("overhead", "overhead_fraction"): ("framework overhead, 1 - run.py / bare loop tokens/s", "<=", 0.05),
    ("padding", "pad_fraction"): ("pad tokens in a Multi30k train epoch (token-budget batches)", "<=", 0.10),
    ("decoding", "speedup"): ("greedy tokens/s, cached / recompute, length 64", ">=", 3.0),
    ("nanogpt_step", "ratio"): ("shakespeare_char_cpu step tokens/s, xformer / plain-PyTorch nanoGPT", ">=", 1.0),
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="xformer bench", description=__doc__.split("\n\n")[0], formatter_class=PlainHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes and few repeats (a smoke run, < 1 min)")
    p.add_argument("--preset", choices=["cpu", "gpu"], help="sizes (default: gpu on cuda, cpu otherwise)")
    p.add_argument("--device", help="cpu or cuda (default: cpu)")
    p.add_argument("--out", default="bench.json", help="where to write the JSON (default: bench.json)")
    p.add_argument(
        "--sections",
        help=f"comma-separated rows to run; default {','.join(DEFAULT_SECTIONS)}; "
        f"also {','.join(OPTIONAL_SECTIONS)}; 'all' for every row",
    )
    p.add_argument("--repeats", type=int, help="timed repeats per contender (row 1)")
    p.add_argument("--warmup", type=int, help="untimed warm-up steps (row 1)")
    p.add_argument(
        "--data-root", help="Multi30k raw files (default: $XFORMER_DATA/multi30k or ../shared/data/multi30k)"
    )
    p.add_argument("--ddp-devices", help="device counts for the ddp row, e.g. 1,2,4,8")
    p.add_argument("--ddp-steps", type=int, help="training steps per ddp run")
    p.add_argument("--ddp-skip", type=int, help="steps excluded from the ddp throughput window")
    p.add_argument("--threads", type=int, help="torch.set_num_threads (default: PyTorch's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--run-override", action="append", help="extra run.py override for the overhead/ddp rows (repeatable)"
    )
    p.add_argument("--no-table", action="store_true", help="do not print the table")
    return p.parse_args(argv)


def make_config(args: argparse.Namespace) -> BenchConfig:
    """The preset chosen by ``args`` with the command-line overrides applied; ``UsageError`` for a value
    out of range, or ``--device cuda`` without CUDA."""
    device = args.device or "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError("--device cuda but torch.cuda.is_available() is False")
    name = "quick" if args.quick else (args.preset or ("gpu" if device.startswith("cuda") else "cpu"))
    cfg = preset(name, device)
    over = {"seed": args.seed}
    for key, low in (("repeats", 1), ("warmup", 0), ("threads", 1), ("ddp_steps", 2), ("ddp_skip", 1)):
        value = getattr(args, key)
        if value is not None and value < low:
            raise UsageError(f"--{key.replace('_', '-')}={value}: must be >= {low}")
        if value is not None:
            over[key] = value
    if args.ddp_devices:
        over["ddp_devices"] = [int(x) for x in args.ddp_devices.split(",") if x]
    if args.run_override:
        over["run_overrides"] = [*cfg.run_overrides, *args.run_override]
    return replace(cfg, **over)


def select_sections(spec: str | None) -> list[str]:
    """The sections named by ``--sections`` (comma list, ``all``, or ``None`` for the defaults), in
    table order. Raises ``UsageError`` for an unknown name."""
    if not spec:
        return list(DEFAULT_SECTIONS)
    names = ALL_SECTIONS if spec == "all" else [s.strip() for s in spec.split(",") if s.strip()]
    if bad := [s for s in names if s not in ALL_SECTIONS]:
        raise UsageError(f"--sections: unknown section(s) {bad}; choose from {ALL_SECTIONS}")
    return [s for s in ALL_SECTIONS if s in names]


def meta(cfg: BenchConfig, sections: list[str], argv: list[str], data_root: Path | None) -> dict:
    xt = importlib.metadata.version("x-transformers") if importlib.util.find_spec("x_transformers") else None
    dev = torch.device(cfg.device)
    return {
        "started": _dt.datetime.now().isoformat(timespec="seconds"),
        "argv": argv,
        "preset": cfg.preset,
        "quick": cfg.preset == "quick",
        "sections": sections,
        "device": cfg.device,
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else _cpu_name(),
        "torch": torch.__version__,
        "x_transformers": xt,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "loadavg_start": loadavg(),
        "config": asdict(cfg),
        "data_root": str(data_root) if data_root else None,
    }


def _cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    names = re.findall(r"^model name\s*:(.*)$", cpuinfo.read_text(), re.M) if cpuinfo.is_file() else []
    return names[0].strip() if names else platform.processor() or platform.machine()


def run_sections(cfg: BenchConfig, sections: list[str], data_root: Path | None, on_section) -> dict:
    """Run the chosen rows in order; a failing row is recorded as ``status: error`` and the rest go on.
    ``on_section(results_so_far)`` is called after each row (the CLI saves partial results with it)."""
    from . import attention, decode, gpt2, mfu, nanogpt, overhead, padding, scaling, training

    out: dict[str, dict] = {}
    runners = {
        "train_step": lambda: training.run(cfg),
        "train_step_dropout0": lambda: training.run(cfg, dropout=0.0),
        "train_step_compiled": lambda: training.run(cfg, compiled=True),
        "gpt2": lambda: gpt2.run(cfg, out.get("mfu")),
        "nanogpt_step": lambda: nanogpt.run(cfg),
        "overhead": lambda: overhead.run(cfg, data_root),
        "padding": lambda: padding.run(cfg, data_root),
        "decoding": lambda: decode.run(cfg),
        "attention": lambda: attention.run_cost(cfg),
        "recurrence": lambda: attention.run_recurrence(cfg),
        "mfu": lambda: mfu.run(cfg, out.get("train_step")),
        "compile": lambda: scaling.run_compile(cfg),
        "ddp": lambda: scaling.run_ddp(cfg, data_root),
    }
    for name in sections:
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            res = runners[name]()
        except Exception as err:  # one broken row must not lose the others
            res = {
                "status": "error",
                "error": f"{type(err).__name__}: {err}"[:2000],
                "traceback": traceback.format_exc()[-4000:],
            }
        res["seconds"] = round(time.perf_counter() - t0, 2)
        out[name] = res
        print(f"[bench] {name}: {res['status']} ({res['seconds']:.1f} s)", file=sys.stderr, flush=True)
        on_section(out)
    return out


def evaluate_targets(sections: dict) -> list[dict]:
    rows = []
    for (sec, key), (desc, op, thr) in TARGETS.items():
        if (s := sections.get(sec, {})).get("status") != "ok":
            continue
        val = (s.get("token_budget") or {}).get(key) if sec == "padding" else s.get(key)
        met = None if val is None else (val >= thr if op == ">=" else val <= thr)
        rows.append(
            {"section": sec, "metric": key, "description": desc, "value": val, "target": f"{op} {thr:g}", "met": met}
        )
    return rows


class UsageError(ValueError):
    """A bad command-line value; :func:`main` prints it as one ``error:`` line and exits 2."""


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status (0 ok, 1 a row failed, 2 bad arguments)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    try:
        cfg = make_config(args)
        sections = select_sections(args.sections)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    from .overhead import data_root_default

    data_root = Path(args.data_root).resolve() if args.data_root else data_root_default()
    t0 = time.perf_counter()
    result = {"schema_version": SCHEMA_VERSION, "meta": meta(cfg, sections, argv, data_root)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save(secs: dict) -> None:  # after every row, so a long run interrupted keeps what it measured
        result["meta"]["loadavg_end"] = loadavg()
        result["meta"]["wall_s"] = round(time.perf_counter() - t0, 2)
        result["targets"] = evaluate_targets(secs)
        result["sections"] = secs
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(_clean(result), indent=2))
        tmp.replace(out)

    secs = run_sections(cfg, sections, data_root, on_section=save)
    save(secs)
    if not args.no_table:
        from .table import render  # imported here: python -m xformer.bench.table runs that module as __main__

        render(result)
    print(f"wrote {out}", file=sys.stderr)
    return 0 if all(s.get("status") != "error" for s in secs.values()) else 1


def _clean(obj):
    """JSON-safe copy: NaN/inf become null (strict JSON readers reject them)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


__all__ = ["main", "run_sections", "DEFAULT_SECTIONS", "ALL_SECTIONS", "TARGETS"]
