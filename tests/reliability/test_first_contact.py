"""A new user's first contact: config errors before the training stack is imported, Ctrl-C
keeps the work, a checkpoint of another model and an unwritable output folder give one error line,
the console says only true things, the test table has one column per split, the progress bar
after a mid-epoch resume, the empty-input note of ``xformer translate``."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import REPO
from tests.reliability.conftest import RESUMABLE, SLOW_STEPS, TINY, env_for, metrics, run_py, start_py, wait_for
from tests.reliability.test_resume import _assert_same_run
from xformer.errors import ConfigError

#: modules that mean the training stack (or the data) was loaded (plain `import torch` brings
#: torch._dynamo along in torch 2.13, so torch itself is judged separately)
HEAVY = ("lightning", "wandb", "xformer.data", "xformer.jobs.driver", "xformer.train.", "sacrebleu", "torchmetrics")
# pure-Python LR schedules (the scheduler node is checked in stage 1); the loss, decode and optimizer
# settings import torch at most: stage 2 checks their nodes against their signatures
# and the checkpoint reader / model builder the checks share with the driver (torch only when called)
LIGHT = (
    "xformer.train.schedules",
    "xformer.train.losses",
    "xformer.train.decode",
    "xformer.train.optim",
    "xformer.train.checkpoint_file",
)


def _imported(importtime_stderr: str) -> set[str]:
    """Module names from ``python -X importtime`` output."""
    return {
        m.group(1).strip() for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)\s*$", importtime_stderr, re.M)
    }


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


# ---- 1. config checked first ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad,key,stage",
    [
        ("objective.metric=val/blue", "objective.metric=val/blue", 1),  # keys without a class: no torch
        ("seed=-1", "seed=-1", 1),
        ("+sed=3", "+sed=3", 1),
        ("model.n_heads=four", "model.n_heads=four", 2),  # read from the model class's signature: torch
        ("model.dropout=1.5", "model.dropout=1.5", 2),
        ("model.d_model=30", "d_model=30", 2),  # built on the meta device: torch, nothing else
        pytest.param(  # Lightning's own Literal: Lightning, no data
            "trainer.precision=bf17", "trainer.precision=bf17", 3, marks=pytest.mark.slow
        ),
    ],
)
def test_config_error_comes_before_lightning_wandb_and_data(tmp_path, bad, key, stage):
    """Stage 1 (keys without a class) imports no torch; stage 2 (the model, optimizer, loss and decode
    nodes against their classes) imports torch, not Lightning; stage 3 (trainer, data, callbacks and
    loggers against their classes) imports Lightning, and still reads no data."""
    env = env_for(tmp_path)
    res = subprocess.run(
        [sys.executable, "-X", "importtime", str(REPO / "run.py"), bad, f"hydra.run.dir={tmp_path / 'job'}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stderr[-2000:]
    errors = _error_lines(res.stderr)
    assert len(errors) == 1 and key in errors[0], errors
    mods = _imported(res.stderr)
    assert "hydra" in mods  # the parser works
    heavy = sorted(
        m
        for m in mods
        if m.split(".")[0] in ("lightning", "wandb", "sacrebleu", "torchmetrics")
        or (m.startswith(HEAVY) and m not in LIGHT)
    )
    assert stage == 3 or not heavy, f"imported before the error: {heavy[:10]}"
    assert stage > 1 or "torch" not in mods
    assert not (tmp_path / "cache").exists(), "no data or tokenizer was built"


def test_check_config_first_on_a_valid_config_loads_no_training_stack(tmp_path):
    code = f"""
import json, sys
from hydra import compose, initialize_config_dir
from xformer.config.check import check_config_first
with initialize_config_dir(config_dir={str(REPO / "conf")!r}, version_base="1.3"):
    cfg = compose("config", overrides={TINY!r})
check_config_first(cfg)
print(json.dumps(sorted(sys.modules)))
"""
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env_for(tmp_path), capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr[-2000:]
    mods = json.loads(res.stdout.strip().splitlines()[-1])
    assert "xformer.model" in mods  # the model was checked (meta device)
    assert not [m for m in mods if m.startswith(HEAVY) and m not in LIGHT], [
        m for m in mods if m.startswith(HEAVY) and m not in LIGHT
    ][:10]


def test_sequence_metric_names_are_those_the_module_computes():
    from xformer.config.check import SEQUENCE_METRICS
    from xformer.train.module import corpus_metrics

    out, _ = corpus_metrics([(1.0, 2, 1)], {0: ("a b", "a b")}, list(SEQUENCE_METRICS), "val")
    assert {f"val/{m}" for m in SEQUENCE_METRICS} <= set(out)


def test_objective_typo_fails_without_the_data_and_a_metric_the_data_lacks_fails_with_it():
    from xformer.config.check import check_objective

    cfg = OmegaConf.create({"objective": {"metric": "val/blue"}, "decode": {"val_batches": None}})
    with pytest.raises(ConfigError, match="objective.metric=val/blue.*no such metric"):
        check_objective(cfg, None)
    cfg.objective.metric = "val/bleu"
    check_objective(cfg, None)  # a metric xformer computes: the data decides (next stage)
    with pytest.raises(ConfigError, match="does not compute it"):
        check_objective(cfg, ["exact_match"], "NumbersDataModule")


# ---- 2. Ctrl-C keeps the work -----------------------------------------------------------------------


@pytest.mark.slow  # suite time: ~30 s; in CI a Ctrl-C resume runs in tests/reliability/test_resume_matrix.py
def test_ctrl_c_saves_last_ckpt_and_resume_matches_the_uninterrupted_run(tmp_path, reference_run):
    job = tmp_path / "job"
    proc = start_py([*RESUMABLE, *SLOW_STEPS, f"hydra.run.dir={job}"], tmp_path)
    wait_for(job / "checkpoints" / "last.ckpt", proc)
    os.kill(proc.pid, signal.SIGINT)  # what the terminal sends on Ctrl-C
    assert proc.wait(timeout=120) == 130, proc.log_path.read_text()[-3000:]
    log = proc.log_path.read_text()
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log[-3000:]
    m = metrics(job)
    assert m["status"] == "interrupted", m.get("error")
    ckpt = torch.load(job / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    stopped_at = ckpt["global_step"]
    assert stopped_at == m["global_step"], "last.ckpt holds the state where the run stopped"
    assert f"saved {job / 'checkpoints' / 'last.ckpt'} at step {stopped_at}" in log
    hint = next(line for line in log.splitlines() if "resume with: " in line).split("resume with: ", 1)[1]
    assert hint.startswith("python ") and "ckpt_path=last" in hint and f"hydra.run.dir={job}" in hint
    assert "trainer.max_steps=16" in hint  # the job's own overrides

    res = run_py([*RESUMABLE, f"hydra.run.dir={job}", "ckpt_path=last"], tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    _assert_same_run(job, reference_run, stopped_at)


@pytest.mark.slow  # ~13 s: two-second steps so the second signal lands while the first stop is pending
def test_second_ctrl_c_quits_at_once(tmp_path):
    job = tmp_path / "job"
    slow = ["+callbacks.slow._target_=tests.reliability.first_contact_probe.SlowSteps", "+callbacks.slow.seconds=2"]
    proc = start_py(
        [*RESUMABLE, *slow, "callbacks.last_checkpoint.every_n_train_steps=1", f"hydra.run.dir={job}"], tmp_path
    )
    wait_for(job / "checkpoints" / "last.ckpt", proc)
    os.kill(proc.pid, signal.SIGINT)
    t0 = time.monotonic()
    while "Ctrl-C: stopping" not in proc.log_path.read_text():
        assert proc.poll() is None and time.monotonic() - t0 < 30, proc.log_path.read_text()[-2000:]
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGINT)  # while the step still sleeps: the first stop is not done
    assert proc.wait(timeout=10) == 130
    assert time.monotonic() - t0 < 2.0, "the second Ctrl-C did not quit at once"
    assert "second Ctrl-C: quitting now" in proc.log_path.read_text()
    assert not (job / "metrics.json").exists()


# ---- 3. a checkpoint of another model; an output folder that cannot be made ---------------------------


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=overrides)


def _fake_checkpoint(path: Path, cfg, src_vocab: int = 40, tgt_vocab: int = 40, xformer: bool = True) -> Path:
    """A checkpoint with the layout ``run.py`` writes (Lightning's ``state_dict`` with ``model.``
    names, and the ``xformer`` section) for ``cfg.model``, without training."""
    from xformer.train.checkpoint_file import build_model

    model = build_model(cfg, src_vocab, tgt_vocab, 0)
    ckpt = {
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
        "global_step": 0,
        "epoch": 0,
        "pytorch-lightning_version": "2.6.0",
    }
    if xformer:
        ckpt["xformer"] = {
            "config": {
                "model": OmegaConf.to_container(cfg.model, resolve=True),
                "data": {"vocab_size": src_vocab, "tokenizer": "bpe"},
            },
            "src_vocab_size": src_vocab,
            "tgt_vocab_size": tgt_vocab,
            "pad_id": 0,
            "tokenizer": None,
        }
    torch.save(ckpt, path)
    return path


def test_decoder_only_checkpoint_into_an_encoder_decoder_run_is_one_error_line(tmp_path):
    ckpt = _fake_checkpoint(
        tmp_path / "lm.ckpt", _compose([*TINY, "model/arch=decoder_only", "model.n_encoder_layers=0"])
    )
    t0 = time.monotonic()
    res = run_py([*TINY, f"ckpt_path={ckpt}", f"hydra.run.dir={tmp_path / 'job'}"], tmp_path, timeout=120)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and "size mismatch" not in res.stderr, res.stderr[-2000:]
    errors = _error_lines(res.stderr)
    assert len(errors) == 1, res.stderr[-2000:]
    assert "decoder_only (" in errors[0] and "encoder_decoder (" in errors[0]
    assert "model/arch=decoder_only" in errors[0] and "drop ckpt_path" in errors[0]
    assert not (tmp_path / "cache").exists(), "refused before any data was built"
    print(f"time to error: {time.monotonic() - t0:.1f} s")


@pytest.mark.parametrize(
    "other,fix",
    [
        (["model.d_model=64"], "model.d_model=64"),
        (["model.n_decoder_layers=2"], "model.n_decoder_layers=2"),
        (["model/ffn=swiglu"], "model.ffn"),
    ],
)
def test_checkpoint_of_another_model_shape_names_both_and_the_fix(tmp_path, other, fix):
    from xformer.config.checkpoint import check_checkpoint_model

    ckpt = _fake_checkpoint(tmp_path / "other.ckpt", _compose([*TINY, *other]))
    with pytest.raises(ConfigError) as info:
        check_checkpoint_model(_compose(TINY), str(ckpt))
    msg = str(info.value)
    assert "\n" not in msg and "the checkpoint holds encoder_decoder (" in msg and "this run builds" in msg
    assert fix in msg.split("Fix:", 1)[1], msg
    check_checkpoint_model(_compose([*TINY, *other]), str(ckpt))  # the fix works


def test_a_non_xformer_lightning_checkpoint_is_refused_in_one_line(tmp_path):
    from xformer.config.checkpoint import check_checkpoint_model

    cfg = _compose(TINY)
    foreign = _fake_checkpoint(tmp_path / "foreign.ckpt", cfg, xformer=False)
    with pytest.raises(ConfigError, match="a Lightning checkpoint from another program"):
        check_checkpoint_model(cfg, str(foreign))
    plain = tmp_path / "weights.pt"
    torch.save({"weight": torch.zeros(2)}, plain)
    with pytest.raises(ConfigError, match="not a Lightning checkpoint"):
        check_checkpoint_model(cfg, str(plain))
    eval_cfg = _compose([*TINY, "mode=eval", f"ckpt_path={foreign}"])
    with pytest.raises(ConfigError, match="another program"):
        check_checkpoint_model(eval_cfg, str(foreign))


def test_checkpoint_with_another_vocabulary_is_refused_with_both_sizes(tmp_path):
    from xformer.config.checkpoint import check_checkpoint_vocab

    cfg = _compose(TINY)
    ckpt = _fake_checkpoint(tmp_path / "v50.ckpt", cfg, src_vocab=50, tgt_vocab=50)
    with pytest.raises(ConfigError, match=r"vocabulary has 50/50 .* this run's data 600/600.*data.vocab_size=50"):
        check_checkpoint_vocab(cfg, str(ckpt), SimpleNamespace(src_vocab_size=600, tgt_vocab_size=600))
    check_checkpoint_vocab(cfg, str(ckpt), SimpleNamespace(src_vocab_size=50, tgt_vocab_size=50))


@pytest.mark.slow  # ~11 s: builds the tiny data set
def test_checkpoint_with_another_vocabulary_stops_run_py_in_one_line(tmp_path):
    cfg = _compose(TINY)
    ckpt = _fake_checkpoint(tmp_path / "v50.ckpt", cfg, src_vocab=50, tgt_vocab=50)
    res = run_py([*TINY, f"ckpt_path={ckpt}", f"hydra.run.dir={tmp_path / 'job'}"], tmp_path, timeout=180)
    assert res.returncode == 2, res.stderr[-2000:]
    errors = _error_lines(res.stderr)
    assert len(errors) == 1 and "vocabulary has 50/50" in errors[0] and "Traceback" not in res.stderr, res.stderr[
        -2000:
    ]


@pytest.mark.parametrize("where", ["/proc/xformer-run", "{file}/sub", "/sys/xformer-run"])
def test_an_output_folder_that_cannot_be_made_is_one_error_line(tmp_path, where):
    (tmp_path / "a_file").write_text("x")
    folder = where.format(file=tmp_path / "a_file")
    res = run_py([f"hydra.run.dir={folder}"], tmp_path, timeout=60)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    assert _error_lines(res.stderr) == [next(line for line in res.stderr.splitlines() if line.startswith("error:"))]
    assert _error_lines(res.stderr)[0].startswith(f"error: hydra.run.dir={folder}: cannot create the folder (")


def test_a_sweep_folder_that_cannot_be_made_is_one_error_line(tmp_path):
    res = run_py(["hydra.sweep.dir=/proc/xformer-sweep", "model.d_model=32,64", "-m"], tmp_path, timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert _error_lines(res.stderr)[0].startswith("error: hydra.sweep.dir=/proc/xformer-sweep: cannot create")


def test_a_disk_that_fills_up_during_the_run_is_one_error_line(tmp_path):
    job = tmp_path / "job"
    full = [
        "+callbacks.full._target_=tests.reliability.first_contact_probe.DiskFull",
        f"+callbacks.full.dirpath={job / 'checkpoints'}",
    ]
    res = run_py([*TINY, "logger=csv", "trainer.max_steps=6", *full, f"hydra.run.dir={job}"], tmp_path, timeout=180)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
    errors = _error_lines(res.stderr)
    assert len(errors) == 1, res.stderr[-2000:]
    assert errors[0].startswith(f"error: {job / 'checkpoints' / 'last.ckpt'}: No space left on device. Fix: ")
    assert f"ckpt_path=last hydra.run.dir={job}" in errors[0]
    assert metrics(job)["status"] == "failed"


@pytest.mark.parametrize(
    "call,err,reason",
    [
        ("mkdir", errno.EROFS, "Read-only file system"),
        ("write", errno.ENOSPC, "No space left on device"),
        ("open", errno.EACCES, "Permission denied"),
    ],
)
def test_output_folder_os_errors_name_the_folder(tmp_path, monkeypatch, call, err, reason):
    from xformer.jobs import hydra_callbacks

    def fail(*_args, **_kwargs):
        raise OSError(err, os.strerror(err))

    target = {"mkdir": (Path, "mkdir"), "write": (os, "write"), "open": (os, "open")}[call]
    monkeypatch.setattr(*target, fail)
    with pytest.raises(ConfigError) as info:
        hydra_callbacks.check_output_dir(tmp_path / "out")
    assert str(info.value).startswith(f"hydra.run.dir={tmp_path / 'out'}: cannot ") and reason in str(info.value)


# ---- 4./5. console, test table, progress bar, translate ----------------------------------------------

#: every line a default (tiny) run may print on stderr: W&B's offline-run lines and its end-of-run
#: history/summary block; nothing else
ALLOWED_STDERR = [
    r"wandb: Tracking run with wandb version [\d.]+",
    r"wandb: W&B syncing is set to `offline` in this directory\. .*",
    r"wandb: Run data is saved locally in .*",
    r"wandb: View this run in the terminal with `wandb leet`",
    r"wandb: (Run history|Run summary):",
    r"wandb:\s+[\w/@.+-]+ .*",  # a history/summary row (name, sparkline or value)
    r"wandb:\s+\+\d+ \.\.\.",
    r"wandb: ?",
    r"wandb: You can sync this run to the cloud by running:",
    r"wandb: wandb sync .*",
    r"wandb: Find logs at: .*",
]


def _unexpected(stderr: str) -> list[str]:
    return [
        line for line in stderr.splitlines() if line.strip() and not any(re.fullmatch(p, line) for p in ALLOWED_STDERR)
    ]


@pytest.mark.slow  # ~10 s: the suite stays under 10 min (make test-slow runs it)
def test_default_run_console_is_quiet_and_true_and_the_bar_is_sane_after_resume(tmp_path):
    job = tmp_path / "job"
    args = [*TINY, "data.tokens_per_batch=256", "trainer.enable_progress_bar=true", f"hydra.run.dir={job}"]
    res = run_py([*args, "trainer.max_steps=6"], tmp_path, WANDB_MODE=None)
    assert res.returncode == 0, res.stderr[-3000:]
    assert not _unexpected(res.stderr), _unexpected(res.stderr)
    out = res.stdout
    for noise in ("anonymous setting", "Tip:", "litlogger", "LeafSpec", "DataLoader 0"):
        assert noise not in out + res.stderr, noise
    header = next(line for line in out.splitlines() if "metric" in line and "test" in line)
    assert re.search(r"metric\s+┃\s+test\s+┃\s+long", header), header  # one column per split, by name
    m = metrics(job)["metrics"]
    row = next(line for line in out.splitlines() if re.match(r"│ loss\s", line))
    assert f"{m['test/loss']:.4f}" in row and f"{m['test/loss@long']:.4f}" in row

    bar = tmp_path / "bar.json"
    probe = ["+callbacks.bar._target_=tests.reliability.first_contact_probe.BarProbe", f"+callbacks.bar.path={bar}"]
    res = run_py([*args, "trainer.max_steps=16", "ckpt_path=last", *probe], tmp_path, WANDB_MODE=None)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Previous log files" not in res.stdout + res.stderr  # false: the CSV keeps its rows
    assert not _unexpected(res.stderr), _unexpected(res.stderr)
    rows = json.loads(bar.read_text())
    assert rows and rows[0]["step"] == 6 and rows[-1]["step"] == 16, rows  # resumed at 6, the budget 16
    for r in rows:  # the step of the budget, not of this process or of a data epoch; the data's epoch
        assert r["text"].startswith(f"epoch {r['epoch']} · step {r['step']}/16 · "), r
    assert next(r["step"] for r in rows if r["epoch"] == 1) == 12, rows  # 12 batches per data epoch


def test_test_table_has_one_column_per_split():
    from xformer.jobs.console import test_table

    text = test_table({"test/loss": 1.5, "test/loss@long": 2.25, "test/bleu": 30.0, "val/loss": 9.0}, ["test", "long"])
    lines = text.splitlines()
    assert re.search(r"metric\s+┃\s+test\s+┃\s+long", next(x for x in lines if "metric" in x))
    assert re.search(r"loss\s+│\s+1\.5000\s+│\s+2\.2500", next(x for x in lines if "loss" in x))
    assert re.search(r"bleu\s+│\s+30\.0000\s+│\s+-", next(x for x in lines if "bleu" in x))
    assert "9.0" not in text and "DataLoader" not in text


def test_translate_notes_empty_input_on_stderr(capsys, monkeypatch):
    import io

    from xformer.cli import main
    from xformer.model import EncoderDecoder
    from xformer.train import translate

    model = EncoderDecoder(
        src_vocab_size=20, tgt_vocab_size=20, d_model=8, n_heads=2, n_encoder_layers=1, n_decoder_layers=1
    )
    cfg = OmegaConf.create({"decode": {"beam_size": 1, "alpha": 0.6, "max_len_a": 1.0, "max_len_b": 2}})
    monkeypatch.setattr(translate, "load_checkpoint", lambda _path: (model, None, cfg))
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["translate", "--ckpt", "mt.ckpt"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("note: the input was empty"), err
