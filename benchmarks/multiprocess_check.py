"""The multi-process training path on one device, checked against a single process.

Three runs of the same tiny job (numbers task, 6 optimizer steps):

* ``single``: one process, ``data.tokens_per_batch = 2·TPB``;
* ``ddp1``: ``trainer=ddp`` with one process (NCCL on a GPU, gloo on a CPU): the collective path
  with a world of one, ``data.tokens_per_batch = 2·TPB``;
* ``ddp2``: two processes sharing the one device over gloo, started by ``torchrun`` as two
  one-process "nodes" (so both get local rank 0, i.e. the same GPU); ``data.tokens_per_batch = TPB``
  per rank, so the global batch equals the others' (rank r takes batches r, r+2, ... of the same
  sequence: the module docs of ``xformer.data.batching``).

All three must report the same validation and test metrics (relative tolerance ``--rtol``). A GPU
lease with one GPU can thus still exercise NCCL and the two-rank code path.

Usage: ``python benchmarks/multiprocess_check.py --accelerator gpu --out DIR`` (``cpu`` for a smoke
test). Writes ``DIR/multiprocess.json``; exits 1 when a run fails or a metric differs.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TPB = 96
BASE = [
    "data=numbers",
    "data.n_train=400",
    "data.n_val=32",
    "data.n_test=32",
    "data.n_long=8",
    "model.d_model=32",
    "model.n_heads=2",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=1",
    "model.dropout=0.0",
    "trainer.max_steps=6",
    "trainer.val_check_interval=3",
    "logger=csv",
    "trainer.enable_progress_bar=false",
    "seed=0",
]
KEYS = ("val/loss", "val/acc", "test/loss", "test/acc", "test/exact_match")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _metrics(job: Path) -> dict:
    return json.loads((job / "metrics.json").read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--accelerator", choices=["gpu", "cpu"], default="gpu")
    p.add_argument("--out", default="multiprocess-check")
    p.add_argument("--rtol", type=float, default=1e-3)
    args = p.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "1", "PYTHONPATH": str(REPO)}
    acc = [f"trainer.accelerator={args.accelerator}"]
    py = [sys.executable, str(REPO / "run.py")]
    backend = "nccl" if args.accelerator == "gpu" else "gloo"
    runs = {
        "single": [py + [*BASE, *acc, f"data.tokens_per_batch={2 * TPB}", f"hydra.run.dir={out / 'single'}"]],
        "ddp1": [
            py
            + [
                *BASE,
                *acc,
                "trainer=ddp",
                "trainer.devices=1",
                f"data.tokens_per_batch={2 * TPB}",
                f"hydra.run.dir={out / 'ddp1'}",
            ]
        ],
    }
    port = _free_port()
    strategy = "+trainer.strategy.process_group_backend=gloo"  # xformer.jobs.distributed.ddp_strategy passes it on
    runs["ddp2"] = [
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            f"--node_rank={r}",
            "--nproc_per_node=1",
            "--master_addr=127.0.0.1",
            f"--master_port={port}",
            str(REPO / "run.py"),
            *BASE,
            *acc,
            "trainer=ddp",
            "trainer.devices=1",
            "trainer.num_nodes=2",
            strategy,
            f"data.tokens_per_batch={TPB}",
            f"hydra.run.dir={out / 'ddp2'}",
        ]
        for r in (0, 1)
    ]
    report: dict = {"accelerator": args.accelerator, "ddp1_backend": backend, "ddp2_backend": "gloo", "runs": {}}
    ok = True
    for name, cmds in runs.items():
        t0 = time.perf_counter()
        procs = [
            subprocess.Popen(c, cwd=out, env=env, stdout=open(out / f"{name}-{i}.log", "w"), stderr=subprocess.STDOUT)
            for i, c in enumerate(cmds)
        ]
        codes = [pr.wait(timeout=600) for pr in procs]
        entry = {"exit_codes": codes, "wall_s": round(time.perf_counter() - t0, 1)}
        if any(codes):
            ok = False
        else:
            m = _metrics(out / name)
            entry.update(global_step=m["global_step"], metrics={k: m["metrics"].get(k) for k in KEYS})
        report["runs"][name] = entry
        print(f"{name}: exit {codes}, {entry['wall_s']} s", flush=True)
    ref = report["runs"]["single"].get("metrics")
    report["differences"] = {}
    for name in ("ddp1", "ddp2"):
        got = report["runs"][name].get("metrics")
        if not (ref and got):
            continue
        diff = {
            k: abs(got[k] - ref[k]) / max(abs(ref[k]), 1e-12)
            for k in KEYS
            if got.get(k) is not None and ref.get(k) is not None
        }
        report["differences"][name] = diff
        bad = {k: v for k, v in diff.items() if v > args.rtol}
        print(
            f"{name} vs single: max relative difference {max(diff.values(), default=0):.2e}"
            + (f"  MISMATCH {bad}" if bad else ""),
            flush=True,
        )
        ok = ok and not bad
    report["ok"] = ok
    (out / "multiprocess.json").write_text(json.dumps(report, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
