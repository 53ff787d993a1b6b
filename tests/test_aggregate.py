"""Aggregates across benchmarks: each statistic against scipy, a count by hand or a
simulation, and ``leaderboard --aggregate`` end to end on a real store."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from benchmarks.results import aggregate as agg

TWO = {"a": np.array([0.1, 0.4, 0.2, 0.9]), "b": np.array([0.5, 0.7, 0.3])}


def test_iqm_and_mean_pool_every_run_of_every_benchmark():
    pooled = sorted([0.1, 0.4, 0.2, 0.9, 0.5, 0.7, 0.3])  # 7 runs: trim_mean cuts 1 each end
    assert agg.iqm(TWO) == pytest.approx(sum(pooled[1:-1]) / 5)
    eight = {"x": np.arange(8) / 10}  # cuts 2 each end: the middle four
    assert agg.iqm(eight) == pytest.approx((0.2 + 0.3 + 0.4 + 0.5) / 4)
    assert agg.mean(TWO) == pytest.approx(sum(pooled) / 7)


def test_probability_of_improvement_is_mann_whitney_u_over_n_m_averaged_over_benchmarks():
    x = {"a": np.array([0.3, 0.5, 0.5, 0.9]), "b": np.array([0.2, 0.4, 0.6])}
    y = {"a": np.array([0.5, 0.1, 0.4]), "b": np.array([0.4, 0.4, 0.1, 0.8])}
    expected = np.mean([stats.mannwhitneyu(x[b], y[b]).statistic / (len(x[b]) * len(y[b]))
                        for b in ("a", "b")])  # fmt: skip
    assert agg.probability_of_improvement(x, y) == pytest.approx(expected)
    # and by hand on "a": pairs won 0+1+1+1 + 0.5*0 ... counted one by one
    wins = sum((u > v) + 0.5 * (u == v) for u in x["a"] for v in y["a"]) / 12
    assert agg._pairwise_wins(x["a"], y["a"]) == pytest.approx(wins)
    assert agg.probability_of_improvement(x, y) + agg.probability_of_improvement(y, x) == (
        pytest.approx(1.0))  # fmt: skip


def test_performance_profile_weighs_each_benchmark_the_same():
    taus = (0.0, 0.35, 0.6)
    # a: 4 runs above 0.0, 2 above 0.35 (0.4, 0.9), 1 above 0.6; b: 3, 2, 1 of 3 runs
    expected = [(4 / 4 + 3 / 3) / 2, (2 / 4 + 2 / 3) / 2, (1 / 4 + 1 / 3) / 2]
    assert agg.profile(TWO, taus) == pytest.approx(expected)


def test_the_bootstrap_is_stratified_within_benchmarks():
    """Two benchmarks whose seeds agree: resampling seeds within each cannot move the mean
    (a bootstrap pooling the benchmarks' runs would)."""
    constant = {"a": np.full(5, 0.2), "b": np.full(3, 0.8)}
    low, high = agg.bootstrap_interval(agg.mean, constant, reps=500)
    assert low == pytest.approx(0.2 * 5 / 8 + 0.8 * 3 / 8) and high == pytest.approx(low)


def test_one_benchmarks_interval_is_scipys_percentile_bootstrap():
    rng = np.random.default_rng(3)
    values = rng.normal(0.5, 0.2, 12)
    low, high = agg.bootstrap_interval(agg.mean, {"a": values}, reps=20_000)
    theirs = stats.bootstrap((values,), np.mean, n_resamples=20_000, method="percentile",
                             random_state=np.random.default_rng(4)).confidence_interval  # fmt: skip
    # Two Monte Carlo estimates of the same percentiles: within a few thousandths.
    assert low == pytest.approx(theirs.low, abs=0.006)
    assert high == pytest.approx(theirs.high, abs=0.006)


def test_the_same_scores_give_the_same_intervals_and_rliable_agrees_where_installed():
    scores = {m: {b: np.random.default_rng(hash((m, b)) % 2**32).uniform(0, 1, 5)
                  for b in ("a", "b", "c")} for m in ("p", "q")}  # fmt: skip
    first = agg.aggregate(scores, ["a", "b", "c"], reps=300)
    again = agg.aggregate(scores, ["a", "b", "c"], reps=300)
    assert [m.iqm for m in first.methods] == [m.iqm for m in again.methods]
    assert first.improvement == again.improvement
    rly = pytest.importorskip("rliable.metrics")  # in the dev extra; a skip fails CI
    matrix = np.stack([scores["p"][b] for b in ("a", "b", "c")], axis=1)  # runs x tasks
    other = np.stack([scores["q"][b] for b in ("a", "b", "c")], axis=1)
    assert first.methods[0].iqm.value == pytest.approx(rly.aggregate_iqm(matrix))
    assert first.methods[0].mean.value == pytest.approx(rly.aggregate_mean(matrix))
    assert first.improvement["p", "q"].value == pytest.approx(
        rly.probability_of_improvement(matrix, other))  # fmt: skip


def test_methods_missing_a_benchmark_are_left_out_and_named():
    scores = {"p": {"a": np.array([0.2, 0.3]), "b": np.array([0.5, 0.6])},
              "q": {"a": np.array([0.4, 0.1])}}  # fmt: skip
    result = agg.aggregate(scores, ["a", "b"], reps=50)
    assert [m.method for m in result.methods] == ["p"]
    assert result.missing == {"q": ["b"]}


def test_no_adaptation_losses_match_a_simulation():
    """The regression anchors against Monte Carlo: the variance of y given x, averaged over
    x (the loss of the best predictor that sees no support points)."""
    import torch

    from mesabench_datasets.regression import LinRegConfig, SinusoidConfig

    g = np.random.default_rng(0)
    sinusoid = SinusoidConfig(amplitude=(0.5, 3.0), phase=(0.2, 2.0), input_range=(-4.0, 3.0))
    x = (np.arange(1000)[:, None] + 0.5) / 1000 * 7.0 - 4.0  # the midpoints of 1,000 bins
    y = g.uniform(0.5, 3.0, (1000, 4000)) * np.sin(x - g.uniform(0.2, 2.0, (1000, 4000)))
    assert sinusoid.build().no_adaptation_loss() == pytest.approx(y.var(axis=1).mean(), rel=0.01)
    default = SinusoidConfig().build().no_adaptation_loss()
    # by hand: E[A^2]/2 - E[A]^2 (2/pi)^2 E[cos^2 x] on U(-5, 5)
    by_hand = 8.50333333 / 2 - 2.55**2 * (4 / math.pi**2) * (0.5 + math.sin(10) / 20)
    assert default == pytest.approx(by_hand, rel=1e-6)
    for config in (LinRegConfig(noise=0.5, outputs=2),
                   LinRegConfig(input_dist="exponential", dim=4, teacher_scale=0.7)):
        batch = config.build().sample(200_000, torch.Generator().manual_seed(1), "test")
        simulated = 0.5 * (batch.query_y.double() ** 2).sum(-1).mean().item()
        assert config.build().no_adaptation_loss() == pytest.approx(simulated, rel=0.01)


def test_anchors_of_the_built_in_families():
    from benchmarks.catalog.anchors import anchors_for

    omniglot = anchors_for("omniglot-20w1s")
    assert (omniglot.metric, omniglot.zero, omniglot.one) == ("final/test_accuracy", 0.05, 1.0)
    assert omniglot.normalise(0.525) == pytest.approx(0.5)
    linreg = anchors_for("linreg-icl")
    assert linreg.zero == pytest.approx(0.5 * 10 / 3) and linreg.one == 0.0
    assert linreg.normalise(0.825) == pytest.approx(1 - 0.825 / (5 / 3))
    assert anchors_for("mnist-rotations") is None


def _store_with_runs(tmp_path):
    from mlflow.tracking import MlflowClient

    from tests.helpers import fake_run

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    losses = {("maml", "sinusoid-5shot"): [0.3, 0.5, 0.4],
              ("fomaml", "sinusoid-5shot"): [0.6, 0.7, 0.9],
              ("maml", "linreg-icl"): [0.8, 0.9, 1.0],
              ("fomaml", "linreg-icl"): [0.85, 0.95, 1.1],
              ("anil", "sinusoid-5shot"): [0.2, 0.25, 0.3]}  # fmt: skip
    for (method, benchmark), values in losses.items():
        for seed, loss in enumerate(values):
            run_id = fake_run(store, method, seed, {"final/test_loss": loss}, benchmark=benchmark)
            if (method, benchmark, seed) == ("fomaml", "linreg-icl", 0):  # from another lab
                client = MlflowClient(store)
                client.set_tag(run_id, "mesabench.imported_from", "lab.mesabundle")
                client.set_tag(run_id, "mesabench.verified", "agrees (bit-identical)")
    # at other task settings: left out of the aggregate (its anchors do not hold there)
    fake_run(store, "maml", 3, {"final/test_loss": 0.0}, benchmark="linreg-icl",
             **{"task.input_range": "0.5"})  # fmt: skip
    return store, losses


def test_leaderboard_aggregate_end_to_end_on_a_store(tmp_path, capsys):
    from benchmarks.cli.main import main
    from tests.helpers import assert_compiles

    store, losses = _store_with_runs(tmp_path)
    capsys.readouterr()
    assert main(["leaderboard", "--aggregate", "sinusoid-5shot,linreg-icl", "--format", "json",
                 "--tracking-uri", store]) == 0  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    zero = {"sinusoid-5shot": 3.0056693555757548, "linreg-icl": 5 / 3}
    normalised = {m: {b: np.array([1 - v / zero[b] for v in losses[m, b]]) for b in zero}
                  for m in ("maml", "fomaml")}  # fmt: skip
    rows = {m["method"]: m for m in data["methods"]}
    assert set(rows) == {"maml", "fomaml"} and data["left_out"] == {"anil": ["linreg-icl"]}
    # A run from a bundle is marked, as on a board, with what verify found of it.
    assert rows["maml"]["imported"] == {}
    assert rows["fomaml"]["imported"] == {
        "linreg-icl": "imported: 1 of 3 runs, from lab.mesabundle; verified: 1 re-run(s) agree"}
    for method in rows:
        pooled = np.concatenate(list(normalised[method].values()))
        assert rows[method]["iqm"]["value"] == pytest.approx(stats.trim_mean(pooled, 0.25))
        assert rows[method]["runs"] == {"sinusoid-5shot": 3, "linreg-icl": 3}
        assert rows[method]["iqm"]["ci95_low"] <= rows[method]["iqm"]["value"]
    poi = {(p["x"], p["y"]): p["value"] for p in data["probability_of_improvement"]}
    expected = np.mean([stats.mannwhitneyu(normalised["maml"][b], normalised["fomaml"][b])
                        .statistic / 9 for b in zero])  # fmt: skip
    assert poi["maml", "fomaml"] == pytest.approx(expected)
    # markdown names the interval and the anchors
    assert main(["leaderboard", "--aggregate", "sinusoid-5shot,linreg-icl", "--format",
                 "markdown", "--tracking-uri", store]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "IQM [95% CI, stratified bootstrap]" in text and "0 = 1.66667" in text
    assert "From bundles: fomaml (linreg-icl: imported: 1 of 3 runs" in text
    # latex: the best IQM in bold, and fomaml too unless the best is surely better than it
    assert main(["leaderboard", "--aggregate", "sinusoid-5shot,linreg-icl", "--format",
                 "latex", "--tracking-uri", store]) == 0  # fmt: skip
    tex = capsys.readouterr().out
    best = max(rows, key=lambda m: rows[m]["iqm"]["value"])
    other = ({"maml", "fomaml"} - {best}).pop()
    lines = {line.split(" & ")[0]: line for line in tex.splitlines() if " & " in line}
    iqm = rows[best]["iqm"]
    assert f"\\textbf{{{iqm['value']:.3f} [{iqm['ci95_low']:.3f}, {iqm['ci95_high']:.3f}]}}" \
        in lines[best]
    surely_better = next(p for p in data["probability_of_improvement"]
                         if (p["x"], p["y"]) == (best, other))["ci95_low"] > 0.5  # fmt: skip
    assert ("\\textbf" in lines[other]) != surely_better
    assert "\\toprule" in tex and "95\\%" in tex
    assert_compiles(tex, tmp_path)


def test_aggregate_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    from benchmarks.cli.main import main

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cases = [
        (["--aggregate", "sinusoid-5shot"], "two or more benchmarks"),
        (["--aggregate", "sinusoid-5shot,mnist-rotations"], "mnist-rotations declares no score"),
        (["--aggregate", "sinusoid-5shot,linreg-icl", "--format", "csv"], "allowed table"),
        (["--aggregate", "sinusoid-5shot,linreg-icl", "--all"], "leave out --benchmark"),
        (["--aggregate", "sinusoid-5shot,no-such"], "unknown benchmark 'no-such'"),
        (["--aggregate", "sinusoid-5shot,linreg-icl"], "no method has finished runs"),
        (["--aggregate", "sinusoid-5shot,linreg-icl", "--baseline", "maml"],
         "--aggregate takes no --baseline"),
    ]
    for extra, said in cases:
        capsys.readouterr()
        assert main(["leaderboard", *extra, "--tracking-uri", store]) == 2, extra
        err = capsys.readouterr().err.strip()
        assert said in err and len(err.splitlines()) == 1, (extra, err)


def test_report_draws_the_aggregate(tmp_path):
    from benchmarks.cli.main import main

    store, _ = _store_with_runs(tmp_path)
    out = tmp_path / "report"
    assert main(["report", "--aggregate", "sinusoid-5shot,linreg-icl", "--output", str(out),
                 "--tracking-uri", store]) == 0  # fmt: skip
    page = (out / "index.html").read_text()
    assert 'id="aggregate"' in page and "performance profiles" not in page  # figure is a PNG
    assert (out / "figures" / "aggregate.png").stat().st_size > 10_000
    data = json.loads((out / "figures" / "aggregate.json").read_text())
    assert [m["method"] for m in data["methods"]] == ["fomaml", "maml"]
    assert 'id="sinusoid-5shot"' in page and 'id="linreg-icl"' in page


def test_the_aggregate_figure_renders_in_headless_chromium(tmp_path):
    """Every embedded image decodes, the figure is not shrunk, nothing overflows the page."""
    import os
    import shutil
    import subprocess

    from benchmarks.cli.main import main

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        if os.environ.get("MESABENCH_REQUIRE_BROWSER"):
            pytest.fail("Chromium is not installed; MESABENCH_REQUIRE_BROWSER is set")
        pytest.skip("Chromium is not installed (.ci/run installs it)")
    store, _ = _store_with_runs(tmp_path)
    out = tmp_path / "report"
    assert main(["report", "--aggregate", "sinusoid-5shot,linreg-icl", "--output", str(out),
                 "--tracking-uri", store]) == 0  # fmt: skip
    dom = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--virtual-time-budget=5000", "--window-size=1400,1800", "--dump-dom",
         (out / "index.html").as_uri()], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-broken="0"' in dom.stdout

    def measured(name: str) -> float:
        return float(dom.stdout.split(f'data-{name}="')[1].split('"')[0])

    assert measured("images") >= 1 and measured("min-image-scale") >= 0.75
    assert measured("page-overflow") == 0
    assert "P(X &gt; Y) [95% CI, stratified bootstrap]" in dom.stdout


def test_a_method_with_no_score_to_pool_is_named_with_the_reason(tmp_path):
    """Diverged runs, and runs at other protocol settings than the board ranks, leave a
    method out of the aggregate: said in the notes, never dropped silently."""
    from benchmarks.results.aggregate import aggregate_from_store, notes
    from benchmarks.store.reader import open_reader
    from tests.helpers import fake_run

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for benchmark in ("sinusoid-5shot", "linreg-icl"):
        for seed in (0, 1):
            fake_run(store, "maml", seed, {"final/test_loss": 0.5 + seed / 10},
                     benchmark=benchmark)  # fmt: skip
            fake_run(store, "fomaml", seed, {"final/test_loss": 0.6 + seed / 10},
                     benchmark=benchmark)  # fmt: skip
    fake_run(store, "anil", 0, {"final/test_loss": 0.4}, benchmark="linreg-icl",
             iterations="7")  # fmt: skip
    fake_run(store, "anil", 0, {"final/test_loss": 0.4}, benchmark="sinusoid-5shot")
    fake_run(store, "metasgd", 0, {"final/test_loss": math.nan,
                                   "final/test_loss_diverged_fraction": 0.5},
             benchmark="linreg-icl")  # fmt: skip
    result, anchors = aggregate_from_store(open_reader(store), ["sinusoid-5shot", "linreg-icl"],
                                           reps=50)  # fmt: skip
    assert [m.method for m in result.methods] == ["fomaml", "maml"]
    assert result.missing == {"anil": ["linreg-icl"], "metasgd": ["sinusoid-5shot", "linreg-icl"]}
    said = notes(result, anchors)
    assert ("Left out: anil (linreg-icl: runs at other settings: iterations=7 (ranked: 2000))."
            in said)  # fmt: skip
    assert "Left out: metasgd (sinusoid-5shot: no runs; linreg-icl: diverged)." in said
