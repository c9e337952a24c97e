"""``xformer bench --quick``: runs end to end in under a minute and writes the documented structure.

Checks the shape of ``bench.json`` and of the printed table, never the speed. The run goes through
``python -m xformer.bench``; ``test_console_command_dispatches_to_bench`` checks that ``xformer bench``
(``xformer.cli``) calls the same ``xformer.bench.main``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO

NUM = (int, float)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench")
    out = tmp / "bench.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "XFORMER_CACHE": os.environ.get("XFORMER_CACHE", str(tmp / "cache")),
        "COLUMNS": "200",
    }
    load = os.getloadavg()[0]
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "xformer.bench", "--quick", "--out", str(out)],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    wall = time.perf_counter() - t0
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(out.read_text()), res.stdout, {"wall": wall, "cpu": _children_cpu() - cpu0, "load": load}


def _children_cpu() -> float:
    """User + system CPU seconds of finished child processes (and theirs: run.py, the memory worker)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


@pytest.mark.slow  # 30-60 s: in `make test-slow`, out of `make test`'s 10-minute budget
def test_quick_runs_under_a_minute(quick):
    t = quick[2]
    assert t["cpu"] < 60, f"xformer bench --quick used {t['cpu']:.0f} CPU seconds"
    if t["load"] > (os.cpu_count() or 1):  # an oversubscribed machine stretches wall time, not CPU time
        pytest.skip(
            f"load average {t['load']:.1f} > {os.cpu_count()} CPUs: wall time {t['wall']:.0f} s "
            f"not checked (CPU time {t['cpu']:.0f} s)"
        )
    assert t["wall"] < 60, f"xformer bench --quick took {t['wall']:.0f} s"


@pytest.mark.slow  # the quick bench (~1 min): in `make test-slow` and `make bench`
def test_top_level_keys(quick):
    data, _, _ = quick
    assert data["schema_version"] == 1
    assert set(data) == {"schema_version", "meta", "targets", "sections"}
    m = data["meta"]
    for key in (
        "started",
        "argv",
        "preset",
        "quick",
        "sections",
        "device",
        "device_name",
        "torch",
        "x_transformers",
        "python",
        "cpu_count",
        "torch_threads",
        "loadavg_start",
        "loadavg_end",
        "wall_s",
        "config",
        "data_root",
    ):
        assert key in m, key
    assert m["quick"] is True and m["preset"] == "quick" and m["device"] == "cpu"
    assert m["sections"] == [
        "train_step",
        "train_step_dropout0",
        "overhead",
        "padding",
        "decoding",
        "attention",
        "recurrence",
        "mfu",
        "nanogpt_step",
    ]
    assert list(data["sections"]) == m["sections"]
    for name, sec in data["sections"].items():
        assert sec["status"] in ("ok", "skipped", "n/a"), (name, sec.get("error"))
        assert isinstance(sec["seconds"], NUM)


@pytest.mark.slow  # the quick bench (~1 min): in `make test-slow` and `make bench`
def test_train_step_section(quick):
    sec = quick[0]["sections"]["train_step"]
    assert sec["status"] == "ok"
    for key in (
        "d_model",
        "n_heads",
        "n_layers",
        "d_ff",
        "dropout",
        "vocab",
        "batch",
        "seq_len",
        "tokens_per_step",
        "pad_fraction",
        "precision",
        "optimizer",
    ):
        assert key in sec["config"], key
    assert set(sec["contenders"]) == {"xformer", "torch", "x_transformers"}
    for name, c in sec["contenders"].items():
        if c["status"] == "skipped":
            assert name == "x_transformers" and c["note"]
            continue
        assert c["tokens_per_s"] > 0 and c["step_ms"] > 0 and c["params"] > 0
        assert len(c["step_ms_all"]) == quick[0]["meta"]["config"]["repeats"]
    assert sec["ratio_vs_torch"] > 0
    xt = sec["contenders"]["x_transformers"]
    assert (sec["ratio_vs_x_transformers"] > 0) if xt["status"] == "ok" else sec["ratio_vs_x_transformers"] is None


@pytest.mark.slow  # the quick bench (~1 min): in `make test-slow` and `make bench`
def test_overhead_section(quick):
    sec = quick[0]["sections"]["overhead"]
    assert sec["status"] == "ok", sec
    assert sec["run_py"]["tokens_per_s"] > 0 and sec["bare"]["tokens_per_s"] > 0
    assert sec["ratio"] > 0
    assert sec["overhead_fraction"] == pytest.approx(1 - sec["ratio"])
    assert sec["same_batches"] is True  # run.py and the bare loop saw the same batches
    for rep in sec["run_py"]["repeats"] + sec["bare"]["repeats"]:
        assert rep["window_steps"] > 0 and rep["window_tokens"] > 0


@pytest.mark.slow  # the quick bench (~1 min): in `make test-slow` and `make bench`
def test_padding_section(quick, shared_data):
    sec = quick[0]["sections"]["padding"]
    if not (shared_data / "multi30k").is_dir():
        assert sec["status"] == "skipped" and sec["note"]
        return
    assert sec["status"] == "ok"
    for side in ("token_budget", "fixed_random"):
        s = sec[side]
        assert 0 <= s["pad_fraction"] < 1 and 0 <= s["pad_fraction_max_len"] < 1
        assert s["batches"] > 0
    assert sec["token_budget"]["batches"] == pytest.approx(sec["fixed_random"]["batches"], rel=0.05)
    assert sec["waste_ratio"] > 0


@pytest.mark.slow  # the quick bench (~1 min): in `make test-slow` and `make bench`
def test_decoding_section(quick):
    sec = quick[0]["sections"]["decoding"]
    assert sec["beam"]["beam_size"] == 4 and sec["beam"]["tokens_per_s"] > 0
    assert sec["status"] == "ok"
    assert sec["config"]["output_len"] == 64
    assert sec["cached"]["tokens_per_s"] > 0 and sec["recompute"]["tokens_per_s"] > 0
    assert sec["speedup"] > 0
    assert sec["outputs_match"] is True  # the cache changes the speed, not the output


@pytest.mark.slow  # the quick bench (~1 min): in `make test-slow` and `make bench`
def test_attention_sections(quick):
    a = quick[0]["sections"]["attention"]
    assert a["status"] == "ok"
    n = a["n"]
    assert n == sorted(n) and len(n) >= 3
    for path in ("explicit", "sdpa", "linear", "linear_causal"):  # linear: model/mixer=linear
        assert len(a[path]["time_ms"]) == len(n) and all(t > 0 for t in a[path]["time_ms"])
        assert len(a[path]["peak_mb"]) == len(n)
        if path.startswith("linear"):  # quick sizes: a linear path may stay under the 1 ms fitting floor
            assert isinstance(a[path]["time_exponent"], NUM) or len(a[path]["time_fit_n"]) < 2
        else:
            assert isinstance(a[path]["time_exponent"], NUM)
    assert [r["n"] for r in a["claim_table"]] == [1_000, 10_000, 100_000]
    assert [r["fp16_nxn_bytes"] for r in a["claim_table"]] == [2e6, 2e8, 2e10]
    r = quick[0]["sections"]["recurrence"]
    assert r["status"] == "ok"
    assert len(r["attention_ms"]) == len(r["lstm_ms"]) == len(r["conv_ms"]) == len(r["n"])
    assert all(x > 0 for x in r["attention_over_lstm"]) and all(x > 0 for x in r["attention_over_conv"])
    assert "model/mixer=lstm" in r["config"]["recurrent"] and "model/mixer=conv" in r["config"]["convolutional"]
    assert r["claim_crossover_n"] == r["config"]["d"]
    assert r["crossover_n"] is None or r["crossover_n"] > 0


@pytest.mark.slow  # the quick bench (~1 min): in `make test-slow` and `make bench`
def test_mfu_on_cpu_is_against_a_float32_matmul_peak_measured_in_the_run(quick):
    sec = quick[0]["sections"]["mfu"]
    assert sec["status"] == "ok" and "float32" in sec["peak_method"]
    step_s = quick[0]["sections"]["train_step"]["contenders"]["xformer"]["step_ms"] / 1e3
    assert sec["mfu"] == pytest.approx(sec["flops_per_step"] / step_s / (sec["peak_tflops"] * 1e12), rel=1e-6)
    assert 0 < sec["mfu"] < 1 and 0 < sec["mfu_torch"] < 1


@pytest.mark.slow  # the quick bench (~1 min): in `make test-slow` and `make bench`
def test_dropout0_row_is_row_1_without_dropout(quick):
    sec, base = quick[0]["sections"]["train_step_dropout0"], quick[0]["sections"]["train_step"]
    assert sec["status"] == "ok" and sec["config"]["dropout"] == 0.0 and base["config"]["dropout"] > 0
    assert {k: v for k, v in sec["config"].items() if k != "dropout"} == {
        k: v for k, v in base["config"].items() if k != "dropout"
    }
    xf = sec["contenders"]["xformer"]
    assert sec["ratio_vs_torch"] == pytest.approx(xf["tokens_per_s"] / sec["contenders"]["torch"]["tokens_per_s"])


def test_gpt2_row_counts_flops_as_6n_plus_attention():
    from xformer.bench import gpt2
    from xformer.bench.config import preset

    cfg = preset("quick")
    model = gpt2.build(cfg)
    g, t = cfg.gpt2, cfg.gpt2_seq_len
    layer = 12 * g["d_model"] ** 2 + 13 * g["d_model"]  # attention 4D²+4D, FFN 8D²+5D, two LayerNorms 4D
    n = g["n_layers"] * layer + 2 * g["d_model"] + g["d_model"] * g["vocab"]  # + final LayerNorm, output layer
    want = (6 * n + 12 * g["n_layers"] * g["d_model"] * t) * cfg.gpt2_batch * t
    assert gpt2.step_flops(model, cfg) == want
    res = gpt2.run(cfg)
    assert res["status"] == "ok" and 0 < res["mfu"] < 1 and res["tokens_per_s"] > 0
    assert res["nanogpt_mfu"] == [0.40, 0.50]


@pytest.mark.slow  # the quick bench (~1 min): in `make test-slow` and `make bench`
def test_targets_and_table(quick):
    data, stdout, _ = quick
    keys = {(t["section"], t["metric"]) for t in data["targets"]}
    assert ("train_step", "ratio_vs_torch") in keys and ("decoding", "speedup") in keys
    for t in data["targets"]:
        assert t["met"] in (True, False, None) and t["target"][:2] in (">=", "<=")
    for text in (
        "xformer bench",
        "train step vs torch.nn.Transformer",
        "run.py vs bare loop",
        "greedy decode, length 64",
        "attention: exponent of time / memory in n",
        "crossover n (attention slower than LSTM)",
        "Attention vs LSTM, measured crossover",
        "MFU",
    ):
        assert text in stdout, text


def test_section_selection_and_help():
    from xformer.bench import ALL_SECTIONS, UsageError, select_sections

    assert select_sections("decoding,train_step") == ["train_step", "decoding"]
    assert select_sections("all") == ALL_SECTIONS
    with pytest.raises(UsageError, match="unknown section"):
        select_sections("nope")


@pytest.mark.parametrize(
    "argv, key",
    [
        (["--sections", "bogus"], "--sections"),
        (["--repeats", "-1"], "--repeats=-1"),
        (["--warmup", "-2"], "--warmup=-2"),
        (["--threads", "0"], "--threads=0"),
    ],
)
def test_bad_arguments_exit_2_with_one_error_line(argv, key, tmp_path, capsys):
    from xformer.bench import main

    assert main(["--quick", "--out", str(tmp_path / "b.json"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {key}"), err
    assert not (tmp_path / "b.json").exists()


def test_console_command_dispatches_to_bench(monkeypatch):
    import xformer.bench
    from xformer import cli

    seen = []
    monkeypatch.setattr(xformer.bench, "main", lambda argv: seen.append(argv) or 0)
    assert cli.main(["bench", "--quick", "--out", "x.json"]) == 0
    assert seen == [["--quick", "--out", "x.json"]]


@pytest.mark.slow  # the quick bench (~1 min): in `make test-slow` and `make bench`
def test_nanogpt_step_row_compares_the_same_model(quick):
    """Row 9: the preset's step and the plain-PyTorch nanoGPT step, same parameter count, ratio shown."""
    data, stdout, _ = quick
    sec = data["sections"]["nanogpt_step"]
    c = sec["contenders"]
    assert c["xformer"]["params"] == c["plain"]["params"]  # the same model, built two ways
    assert (sec["config"]["block_size"], sec["config"]["batch"], sec["config"]["n_layers"]) == (64, 12, 4)
    assert sec["ratio"] == c["xformer"]["tokens_per_s"] / c["plain"]["tokens_per_s"] > 0
    assert "nanoGPT" in stdout and any(t["section"] == "nanogpt_step" for t in data["targets"])
