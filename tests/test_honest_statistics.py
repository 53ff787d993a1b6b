"""Leaderboard numbers labelled honestly: t-intervals, paired tests, declared directions,
diverged rows listed apart, strict JSON, identical test tasks for every method."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest
from scipy import stats as scipy_stats

from benchmarks.cli.main import main
from benchmarks.metrics.catalog import direction_of, is_declared
from benchmarks.planning.plan import plan_run
from benchmarks.protocols.recording import MemoryRecorder
from benchmarks.results.statistics import paired_t_test, seed_stats, t_cdf, t_quantile
from benchmarks.running.execute import execute
from tests.helpers import TINY, fake_run, leaderboard_json, stored_runs

#: Student's t two-sided 95% critical values t(0.975, df) as printed in the standard tables
#: (e.g. NIST/SEMATECH e-Handbook of Statistical Methods, table 1.3.6.7.2), to 3 decimals.
T_TABLE = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 9: 2.262, 19: 2.093,
           29: 2.045, 100: 1.984}  # fmt: skip


@pytest.mark.parametrize("df", sorted(T_TABLE))
def test_student_t_matches_the_printed_table(df):
    """The CI's quantile against the printed table, not against scipy."""
    assert t_quantile(0.975, df) == pytest.approx(T_TABLE[df], abs=5e-4)
    assert t_quantile(0.025, df) == pytest.approx(-T_TABLE[df], abs=5e-4)
    assert t_cdf(T_TABLE[df], df) == pytest.approx(0.975, abs=1e-4)
    assert t_cdf(0.0, df) == 0.5


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 10, 49, 50, 999, 2.5])
def test_student_t_closed_form_is_scipys_to_float_rounding(df):
    """Whole degrees of freedom take the closed-form series (no scipy import on a board);
    both it and the fractional path are held to scipy's stdtr / stdtrit over the range."""
    from scipy.special import stdtr, stdtrit

    for t in (-60.0, -3.3, -1.0, -0.05, 0.4, 1.96, 2.7, 9.0, 150.0):
        # a tail is 0.5 - P(|T| <= t) / 2: absolute rounding near 1e-15 at large df
        assert t_cdf(t, df) == pytest.approx(float(stdtr(df, t)), rel=1e-12, abs=1e-14)
    for p in (1e-6, 0.025, 0.3, 0.5, 0.8, 0.95, 0.975, 0.995, 1 - 1e-6):
        assert t_quantile(p, df) == pytest.approx(float(stdtrit(df, p)), rel=1e-9, abs=1e-12)
    with pytest.raises(ValueError, match="p must be in"):
        t_quantile(1.0, df)


def test_seed_statistics_and_paired_test_match_scipy():
    values = [0.61, 0.55, 0.72, 0.58]
    got = seed_stats(values)
    low, high = scipy_stats.t.interval(
        0.95, len(values) - 1, loc=sum(values) / 4, scale=scipy_stats.sem(values)
    )
    assert got.n == 4 and got.std == pytest.approx(scipy_stats.tstd(values), rel=1e-12)
    assert (got.ci_low, got.ci_high) == (pytest.approx(low, rel=1e-10), pytest.approx(high))
    one = seed_stats([0.5])
    assert one.mean == 0.5 and one.std is None and one.ci95 is None  # no spread, not 0
    assert seed_stats([0.5, math.nan]).mean is None  # a diverged run makes no number

    a, b = [0.50, 0.61, 0.48, 0.55, 0.58], [0.47, 0.60, 0.44, 0.52, 0.57]
    test = paired_t_test(a, b)
    reference = scipy_stats.ttest_rel(a, b)
    assert test.p_value == pytest.approx(reference.pvalue, rel=1e-9)
    assert test.difference == pytest.approx(sum(a) / 5 - sum(b) / 5)
    assert test.significant == (reference.pvalue < 0.05)


def test_baseline_marks_paired_differences_over_shared_seeds(store, capsys):
    # maml is consistently 0.03 better than sparse_maml on each seed: the per-seed spread is
    # large, the paired differences are not (the case issue 16 saw: p = 0.006).
    maml = {0: 0.50, 1: 0.61, 2: 0.48, 3: 0.70}
    sparse = {0: 0.53, 1: 0.635, 2: 0.515, 3: 0.72}
    for seed, value in maml.items():
        fake_run(store, "maml", seed, {"final/test_loss": value})
    for seed, value in list(sparse.items())[:3]:  # seed 3 missing: 3 pairs
        fake_run(store, "sparse_maml", seed, {"final/test_loss": value})
    board = leaderboard_json(store, capsys, "--baseline", "maml")
    (row,) = [r for r in board["rows"] if r["method"] == "sparse_maml"]
    paired = row["versus_baseline"]
    reference = scipy_stats.ttest_rel([sparse[s] for s in range(3)], [maml[s] for s in range(3)])
    assert paired["pairs"] == 3 and paired["baseline"] == "maml"
    assert paired["p_value"] == pytest.approx(reference.pvalue, rel=1e-9)
    assert paired["difference"] == pytest.approx(0.03, rel=1e-9)  # (0.03 + 0.025 + 0.035) / 3
    assert paired["significant"] is bool(reference.pvalue < 0.05) is True
    # The unpaired intervals overlap; the paired test still separates the two.
    base = next(r for r in board["rows"] if r["method"] == "maml")["stats"]["final/test_loss"]
    mine = row["stats"]["final/test_loss"]
    assert mine["ci95_low"] < base["ci95_high"]
    capsys.readouterr()
    assert main(["leaderboard", "--tracking-uri", store, "--baseline", "maml",
                 "--format", "markdown"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "Δ test_loss vs maml@" in out and "3 pairs)" in out
    assert main(["leaderboard", "--tracking-uri", store, "--baseline", "nope"]) == 2


def test_the_baseline_row_is_the_one_that_pairs_and_can_be_chosen(store, capsys):
    """After a sweep over seeds 10-11, maml's best row shares no seed with sparse_maml's
    (seeds 0-2): the baseline is maml's row that does; --baseline maml@CONFIG picks the
    other, and then the board says that the row shares no seed instead of showing "-"."""
    for seed in (10, 11):
        fake_run(store, "maml", seed, {"final/test_loss": 0.1}, inner_lr="0.05")
    for seed in (0, 1, 2):
        fake_run(store, "maml", seed, {"final/test_loss": 0.5 + 0.01 * seed}, inner_lr="0.01")
        fake_run(store, "sparse_maml", seed, {"final/test_loss": 0.45 + 0.01 * seed})
    board = leaderboard_json(store, capsys, "--baseline", "maml")
    sparse = next(r for r in board["rows"] if r["method"] == "sparse_maml")
    assert sparse["versus_baseline"]["pairs"] == 3
    assert sparse["versus_baseline"]["difference"] == pytest.approx(-0.05)
    lonely = next(r for r in board["rows"] if r["method"] == "maml" and "0.05" in r["config"])
    assert lonely["versus_baseline"]["pairs"] == 0
    codes = {r.data.params.get("method.inner_lr"): r.data.tags["mesabench.config_hash"]
             for r in stored_runs(store) if r.data.tags["mesabench.method"] == "maml"}
    best_code = codes["0.05"]
    capsys.readouterr()
    assert main(["leaderboard", "--tracking-uri", store, "--baseline", f"maml@{best_code[:6]}",
                 "--format", "markdown"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert f"vs maml@{best_code[:8]}" in out and "no shared seeds" in out
    assert "(seeds 10,11;" in out and "2 row(s) share no seed with it" in out
    assert main(["leaderboard", "--tracking-uri", store, "--baseline", "maml@ffff"]) == 2
    assert f"its rows: maml@{codes['0.05'][:8]}" in capsys.readouterr().err


def test_directions_are_declared_never_guessed_from_names(store, capsys):
    # A loss whose name has no "loss"-like word and an OOD loss ranked by its declaration.
    assert direction_of("final/ood/input_x2_model") == "lower"
    assert direction_of("final/ra") == "higher" and direction_of("final/num_params") is None
    assert not is_declared("final/made_up")
    fake_run(store, "maml", 0, {"final/test_loss": 0.5, "final/ood/input_x2_model": 2.0})
    fake_run(store, "fomaml", 0, {"final/test_loss": 0.6, "final/ood/input_x2_model": 1.0})
    board = leaderboard_json(store, capsys, "--metric", "final/ood/input_x2_model")
    assert board["higher_is_better"] is False
    assert [r["method"] for r in board["rows"] if r["rank"]] == ["fomaml", "maml"]
    assert "the input scaled by 2, lower is better" in board["metric_words"]
    capsys.readouterr()
    for metric, why in (("final/made_up", "not declared"), ("final/num_params", "descriptive")):
        assert main(["leaderboard", "--tracking-uri", store, "--metric", metric]) == 2
        err = capsys.readouterr().err
        assert why in err and len(err.strip().splitlines()) == 1


def test_diverged_rows_are_listed_with_their_fraction_never_ranked(store, capsys):
    sizes = {"final/num_params": 1761.0, "final/train_time_s": 12.5}
    fake_run(store, "maml", 0, {"final/test_loss": 0.5, **sizes})
    fake_run(store, "maml", 1, {"final/test_loss": 0.6, **sizes})
    fake_run(store, "metasgd", 0,
              {"final/test_loss": math.nan, "final/test_loss_diverged_fraction": 0.56})  # fmt: skip
    fake_run(store, "metasgd", 1, {"final/test_loss": 0.1})
    board = leaderboard_json(store, capsys)
    diverged = next(r for r in board["rows"] if r["method"] == "metasgd")
    assert diverged["status"] == "diverged" and diverged["rank"] is None
    cells = diverged["stats"]["final/test_loss"]
    assert cells["mean"] is None and cells["std"] is None and cells["diverged_fraction"] == 0.56
    assert [r["rank"] for r in board["rows"] if r["method"] == "maml"] == [1]
    capsys.readouterr()
    assert main(["leaderboard", "--tracking-uri", store, "--format", "markdown"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "metasgd" in x)
    assert line.startswith("| - | metasgd") and "diverged (56% of tasks)" in line
    # One task in a thousand is said as such, never rounded to "0% of tasks".
    from benchmarks.results.formats import stat_text

    one = stat_text({"mean": None, "n": 3, "diverged_fraction": 0.001}, "diverged")
    assert one == "diverged (0.1% of tasks)"
    # CSV: numbers are numbers, the missing mean is empty, never "nan".
    capsys.readouterr()
    assert main(["leaderboard", "--tracking-uri", store, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert "nan" not in json.dumps(rows).lower()
    json_board = leaderboard_json(store, capsys)
    maml = next(r for r in json_board["rows"] if r["method"] == "maml")
    assert maml["rank"] == 1 and maml["num_params"] == 1761 and maml["n"] == 2
    assert isinstance(maml["train_time_s"], float) and maml["train_time_s"] == 12.5


def test_a_budget_that_differs_between_methods_is_shown_and_never_ranked_together(
    store, capsys
):
    fake_run(store, "maml", 0, {"final/test_loss": 0.5}, iterations="40")
    fake_run(store, "fomaml", 0, {"final/test_loss": 0.6}, iterations="20")
    board = leaderboard_json(store, capsys)
    # Neither is the benchmark's default budget and each has one cell: the newest ranks.
    (ranked,) = [r for r in board["rows"] if r["rank"]]
    (apart,) = [r for r in board["rows"] if r["status"] == "other settings"]
    assert ranked["method"] == "fomaml" and apart["method"] == "maml" and apart["rank"] is None
    assert apart["other_setting"] == {"protocol.iterations": {"this_row": "40", "ranked": "20"}}
    assert apart["config"] == "iterations=40 (ranked: 20)"
    # Either budget ranks on its own when asked for.
    (only,) = leaderboard_json(store, capsys, "--param", "iterations=40")["rows"]
    assert only["method"] == "maml" and only["rank"] == 1


def test_the_same_seed_draws_the_same_test_tasks_for_every_method(store, tmp_path):
    """Pairing over test tasks needs identical tasks: the per-task artifact of two methods
    run at different seeds lists the same tasks, and its mean is the logged test loss."""
    from benchmarks.protocols.episodic import PER_TASK_PATH, TEST, EpisodicProtocol

    plans = [plan_run(m, "sinusoid-5shot", 3, {"test_tasks": "30"}, device="cpu")
             for m in ("maml", "sparse_maml", "metasgd")]  # fmt: skip
    batches = []
    for plan in plans:
        protocol = EpisodicProtocol(plan.protocol, plan.task.build(), plan.seed, MemoryRecorder(),
                                    device="cpu")  # fmt: skip
        batches.append(list(protocol._tasks(TEST, plan.protocol.test_seed, 30)))
    for other in batches[1:]:
        for a, b in zip(batches[0], other, strict=True):
            assert a.query_x.equal(b.query_x) and a.support_y.equal(b.support_y)

    finals, tables = [], []
    for method, seed in (("maml", 0), ("fomaml", 1)):
        overrides = dict(item.split("=") for item in TINY[1::2])
        plan = plan_run(method, "sinusoid-5shot", seed, overrides, device="cpu")
        recorder = MemoryRecorder()
        finals.append(execute(plan, recorder))
        tables.append(list(csv.DictReader(io.StringIO(recorder.artifacts[PER_TASK_PATH]))))
    for final, table in zip(finals, tables, strict=True):
        assert [int(r["task"]) for r in table] == list(range(50))
        column = [float(r["loss_steps10"]) for r in table]
        assert sum(column) / len(column) == pytest.approx(final["final/test_loss"], rel=1e-9)
        first = [float(r["loss_steps1"]) for r in table]
        assert sum(first) / 50 == pytest.approx(final["final/test_loss_steps1"], rel=1e-9)


def test_holm_adjustment_and_seeds_for_power_equal_statsmodels():
    """Holm's step-down p-values and the pairs a two-sided paired t-test needs for 80%
    power, against statsmodels' multipletests and TTestPower on the same numbers."""
    from statsmodels.stats.multitest import multipletests
    from statsmodels.stats.power import TTestPower

    from benchmarks.results.multiple_tests import holm, seeds_for_power

    p_values = [0.01, 0.04, 0.03, 0.5, 0.005, None]
    ours = holm(p_values)
    theirs = multipletests([p for p in p_values if p is not None], method="holm")[1]
    assert ours[-1] is None
    assert ours[:-1] == pytest.approx(list(theirs), rel=1e-12)
    for differences in ([0.03, 0.025, 0.035], [0.1, -0.05, 0.2, 0.02], [0.5, 0.1, 0.45, 0.6],
                        [0.3, -0.2, 0.25]):
        n = len(differences)
        mean = sum(differences) / n
        std = (sum((d - mean) ** 2 for d in differences) / (n - 1)) ** 0.5
        effect = abs(mean) / std
        needed = seeds_for_power(differences)
        # statsmodels' power of the paired (one-sample) t-test: reached at ours, not below.
        power = TTestPower().power
        assert power(effect, needed, 0.05, alternative="two-sided") >= 0.8, differences
        if needed > 2:
            assert power(effect, needed - 1, 0.05, alternative="two-sided") < 0.8, differences
        if needed > 3:  # (its solver stops at its bound of 2 for large effects)
            exact = TTestPower().solve_power(effect_size=effect, alpha=0.05, power=0.8,
                                             alternative="two-sided")  # fmt: skip
            assert needed == math.ceil(exact - 1e-9), differences
    assert seeds_for_power([0.1]) is None and seeds_for_power([0.1, 0.1]) is None


def test_a_board_of_several_paired_tests_adjusts_them_and_says_how_many_seeds(store, capsys):
    maml = {0: 0.50, 1: 0.61, 2: 0.48}
    others = {"fomaml": {0: 0.53, 1: 0.635, 2: 0.515}, "metasgd": {0: 0.49, 1: 0.64, 2: 0.47}}
    for seed, value in maml.items():
        fake_run(store, "maml", seed, {"final/test_loss": value})
    for method, values in others.items():
        for seed, value in values.items():
            fake_run(store, method, seed, {"final/test_loss": value})
    board = leaderboard_json(store, capsys, "--baseline", "maml")
    raw = {r["method"]: r["versus_baseline"]["p_value"] for r in board["rows"]
           if r.get("versus_baseline") and r["versus_baseline"]["p_value"] is not None}
    from statsmodels.stats.multitest import multipletests

    methods = sorted(raw)
    adjusted = dict(zip(methods, multipletests([raw[m] for m in methods], method="holm")[1],
                        strict=True))  # fmt: skip
    for row in board["rows"]:
        paired = row.get("versus_baseline")
        if row["method"] in adjusted:
            assert paired["p_value_holm"] == pytest.approx(adjusted[row["method"]], rel=1e-9)
            assert paired["tests"] == 2
            assert paired["significant"] == (adjusted[row["method"]] < 0.05)
            assert isinstance(paired["seeds_for_80_power"], int)
    assert main(["leaderboard", "--tracking-uri", store, "--baseline", "maml",
                 "--format", "markdown"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "(paired t, Holm-adjusted)" in out and "Holm p=" in out and "80% power: " in out
    assert "p adjusted by Holm over the board's 2 tests" in out
