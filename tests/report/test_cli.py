"""``xformer report``: exit codes, error line, report.md content."""

from __future__ import annotations

from xformer.report.cli import main


def test_empty_dir_exits_2_with_one_error_line(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "no jobs found" in err


def test_missing_dir_exits_2(tmp_path, capsys):
    assert main([str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_unknown_metric_exits_2(sweep_dir, capsys):
    assert main([str(sweep_dir), "--metric", "val/nothing"]) == 2
    assert "--metric val/nothing" in capsys.readouterr().err


def test_report_md_has_table_verdicts_failed_jobs_and_plots(sweep_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert main([str(sweep_dir), "--out", str(out)]) == 0
    stdout = capsys.readouterr().out.splitlines()
    assert stdout[-1] == str(out / "report.md")
    assert sum(str(out / "report.md") in line for line in stdout) == 1  # the path once, last
    # the console: one line per claim the sweep asks about (its experiment), details in report.md
    claims = [line for line in stdout if line.startswith("C")]
    assert [c.split(" ")[0].rstrip(":") for c in claims] == ["C1", "C2"]
    # C1's part (iii) reads another sweep: the verdict says it is over the parts reading this one
    assert claims[0].startswith("C1 (on the parts reading c1_ffn_ratio): supported — (i) supported")
    text = (out / "report.md").read_text()
    assert "| model.ffn_ratio | n | diverged | failed | test/loss | val/loss | val/ppl | test/bleu | params |" in text
    assert "| 4 | 3 | 0 | 0 | 1.804 ± 0.002 (n=3) |" in text and "25.85 ± 0.05 (n=3)" in text
    assert "**supported** at 40 steps, 1 k tokens" in text and "### C2: supported" in text
    assert "25.4 / 25.8 / 26.2" in text  # published numbers beside the measured
    assert "| failed | – | model.ffn_ratio=8 seed=4 trainer.max_steps=40 experiment=claims/c1_ffn_ratio |" in text
    assert "| (i) `c1_ffn_ratio` | claim | trend |" in text and "| (ii) `c1_ffn_ratio` | claim | trend |" in text
    assert "- step model.ffn_ratio=4 vs model.ffn_ratio=2: Δ +0.0586 [95%" in text
    assert "](curves.png)" in text and (out / "curves.png").is_file()
    assert "xformer report " in text
    # the rules are linked, not repeated
    assert "docs/report.md § Test types" in text and "Welch" not in text.split("## Claim verdicts")[0]


def test_default_out_is_first_dir(sweep_dir):
    assert main([str(sweep_dir), "--metric", "val/loss"]) == 0
    assert (sweep_dir / "report.md").is_file()
    assert "table metric: `val/loss`" in (sweep_dir / "report.md").read_text()


def test_wandb_without_api_key_says_so_and_uses_files(sweep_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    assert main([str(sweep_dir), "--out", str(tmp_path / "o"), "--wandb", "me/xformer:g1"]) == 0
    assert "wandb: no API key" in capsys.readouterr().out


def test_a_bench_only_dir_decides_the_claims_measured_by_the_bench(tmp_path, capsys):
    (tmp_path / "bench.json").write_text(
        '{"sections": {"attention": {"explicit": {"time_exponent": 2.1, "memory_exponent": 1.98}},'
        ' "recurrence": {"crossover_n": 512, "config": {"d": 512}}}}'
    )
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "C7: supported" in out and "C8: supported" in out and "guessed" in out
    text = (tmp_path / "report.md").read_text()
    assert "### C7: supported" in text and "### C8: supported" in text


def test_a_sweep_that_records_no_experiment_says_which_claims_it_guessed(tmp_path, capsys):
    from .conftest import write_job

    num = 0
    for ratio, vals in {2: [5.62, 5.58], 4: [5.50, 5.48]}.items():
        for seed, loss in enumerate(vals, start=1):
            write_job(
                tmp_path,
                num,
                [f"model.ffn_ratio={ratio}", f"seed={seed}", "trainer.max_steps=30"],
                {"test/loss": loss, "val/loss": loss},
                curve=[(29, loss + 0.2, loss)],
            )
            num += 1
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    # ratios 2 and 4 lack the levels C1's trend declares (1, 2, 4, 8): no claim is guessed onto them
    assert out[0].startswith("note: the jobs record no experiment, and no declared claim finds"), out
    assert not [line for line in out if line.startswith("C1")]


def test_summary_table_comes_first_with_each_claims_parts(sweep_dir, tmp_path):
    out = tmp_path / "out"
    assert main([str(sweep_dir), "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    summary = text.index("## Summary")
    assert summary < text.index("Command:") < text.index("## Claim verdicts") < text.index("## Results")
    (row,) = [line for line in text.splitlines() if line.startswith("| C1 |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert (
        cells[1] == "**supported**" and cells[2] == "(i) supported; (ii) supported" and cells[3].startswith("40 steps")
    )
    assert "Table 3 C" in cells[4]
    # the claim's own plot sits under its parts
    c1 = text.index("### C1 (on the parts reading c1_ffn_ratio): supported")
    assert text.index("](claim_C1_1.png)") - c1 < 2000 and (out / "claim_C1_1.png").is_file()


def test_per_seed_files_and_report_folder_read_back(sweep_dir, tmp_path, capsys):
    import csv

    out = tmp_path / "out"
    assert main([str(sweep_dir), "--out", str(out)]) == 0
    first = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("C1", "C2"))]
    assert len(first) == 2
    rows = list(csv.DictReader((out / "seeds.csv").open()))
    assert len(rows) == 13 and {r["status"] for r in rows} == {"finished", "failed"}
    r = next(r for r in rows if r["model.ffn_ratio"] == "4" and r["seed"] == "2")
    assert r["setting"] == "model.ffn_ratio=4" and float(r["val/loss"]) == 2.0 - 0.1 * 4**0.5 + 0.004
    curves = list(csv.DictReader((out / "curves.csv").open()))
    assert {c["metric"] for c in curves} == {"val/loss"} and len(curves) == 12 * 8
    # the report folder alone gives the same verdicts (no job folder in it)
    again = tmp_path / "again"
    assert main([str(out), "--out", str(again)]) == 0
    second = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("C1", "C2"))]
    assert second == first
    assert (again / "seeds.csv").read_text().splitlines()[1:] == (out / "seeds.csv").read_text().splitlines()[1:]
