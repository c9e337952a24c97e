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
    assert any(line.startswith("C1: supported") for line in stdout)
    text = (out / "report.md").read_text()
    assert "| model.ffn_ratio | n | diverged | failed | val/loss | val/ppl | test/bleu | params |" in text
    assert "| 4 | 3 | 0 | 0 | 1.804 ± 0.002 (n=3) |" in text and "25.85 ± 0.05 (n=3)" in text
    assert "**C1: supported** at 40 steps, 1 k tokens" in text and "**C2: supported**" in text
    assert "25.4 / 25.8 / 26.2" in text  # published numbers beside the measured
    assert "| failed | – | model.ffn_ratio=8 seed=4 trainer.max_steps=40 |" in text
    assert "  - evidence: 4 vs 2: Δ +0.0586 [95% CI" in text and "  - rule: Needs ratio 4" in text
    assert "`trainer.max_steps=40`" in text
    assert "](curves.png)" in text and (out / "curves.png").is_file()
    assert "xformer report " in text


def test_default_out_is_first_dir(sweep_dir):
    assert main([str(sweep_dir), "--metric", "val/loss"]) == 0
    assert (sweep_dir / "report.md").is_file()
    assert "decision metric: `val/loss`" in (sweep_dir / "report.md").read_text()


def test_wandb_without_api_key_says_so_and_uses_files(sweep_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    assert main([str(sweep_dir), "--out", str(tmp_path / "o"), "--wandb", "me/xformer:g1"]) == 0
    assert "wandb: no API key" in capsys.readouterr().out


def test_bench_only_dir_gives_c7_c8_verdicts(tmp_path):
    (tmp_path / "bench.json").write_text(
        '{"attention_cost": {"fit": {"time_exponent": 2.1, "memory_exponent": 1.98}},'
        ' "attention_vs_lstm": {"crossover_n": 512, "d": 512}}'
    )
    assert main([str(tmp_path)]) == 0
    text = (tmp_path / "report.md").read_text()
    assert "**C7: supported**" in text and "**C8: supported**" in text


def test_issue_case_prints_inconclusive_with_evidence_and_rule(tmp_path, capsys):
    # issue 12: `run.py model.ffn_ratio=2,4 seed=1,2 trainer.max_steps=30 -m`, then `xformer report`
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
    out = capsys.readouterr().out
    c1 = [line for line in out.splitlines() if line.startswith("C1")]
    assert c1 and c1[0].startswith("C1: inconclusive at 30 steps"), out
    assert "steps" in c1[0] and ": the sweep does not cover the claim's axis" in c1[0], out
    assert "    evidence: 4 vs 2: Δ +0.11, n=2/2 → too few seeds" in out and "    rule: Needs ratio 4" in out


def test_summary_table_comes_first_with_budget_delta_relative_and_published(sweep_dir, tmp_path):
    out = tmp_path / "out"
    assert main([str(sweep_dir), "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    summary = text.index("## Summary")
    assert summary < text.index("Command:") < text.index("## Claim verdicts") < text.index("## Results")
    (row,) = [line for line in text.splitlines() if line.startswith("| C1 |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "**supported**" and cells[2].startswith("40 steps")
    # 4 vs 2 on val/loss: means 1.8040 and 1.8626 (2.0 - 0.1·√r + 0.004): Δ +0.0586, 3.1 % of 1.8626
    assert cells[3].startswith("4 vs 2: +0.0586 [") and cells[3].endswith("val/loss")
    assert cells[4].startswith("+3.1 % [")
    assert "Table 3 C" in cells[5]
    # the verdict's own plot sits right under its verdict line
    c1 = text.index("- **C1: supported**")
    assert text.index("](verdict_C1_1.png)") - c1 < 400 and (out / "verdict_C1_1.png").is_file()


def test_per_seed_files_and_report_folder_read_back(sweep_dir, tmp_path, capsys):
    import csv

    out = tmp_path / "out"
    assert main([str(sweep_dir), "--out", str(out)]) == 0
    first = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("C1", "C2"))]
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
