"""Rich tables of a ``bench.json`` result: one summary row per benchmark row, then the attention and
recurrence details. ``python -m xformer.bench.table bench.json`` re-prints those of a saved result.
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.filesize import decimal
from rich.table import Table


def _f(x, fmt: str = "{:,.0f}", none: str = "—") -> str:
    return none if x is None else fmt.format(x)


def _row(num: str, what: str, ours: str, base: str, ratio: str = "—", t: dict | None = None) -> list[str]:
    """A summary row; ``t`` is the row's target (its ``target`` and ``met``), ``None``: no target."""
    met = {True: "[green]yes[/]", False: "[red]no[/]", None: "—"}[(t or {}).get("met")]
    return [num, what, ours, base, ratio, *(("—", "—") if t is None else (t.get("target", ""), met))]


def _train_step_rows(sec: dict, num: str, tg: dict, what: str = "train step") -> list[list[str]]:
    c = sec["contenders"]
    ours = _f(c["xformer"]["tokens_per_s"]) + " tok/s"
    rows = []
    for name, label in (("torch", "torch.nn.Transformer"), ("x_transformers", "x-transformers")):
        cc, key = c.get(name, {}), f"ratio_vs_{name}"
        if cc.get("status") == "ok":
            base = f"{_f(cc['tokens_per_s'])} tok/s"
            rows.append(_row(num, f"{what} vs {label}", ours, base, _f(sec[key], "{:.2f}×"), tg.get(key, {})))
        else:
            rows.append(_row(num, f"{what} vs {label}", ours, cc.get("note", "skipped")))
    return rows


def _gpt2_rows(sec: dict, num: str, _tg: dict) -> list[list[str]]:
    (lo, hi), c = sec["nanogpt_mfu"], sec["config"]
    what = f"GPT-2-small-shaped step (T {c['seq_len']}, B {c['batch']})"
    ours = f"{_f(sec['tokens_per_s'])} tok/s, MFU {100 * sec['mfu']:.1f}%"
    return [
        _row(num, what, ours, f"nanoGPT: {100 * lo:.0f}–{100 * hi:.0f}% MFU", f"{sec['achieved_tflops']:.3g} TFLOP/s")
    ]


def _overhead_rows(sec: dict, num: str, tg: dict) -> list[list[str]]:
    t = tg.get("overhead_fraction", {})
    ratio = f"{sec['ratio']:.3f}× (overhead {100 * sec['overhead_fraction']:.1f}%)"
    ours, base = (f"{_f(sec[k]['tokens_per_s'])} tok/s" for k in ("run_py", "bare"))
    return [_row(num, "run.py vs bare loop", ours, base, ratio, {**t, "target": "overhead " + t.get("target", "")})]


def _padding_rows(sec: dict, num: str, tg: dict) -> list[list[str]]:
    ours = f"{100 * sec['token_budget']['pad_fraction']:.1f}% (token budget)"
    base = f"{100 * sec['fixed_random']['pad_fraction']:.1f}% (random, {sec['config']['fixed_batch_size']}/batch)"
    ratio = _f(sec.get("waste_ratio"), "{:.1f}× less")
    return [_row(num, "pad tokens, Multi30k epoch", ours, base, ratio, tg.get("pad_fraction", {}))]


def _decoding_rows(sec: dict, num: str, tg: dict) -> list[list[str]]:
    n = sec["config"]["output_len"]
    ours = f"{_f(sec['cached']['tokens_per_s'])} tok/s (cache)"
    base = f"{_f(sec['recompute']['tokens_per_s'])} tok/s (recompute)"
    rows = [_row(num, f"greedy decode, length {n}", ours, base, _f(sec["speedup"], "{:.1f}×"), tg.get("speedup", {}))]
    if "beam" in sec:
        b = sec["beam"]
        rows.append(
            _row("4b", f"beam search ({b['beam_size']} beams), length {n}", f"{_f(b['tokens_per_s'])} tok/s", "—")
        )
    return rows


def _exponents(p: dict, keys: tuple[str, ...] = ("time_exponent", "memory_exponent")) -> str:
    return " / ".join(_f(p[k], "{:.2f}") for k in keys)


def _attention_rows(sec: dict, num: str, _tg: dict) -> list[list[str]]:
    e, f = sec["explicit"], sec["sdpa"]
    what = "attention: exponent of time / memory in n"
    t = {"target": "Table 1: 2 / 2", "met": None}
    rows = [_row(num, what, f"fused SDPA: {_exponents(f)}", f"explicit: {_exponents(e)}", t=t)]
    if "linear" in sec:  # bench.json files from before model/mixer=linear have no such path
        ours = f"linear: {_exponents(sec['linear'], ('time_exponent',))}, "
        ours += f"causal: {_exponents(sec['linear_causal'], ('time_exponent',))}"
        what = "linear attention (model/mixer=linear): time exponent"
        base = f"explicit: {_exponents(e, ('time_exponent',))}"
        rows.append(_row("5b", what, ours, base, t={"target": "≈ 1", "met": None}))
    return rows


def _recurrence_rows(sec: dict, num: str, _tg: dict) -> list[list[str]]:
    cross, claim = sec["crossover_n"], sec["claim_crossover_n"]
    what = f"crossover n (attention slower than LSTM), d={sec['config']['d']}"
    ratio = _f(cross / claim if cross else None, "{:.1f}× d")
    return [_row(num, what, _f(cross, "n ≈ {:,.0f}", "none in range"), f"Table 1: n = d = {claim}", ratio)]


def _mfu_rows(sec: dict, num: str, tg: dict) -> list[list[str]]:
    what = f"MFU (6N + 12·L·H·Q·T), {sec.get('peak_method', '').split(' ')[1]} peak"
    ours = f"{100 * sec['mfu']:.1f}% of {sec['peak_tflops']:.3g} TFLOP/s"
    base = f"torch {_f(sec.get('mfu_torch'), '{:.1%}')}, x-t {_f(sec.get('mfu_x_transformers'), '{:.1%}')}"
    return [_row(num, what, ours, base, f"{sec['achieved_tflops']:.3g} TFLOP/s", tg.get("mfu", {}))]


def _compile_rows(sec: dict, num: str, _tg: dict) -> list[list[str]]:
    ours, base = (f"{_f(sec[k]['tokens_per_s'])} tok/s" for k in ("compiled", "eager"))
    t = {"target": f"compile {sec['compile_s']:.0f} s, {sec['graph_breaks']} breaks", "met": None}
    return [_row(num, "torch.compile train step", ours, base + " eager", _f(sec["speedup"], "{:.2f}×"), t)]


def _nanogpt_rows(sec: dict, num: str, tg: dict) -> list[list[str]]:
    c, cfg = sec["contenders"], sec["config"]
    what = f"shakespeare_char_cpu step vs plain-PyTorch nanoGPT (B {cfg['batch']}, T {cfg['block_size']})"
    ours, base = (f"{_f(c[k]['tokens_per_s'])} tok/s" for k in ("xformer", "plain"))
    return [_row(num, what, ours, base, _f(sec["ratio"], "{:.2f}×"), tg.get("ratio", {}))]


def _ddp_rows(sec: dict, num: str, _tg: dict) -> list[list[str]]:
    rows = []
    for r in sec["runs"]:
        what, ours, t = (
            f"DDP {r['devices']} device(s)",
            f"{_f(r['tokens_per_s'])} tok/s",
            _f(r.get("efficiency"), "eff {:.0%}"),
        )
        rows.append(_row(num, what, ours, "", _f(r.get("speedup"), "{:.2f}×"), {"target": t, "met": None}))
    return rows


# section -> (row number, name shown when the section did not run, rows of a section that ran)
_SUMMARY = {
    "train_step": ("1", "training step", _train_step_rows),
    "train_step_dropout0": ("1b", "training step, dropout 0", partial(_train_step_rows, what="train step, dropout 0,")),
    "train_step_compiled": ("1c", "compiled training step", partial(_train_step_rows, what="compiled train step")),
    "overhead": ("2", "framework overhead", _overhead_rows),
    "padding": ("3", "padding waste", _padding_rows),
    "decoding": ("4", "decoding", _decoding_rows),
    "attention": ("5", "attention cost over n", _attention_rows),
    "recurrence": ("6", "attention vs LSTM over n", _recurrence_rows),
    "mfu": ("7", "MFU", _mfu_rows),
    "gpt2": ("8", "GPT-2-small-shaped step", _gpt2_rows),
    "nanogpt_step": ("9", "nanoGPT-recipe step", _nanogpt_rows),
    "compile": ("+", "torch.compile", _compile_rows),
    "ddp": ("+", "DDP scaling", _ddp_rows),
}


def summary_rows(result: dict) -> list[list[str]]:
    """``[row, measure, xformer, baseline, ratio, target, met]`` strings for each section present."""
    rows: list[list[str]] = []
    for key, (num, name, make) in _SUMMARY.items():
        if (sec := result.get("sections", {}).get(key)) is None:
            continue
        if sec.get("status") == "ok":
            rows += make(sec, num, {t["metric"]: t for t in result.get("targets", []) if t["section"] == key})
        else:
            rows.append(_row(num, name, sec.get("status", "?"), (sec.get("note") or sec.get("error") or "")[:60]))
    return rows


def render(result: dict, console: Console | None = None) -> None:
    console = console or Console()
    m = result.get("meta", {})
    t = Table(
        title=f"xformer bench — {m.get('device_name', '')} ({m.get('device')}), preset {m.get('preset')}, "
        f"torch {m.get('torch')}, load {m.get('loadavg_start')} → {m.get('loadavg_end')}"
    )
    for col in ("#", "row", "xformer", "baseline", "ratio", "target", "met"):
        t.add_column(col, overflow="fold")
    for r in summary_rows(result):
        t.add_row(*r)
    console.print(t)
    s = result.get("sections", {})
    a = s.get("attention")
    if a and a.get("status") == "ok":
        c = Table(
            title=f"Attention cost over n: one layer (d={a['config']['d_model']}, {a['config']['heads']} heads, "
            f"{a['config']['precision']}, {a['config']['pass']})"
        )
        lin = [a[p] for p in ("linear", "linear_causal") if p in a]  # absent in files before model/mixer=linear
        cols = ["n", "explicit ms", "explicit MiB", "SDPA ms", "SDPA MiB", "H·n² scores MiB", "fp16 n×n MB"]
        for col in cols + ["linear ms", "causal linear ms"][: len(lin)]:
            c.add_column(col, justify="right")
        cols = [
            (a[p][k], fmt) for p in ("explicit", "sdpa") for k, fmt in (("time_ms", "{:.2f}"), ("peak_mb", "{:.1f}"))
        ]
        cols += [(a["score_matrices_mb"], "{:.1f}"), (a["fp16_nxn_mb_at_n"], "{:.1f}")]
        cols += [(x["time_ms"], "{:.2f}") for x in lin]
        for i, n in enumerate(a["n"]):
            c.add_row(str(n), *(_f(col[i], fmt) for col, fmt in cols))
        for p, skip in (("explicit", 0), ("sdpa", 2)):  # rich leaves the cells after the last one empty
            fit = (_f(a[p][k], "n^{:.2f}") for k in ("time_exponent", "memory_exponent"))
            c.add_row(f"fit {p}", *[""] * skip, *fit)
        if lin:
            c.add_row("fit linear", *[""] * 6, *(_f(x["time_exponent"], "n^{:.2f}") for x in lin))
        console.print(c)
        k = Table(title="fp16 n×n score matrix (one head, one sequence): stated vs n²·2 bytes")
        for col in ("n", "claimed", "computed n²·2 B"):
            k.add_column(col, justify="right")
        for row in a["claim_table"]:
            k.add_row(f"{row['n']:,}", row["claimed"], decimal(int(row["fp16_nxn_bytes"])))
        console.print(k)
        for note in a.get("notes", []):
            console.print(f"[yellow]attention note:[/] {note}")
    r = s.get("recurrence")
    if r and r.get("status") == "ok":
        c = Table(
            title=f"Self-attention vs LSTM, d={r['config']['d']}, batch {r['config']['batch']} "
            f"(Table 1: attention cheaper while n < d = {r['claim_crossover_n']}; "
            f"equal multiply-adds at n = {r['macs_crossover_n']})"
        )
        keys = [k for k in ("attention_ms", "lstm_ms", "attention_over_lstm", "conv_ms") if k in r]  # no conv_ms: older
        for col in ("n", "attention ms", "LSTM ms", "attention / LSTM", "conv ms")[: len(keys) + 1]:
            c.add_column(col, justify="right")
        for i, n in enumerate(r["n"]):
            c.add_row(str(n), *(_f(r[k][i], "{:.3f}" if k == "attention_over_lstm" else "{:.2f}") for k in keys))
        console.print(c)
        cross = _f(r["crossover_n"], "n ≈ {:,.0f}", "none in the measured range")
        console.print(f"Attention vs LSTM, measured crossover: {cross}")
    for name, sec in s.items():
        if sec.get("status") == "error":
            console.print(f"[red]{name} failed:[/] {sec.get('error')}")
        for note in sec.get("notes", []) if name != "attention" else []:
            console.print(f"[yellow]{name} note:[/] {note}")


if __name__ == "__main__":  # python -m xformer.bench.table [bench.json]
    render(json.loads(Path(sys.argv[1] if len(sys.argv) > 1 else "bench.json").read_text()))
