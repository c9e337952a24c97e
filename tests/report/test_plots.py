"""The PNGs are written and are valid PNG files."""

from __future__ import annotations

from xformer.report.aggregate import aggregate
from xformer.report.plots import seed_band, write_plots

PNG = b"\x89PNG\r\n\x1a\n"


def test_plots_written_as_valid_pngs(sweep_dir, tmp_path):
    out = tmp_path / "plots"
    paths = write_plots(aggregate([sweep_dir]), out, ["test/bleu", "val/loss"])
    names = {p.name for p in paths}
    assert {
        "metric_test-bleu_vs_model.ffn_ratio.png",
        "metric_val-loss_vs_model.ffn_ratio.png",
        "params_test-bleu.png",
        "curves.png",
    } <= names
    for p in paths:
        assert p.is_file() and p.read_bytes()[:8] == PNG


def test_mean_curve_averages_seeds_and_interpolates_misaligned_steps():
    steps, mean, _, _ = seed_band([([1, 2, 3], [1.0, 2.0, 3.0]), ([1, 2, 3], [3.0, 4.0, 5.0])])
    assert list(steps) == [1, 2, 3] and list(mean) == [2.0, 3.0, 4.0]
    steps, mean, _, _ = seed_band([([0, 10], [0.0, 10.0]), ([0, 5, 10], [0.0, 5.0, 10.0])])
    assert list(steps) == [0, 5, 10] and list(mean) == [0.0, 5.0, 10.0]
