"""Row 2 (framework overhead) and the DDP runs: ``run.py`` (Lightning + Hydra, as a subprocess with
the :class:`StepTimer` callback) against :func:`bare_loop`, a plain PyTorch loop built from the same
composed Hydra config in a fresh process of its own; steady-state tokens/s of each (:func:`steady_state`),
medians over repeats that alternate which runs first (the method in full: ``docs/bench.md``, row 2).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from .config import BenchConfig
from .timing import median, sync

REPO = Path(__file__).resolve().parents[2]


class StepTimer(Callback):
    """Lightning callback: end-of-batch timestamps and token counts, written to ``path`` as JSON at
    the end of training (rank 0; token counts summed over DDP ranks)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.times: list[float] = []
        self.tokens: list[int] = []

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        sync(pl_module.device)
        self.times.append(time.perf_counter())
        self.tokens.append(batch_tokens(batch, pl_module.pad_id))

    def on_train_end(self, trainer, pl_module) -> None:
        t = torch.tensor(self.tokens, dtype=torch.float64, device=pl_module.device)
        tokens = [int(x) for x in trainer.strategy.reduce(t, reduce_op="sum").tolist()]
        if trainer.is_global_zero:
            record = {"times": self.times, "tokens": tokens, "world_size": trainer.world_size}
            Path(self.path).write_text(json.dumps(record))


def batch_tokens(batch: dict, pad: int) -> int:
    """Non-padding source tokens + non-padding target tokens predicted (``tgt[:, 1:]``), as the
    training module counts them."""
    n = int((batch["tgt"][:, 1:] != pad).sum())
    if "src" in batch:
        n += int((batch["src"] != pad).sum())
    return n


def steady_state(times: list[float], tokens: list[int], skip: int) -> dict:
    """Tokens/s over steps ``skip+1..N``: their tokens over the time from the end of step ``skip`` to
    the end of step ``N`` (start-up and warm-up excluded)."""
    skip = max(1, min(skip, len(times) - 2))
    dt = times[-1] - times[skip - 1]
    tok = sum(tokens[skip:])
    return {
        "tokens_per_s": tok / dt if dt > 0 else float("nan"),
        "window_steps": len(times) - skip,
        "window_tokens": tok,
        "window_s": dt,
    }


def run_overrides(cfg: BenchConfig, data_root: Path | None, steps: int) -> tuple[list[str], str]:
    """Hydra overrides of the overhead and DDP runs (data, row-1 model sizes, ``steps`` training steps,
    no validation or test); returns ``(overrides, description of the data)``."""
    name, s = cfg.overhead_data, cfg.size
    tpb = f"data.tokens_per_batch={cfg.overhead_tokens_per_batch}"
    if name == "multi30k" and data_root is not None:
        data, desc = ["data=multi30k", f"data.root={data_root}", tpb], f"multi30k train ({data_root})"
    elif name in ("copy", "reverse", "sort", "addition"):
        data, desc = [f"data={name}", "data.n_train=2000", "data.n_val=50", "data.n_test=50", tpb], f"synthetic {name}"
    else:
        data, desc = ["data=numbers", tpb], "numbers (generated; Multi30k files not found)"
    return [
        *data,
        f"model.d_model={s.d_model}",
        f"model.n_heads={s.n_heads}",
        f"model.d_ff={s.d_ff}",
        f"model.n_encoder_layers={s.n_layers}",
        f"model.n_decoder_layers={s.n_layers}",
        f"model.dropout={s.dropout}",
        f"trainer.max_steps={steps}",
        "trainer.limit_val_batches=0",
        "++trainer.limit_test_batches=0",
        "objective.metric=train/loss",
        f"trainer.accelerator={'gpu' if torch.device(cfg.device).type == 'cuda' else 'cpu'}",
        "logger=csv",
        f"seed={cfg.seed}",
        *cfg.run_overrides,
    ], desc


def run_py(overrides: list[str], workdir: Path) -> dict:
    """Run ``run.py`` with ``overrides`` plus the :class:`StepTimer` callback; return its record."""
    timer = "+callbacks.bench_timer._target_=xformer.bench.overhead.StepTimer"
    args = [str(REPO / "run.py"), *overrides, f"hydra.run.dir={workdir / 'job'}", timer]
    return _child([*args, f"+callbacks.bench_timer.path={workdir / 'steps.json'}"], workdir, "run.py")


def _child(args: list[str], workdir: Path, what: str, timeout: float = 1800) -> dict:
    """Run ``python *args`` in ``workdir`` with this process's intra-op thread count and W&B off; return
    the JSON it wrote to ``workdir/steps.json`` plus ``wall_s`` (the whole process). Raises
    ``RuntimeError`` with the stderr tail if it failed."""
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / "steps.json"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(torch.get_num_threads()),
        "WANDB_MODE": "disabled",
        "HYDRA_FULL_ERROR": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, *args], cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    if res.returncode != 0 or not out.is_file():
        raise RuntimeError(f"{what} failed (exit {res.returncode}): {res.stderr[-1500:]}")
    return {**json.loads(out.read_text()), "wall_s": wall}


def compose(overrides: list[str]):
    """The config ``run.py`` would see for ``overrides`` (Hydra's compose API)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=overrides)


def bare_loop(overrides: list[str], device: str) -> dict:
    """The hand-written loop over what ``run.py`` builds for ``overrides`` (see the module docstring)."""
    import lightning as L
    from hydra.utils import instantiate

    from xformer.train.checkpoint_file import build_model

    from .training import optimize

    cfg = compose(overrides)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    dm = instantiate(cfg.data)
    dm.prepare_data()
    dm.setup("fit")
    model = build_model(cfg, dm.src_vocab_size, dm.tgt_vocab_size, dm.pad_id).to(device).train()
    opt = instantiate(cfg.optim.optimizer)(model.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, instantiate(cfg.optim.scheduler))
    clip = cfg.trainer.get("gradient_clip_val")
    bf16 = str(cfg.trainer.get("precision")) in ("bf16-mixed", "bf16")
    cuda = torch.device(device).type == "cuda"
    pad, smoothing = dm.pad_id, cfg.loss.label_smoothing
    loader = dm.train_dataloader()
    times: list[float] = []
    tokens: list[int] = []
    for epoch in itertools.count():
        if epoch:
            loader.batch_sampler.set_epoch(epoch)
        for batch in loader:
            src = batch["src"].to(device, non_blocking=True)
            tgt = batch["tgt"].to(device, non_blocking=True)
            with torch.autocast(device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(src, tgt[:, :-1])
            optimize(model, opt, logits, tgt[:, 1:], clip, ignore_index=pad, label_smoothing=smoothing)
            sched.step()
            sync(device)
            times.append(time.perf_counter())
            tokens.append(batch_tokens(batch, pad))
            if len(times) == cfg.trainer.max_steps:
                return {"times": times, "tokens": tokens}


def bare_py(overrides: list[str], device: str, workdir: Path) -> dict:
    """:func:`bare_loop` in a fresh Python process (as ``run.py`` runs in one), so neither contender
    inherits this process's allocator state, warm caches or loaded modules."""
    args = ["-m", "xformer.bench.overhead", device, str(workdir / "steps.json"), *overrides]
    return _child(args, workdir, "bare loop")


def data_root_default() -> Path | None:
    """Multi30k raw files: ``$XFORMER_DATA/multi30k`` or ``../shared/data/multi30k`` beside the repo."""
    cands = [Path(os.environ["XFORMER_DATA"]) / "multi30k"] if os.environ.get("XFORMER_DATA") else []
    cands.append(REPO.parent / "shared" / "data" / "multi30k")
    return next((c.resolve() for c in cands if (c / "train.de.gz").is_file() or (c / "train.de").is_file()), None)


def run(cfg: BenchConfig, data_root: Path | None = None) -> dict:
    """Measure row 2; returns the ``overhead`` section of ``bench.json``."""
    if not (REPO / "run.py").is_file():
        return {"status": "skipped", "note": f"run.py not found beside the package ({REPO})"}
    overrides, data_desc = run_overrides(cfg, data_root, cfg.overhead_steps)
    runs, bares = [], []
    with tempfile.TemporaryDirectory(prefix="xformer-bench-") as tmp:
        for r in range(cfg.overhead_repeats):
            # alternate which goes first, so drift in machine load hits both alike
            order = ("bare", "run") if r % 2 == 0 else ("run", "bare")
            recs = {}
            for who in order:
                work = Path(tmp) / f"{who}{r}"
                recs[who] = bare_py(overrides, cfg.device, work) if who == "bare" else run_py(overrides, work)
            bare, rec = recs["bare"], recs["run"]
            bares.append({**steady_state(bare["times"], bare["tokens"], cfg.overhead_skip), "wall_s": bare["wall_s"]})
            s = steady_state(rec["times"], rec["tokens"], cfg.overhead_skip)
            runs.append({**s, "wall_s": rec["wall_s"], "same_batches": rec["tokens"] == bare["tokens"]})
    run_tps = median([r["tokens_per_s"] for r in runs])
    bare_tps = median([b["tokens_per_s"] for b in bares])
    ratio = run_tps / bare_tps
    return {
        "status": "ok",
        "config": {
            "data": data_desc,
            "model": asdict(cfg.size),
            "steps": cfg.overhead_steps,
            "skip": cfg.overhead_skip,
            "repeats": cfg.overhead_repeats,
            "tokens_per_batch": cfg.overhead_tokens_per_batch,
            "overrides": overrides,
            "method": "tokens of steps skip+1..N / time from end of step skip to end of step N, "
            "end-of-step timestamps (StepTimer callback in run.py; same in the bare loop)",
        },
        "run_py": {"tokens_per_s": run_tps, "repeats": runs},
        "bare": {"tokens_per_s": bare_tps, "repeats": bares},
        "ratio": ratio,
        "overhead_fraction": 1.0 - ratio,
        "same_batches": all(r["same_batches"] for r in runs),
    }


if __name__ == "__main__":  # python -m xformer.bench.overhead DEVICE OUT.json OVERRIDE...: bare_py's worker
    device, out, *overrides = sys.argv[1:]
    Path(out).write_text(json.dumps(bare_loop(overrides, device)))
