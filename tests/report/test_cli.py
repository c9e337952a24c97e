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
    assert "| model.ffn_ratio | n | failed | test/bleu | val/loss | val/ppl | params |" in text
    assert "| 4 | 2 | 0 | 25.85 ± 0.0707 (n=2) |" in text
    assert "**C1: supported**" in text and "**C2: supported**" in text
    assert "25.4 / 25.8 / 26.2" in text                   # published numbers beside the measured
    assert "| failed | model.ffn_ratio=8 seed=3 trainer.max_steps=40 |" in text
    assert "`trainer.max_steps=40`" in text
    assert "](curves.png)" in text and (out / "curves.png").is_file()
    assert "xformer report " in text


def test_default_out_is_first_dir(sweep_dir, capsys):
    assert main([str(sweep_dir), "--metric", "val/loss"]) == 0
    assert (sweep_dir / "report.md").is_file()
    assert "decision metric: `val/loss`" in (sweep_dir / "report.md").read_text()


def test_wandb_without_api_key_says_so_and_uses_files(sweep_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    assert main([str(sweep_dir), "--out", str(tmp_path / "o"), "--wandb", "me/xformer:g1"]) == 0
    assert "wandb: no API key" in capsys.readouterr().out


def test_bench_only_dir_gives_c7_c8_verdicts(tmp_path, capsys):
    (tmp_path / "bench.json").write_text(
        '{"attention_cost": {"fit": {"time_exponent": 2.1, "memory_exponent": 1.98}},'
        ' "attention_vs_lstm": {"crossover_n": 512, "d": 512}}')
    assert main([str(tmp_path)]) == 0
    text = (tmp_path / "report.md").read_text()
    assert "**C7: supported**" in text and "**C8: supported**" in text
