"""`xformer claims`: the README claims table is generated from the committed reports (and this test
fails when it drifts), rows come from summary.json, a report's summary table or its verdict lines,
and `claims list/run` see each sweep's state in its stable folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, SHARED_DATA
from xformer.report import claims_run, claims_table
from xformer.report.claims_table import BEGIN, END, README, render
from xformer.report.rules.engine import project_claims


def test_readme_claims_table_matches_the_committed_reports():
    text = README.read_text()
    table = text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip()
    assert table == render().strip(), "README claims table drifted from docs/results/*/: run `xformer claims table`"
    assert claims_table.main(check=True) == 0


def test_check_reports_drift_and_table_rewrites_it(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{BEGIN}\n| stale |\n{END}\nrest\n")
    assert claims_table.main(check=True, readme=readme) == 1
    assert "drift" in capsys.readouterr().out
    assert claims_table.main(readme=readme) == 0
    text = readme.read_text()
    assert "| stale |" not in text and text.startswith("intro\n") and text.endswith(f"{END}\nrest\n")
    assert claims_table.main(check=True, readme=readme) == 0


def _publish(results: Path, name: str, report: str, summary: dict | None = None, run_md: bool = True) -> None:
    d = results / name
    d.mkdir(parents=True)
    (d / "report.md").write_text(report)
    if run_md:
        (d / "run.md").write_text("# How this report was made\n")
    if summary is not None:
        (d / "verdicts.json").write_text(json.dumps(summary))


def _rows(results: Path, claim: str, sweep: str) -> list:
    (c,) = [c for c in project_claims() if c.name == claim]
    return [r for r in claims_table.claim_rows(c, results) if r.sweep == sweep]


def test_rows_come_from_verdicts_json_never_from_the_markdown(tmp_path):
    top = "# report\n\n| claim | verdict |\n|---|---|\n| C4 | not supported |\n"
    _publish(tmp_path, "c4_norm_warmup", top)
    (row,) = _rows(tmp_path, "C4", "c4_norm_warmup")
    assert row.part_verdict == "not run" and row.where == "`xformer claims run c4_norm_warmup`"
    summary = {
        "format": 2,
        "claims": [
            {
                "claim": "C9",
                "verdict": "inconclusive",
                "parts": [
                    {
                        "part": "(i)",
                        "test": "superiority",
                        "role": "claim",
                        "verdict": "supported",
                        "estimate": 0.1,
                        "interval": [0.05, 0.15],
                        "metric": "test/loss",
                    },
                    {
                        "part": "(ii)",
                        "test": "contrast",
                        "role": "claim",
                        "verdict": "inconclusive",
                        "estimate": 0.07,
                        "interval": [-0.01, 0.15],
                        "margin": 0.02,
                        "margin_source": "m",
                    },
                ],
            }
        ],
    }
    _publish(tmp_path, "c9_attn_scale", top, summary)
    first, second = _rows(tmp_path, "C9", "c9_attn_scale")
    # the claim's one verdict is recomputed from its parts (the record's own "inconclusive" is not copied)
    assert (first.claim, first.verdict, first.part, first.test, first.part_verdict) == (
        "C9",
        "**inconclusive**",
        "(i)",
        "superiority",
        "supported",
    )
    assert first.interval == "+0.1 [+0.05, +0.15] test/loss" and second.margin == "0.02 (m)" and second.claim == ""
    assert "| C9 | **inconclusive** | (i) | `c9_attn_scale` | superiority | supported |" in render(tmp_path)


def test_a_report_made_before_claims_had_parts_asks_to_be_re_rendered(tmp_path):
    _publish(tmp_path, "c6_pe_in_distribution", "old\n", {"format": 1, "claims": [{"claim": "C6", "verdict": "x"}]})
    (row,) = _rows(tmp_path, "C6", "c6_pe_in_distribution")
    assert row.part_verdict.startswith("made before claims had parts: re-render it, `xformer report docs/results/c6")


def test_a_report_writes_verdicts_json_with_portable_paths(tmp_path, monkeypatch):
    """``xformer report`` writes verdicts.json (read by the table) and names folders under
    $XFORMER_RUNS / $XFORMER_DATA by the variable, never by this machine's absolute path."""
    from xformer.report.cli import main

    from .conftest import write_sweep

    runs = tmp_path / "runs"
    sweep = runs / "claims" / "c11_d_head" / "cpu"
    table = {6: [1.80, 1.81, 1.82], 24: [1.74, 1.75, 1.76]}
    write_sweep(sweep, "model.d_qk", table, metric="test/loss", extra=["experiment=claims/c11_d_head"])
    monkeypatch.setenv("XFORMER_RUNS", str(runs))
    out = tmp_path / "docs" / "c11_d_head"
    assert main([str(sweep), "--out", str(out)]) == 0
    data = json.loads((out / "verdicts.json").read_text())
    (c11,) = [r for r in data["claims"] if r["claim"] == "C11"]
    (part,) = c11["parts"]
    assert c11["verdict"] == "supported" and part["test"] == "superiority" and part["detectable"] > 0
    assert part["interval"][0] > 0
    text = (out / "report.md").read_text()
    assert "${XFORMER_RUNS}/claims/c11_d_head/cpu" in text and str(runs) not in text
    assert str(runs) not in (out / "jobs.json").read_text()


def test_unpublished_claims_are_not_run_rows_with_their_command(tmp_path):
    _publish(tmp_path, "c5_pe_length", "old form\n", {"format": 2, "claims": []}, run_md=False)
    (row,) = _rows(tmp_path, "C5", "c5_pe_length")
    assert row.part_verdict == "not run" and row.where == "`xformer claims run c5_pe_length`"
    rows = render(tmp_path).splitlines()[2:]
    assert len(rows) == sum(len(c.sweeps) for c in project_claims())  # one row per claim and sweep not run


def test_names_resolve_to_claim_configs():
    assert claims_run.resolve_names(["C12"]) == ["c12_dropout", "c12_label_smoothing"]
    assert claims_run.resolve_names(["c3_heads", "c1"]) == ["c3_heads", "c1_ffn_ratio", "c1_ffn_ratio_budget"]
    assert claims_run.resolve_names([]) == claims_run.claim_names()
    with pytest.raises(claims_run.UsageError, match="c99"):
        claims_run.resolve_names(["c99"])


def test_list_reads_each_job_folder_of_the_stable_sweep_dir(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XFORMER_RUNS", str(tmp_path / "runs"))
    s = claims_run.inspect("c6_pe_in_distribution", "cpu")
    assert s.sweep_dir == tmp_path / "runs" / "claims" / "c6_pe_in_distribution" / "cpu"
    assert len(s.states) == 6 and set(s.states) == {"new"} and s.refused is None
    # job 0 finished, job 1 killed after a checkpoint, both recorded with the config this command gives
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from xformer.jobs.sweep import sweep_jobs

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        base = compose(
            "config", overrides=["experiment=claims/c6_pe_in_distribution", "scale=cpu"], return_hydra_config=True
        )
        jobs = sweep_jobs(base)
        for num in (0, 1):
            cfg = compose("config", overrides=["experiment=claims/c6_pe_in_distribution", "scale=cpu", *jobs[num]])
            (s.sweep_dir / str(num) / ".hydra").mkdir(parents=True)
            OmegaConf.save(cfg, s.sweep_dir / str(num) / ".hydra" / "config.yaml")
    (s.sweep_dir / "0" / "metrics.json").write_text(json.dumps({"status": "finished"}))
    (s.sweep_dir / "1" / "checkpoints").mkdir()
    (s.sweep_dir / "1" / "checkpoints" / "last.ckpt").write_bytes(b"x")
    assert claims_run.main(["list", "c6_pe_in_distribution"]) == 0
    out = capsys.readouterr().out
    assert "c6_pe_in_distribution    cpu      6    1      1      4" in out
    # c6's report is committed: `run` leaves it, and says how to run it again
    assert "published: " in out and "with --rerun it runs python run.py experiment=claims/c6_pe_in_distribution" in out
    empty = tmp_path / "results"
    assert claims_run.main(["list", "c6_pe_in_distribution", "--results", str(empty)]) == 0
    assert "would run: python run.py experiment=claims/c6_pe_in_distribution scale=cpu -m" in capsys.readouterr().out
    # the same folder with another learning rate is refused (listed, and `run` exits 2)
    s2 = claims_run.inspect("c6_pe_in_distribution", "cpu", ["optim.lr=0.01"])
    assert s2.refused and "optim.lr" in s2.refused
    monkeypatch.setenv("XFORMER_DATA", str(tmp_path))
    assert claims_run.main(["run", "c6_pe_in_distribution", "--", "optim.lr=0.01"]) == 2
    assert "holds another config" in capsys.readouterr().err


def test_a_published_claim_is_not_run_again_unless_asked(tmp_path, monkeypatch, capsys):
    """In a fresh clone (no sweep folders) every committed report counts as done:
    `claims run` starts nothing for it; `--rerun` runs it; an unpublished claim runs."""
    monkeypatch.setenv("XFORMER_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("XFORMER_DATA", str(tmp_path))
    ran = []
    monkeypatch.setattr(claims_run, "run_sweep", lambda s, *_: ran.append(s.name) or 0)
    monkeypatch.setattr(claims_run, "publish", lambda *_: 0)
    assert claims_run.main(["run", "c6_pe_in_distribution"]) == 0
    assert ran == [] and "published" in capsys.readouterr().out
    assert claims_run.main(["run", "c6_pe_in_distribution", "--rerun"]) == 0
    assert ran == ["c6_pe_in_distribution"]
    assert claims_run.main(["run", "c6_pe_in_distribution", "--results", str(tmp_path / "none")]) == 0
    assert ran == ["c6_pe_in_distribution"] * 2


def test_run_without_data_is_one_error_line(monkeypatch, capsys):
    monkeypatch.delenv("XFORMER_DATA", raising=False)
    assert claims_run.main(["run", "c3_heads"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: XFORMER_DATA")


def test_cpu_forms_run_two_single_threaded_jobs_side_by_side_gpu_forms_one():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        for name in claims_run.claim_names():
            cpu = compose("config", overrides=[f"experiment=claims/{name}"], return_hydra_config=True)
            assert cpu.hydra.launcher._target_.endswith("JoblibLauncher") and cpu.hydra.launcher.n_jobs == 2, name
            assert cpu.hydra.job.env_set.OMP_NUM_THREADS == "1", name
            assert str(cpu.hydra.sweep.dir) == f"multirun/claims/{name}/cpu", name
            gpu = compose("config", overrides=[f"experiment=claims/{name}", "scale=gpu"], return_hydra_config=True)
            assert gpu.hydra.launcher._target_.endswith("BasicLauncher"), name
            assert str(gpu.hydra.sweep.dir) == f"multirun/claims/{name}/gpu", name


@pytest.mark.slow
def test_claims_run_runs_reports_and_resumes(tmp_path):
    """A tiny C6 (6 jobs of 2 steps, 2 at a time): `claims run` publishes report.md, run.md and
    jobs.csv; run again, it starts no sweep and the wall-time log keeps one invocation. ~90 s."""
    import os

    data = next(
        (
            d
            for d in (SHARED_DATA, Path(os.environ.get("XFORMER_DATA") or "/nonexistent"))
            if (d / "tinyshakespeare" / "input.txt").is_file()
        ),
        None,
    )
    if data is None:
        pytest.skip(f"tiny-shakespeare copy not found in {SHARED_DATA} or $XFORMER_DATA")
    from tests.reliability.conftest import env_for

    env = env_for(tmp_path, XFORMER_DATA=str(data), XFORMER_RUNS=str(tmp_path / "runs"))
    cmd = [
        sys.executable,
        "-m",
        "xformer.cli",
        "claims",
        "run",
        "C6",
        "--results",
        str(tmp_path / "results"),
        "--",
        "trainer.max_steps=2",
        "trainer.val_check_interval=1",
        "data.batch_size=4",
    ]
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = tmp_path / "results" / "c6_pe_in_distribution"
    assert (out / "report.md").is_file() and "C6" in (out / "report.md").read_text()
    run_md = (out / "run.md").read_text()
    assert "xformer claims run --scale cpu c6_pe_in_distribution" in run_md and "1 invocation" in run_md
    rows = (out / "jobs.csv").read_text().splitlines()
    assert len(rows) == 7 and all(",finished," in r for r in rows[1:])
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "all 6 jobs finished" in res.stdout and "python run.py" not in res.stdout.split("published")[0]
    runs = json.loads(
        (tmp_path / "runs" / "claims" / "c6_pe_in_distribution" / "cpu" / ".xformer" / "claims_runs.json").read_text()
    )
    assert len(runs) == 1


def test_a_sweep_read_by_a_bench_claim_is_reported_with_the_committed_bench_file():
    """Claims declared with ``bench: true`` are decided from ``xformer bench``: the report of the sweep
    they read gets ``docs/results/bench-<scale>.json``; quality claims are reported without it."""
    from xformer.report import claims_run

    c7 = claims_run.ClaimSweep("c7_mixer", "cpu", Path("/nowhere"), [])
    args = claims_run.bench_args(c7)
    assert args == ["--bench", str(claims_run.RESULTS / "bench-cpu.json")] and Path(args[1]).is_file()
    assert claims_run.bench_args(claims_run.ClaimSweep("c7_mixer", "gpu", Path("/nowhere"), [])) in (
        [],
        ["--bench", str(claims_run.RESULTS / "bench-gpu.json")],
    )
    assert claims_run.bench_args(claims_run.ClaimSweep("c11_d_head", "cpu", Path("/nowhere"), [])) == []


def test_an_invocation_stopped_by_sigterm_keeps_its_wall_time(tmp_path):
    """``xformer claims run`` stopped by SIGTERM (a killed shell, a preempted allocation) records the
    invocation and its wall time, so run.md's wall time counts every interrupted invocation of a resumed sweep."""
    import signal
    import time

    sweep_dir = tmp_path / "sweep"
    code = (
        "import sys, time, subprocess\n"
        "from pathlib import Path\n"
        "from xformer.report import claims_run as cr\n"
        "subprocess.call = lambda *a, **k: time.sleep(60)\n"
        f"s = cr.ClaimSweep('c11_d_head', 'cpu', Path({str(sweep_dir)!r}), [], states=['new'])\n"
        "print('started', flush=True)\n"
        "cr.run_sweep(s, [])\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "started"
    log = sweep_dir / claims_run.RUNS_LOG
    for _ in range(100):  # the "running" record is written before the sweep starts
        if log.is_file():
            break
        time.sleep(0.05)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    (run,) = json.loads(log.read_text())
    assert run["exit"] == "SIGTERM" and run["wall_s"] >= 1.0
    md = claims_run.write_run_md(claims_run.ClaimSweep("c11_d_head", "cpu", sweep_dir, []), tmp_path / "out", [])
    import re

    assert re.search(r"Wall time of the sweep: [1-9]\d* s \(.*\) over 1 invocation", md.read_text())
    assert "| SIGTERM |" in md.read_text()


def test_readme_is_the_front_door_and_small():
    """The README keeps what a newcomer needs on day one (<= 14 KB); the claims table
    has one home, docs/results/README.md, which the README links to and does not copy."""
    readme = (REPO / "README.md").read_text()
    assert len(readme.encode()) <= 14 * 1024, len(readme.encode())
    assert BEGIN not in readme and "docs/results/README.md" in readme
    for needed in ("make run", "make test", "source .venv/bin/activate", "## Config groups", "## Adding a variant"):
        assert needed in readme, needed
    assert README == REPO / "docs" / "results" / "README.md" and BEGIN in README.read_text()
