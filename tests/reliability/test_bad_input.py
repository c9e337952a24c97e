"""Bad configuration and bad input: one clear line before any training, a non-zero exit status and
no stack trace (``HYDRA_FULL_ERROR=1`` shows one). ``-m`` sweeps check every job first.

Most cases run through ``run.py``'s Hydra entry point one after another in a single process
(:mod:`tests.reliability.run_many`: the same code path as ``python run.py <args>``, imports paid
once); the misspelled key also as real ``python run.py`` processes.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.reliability.conftest import TINY, FileServer, env_for, run_py

SPLITS = ("train", "val", "test_2016_flickr")


def _m30k(folder: Path, n: int = 6) -> Path:
    """A tiny Multi30k-shaped folder (gzipped, line-aligned de/en files)."""
    folder.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        for lang, word in (("de", "ein Hund"), ("en", "a dog")):
            text = "".join(f"{word} {i}\n" for i in range(n))
            (folder / f"{split}.{lang}.gz").write_bytes(gzip.compress(text.encode()))
    return folder


def _case(name: str, args: list[str], tmp: Path, **env: str) -> dict:
    return {"name": name, "args": [*args, f"hydra.run.dir={tmp / 'jobs' / name}"], "env": env}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    """Run every case once (one process); ``name -> {"rc", "out", "err", "job", ...}``."""
    tmp = tmp_path_factory.mktemp("bad_input")
    _m30k(tmp / "m30k_ok")
    empty = tmp / "empty"
    empty.mkdir()
    mismatch = _m30k(tmp / "m30k_mismatch")
    (mismatch / "train.en.gz").write_bytes(gzip.compress(b"a dog\n" * 5))  # 5 lines vs 6
    corrupt = _m30k(tmp / "m30k_corrupt")
    (corrupt / "train.de.gz").write_bytes(gzip.compress(b"ein Hund\n" * 6)[:20])  # truncated gzip
    served = tmp / "served"
    served.mkdir()
    (served / "train.de.gz").write_bytes(gzip.compress(b"not the real file\n"))  # wrong checksum
    text = tmp / "text"
    text.mkdir()
    (text / "bad.src").write_bytes("eins\nzw\xe4i\ndrei\n".encode("latin-1"))
    (text / "bad.tgt").write_text("one\ntwo\nthree\n")
    src = [f"{w} {i}" for i in range(30) for w in ["eins"]]
    tgt = [f"one {i}" for i in range(30)]
    src[3] = "   "  # an empty (whitespace-only) source line: the pair is skipped and counted
    (text / "train.src").write_text("\n".join(src) + "\n")
    (text / "train.tgt").write_text("\n".join(tgt) + "\n")
    truncated = tmp / "truncated.ckpt"
    truncated.write_bytes(b"PK\x03\x04 half a checkpoint")
    text_args = [
        "data=text",
        "data.tokenizer=char",
        f"data.root={text}",
        "data.train_src=train.src",
        "data.train_tgt=train.tgt",
        "data.val_src=train.src",
        "data.val_tgt=train.tgt",
    ]
    server = FileServer(served)
    cache = tmp / "cache"
    model = [a for a in TINY if a.startswith("model.")]
    cases = [
        _case("wrong_type", [*TINY, "model.n_heads=four"], tmp),
        _case("negative_size", [*TINY, "model.d_model=-8"], tmp),
        _case("negative_layers", [*TINY, "model.n_encoder_layers=-1"], tmp),
        _case("dropout_range", [*TINY, "model.dropout=1.0"], tmp),
        _case("warmup_negative", [*TINY, "optim.warmup_steps=-1"], tmp),
        _case("max_steps", [*TINY, "trainer.max_steps=-5"], tmp),
        _case("max_steps_zero", [*TINY, "trainer.max_steps=0"], tmp),
        _case("tokens_per_batch", [*TINY, "data.tokens_per_batch=0"], tmp),
        _case("heads_divide", [*TINY, "model.d_model=30", "model.n_heads=4"], tmp),
        _case("rope_odd_head", [*TINY, "model/pe=rope", "model.d_head=7"], tmp),
        _case("local_window", [*TINY, "model/attention=local", "model.attention.window=0"], tmp),
        _case("learned_max_len", [*TINY, "model/pe=learned", "model.max_len=5"], tmp),
        _case("objective_typo", [*TINY, "objective.metric=val/blue"], tmp),
        _case("data_option", [*model, "data=copy", "data.task_name=rotate"], tmp),
        _case("ckpt_missing", [*TINY, "ckpt_path=/nonexistent/model.ckpt"], tmp),
        _case("ckpt_name_too_long", [*TINY, f"ckpt_path=/nonexistent/{'x' * 300}.ckpt"], tmp),
        _case("ckpt_truncated", [*TINY, f"ckpt_path={truncated}"], tmp),
        _case("root_missing", ["data=multi30k", "data.root=/nonexistent", *model], tmp),
        _case("root_without_files", ["data=multi30k", f"data.root={empty}", *model], tmp),
        _case("line_counts", ["data=multi30k", f"data.root={mismatch}", *model], tmp),
        _case("corrupt_gz", ["data=multi30k", f"data.root={corrupt}", *model], tmp),
        _case("checksum", ["data=multi30k", f"data.base_url={server.url}", *model], tmp, XFORMER_CACHE=str(cache)),
        _case("not_utf8", [*text_args, "data.val_src=bad.src", "data.val_tgt=bad.tgt", *model], tmp),
        _case("full_error", [*TINY, "model.n_heads=four"], tmp, HYDRA_FULL_ERROR="1"),
        _case("sweep_invalid_job", ["-m", *TINY, "model.n_heads=2,3", f"hydra.sweep.dir={tmp / 'sweep'}"], tmp),
        # the one case that trains (2 steps): empty lines are skipped with a count, not fatal
        _case(
            "empty_line",
            [
                *text_args,
                *model,
                "trainer.max_steps=2",
                "trainer.val_check_interval=2",
                "logger=csv",
                "trainer.enable_progress_bar=false",
            ],
            tmp,
        ),
    ]
    cases_file = tmp / "cases.json"
    cases_file.write_text(json.dumps(cases))
    try:
        proc = subprocess.run(
            [sys.executable, str(REPO / "tests" / "reliability" / "run_many.py"), str(cases_file)],
            cwd=tmp,
            env=env_for(tmp),
            capture_output=True,
            text=True,
            timeout=400,
        )
    finally:
        server.close()
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert len(lines) == len(cases), proc.stderr[-3000:]
    out = {}
    for case, res in zip(cases, lines, strict=False):
        res["job"] = tmp / "jobs" / case["name"]
        res["text"] = res["out"] + res["err"]
        out[case["name"]] = res
    out["_cache"] = {"dir": cache, "sweep": tmp / "sweep"}
    return out


@pytest.mark.parametrize(
    "name, rc, expected",
    [
        ("wrong_type", 2, "model.n_heads=four (from the command line): must be an integer"),
        ("negative_size", 2, "model.d_model=-8 (from the command line): must be >= 1"),
        ("negative_layers", 2, "model.n_encoder_layers=-1 (from the command line): must be >= 0"),
        ("dropout_range", 2, "model.dropout=1.0 (from the command line): must be < 1"),
        ("warmup_negative", 2, "optim.scheduler.warmup_steps=-1 (from ${optim.warmup_steps}): must be >= 0"),
        ("max_steps", 2, "`max_steps` must be a non-negative integer or -1"),
        ("max_steps_zero", 2, "trainer.max_steps=0: would train nothing"),
        ("tokens_per_batch", 2, "data.tokens_per_batch=0 (from the command line): must be >= 1"),
        ("heads_divide", 2, "model.n_heads=4: d_model=30 is not divisible"),
        ("rope_odd_head", 2, "model.d_head=7: rope needs an even head size"),
        ("local_window", 2, "model.attention.window=0 (from the command line): must be >= 1"),
        ("learned_max_len", 2, "model.max_len=5: the data's longest sequence has"),
        ("objective_typo", 2, "objective.metric=val/blue: not logged"),
        ("data_option", 2, "data (SyntheticDataModule): SyntheticDataModule: task_name must be one of"),
        ("ckpt_missing", 2, "ckpt_path=/nonexistent/model.ckpt: no such file"),
        ("ckpt_name_too_long", 2, "x.ckpt: no such file"),
        ("ckpt_truncated", 2, "not a readable checkpoint (truncated or corrupt)"),
        ("root_missing", 2, "data.root=/nonexistent: no such folder"),
        ("root_without_files", 2, "Multi30k file not found"),
        ("line_counts", 2, "parallel files are not aligned"),
        ("corrupt_gz", 2, "train.de.gz is not a valid gzip file"),
        ("checksum", 2, "checksum mismatch for train.de.gz"),
        ("not_utf8", 2, "bad.src: line 2 is not valid UTF-8"),
    ],
)
def test_bad_config_or_input_is_one_line_before_training(outcomes, name, rc, expected):
    res = outcomes[name]
    assert res["rc"] == rc, res["text"][-3000:]
    assert "Traceback" not in res["text"], res["text"][-3000:]
    errors = [line for line in res["err"].splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and expected in errors[0], res["err"][-3000:]
    assert not (res["job"] / "checkpoints").exists() and not (res["job"] / "metrics.json").exists()


def test_checksum_mismatch_leaves_nothing_in_the_cache(outcomes):
    folder = outcomes["_cache"]["dir"] / "multi30k"
    assert not folder.exists() or list(folder.iterdir()) == [], list(folder.iterdir())


def test_hydra_full_error_shows_the_stack_trace(outcomes):
    res = outcomes["full_error"]
    assert res["rc"] != 0 and "Traceback" in res["err"] and "model.n_heads=four" in res["err"]


def test_sweep_with_one_invalid_job_fails_before_the_first_job(outcomes):
    res = outcomes["sweep_invalid_job"]
    assert res["rc"] == 2, res["text"][-3000:]
    assert "Traceback" not in res["text"]
    assert "error: sweep job 1 (model.n_heads=3): model.n_heads=3: d_model=32 is not divisible" in res["err"]
    assert "1 of 2 sweep jobs have an invalid config; nothing was run" in res["err"]
    sweep = outcomes["_cache"]["sweep"]
    assert not sweep.exists() or not [p for p in sweep.iterdir() if p.name.isdigit()], "no job may start"


def test_empty_lines_are_skipped_with_a_count(outcomes):
    res = outcomes["empty_line"]
    assert res["rc"] == 0, res["text"][-3000:]
    assert "skipped 1 pair(s) with an empty side" in res["text"]
    assert json.loads((res["job"] / "metrics.json").read_text())["status"] == "finished"


def test_misspelled_key_is_hydras_short_message_without_traceback(tmp_path):
    res = run_py([*TINY, "model.ffn_ratoi=4", f"hydra.run.dir={tmp_path / 'job'}"], tmp_path, timeout=120)
    assert res.returncode != 0
    assert "model.ffn_ratoi" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) <= 8, res.stderr
    assert not (tmp_path / "job" / "checkpoints").exists()
    full = run_py(
        [*TINY, "model.ffn_ratoi=4", f"hydra.run.dir={tmp_path / 'job'}"], tmp_path, timeout=120, HYDRA_FULL_ERROR="1"
    )
    assert full.returncode != 0 and "Traceback" in full.stderr


@pytest.mark.slow  # 30-60 s: in `make test-slow`, out of `make test`'s 10-minute budget
def test_fsdp_without_a_device_count_is_one_line_with_one_fix(tmp_path):
    """The strategy's own refusal reaches the console as it is: one ``error:`` line, one fix, no traceback."""
    args = [*TINY, "trainer=fsdp", "trainer.accelerator=cpu", "trainer.devices=auto", "logger=csv"]
    res = run_py([*args, f"hydra.run.dir={tmp_path / 'job'}"], tmp_path, timeout=120)
    assert res.returncode == 2, res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "trainer.devices=auto" in errors[0] and errors[0].count("Fix:") == 1, errors[0]


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
def test_a_gpu_experiment_on_a_machine_without_one_is_one_line_before_any_data(tmp_path):
    """``experiment=multi30k`` (``trainer=gpu``) where no GPU is: one line naming trainer.accelerator and the
    fix, exit 2, before the data is fetched (an empty cache, no network here: a download would fail
    first) and before the model is built (was: the 48 M-parameter model, then Lightning's "No supported
    gpu backend found!")."""
    res = run_py(["experiment=multi30k", f"hydra.run.dir={tmp_path / 'job'}"], tmp_path)
    assert res.returncode == 2, res.stderr[-3000:]
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: trainer.accelerator=gpu:"), res.stderr[-3000:]
    assert "Fix: " in errors[0] and "trainer.accelerator=cpu" in errors[0]
    assert "parameters:" not in res.stdout + res.stderr  # no model was built
