"""One verdict per claim over its sweeps, guessed claims only where they fit, pre-registration in the
report, every reason read back from its template, plots that name what they plot, and the engine's
error rates measured by simulation (a small run here; the full one is marked slow)."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from tests.conftest import REPO
from xformer.jobs import preregister
from xformer.report.aggregate import aggregate
from xformer.report.cli import main
from xformer.report.rules.engine import evaluate, project_claims

from .conftest import PARAMS, write_job

RATIOS = {1: 2.20, 2: 2.10, 4: 2.00, 8: 1.90}


def _c1_jobs(root, experiment: str | None, totals: dict, start: int = 0, shift: float = 0.0) -> int:
    """Ratios 1, 2, 4, 8 × 3 seeds, each step up 0.1 lower in test loss; ``totals``: params per ratio."""
    num = start
    for ratio, loss in RATIOS.items():
        for seed in (1, 2, 3):
            v = loss + shift + 0.003 * seed
            extra = [f"experiment=claims/{experiment}"] if experiment else []
            write_job(
                root,
                num,
                [f"model.ffn_ratio={ratio}", f"seed={seed}", *extra],
                {"test/loss": v, "val/loss": v},
                params={**PARAMS, "total": totals[ratio]},
                curve=[(s, v + 0.1, v) for s in range(10, 101, 10)],
            )
            num += 1
    return num


GROWING = {1: 200_000, 2: 260_000, 4: 380_000, 8: 620_000}
EQUAL = {1: 234_000, 2: 241_000, 4: 230_000, 8: 215_000}


def test_a_claim_over_two_sweeps_gets_one_verdict(tmp_path):
    # C1 reads c1_ffn_ratio (parts i, ii) and c1_ffn_ratio_budget (part iii): one folder with both
    root = tmp_path / "both"
    n = _c1_jobs(root, "c1_ffn_ratio", GROWING)
    _c1_jobs(root, "c1_ffn_ratio_budget", EQUAL, start=n, shift=0.05)
    results, _ = evaluate(aggregate([root]))
    (c1,) = [r for r in results if r.claim == "C1"]
    assert [p.label for p in c1.parts] == ["(i)", "(ii)", "(iii)"] and c1.scope == ""
    assert [p.sweep for p in c1.parts] == ["c1_ffn_ratio", "c1_ffn_ratio", "c1_ffn_ratio_budget"]
    assert "other sweep" not in {q for p in c1.parts for q in p.problems}
    # part (iii) read only the budget sweep's jobs (shifted by 0.05), part (i) only the first sweep's
    assert c1.parts[2].arms[0].mean == pytest.approx(RATIOS[1] + 0.05 + 0.006)
    assert c1.parts[0].arms[0].mean == pytest.approx(RATIOS[1] + 0.006)
    # one sweep alone: its verdict is over its own parts, and it says so
    alone, _ = evaluate(aggregate([_c1_root(tmp_path / "one")]))
    (c1a,) = [r for r in alone if r.claim == "C1"]
    assert c1a.scope == "c1_ffn_ratio" and "other sweep" in c1a.parts[2].problems
    assert c1a.line().startswith("C1 (on the parts reading c1_ffn_ratio): ")


def _c1_root(root):
    _c1_jobs(root, "c1_ffn_ratio", GROWING)
    return root


def test_a_guessed_part_needs_its_levels_and_equal_parameters(tmp_path):
    # no experiment recorded: C1 (i), (ii) fit ratios 1-8; (iii) says "at an equal parameter count" and
    # the arms grow from 200 k to 620 k parameters, so it is not guessed
    root = tmp_path / "plain"
    _c1_jobs(root, None, GROWING)
    results, note = evaluate(aggregate([root]))
    (c1,) = [r for r in results if r.claim == "C1"]
    assert [p.label for p in c1.parts] == ["(i)", "(ii)"] and "guessed" in note
    assert main([str(root), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "report.md").read_text()
    (row,) = [line for line in text.splitlines() if line.startswith("| C1 ")]
    assert "paper's setting, not these jobs' task: BLEU 25.4" in row  # the published column is labelled
    # at equal sizes it is guessed too
    eq = tmp_path / "eq"
    _c1_jobs(eq, None, EQUAL)
    (c1e,) = [r for r in evaluate(aggregate([eq]))[0] if r.claim == "C1"]
    assert [p.label for p in c1e.parts] == ["(i)", "(iii)"]  # (ii) needs increasing parameter counts


def test_a_missing_level_is_not_covered_naming_it(tmp_path):
    root = tmp_path / "s"
    _c1_jobs(root, "c1_ffn_ratio", GROWING)
    for d in range(9, 12):  # drop ratio 8's three jobs
        for f in (root / str(d)).rglob("*"):
            if f.is_file():
                f.unlink()
        for sub in sorted((root / str(d)).rglob("*"), reverse=True):
            sub.rmdir()
        (root / str(d)).rmdir()
    (c1,) = [r for r in evaluate(aggregate([root]))[0] if r.claim == "C1"]
    first = c1.parts[0]
    assert first.verdict == "inconclusive" and "not covered" in first.problems
    assert first.reason == ("not covered: level(s) 8 of model.ffn_ratio missing at every job (the sweep has 1, 2, 4)")
    assert c1.verdict == "inconclusive"


HYP = """\
H1:
  statement: ratio 8 beats ratio 1
  parts:
    - test: superiority
      a: {model.ffn_ratio: 8}
      b: {model.ffn_ratio: 1}
      metric: test/loss
"""


def test_a_researchers_file_is_frozen_the_first_time_and_a_change_is_recorded(tmp_path):
    root = tmp_path / "sweep"
    _c1_jobs(root, None, GROWING)
    f = tmp_path / "h.yaml"
    f.write_text(HYP)
    assert main([str(root), "--claims", str(f), "--out", str(tmp_path / "a")]) == 0
    record = preregister.read(root)  # frozen into the sweep folder, with the jobs finished then
    assert record["claims"]["H1"]["jobs_finished"] == 12 and record["claims"]["H1"]["n_jobs"] == 12
    first = json.loads((tmp_path / "a" / "verdicts.json").read_text())["claims"][0]["preregistration"]
    assert first["status"] == "frozen after 12 of 12 jobs had finished"
    assert first["frozen_sha256"] == preregister.fingerprint(yaml.safe_load(HYP)["H1"])[0]
    f.write_text(HYP.replace("b: {model.ffn_ratio: 1}", "b: {model.ffn_ratio: 2}"))
    assert main([str(root), "--claims", str(f), "--out", str(tmp_path / "b")]) == 0
    second = json.loads((tmp_path / "b" / "verdicts.json").read_text())["claims"][0]["preregistration"]
    assert second["status"] == "changed after the data" and second["changed_parts"] == [1]
    assert second["frozen_sha256"] == first["frozen_sha256"]
    assert "changed after 12 of 12 jobs had finished" in (tmp_path / "b" / "report.md").read_text()


def test_a_sweep_frozen_at_its_start_reads_declared_before_the_data(tmp_path):
    root = tmp_path / "sweep"
    preregister.freeze(root, preregister.declarations_reading("c1_ffn_ratio"), 12, 0)  # as FreezeClaims does
    _c1_jobs(root, "c1_ffn_ratio", GROWING)
    assert main([str(root), "--out", str(tmp_path / "out")]) == 0
    data = json.loads((tmp_path / "out" / "verdicts.json").read_text())
    pre = {c["claim"]: c["preregistration"]["status"] for c in data["claims"]}
    assert pre == {"C1": "declared before the data", "C2": "declared before the data"}
    assert (tmp_path / "out" / "preregistration.json").is_file()  # the report folder carries the record


def test_every_published_claim_carries_its_preregistration_record():
    for c in project_claims():
        for sweep in c.sweeps:
            data = json.loads((REPO / "docs" / "results" / sweep / "verdicts.json").read_text())
            (rec,) = [r for r in data["claims"] if r["claim"] == c.name]
            assert rec["preregistration"]["status"], (c.name, sweep)
            assert rec["preregistration"].get("derived", "").startswith("derived from git"), (c.name, sweep)
    c13 = json.loads((REPO / "docs" / "results" / "c13_path_length" / "verdicts.json").read_text())["claims"][0]
    assert c13["preregistration"]["status"] == "changed after the data"
    # part (iv)'s present text (with "stated before this sweep") was first seen in the results commit; its
    # test was rewritten at be2dac7 after about 110-140 of the 165 jobs, which the derived note says
    assert c13["preregistration"]["changed_parts_jobs_finished"]["4"] == 165
    assert "after about 110–140 of 165 jobs had finished" in c13["preregistration"]["derived"]


def test_every_reason_the_engine_gave_reads_back_to_one_template(tmp_path):
    from xformer.report.rules.declare import load_file
    from xformer.report.rules.reasons import REASONS, parse

    reasons = []
    for f in (REPO / "docs" / "results").glob("*/verdicts.json"):
        for c in json.loads(f.read_text())["claims"]:
            reasons.append(c["reason"])
            reasons += [p["reason"] for p in c["parts"]]
    # and a small-claim sweep of two seeds (the self-contradicting text of issue 53 came from one)
    root = tmp_path / "two"
    for num, (ratio, seed) in enumerate([(2, 1), (2, 2), (4, 1), (4, 2)]):
        write_job(root, num, [f"model.ffn_ratio={ratio}", f"seed={seed}"], {"test/loss": 2.0 - 0.01 * ratio + seed})
    f = tmp_path / "h.yaml"
    f.write_text(
        HYP.replace("8", "4").replace("{model.ffn_ratio: 1}", "{model.ffn_ratio: 2}")
        + "H2:\n  statement: t\n  parts:\n    - {test: trend, axis: model.ffn_ratio, values: all, shape: monotone,"
        " metric: test/loss}\n"
    )
    (h1, h2), _ = evaluate(aggregate([root]), load_file(f), True)
    reasons += [h1.reason, h1.parts[0].reason, h2.reason, h2.parts[0].reason]
    assert h1.parts[0].reason == "too few seeds (model.ffn_ratio=4: 2 seed(s); model.ffn_ratio=2: 2 seed(s); needs ≥ 3)"
    for text in reasons:
        assert parse(text), f"no template makes: {text}"
        for word in ("would say", "(inconclusive", "(supported", "inconclusive: "):
            assert word not in text, text
    assert len(REASONS) == len(set(REASONS.values()))  # one template per reason


def test_the_curves_plot_names_a_label_smoothed_training_loss():
    from xformer.report.plots import curve_name

    assert curve_name("train/loss", [0.1]) == "train/loss, label-smoothed (ε = 0.1): not comparable with val/loss"
    assert curve_name("train/loss", []) == "train/loss" and curve_name("train/nll", [0.1]).startswith("train/nll")


def test_interval_headers_name_their_level():
    c6 = (REPO / "docs" / "results" / "c6_pe_in_distribution" / "report.md").read_text()
    assert "estimate [90% interval]" in c6 and "+0.0265 [90% +0.0164, +0.0366]" in c6
    readme = (REPO / "docs" / "results" / "README.md").read_text()
    assert "+0.0265 [90% +0.0164, +0.0366] test/loss" in readme and "[95 % interval]" not in readme


# -- the engine's error rates -----------------------------------------------------------------------
def test_a_small_simulation_meets_the_bounds_at_a_fixed_seed():
    from xformer.report.simulate import _cases, run_case

    (case,) = [c for c in _cases() if c.name == "superiority"]
    row = run_case(case, reps=60, seed=1)
    # 60 replicates: Monte-Carlo s.e. ~2.8 % at 5 %, ~5 % at 80 %; bounds at 2 s.e.
    assert row.wrong <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 60)
    assert row.power >= 0.80 - 2 * math.sqrt(0.8 * 0.2 / 60)


@pytest.mark.slow
def test_the_full_simulation_meets_the_bounds_for_every_test_type():
    from xformer.report.simulate import _cases, run_case

    for i, case in enumerate(_cases()):
        row = run_case(case, reps=400 * case.reps_scale, seed=i)
        assert row.wrong - 2 * row.wrong_se <= 0.05, case.name
        assert row.power + 2 * row.power_se >= 0.80, case.name


def _rank_power(fa: int, da: int, fb: int, db: int, shift: float, draws: int, seed: int) -> float:
    """The rate at which the engine's exact rank test decides ``a`` better at a true ``shift`` (in seed
    spreads), counted directly over normal seeds with the given divergence counts."""
    import random

    from xformer.report.rules.evidence import Arm
    from xformer.report.rules.tests import _ranks, rank_permutation

    rng, hits = random.Random(seed), 0
    for _ in range(draws):
        a = Arm("a", [shift + rng.gauss(0, 1) for _ in range(fa)], da)
        b = Arm("b", [rng.gauss(0, 1) for _ in range(fb)], db)
        hits += rank_permutation(_ranks([a, b], [0.0, 0.0], True), [1.0, -1.0])[1] <= 0.025
    return hits / draws


@pytest.mark.parametrize("counts", [(5, 0, 5, 0), (5, 0, 3, 2), (4, 0, 3, 1)])
def test_the_rank_tests_detectable_shift_has_80_percent_power(counts):
    from xformer.report.rules.tests import rank_shift_needed

    z = rank_shift_needed(*counts, 0.025)
    assert math.isfinite(z) and z > 0
    se = math.sqrt(0.8 * 0.2 / 400)
    assert abs(_rank_power(*counts, z, 400, 3) - 0.8) <= 2.5 * se
    assert _rank_power(*counts, 0.6 * z, 400, 4) < 0.8 - 2.5 * se  # not a loose upper bound: a smaller one misses


def _rank_power_exact_test(fa: int, da: int, fb: int, db: int, shift: float, draws: int, seed: int) -> float:
    """The rate at which the engine's exact rank test decides ``a`` better at a true ``shift`` over
    ``draws`` normal samples: the test depends on the finished seeds only through their order, so each
    order drawn is decided once by :func:`rank_permutation` and counted as often as it was drawn."""
    import numpy as np

    from xformer.report.rules.evidence import Arm
    from xformer.report.rules.tests import _ranks, rank_permutation

    rng = np.random.default_rng(seed)
    values = np.concatenate([shift + rng.standard_normal((draws, fa)), rng.standard_normal((draws, fb))], axis=1)
    labels = np.array([1] * fa + [0] * fb)[np.argsort(values, axis=1)]  # which arm holds each place, low to high
    orders, counts = np.unique(labels, axis=0, return_counts=True)
    hits = 0
    for order, count in zip(orders, counts, strict=True):
        a = Arm("a", [float(i) for i in np.flatnonzero(order == 1)], da)
        b = Arm("b", [float(i) for i in np.flatnonzero(order == 0)], db)
        hits += int(count) * (rank_permutation(_ranks([a, b], [0.0, 0.0], True), [1.0, -1.0])[1] <= 0.025)
    return hits / draws


@pytest.mark.parametrize("counts", [(5, 0, 5, 0), (5, 0, 4, 1), (5, 0, 3, 2), (5, 0, 2, 3), (4, 0, 3, 1)])
def test_the_rank_tests_detectable_shift_has_80_percent_power_to_within_half_a_point(counts):
    # 200 000 samples decided by the engine's permutation test (one call per order of the seeds):
    # Monte-Carlo s.e. 0.09 points, plus the shift's own quantile error (about 0.13)
    from xformer.report.rules.tests import rank_shift_needed

    z = rank_shift_needed(*counts, 0.025)
    assert abs(_rank_power_exact_test(*counts, z, 200_000, 21) - 0.8) <= 0.005


def test_no_shift_decides_a_rank_test_whose_better_arm_diverged():
    from xformer.report.rules.tests import rank_shift_needed

    # a's diverged seed ranks below every finished one: no arrangement of 4 + 1 against 5 reaches p ≤ 0.025
    assert rank_shift_needed(4, 1, 5, 0, 0.025) == math.inf
    assert _rank_power(4, 1, 5, 0, 50.0, 50, 5) == 0.0


def _rank_sweep(d: float, pattern: frozenset, seed: int):
    import random

    from xformer.report.rules.engine import decide_part
    from xformer.report.rules.part import Part
    from xformer.report.simulate import _sweep

    spec = {"test": "superiority", "a": {"x": 1}, "b": {"x": 0}, "metric": "test/loss"}
    ctx, _ = _sweep({0: 0.0, 1: -d}, random.Random(seed), 0.0, 5, pattern)
    return decide_part(Part("S", 0, spec, "simulation", "stable ranking"), ctx)


def test_a_rank_decided_part_prints_the_rank_tests_detectable_effect_and_has_its_power():
    # 5 seeds a side, 2 of b's diverged: the exact rank test decides, and the effect printed is its own
    pattern = frozenset({(0, 1), (0, 2)})
    null = [_rank_sweep(0.0, pattern, s) for s in range(30)]
    assert all(r.scale == "ranks" for r in null)
    assert sum(r.verdict == "supported" for r in null) <= 3
    dets = [r.detectable for r in null]
    assert all(d is not None for d in dets)
    det = sum(dets) / len(dets)
    alt = [_rank_sweep(det, pattern, 100 + s) for s in range(40)]
    power = sum(r.verdict == "supported" for r in alt) / 40
    assert power >= 0.8 - 2 * math.sqrt(0.8 * 0.2 / 40)
    assert any("detectable effect at 80 % power" in e for e in alt[0].evidence)


def _finished(ctx, x: int) -> list[float]:
    """The finished seeds' test losses at ``x`` of a simulated sweep."""
    return [j.metrics["test/loss"] for j in ctx.sweep.jobs if j.overrides["x"] == x and j.status == "finished"]


@pytest.mark.parametrize("pattern", [{(0, 1)}, {(0, 1), (0, 2), (0, 3)}, {(0, 2), (0, 4)}])
def test_a_rank_decided_parts_detectable_effect_reads_the_spread_of_the_finished_seeds_only(pattern):
    # the printed effect is the rank test's shift times the pooled spread of the finished seeds, recomputed
    # here with the statistics module over each arm's finished values (a diverged seed adds no degree of freedom)
    import random
    import statistics

    from xformer.report.rules.engine import decide_part
    from xformer.report.rules.part import Part
    from xformer.report.rules.tests import rank_shift_needed
    from xformer.report.simulate import _sweep
    from xformer.report.stats import c4

    spec = {"test": "superiority", "a": {"x": 1}, "b": {"x": 0}, "metric": "test/loss"}
    ctx, _ = _sweep({0: 0.0, 1: -1.0}, random.Random(11), 0.0, 5, frozenset(pattern))
    r = decide_part(Part("S", 0, spec, "simulation", "stable ranking"), ctx)
    a, b = _finished(ctx, 1), _finished(ctx, 0)
    df = len(a) + len(b) - 2
    sd = math.sqrt(((len(a) - 1) * statistics.variance(a) + (len(b) - 1) * statistics.variance(b)) / df)
    z = rank_shift_needed(len(a), 0, len(b), len(pattern), 0.025)
    assert r.scale == "ranks" and r.detectable == pytest.approx(z * sd / c4(df), rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("pattern", [{(0, 1)}, {(0, 1), (0, 2), (0, 3)}])
def test_a_rank_decided_part_has_80_percent_power_at_the_effect_it_prints(pattern):
    # through the engine's own decision: the printed effect, averaged over 200 null sweeps, is the rank
    # test's shift in seed spreads (σ = 1 here), and 400 sweeps at that effect are decided supported
    # at 80 % (each within 2.5 Monte-Carlo standard errors)
    import statistics

    from xformer.report.rules.tests import rank_shift_needed

    pattern = frozenset(pattern)
    dets = [_rank_sweep(0.0, pattern, 1000 + s).detectable for s in range(200)]
    det = sum(dets) / len(dets)
    z = rank_shift_needed(5, 0, 5 - len(pattern), len(pattern), 0.025)
    assert abs(det - z) <= 2.5 * statistics.stdev(dets) / math.sqrt(len(dets))
    alt = [_rank_sweep(det, pattern, 5000 + s) for s in range(400)]
    power = sum(r.verdict == "supported" for r in alt) / len(alt)
    assert power >= 0.8 - 2.5 * math.sqrt(0.8 * 0.2 / len(alt))


def test_a_rank_part_whose_better_arm_diverged_prints_no_detectable_effect():
    r = _rank_sweep(3.0, frozenset({(1, 1)}), 7)
    assert r.scale == "ranks" and r.detectable is None
    assert any("no effect decides it at 80 % power" in e for e in r.evidence)


def test_every_template_is_used_and_every_reason_names_a_template():
    import re

    from xformer.report.rules.reasons import REASONS

    source = "".join(p.read_text() for p in (REPO / "xformer" / "report" / "rules").glob("*.py"))
    used = set(re.findall(r'reason\(\s*"([^"]+)"', source))
    used |= set(re.findall(r'reason\(\s*"([^"]+)" if', source))
    used |= {k for k in re.findall(r'"([a-z -]+)" if partly else "([a-z -]+)"', source) for k in k}
    assert used <= set(REASONS), used - set(REASONS)
    assert set(REASONS) <= used, set(REASONS) - used
