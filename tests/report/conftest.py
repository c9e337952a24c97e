"""Fixture sweeps for the report tests: job folders written by hand, shaped like ``run.py -m`` output."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

BASE_CONFIG = {
    "seed": 0,
    "model": {
        "_target_": "xformer.model.EncoderDecoder",
        "d_model": 128,
        "n_heads": 4,
        "d_head": None,
        "ffn_ratio": 4,
        "d_ff": None,
        "n_encoder_layers": 2,
        "n_decoder_layers": 2,
        "dropout": 0.1,
        "attn_scale": True,
        "param_budget": None,
        "ffn": {"_target_": "xformer.model.ReLUFFN"},
    },
    "optim": {"lr": 1e-3, "warmup_steps": 400},
    "loss": {"label_smoothing": 0.1},
    "trainer": {"max_steps": 100},
}
BASE_CHOICES = {
    "model/arch": "encoder_decoder",
    "model/pe": "sinusoidal",
    "model/norm": "post",
    "model/attention": "full",
    "model/ffn": "relu",
}
# d_model 128, 4 heads, d_ff 512, 2+2 layers: 6 attention sub-layers of 4·128²+4·128, 4 FFNs of 2·128·512+512+128
PARAMS = {"attention": 6 * 66048, "ffn": 4 * 131712, "embedding": 2048, "positional": 0, "norm": 4352, "other": 0}


def _parse(value: str):
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return {"true": True, "false": False, "null": None}.get(value, value)


def write_job(
    root: Path,
    num: int,
    overrides: list[str],
    metrics: dict | None = None,
    status: str = "finished",
    params: dict | None = None,
    curve: list[tuple[int, float, float]] | None = None,
    summary_extra: dict | None = None,
) -> Path:
    """Write job folder ``root/num`` with ``.hydra/overrides.yaml``, ``metrics.json`` (unless ``status`` is
    ``None``: a job that crashed before writing one; ``summary_extra`` is merged into it, e.g. ``error``
    or ``diverged``) and, given ``curve`` rows (step, train loss, val loss), ``csv/metrics.csv`` as
    Lightning's CSVLogger writes it (the row of the k-th update labelled ``k - 1``)."""
    job = root / str(num)
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    config, choices = copy.deepcopy(BASE_CONFIG), dict(BASE_CHOICES)
    for o in overrides:
        key, _, val = o.partition("=")
        if "/" in key:
            choices[key] = val
            continue
        node = config
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = _parse(val)
    if status is not None:
        summary = {
            "status": status,
            "job": {
                "output_dir": str(job),
                "overrides": overrides,
                "multirun": True,
                "sweep_dir": str(root),
                "job_num": num,
                "choices": choices,
            },
            "config": config,
            "metrics": metrics or {},
            "best": {"metric": "val/loss", "mode": "min", "value": (metrics or {}).get("val/loss"), "checkpoint": None},
            "objective": {"metric": "val/loss", "value": (metrics or {}).get("val/loss")},
            "wall_time_s": 1.0,
            "global_step": 100,
            "tokens_seen": 1000,
            "params": {**PARAMS, "total": sum(PARAMS.values())} if params is None else params,
            **(summary_extra or {}),
        }
        (job / "metrics.json").write_text(json.dumps(summary))
    if curve:
        (job / "csv").mkdir()
        lines = ["epoch,step,train/loss,val/loss"]
        for step, train, val in curve:  # `step` = updates done; Lightning labels the row step - 1
            lines.append(f"0,{step - 1},{train},")
            lines.append(f"0,{step - 1},,{val}")
        (job / "csv" / "metrics.csv").write_text("\n".join(lines) + "\n")
    return job


def flat_curve(val: float) -> list[tuple[int, float, float]]:
    """Ten validations (every 10 steps to 100) with the same value: a run whose ranking is stable over
    the second half of training (6 validations at steps 50–100)."""
    return [(s, val + 0.1, val) for s in range(10, 101, 10)]


def overfit_curve(val: float) -> list[tuple[int, float, float]]:
    """A run that over-fits early: validation at ``val − 0.2`` by step 20, back at ``val`` from step 40
    to 100 (so the second half is flat at ``val``), training loss far below it."""
    dip = {10: val - 0.15, 20: val - 0.2, 30: val - 0.1}
    return [(s, val - 0.5, dip.get(s, val)) for s in range(10, 101, 10)]


def write_sweep(
    root: Path,
    key: str,
    table: dict,
    metric: str = "val/loss",
    extra: list[str] | None = None,
    params: dict | None = None,
    curves: dict | None = None,
) -> Path:
    """One job per (value, seed): ``table = {value: [metric value per seed]}``; ``params`` maps a value
    to its parameter total (other roles as :data:`PARAMS`). Every job gets a ``val/loss`` curve: flat at
    its value (``metric`` when it is ``val/loss``, else 1.0), or ``curves[value][seed - 1]``."""
    num = 0
    for value, vals in table.items():
        for seed, v in enumerate(vals, start=1):
            p = None
            if params is not None:
                p = {**PARAMS, "total": params[value]}
            curve = (
                curves[value][seed - 1]
                if curves and value in curves
                else flat_curve(v if metric == "val/loss" else 1.0)
            )
            write_job(root, num, [f"{key}={value}", f"seed={seed}", *(extra or [])], {metric: v}, params=p, curve=curve)
            num += 1
    return root


@pytest.fixture
def sweep_dir(tmp_path: Path) -> Path:
    """The FFN-ratio claim's sweep (``experiment=claims/c1_ffn_ratio``, ``model.ffn_ratio=1,2,4,8
    seed=1,2,3``) with paper-shaped BLEU, converged loss curves (val/loss and test/loss:
    2.0 - 0.1·√ratio + 0.002·seed) and one failed job."""
    root = tmp_path / "multirun" / "2024-01-01" / "12-00-00"
    bleu = {1: [24.9, 25.0, 24.95], 2: [25.4, 25.5, 25.45], 4: [25.8, 25.9, 25.85], 8: [26.2, 26.3, 26.25]}
    totals = {1: 47e6, 2: 53e6, 4: 65e6, 8: 90e6}
    num = 0
    for ratio, vals in bleu.items():
        for seed, b in enumerate(vals, start=1):
            loss = 2.0 - 0.1 * ratio**0.5 + 0.002 * seed
            curve = [(s, loss + 2.0 / s, loss + (2.5 / s if s < 20 else 0.0)) for s in range(5, 41, 5)]
            write_job(
                root,
                num,
                [f"model.ffn_ratio={ratio}", f"seed={seed}", "trainer.max_steps=40", "experiment=claims/c1_ffn_ratio"],
                {"val/loss": loss, "val/ppl": 2.718**loss, "test/loss": loss, "test/bleu": b},
                params={**PARAMS, "total": int(totals[ratio])},
                curve=curve,
            )
            num += 1
    failed = ["model.ffn_ratio=8", "seed=4", "trainer.max_steps=40", "experiment=claims/c1_ffn_ratio"]
    write_job(root, num, failed, {"val/loss": 99.0}, status="failed")
    return root
