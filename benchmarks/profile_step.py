"""Where a training step's time goes: xformer's ``experiment=shakespeare_char_cpu`` model and optimizer
against nanoGPT's ``GPT`` with the same sizes, in float32 and under ``bf16-mixed`` autocast, each
profiled with the PyTorch profiler over the same steps on one thread.

    python benchmarks/profile_step.py /path/to/nanoGPT [--steps 50] [--warmup 10] [--top 12] [--out FILE]

Prints, per precision and per trainer, the mean step time and the top ops by self CPU time (with
their share of the step), then the ratio xformer / nanoGPT. The model math only (forward, loss,
backward, gradient clipping, the optimizer step): Lightning's loop is measured by the side-by-side
benchmark (``benchmarks/nanogpt_side_by_side.py``), the difference being the loop's cost. A benchmark
script, not a test: timings depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
B, T, V = 12, 64, 65  # nanoGPT's CPU command: batch 12, block 64, the character vocabulary


def xformer_step():
    """The preset's model, loss and optimizer (DecayGroups → fused AdamW), built from its config."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from xformer.train.optim import build_optimizer

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=shakespeare_char_cpu"])
    model = instantiate(cfg.model, src_vocab_size=V, tgt_vocab_size=V, pad_id=-1)
    opt = build_optimizer(instantiate(cfg.optim.optimizer), model)

    def step(x, y):
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return model, step


def nanogpt_step(root: Path):
    """nanoGPT's ``GPT`` and ``configure_optimizers`` with the README's CPU sizes (its own code)."""
    sys.path.insert(0, str(root))
    from model import GPT, GPTConfig  # nanoGPT's model.py

    model = GPT(GPTConfig(block_size=T, vocab_size=V, n_layer=4, n_head=4, n_embd=128, dropout=0.0, bias=False))
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")

    def step(x, y):
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return model, step


def profile(step, precision: str, steps: int, warmup: int, top: int) -> tuple[float, list[tuple[str, float, float]]]:
    """Mean seconds per step (timed outside the profiler) and the top ops ``(name, ms/step, share)``."""
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)) for _ in range(8)]
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if precision == "bf16-mixed" else contextlib.nullcontext
    for i in range(warmup):
        with ctx():
            step(*batches[i % 8])
    t0 = time.perf_counter()
    for i in range(steps):
        with ctx():
            step(*batches[i % 8])
    per_step = (time.perf_counter() - t0) / steps
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for i in range(steps):
            with ctx():
                step(*batches[i % 8])
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    rows = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return per_step, [(e.key, e.self_cpu_time_total / 1e3 / steps, e.self_cpu_time_total / total) for e in rows]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("nanogpt", type=Path, help="a nanoGPT checkout (its model.py is imported)")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=None, help="also write the Markdown here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    lines = [
        f"CPU: {cpu_name()}; torch {torch.__version__}, ATen CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}, {args.threads} thread(s); {args.steps} steps of batch {B}×{T}",
        "",
    ]
    for precision in ("32-true", "bf16-mixed"):
        times = {}
        for name, build in (("xformer", xformer_step), ("nanoGPT", lambda: nanogpt_step(args.nanogpt))):
            torch.manual_seed(1337)
            _, step = build()
            per_step, rows = profile(step, precision, args.steps, args.warmup, args.top)
            times[name] = per_step
            lines += [
                f"### {name}, {precision}: {per_step * 1e3:.2f} ms/step",
                "",
                "| op | ms/step | share |",
                "|---|---|---|",
            ]
            lines += [f"| `{k}` | {ms:.3f} | {share:.1%} |" for k, ms, share in rows]
            lines.append("")
        lines += [f"**{precision}: xformer / nanoGPT step time = {times['xformer'] / times['nanoGPT']:.3f}**", ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


def cpu_name() -> str:
    """The CPU's model name and its bf16/AMX flags, from /proc/cpuinfo (Linux)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "unknown")
    flags = next((ln.split(":", 1)[1].split() for ln in info.splitlines() if ln.startswith("flags")), [])
    wanted = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if f in flags]
    return f"{name} (flags: {', '.join(wanted) or 'none of avx2/avx512/amx'})"


if __name__ == "__main__":
    raise SystemExit(main())
