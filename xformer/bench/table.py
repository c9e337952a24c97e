"""Rich tables of a ``bench.json`` result: one summary row per benchmark row, then the details of the
attention and recurrence rows.

``python -m xformer.bench.table bench.json`` re-prints the tables of a saved result.
"""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table


def _f(x, fmt: str = "{:,.0f}", none: str = "—") -> str:
    if x is None:
        return none
    try:
        return fmt.format(x)
    except (TypeError, ValueError):
        return str(x)


def _met(m) -> str:
    return {True: "[green]yes[/]", False: "[red]no[/]", None: "—"}[m]


def _row(num: str, what: str, ours: str, base: str, ratio: str = "—", t: dict | None = None) -> list[str]:
    """A summary row; ``t`` is the row's target (its ``target`` and ``met``), ``None``: no target."""
    return [num, what, ours, base, ratio, *(("—", "—") if t is None else (t.get("target", ""), _met(t.get("met"))))]


def _train_step_rows(
    sec: dict, tg: dict, row: str = "1", what: str = "train step", section: str = "train_step"
) -> list[list[str]]:
    c = sec["contenders"]
    ours = _f(c["xformer"]["tokens_per_s"]) + " tok/s"
    rows = []
    for name, label, key in (
        ("torch", "torch.nn.Transformer", "ratio_vs_torch"),
        ("x_transformers", "x-transformers", "ratio_vs_x_transformers"),
    ):
        cc = c.get(name, {})
        if cc.get("status") == "ok":
            t = tg.get((section, key), {})
            rows.append(
                _row(row, f"{what} vs {label}", ours, f"{_f(cc['tokens_per_s'])} tok/s", _f(sec[key], "{:.2f}×"), t)
            )
        else:
            rows.append(_row(row, f"{what} vs {label}", ours, cc.get("note", "skipped")))
    return rows


def _dropout0_rows(sec: dict, tg: dict) -> list[list[str]]:
    return _train_step_rows(sec, tg, "1b", "train step, dropout 0,", "train_step_dropout0")


def _compiled_rows(sec: dict, tg: dict) -> list[list[str]]:
    return _train_step_rows(sec, tg, "1c", "compiled train step", "train_step_compiled")


def _gpt2_rows(sec: dict, _tg: dict) -> list[list[str]]:
    lo, hi = sec["nanogpt_mfu"]
    c = sec["config"]
    return [
        _row(
            "8",
            f"GPT-2-small-shaped step (T {c['seq_len']}, B {c['batch']})",
            f"{_f(sec['tokens_per_s'])} tok/s, MFU {100 * sec['mfu']:.1f}%",
            f"nanoGPT: {100 * lo:.0f}–{100 * hi:.0f}% MFU",
            f"{sec['achieved_tflops']:.3g} TFLOP/s",
        )
    ]


def _overhead_rows(sec: dict, tg: dict) -> list[list[str]]:
    t = tg.get(("overhead", "overhead_fraction"), {})
    return [
        _row(
            "2",
            "run.py vs bare loop",
            f"{_f(sec['run_py']['tokens_per_s'])} tok/s",
            f"{_f(sec['bare']['tokens_per_s'])} tok/s",
            f"{sec['ratio']:.3f}× (overhead {100 * sec['overhead_fraction']:.1f}%)",
            {**t, "target": "overhead " + t.get("target", "")},
        )
    ]


def _padding_rows(sec: dict, tg: dict) -> list[list[str]]:
    return [
        _row(
            "3",
            "pad tokens, Multi30k epoch",
            f"{100 * sec['token_budget']['pad_fraction']:.1f}% (token budget)",
            f"{100 * sec['fixed_random']['pad_fraction']:.1f}% (random, {sec['config']['fixed_batch_size']}/batch)",
            _f(sec.get("waste_ratio"), "{:.1f}× less"),
            tg.get(("padding", "pad_fraction"), {}),
        )
    ]


def _decoding_rows(sec: dict, tg: dict) -> list[list[str]]:
    n = sec["config"]["output_len"]
    rows = [
        _row(
            "4",
            f"greedy decode, length {n}",
            f"{_f(sec['cached']['tokens_per_s'])} tok/s (cache)",
            f"{_f(sec['recompute']['tokens_per_s'])} tok/s (recompute)",
            _f(sec["speedup"], "{:.1f}×"),
            tg.get(("decoding", "speedup"), {}),
        )
    ]
    if "beam" in sec:
        b = sec["beam"]
        rows.append(
            _row("4b", f"beam search ({b['beam_size']} beams), length {n}", f"{_f(b['tokens_per_s'])} tok/s", "—")
        )
    return rows


def _attention_rows(sec: dict, _tg: dict) -> list[list[str]]:
    e, f = sec["explicit"], sec["sdpa"]
    rows = [
        _row(
            "5",
            "attention: exponent of time / memory in n",
            f"fused SDPA: {_f(f['time_exponent'], '{:.2f}')} / {_f(f['memory_exponent'], '{:.2f}')}",
            f"explicit: {_f(e['time_exponent'], '{:.2f}')} / {_f(e['memory_exponent'], '{:.2f}')}",
            t={"target": "Table 1: 2 / 2", "met": None},
        )
    ]
    if "linear" in sec:  # bench.json files from before model/mixer=linear have no such path
        lin, lc = sec["linear"], sec["linear_causal"]
        rows.append(
            _row(
                "5b",
                "linear attention (model/mixer=linear): time exponent",
                f"linear: {_f(lin['time_exponent'], '{:.2f}')}, causal: {_f(lc['time_exponent'], '{:.2f}')}",
                f"explicit: {_f(e['time_exponent'], '{:.2f}')}",
                t={"target": "≈ 1", "met": None},
            )
        )
    return rows


def _recurrence_rows(sec: dict, _tg: dict) -> list[list[str]]:
    cross = sec["crossover_n"]
    return [
        _row(
            "6",
            f"crossover n (attention slower than LSTM), d={sec['config']['d']}",
            _f(cross, "n ≈ {:,.0f}", "none in range"),
            f"Table 1: n = d = {sec['claim_crossover_n']}",
            _f(cross / sec["claim_crossover_n"] if cross else None, "{:.1f}× d"),
        )
    ]


def _mfu_rows(sec: dict, tg: dict) -> list[list[str]]:
    return [
        _row(
            "7",
            f"MFU (6N + 12·L·H·Q·T), {sec.get('peak_method', '').split(' ')[1]} peak",
            f"{100 * sec['mfu']:.1f}% of {sec['peak_tflops']:.3g} TFLOP/s",
            f"torch {_f(sec.get('mfu_torch'), '{:.1%}')}, x-t {_f(sec.get('mfu_x_transformers'), '{:.1%}')}",
            f"{sec['achieved_tflops']:.3g} TFLOP/s",
            tg.get(("mfu", "mfu"), {}),
        )
    ]


def _compile_rows(sec: dict, _tg: dict) -> list[list[str]]:
    return [
        _row(
            "+",
            "torch.compile train step",
            f"{_f(sec['compiled']['tokens_per_s'])} tok/s",
            f"{_f(sec['eager']['tokens_per_s'])} tok/s eager",
            _f(sec["speedup"], "{:.2f}×"),
            {"target": f"compile {sec['compile_s']:.0f} s, {sec['graph_breaks']} breaks", "met": None},
        )
    ]


def _nanogpt_rows(sec: dict, tg: dict) -> list[list[str]]:
    c, cfg = sec["contenders"], sec["config"]
    return [
        _row(
            "9",
            f"shakespeare_char_cpu step vs plain-PyTorch nanoGPT (B {cfg['batch']}, T {cfg['block_size']})",
            f"{_f(c['xformer']['tokens_per_s'])} tok/s",
            f"{_f(c['plain']['tokens_per_s'])} tok/s",
            _f(sec["ratio"], "{:.2f}×"),
            tg.get(("nanogpt_step", "ratio"), {}),
        )
    ]


def _ddp_rows(sec: dict, _tg: dict) -> list[list[str]]:
    return [
        _row(
            "+",
            f"DDP {r['devices']} device(s)",
            f"{_f(r['tokens_per_s'])} tok/s",
            "",
            _f(r.get("speedup"), "{:.2f}×"),
            {"target": _f(r.get("efficiency"), "eff {:.0%}"), "met": None},
        )
        for r in sec["runs"]
    ]


# section -> (row number, name shown when the section did not run, rows of a section that ran)
_SUMMARY = {
    "train_step": ("1", "training step", _train_step_rows),
    "train_step_dropout0": ("1b", "training step, dropout 0", _dropout0_rows),
    "train_step_compiled": ("1c", "compiled training step", _compiled_rows),
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
    s = result.get("sections", {})
    tg = {(t["section"], t["metric"]): t for t in result.get("targets", [])}
    rows: list[list[str]] = []
    for key, (num, name, make) in _SUMMARY.items():
        sec = s.get(key)
        if sec is None:
            continue
        if sec.get("status") == "ok":
            rows += make(sec, tg)
        else:
            note = (sec.get("note") or sec.get("error") or "")[:60]
            rows.append(_row(num, name, sec.get("status", "?"), note))
    return rows


def render(result: dict, console: Console | None = None) -> None:
    console = console or Console()
    m = result.get("meta", {})
    title = (
        f"xformer bench — {m.get('device_name', '')} ({m.get('device')}), preset {m.get('preset')}, "
        f"torch {m.get('torch')}, load {m.get('loadavg_start')} → {m.get('loadavg_end')}"
    )
    t = Table(title=title, show_lines=False)
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
        lin = a.get("linear"), a.get("linear_causal")
        for col in ("n", "explicit ms", "explicit MiB", "SDPA ms", "SDPA MiB", "H·n² scores MiB", "fp16 n×n MB"):
            c.add_column(col, justify="right")
        if lin[0]:
            c.add_column("linear ms", justify="right")
            c.add_column("causal linear ms", justify="right")
        cols = [
            (a[p][k], fmt) for p in ("explicit", "sdpa") for k, fmt in (("time_ms", "{:.2f}"), ("peak_mb", "{:.1f}"))
        ]
        cols += [(a["score_matrices_mb"], "{:.1f}"), (a["fp16_nxn_mb_at_n"], "{:.1f}")]
        cols += [(x["time_ms"], "{:.2f}") for x in lin if x]
        for i, n in enumerate(a["n"]):
            c.add_row(str(n), *(_f(col[i], fmt) for col, fmt in cols))
        for p in ("explicit", "sdpa"):
            fit = [_f(a[p]["time_exponent"], "n^{:.2f}"), _f(a[p]["memory_exponent"], "n^{:.2f}")]
            fit = fit + ["", ""] if p == "explicit" else ["", "", *fit]
            c.add_row(f"fit {p}", *fit, "", "", *(["", ""] if lin[0] else []))
        if lin[0]:
            c.add_row("fit linear", *[""] * 6, *(_f(x["time_exponent"], "n^{:.2f}") for x in lin))
        console.print(c)
        k = Table(title="fp16 n×n score matrix (one head, one sequence): stated vs n²·2 bytes")
        for col in ("n", "claimed", "computed n²·2 B"):
            k.add_column(col, justify="right")
        for row in a["claim_table"]:
            k.add_row(f"{row['n']:,}", row["claimed"], _human(row["fp16_nxn_bytes"]))
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
        conv = r.get("conv_ms")  # bench.json files before model/mixer=conv have no such column
        for col in ("n", "attention ms", "LSTM ms", "attention / LSTM", *(("conv ms",) if conv else ())):
            c.add_column(col, justify="right")
        cols = [("attention_ms", "{:.2f}"), ("lstm_ms", "{:.2f}"), ("attention_over_lstm", "{:.3f}")]
        for i, n in enumerate(r["n"]):
            c.add_row(str(n), *(_f(r[k][i], fmt) for k, fmt in cols), *((_f(conv[i], "{:.2f}"),) if conv else ()))
        console.print(c)
        cross = _f(r["crossover_n"], "n ≈ {:,.0f}", "none in the measured range")
        console.print(f"Attention vs LSTM, measured crossover: {cross}")
    for name, sec in s.items():
        if sec.get("status") == "error":
            console.print(f"[red]{name} failed:[/] {sec.get('error')}")
        for note in sec.get("notes", []) if name != "attention" else []:
            console.print(f"[yellow]{name} note:[/] {note}")


def _human(b: float) -> str:
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= div:
            return f"{b / div:,.1f} {unit}"
    return f"{b:.0f} B"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    render(json.loads(open(argv[0] if argv else "bench.json").read()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
