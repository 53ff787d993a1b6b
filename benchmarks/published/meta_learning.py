"""The thesis' chapter 4 as tables: continual learning on MNIST streams (thesis table 4.5),
OSAKA online fast adaptation (thesis table 4.6), and sparse-MAML's few-shot chapter
(sparsity by depth, levels, inner steps, across domains). MAML's own Omniglot table:
:mod:`benchmarks.published.maml`."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from benchmarks.catalog.baseline_settings import MER_CODE_BASELINES, PER_SAMPLE
from benchmarks.catalog.references import THESIS_TABLE_43, THESIS_TABLE_45
from benchmarks.published.claims import PRESETS, Check, Claim, Table
from benchmarks.published.figures import History, Panel, Points, TableFigure

#: How far below the published sparse-La-MAML - La-MAML difference a run may fall and still
#: reproduce it (points of RA): the relation is held to its size, not to a tie.
_MARGIN_SLACK = 1.0


#: What the cpu and quick presets change in a baseline's settings: steps on the stream's
#: batches of 10, not one sample at a time (with avalanche, one sample per step made a MER
#: run ~40 minutes on a 2-task stream's 20x: measured 306 s for 2 tasks). Online SGD's and
#: GEM's per-sample rates are scaled by 10 for a step on the mean loss of 10 samples (the
#: sum of ten per-sample steps, to first order); avalanche's MER steps on each sample of its
#: batch itself, so its rate is kept.
_BATCHED_RATE = {"online_sgd": 10.0, "gem": 10.0, "mer": 1.0}


def _batched(benchmark: str, method: str, factor: float = 1.0) -> dict[str, str]:
    """A baseline's settings on batches of 10 (the cpu and quick presets), at ``factor``
    times the MER code's rate; {} for others."""
    if method not in PER_SAMPLE:
        return {}
    rate = MER_CODE_BASELINES[benchmark][method]["lr"] * _BATCHED_RATE[method] * factor
    return {PER_SAMPLE[method]: "0", "lr": f"{rate:g}"}


#: Online SGD at a lower rate than the MER code's, as a fraction of it: where table 4.5's
#: online rows (RA and BTI) are met here. The thesis states no rate; a probe at cpu over
#: 1/3 to 1 of the MER code's (3 seeds, 2026-11-29) found the MER rate learning each task
#: further and forgetting more, and these fractions landing on both numbers. Lines named
#: "suite's variant", beside the MER-rate lines: they say what rate the rows are consistent
#: with, not that the thesis used it.
_ONLINE_RATE_PROBE = {"mnist-rotations": Fraction(5, 6), "mnist-permutations": Fraction(1, 3)}


def _stream_quick(benchmark: str) -> dict[str, str]:
    """quick's stream for thesis-4.5's benchmarks: 5 tasks (cpu and paper: the whole)."""
    many = benchmark == "mnist-many-permutations"
    return {"tasks": "5", "train_per_task": "200" if not many else "100"}


def _thesis_45() -> Table:
    claims = []
    # Seconds per run, one thread each, two workers, measured over seeds 0-4 on 2026-11-26
    # (RESULTS, thesis table 4.5 by reproduce; quick: 5 tasks, measured earlier on seed 0,
    # GEM's and MER's not measured). Rotations and permutations (20 tasks): permutations'
    # medians (the rotations runs shared the machine with a test run). Many permutations
    # (100 tasks, 10 glances) scores only the entries its metrics read (evaluate=metrics);
    # before, 101 x 100 evaluations of 10,000 test images made its runs 11-20 minutes.
    # The baselines' costs are of the settings before the MER code's (GEM at 256 memories
    # per task, MER at 5 inner steps): the shipped runs' recorded times replace them.
    measured: dict[str, tuple[float | None, float]] = {
        "online_sgd": (2.5, 50.0), "lamaml": (5.0, 128.0), "sparse_lamaml": (5.0, 134.0),
        "gem": (None, 101.0), "mer": (None, 190.0)}  # fmt: skip
    many_cpu_s = {"online_sgd": 30.0, "lamaml": 230.0, "sparse_lamaml": 245.0,
                  "gem": 335.0, "mer": 200.0}  # fmt: skip
    for benchmark, rows in THESIS_TABLE_45.items():
        many = benchmark == "mnist-many-permutations"
        quick = _stream_quick(benchmark)
        for method, (ra, bti) in rows.items():
            quick_s, cpu_s = measured[method]
            cpu_s = many_cpu_s[method] if many else cpu_s
            batched = _batched(benchmark, method)
            # One sample per step (the baselines' paper preset) is not costed: see above.
            cost = {"cpu": cpu_s} if batched else {"cpu": cpu_s, "paper": cpu_s}
            if quick_s is not None:
                cost["quick"] = quick_s
            cite = "thesis table 4.5" + (
                "; settings: the MER authors' public code (mattriemer/MER, mer_examples.sh), "
                "per-sample steps at paper, batches of 10 at cpu and quick" if batched else "")
            for name, metric, value in (("RA", "final/ra", ra), ("BTI", "final/bti", bti)):
                claims.append(
                    Claim(f"{method} {name}, {benchmark}", benchmark, method, metric,
                          budget={"quick": {**quick, **batched}, "cpu": batched},
                          target=round(value / 100, 6), tolerance=0.02, cost_s=cost, cite=cite)
                )  # fmt: skip
            factor = _ONLINE_RATE_PROBE.get(benchmark) if method == "online_sgd" else None
            if factor is not None:
                rate = MER_CODE_BASELINES[benchmark][method]["lr"] * float(factor)
                slower = _batched(benchmark, method, float(factor))
                for name, metric, value in (("RA", "final/ra", ra), ("BTI", "final/bti", bti)):
                    claims.append(Claim(
                        f"suite's variant: {method} {name}, {benchmark}, at {factor} of the MER "
                        "code's rate", benchmark, method, metric, {"lr": f"{rate:g}"},
                        budget={"quick": {**quick, **slower}, "cpu": slower},
                        target=round(value / 100, 6), tolerance=0.02, cost_s=cost,
                        cite="thesis table 4.5; the rate ours (the thesis states none): "
                        f"{factor} of the MER code's, where a probe met the row"))  # fmt: skip
        gain = rows["sparse_lamaml"][0] - rows["lamaml"][0]
        claims.append(
            Claim(f"sparse_lamaml matches or beats lamaml, {benchmark} (paired)",
                  benchmark, "sparse_lamaml", "final/ra", budget={"quick": quick},
                  versus=f"lamaml RA, {benchmark}", check="at_least",
                  tolerance=round(_MARGIN_SLACK / 100, 6), cost_s=claims[-1].cost_s,
                  cite="thesis sec. 4.4.1: 'matching or slightly improved performances when "
                  "using our binary gradient mask across all three MNIST variants'; "
                  f"'matching' as at most {_MARGIN_SLACK:g} point below is ours")
        )  # fmt: skip
        claims.append(
            Claim(f"sparse_lamaml above lamaml by {gain:.2f} points, {benchmark} (paired)",
                  benchmark, "sparse_lamaml", "final/ra", budget={"quick": quick},
                  versus=f"lamaml RA, {benchmark}", check="at_least",
                  tolerance=round((_MARGIN_SLACK - gain) / 100, 6), cost_s=claims[-1].cost_s,
                  provenance="derived",
                  cite=f"the difference of thesis table 4.5's means ({rows['sparse_lamaml'][0]:.2f}"
                  f" - {rows['lamaml'][0]:.2f}), less {_MARGIN_SLACK:g} point; the text claims "
                  "no size")
        )  # fmt: skip
    return Table(
        "thesis-4.5",
        "Continual learning on MNIST streams: retained accuracy and BTI (thesis table 4.5)",
        "thesis table 4.5",
        tuple(claims),
        seeds="0-4",
        note="Band: 2 points of RA or BTI (ours; the table's stds are 0.07-1.99 points). "
        "sparse-La-MAML against La-MAML, paired over seeds: the text's 'matching or slightly "
        f"improved' (at most {_MARGIN_SLACK:g} point below), and the size of the table's "
        f"difference of means less {_MARGIN_SLACK:g} point (derived: the text states no "
        "size). La-MAML's and sparse-La-MAML's settings "
        "are La-MAML's public code's (run_experiments.sh: 200 / 200 / 500 memories, 5 / 5 / 10 "
        "glances; alpha_0 and gamma_m the thesis grid-searched without stating them). The "
        "thesis states no baseline setting: GEM, MER and online SGD run at the MER authors' "
        "public code's (mattriemer/MER, mer_examples.sh) at the same replay budget, GEM and "
        "MER as avalanche's strategies on our stream (avalanche's MER adds to its reservoir at "
        "each task's end, the MER code after every sample). paper steps them one sample at a "
        "time, as that code does; cpu and quick step on the stream's batches of 10 with "
        "online SGD's and GEM's per-sample rates x10 (derived). quick also shortens the "
        "stream to 5 tasks. Many permutations scores only the accuracy-matrix entries its "
        "metrics read. The lines named \"suite's variant\" are ours: online SGD at 5/6 "
        "(rotations) and 1/3 (permutations) of the MER code's rate, where a probe met the "
        "rows; they say which rate the rows are consistent with, not that the thesis used it.",
    )


#: thesis figure 4.3's stream, methods and tensors: La-MAML's three-layer network on MNIST
#: rotations, weights and biases by depth (the network's Linear modules are 0, 2 and 4).
_FIG_43_STREAM = "mnist-rotations"
_FIG_43_METHODS = {"lamaml": "left panel", "sparse_lamaml": "center panel"}
_FIG_43_LAYERS = (("W1", "0.weight"), ("W2", "2.weight"), ("W3", "4.weight"),
                  ("b1", "0.bias"), ("b2", "2.bias"), ("b3", "4.bias"))
#: Seconds of one run (thesis-4.5's measurement of these configurations).
_FIG_43_COST = {"lamaml": {"quick": 5.0, "cpu": 128.0, "paper": 128.0},
                "sparse_lamaml": {"quick": 5.0, "cpu": 134.0, "paper": 134.0}}
#: How monotone "monotonically increases with the number of tasks" is held to be: every
#: tensor's sparsity ends above where it began and does not fall after at least this share
#: of the tasks (ours; the figure shows the curves).
_FIG_43_RISE = 0.9
#: The right panel's hidden widths (both layers; ours: the thesis names none), 100 being
#: thesis-4.5's network. Costs of the others extrapolated from 100's by the network's
#: multiply-adds per sample (784w + w^2 + 10w).
_FIG_43_WIDTHS = (50, 100, 200)


def _width_cost(width: int) -> dict[str, float]:
    scale = (794 * width + width**2) / (794 * 100 + 100**2)
    return {preset: round(seconds * scale, 1)
            for preset, seconds in _FIG_43_COST["sparse_lamaml"].items()}  # fmt: skip


def _lamaml_sparsity() -> Table:
    claims = []
    # The figure's series: (panel, series) -> the lines along its x axis, in order.
    series: dict[tuple[str, str], list[str]] = {}
    for method, panel in _FIG_43_METHODS.items():
        previous = None
        for name, tensor in _FIG_43_LAYERS:
            deeper = previous is not None and previous[0][0] == name[0]
            label = (f"{method}: {name} at least {previous[0]} (paired)" if deeper
                     else f"{method}: {name} sparsity")
            # thesis-4.5's La-MAML runs (the same configuration at every preset).
            claims.append(Claim(
                label, _FIG_43_STREAM, method, f"final/sparsity/{tensor}",
                budget={"quick": _stream_quick(_FIG_43_STREAM)},
                versus=previous[1] if deeper else None,
                check="at_least" if deeper else "within",
                cite=f"thesis figure 4.3 (caption, {panel})",
                cost_s=_FIG_43_COST[method]))  # fmt: skip
            series.setdefault((f"{method} ({panel})", "weights" if name[0] == "W" else "biases"),
                              []).append(label)  # fmt: skip
            previous = (name, label)
    # The left and center panels' x axis: each tensor's sparsity over the tasks trained. Only
    # sparse-La-MAML's is a line: La-MAML's rates pass an exact relu, so a rate at zero gets
    # no gradient and stays off (in La-MAML's public code too), and its sparsity cannot fall.
    # Its panel is drawn from the runs of its W1 line (the same runs).
    over_tasks = {"lamaml": "lamaml: W1 sparsity", "sparse_lamaml": (
        f"sparse_lamaml: every tensor's sparsity rises over the tasks (falls after at most "
        f"{1 - _FIG_43_RISE:.0%} of them)")}  # fmt: skip
    claims.append(Claim(
        over_tasks["sparse_lamaml"], _FIG_43_STREAM, "sparse_lamaml",
        "final/sparsity_rise/least", budget={"quick": _stream_quick(_FIG_43_STREAM)},
        target=_FIG_43_RISE, check="at_least", provenance="derived",
        cite="thesis figure 4.3 (caption): sparsity 'monotonically increases with the number "
        "of tasks' for every weight and bias tensor (left panel), and 'a similar behavior is "
        "observed' for sparse-La-MAML (center panel); of the six tensors, the least share of "
        "tasks after which sparsity did not fall (0 unless it ended above where it began), "
        f"{_FIG_43_RISE:g} ours (1: monotone throughout)",
        cost_s=_FIG_43_COST["sparse_lamaml"]))  # fmt: skip
    # The right panel: sparse-La-MAML's overall sparsity falls, and its RA rises, with width.
    for metric, what, check in (("final/sparsity/overall", "overall sparsity", "at_most"),
                                ("final/ra", "RA", "at_least")):
        previous = None
        for width in _FIG_43_WIDTHS:
            label = f"sparse_lamaml, width {width}: {what}"
            if previous is not None:
                label += f" {'at most' if check == 'at_most' else 'at least'} width " \
                    f"{previous[0]}'s (paired)"  # fmt: skip
            claims.append(Claim(
                label, _FIG_43_STREAM, "sparse_lamaml", metric,
                {} if width == 100 else {"hidden": f"{width},{width}"},
                budget={"quick": _stream_quick(_FIG_43_STREAM)},
                versus=None if previous is None else previous[1],
                check=check if previous is not None else "within",
                cite="thesis figure 4.3 (caption, right panel): 'Overall sparsity of "
                "sparse-La-MAML decreases with increased network capacity accompanied with "
                "higher retained accuracy (RA)'", cost_s=_width_cost(width)))  # fmt: skip
            series.setdefault(("sparse_lamaml (right panel)", what), []).append(label)
            previous = (width, label)
    return Table(
        "lamaml-sparsity",
        "La-MAML and sparse-La-MAML: gradient sparsity grows with depth (W1 <= W2 <= W3, "
        "b1 <= b2 <= b3) and over the tasks; sparse-La-MAML's falls, and its RA rises, with width",
        "thesis ch. 4 (figure 4.3)",
        tuple(claims),
        seeds="0-4",
        note="Sparsity: the share of a tensor's entries whose learned rate (La-MAML) or "
        "mask (sparse-La-MAML) gates its step off, at the end of the MNIST rotations stream. "
        "Each tensor is held to at least the one before it in depth, paired by seed: the "
        "direction figure 4.3's caption states (\"monotonically increases with the number of "
        "tasks and with depth for both weight (W1, W2, W3) and bias parameters (b1, b2, "
        "b3)\"; center: \"a similar behavior\" for sparse-La-MAML), not sizes (the thesis "
        "gives no per-layer numbers in its text). The runs are thesis-4.5's La-MAML and "
        "sparse-La-MAML runs on rotations (La-MAML's public code's settings, the same at "
        "cpu and paper; quick: 5 tasks), seeds 0-4 (the figure averages 3). Right panel: "
        "sparse-La-MAML at hidden widths 50, 100 and 200 in both layers (ours: the thesis "
        "names none; 100 is thesis-4.5's run), each width held to the one below it, paired. "
        "The growth over tasks (left and center panels' x axis), for sparse-La-MAML: each of "
        "the six tensors' sparsity, before the first task and after each, must end above "
        f"where it began and fall after at most {1 - _FIG_43_RISE:.0%} of the tasks (ours; "
        "its masks can turn back on). La-MAML's has no line: its rates pass an exact relu, "
        "so a rate at zero receives no gradient and stays off (as in La-MAML's public code), "
        "and its sparsity cannot fall; its curves are drawn.",
        figure=TableFigure(
            "thesis figure 4.3 (sparsity by depth at the end of the rotations stream)",
            tuple(Panel(title, "layer", "gradient sparsity", tuple(
                Points(kind, tuple(enumerate(series[title, kind], start=1)))
                for kind in ("weights", "biases")))
                for title in (f"{m} ({p})" for m, p in _FIG_43_METHODS.items()))
            + tuple(Panel(f"{m} ({p}): over tasks", "tasks trained", "gradient sparsity", tuple(
                History(name, over_tasks[m], f"sparsity/{tensor}")
                for name, tensor in _FIG_43_LAYERS)) for m, p in _FIG_43_METHODS.items())
            + (Panel("sparse_lamaml (right panel)", "hidden width", "overall sparsity / RA", tuple(
                Points(what, tuple(zip(_FIG_43_WIDTHS, series["sparse_lamaml (right panel)",
                                                              what], strict=True)))
                for what in ("overall sparsity", "RA")), log_x=True),),
        ),  # fmt: skip
    )


#: thesis figure 4.4: La-MAML on MNIST rotations with 10 passes over each task's samples;
#: cpu keeps the first 5 of the 20 tasks, quick 3 tasks of 200 samples and 3 passes.
_FIG_44 = {"cpu": {"tasks": "5"},
           "quick": {"epochs": "3", "tasks": "3", "train_per_task": "200"}}  # fmt: skip
#: The last pass's rise at most this share of the first's: "converge within a task" (ours).
_FIG_44_SETTLE = 0.5
#: Seconds of one run, measured 2026-11-29 (cpu: two workers of one thread each).
_FIG_44_COST = {"quick": 6.0, "cpu": 140.0}


def _lamaml_multipass() -> Table:
    settle = ("lamaml, 10 passes: overall sparsity settles within each task (last pass's rise "
              f"at most {_FIG_44_SETTLE:g} of the first's)")
    claims = [Claim(settle, _FIG_43_STREAM, "lamaml", "final/sparsity_settle/overall",
                    {"epochs": "10"}, budget=_FIG_44, target=_FIG_44_SETTLE, check="at_most",
                    provenance="derived", cost_s=_FIG_44_COST,
                    cite="thesis figure 4.4 (caption: 'Structured sparsity emerges and tends to "
                    "converge within a task in multi-pass continual learning') and sec. 4.4.1 "
                    "('sparsity levels ... tend to converge within tasks and then raise again "
                    f"when tasks switch'); the measure and {_FIG_44_SETTLE:g} are ours")]
    previous = None
    for name, tensor in _FIG_43_LAYERS:  # "Sparsity increases with depth" (the caption)
        deeper = previous is not None and previous[0][0] == name[0]
        label = (f"lamaml, 10 passes: {name} at least {previous[0]} (paired)" if deeper
                 else f"lamaml, 10 passes: {name} sparsity")
        claims.append(Claim(label, _FIG_43_STREAM, "lamaml", f"final/sparsity/{tensor}",
                            {"epochs": "10"}, budget=_FIG_44, cost_s=_FIG_44_COST,
                            versus=previous[1] if deeper else None,
                            check="at_least" if deeper else "within",
                            cite="thesis figure 4.4 (caption: 'Sparsity increases with depth')"))
        previous = (name, label)
    return Table(
        "lamaml-multipass",
        "La-MAML with 10 passes per task: sparsity settles within each task, rises when the "
        "next begins, and grows with depth (thesis figure 4.4)",
        "thesis ch. 4 (figure 4.4)",
        tuple(claims),
        seeds="0-2",
        note="La-MAML at thesis-4.5's rotations settings with 10 passes over each task's "
        "samples (the thesis' 'multi-pass setting', sec. 4.4.1; 3 seeds, as the figure). "
        "Settling: the overall sparsity's rise over each task's last pass as a share of its "
        "rise over the first pass (from where the task began), summed over tasks: near 0 "
        "where it converges within tasks and rises again at each switch, about 1 where it "
        f"rises at one pace; held to at most {_FIG_44_SETTLE:g} (ours: the figure gives "
        "curves). Depth: each tensor at least the one before it, paired (the caption's "
        "direction, no size). cpu keeps the first 5 of the 20 tasks; quick 3 tasks of 200 "
        "samples and 3 passes.",
        figure=TableFigure("thesis figure 4.4 (sparsity over the passes)", (
            Panel("La-MAML, 10 passes per task", "passes over task samples",
                  "gradient sparsity", tuple(History(name, settle, f"sparsity_by_pass/{tensor}")
                                             for name, tensor in _FIG_43_LAYERS)),)),
    )


#: thesis-4.6's cpu budget: quick's stream and pre-training doubled (32 channels both).
_OSAKA_CPU = {"steps": "4000", "pretrain_iterations": "600"}


def _osaka_line(p: str, label: str, method: str, quick_s: float | None, *,
                check: Check = "at_most", settings: dict[str, str] | None = None,
                cite: str = "thesis table 4.6", basis: bool = False) -> Claim:  # fmt: skip
    """One thesis-4.6 line: ``method``'s cumulative accuracy at ``p``, held to cmaml's on
    the same streams (paired by seed), or cmaml's own (``basis``). cpu's cost is quick's
    doubled (extrapolated)."""
    cost = {} if quick_s is None else {"quick": quick_s, "cpu": 2 * quick_s}
    return Claim(label, f"osaka-omniglot-p{p}", method, "final/cumulative_accuracy",
                 settings or {}, {"cpu": _OSAKA_CPU},
                 # the benchmark defaults take ~1.5 h per run on the CPU
                 benchmark_preset={"quick": "quick", "cpu": "quick"},
                 versus=None if basis else f"cmaml, p = {p}", check=check, cost_s=cost,
                 cite="" if basis else cite)  # fmt: skip


# Seconds per quick run (p = 0.9, p = 0.98), one thread each, two workers: cmaml 963-967 s
# and 811-821 s, the others from their RESULTS runs; online fine-tuning, ANIL and the
# thesis' rule at p = 0.9 from one run each beside a test run (2026-11-26; the rule's
# extrapolated from its first 600 steps: 620 s to the stream, 0.63 s a step), at p = 0.98
# not measured (None: unknown).
_OSAKA_QUICK_S: dict[str, tuple[float | None, float | None]] = {
    "cmaml": (965.0, 815.0), "online_adam": (120.0, 95.0), "maml_frozen": (770.0, 290.0),
    "first order": (550.0, 340.0), "second order": (790.0, 540.0),
    "online_finetune": (471.0, None), "anil_frozen": (420.0, None),
    "thesis rule": (1900.0, None)}  # fmt: skip


#: Sec. 4.4.2 states that layer-dependent sparsity emerges in sparse-C-MAML, not which way:
#: the direction held is sec. 4.3.1's for the same Conv-4 (sparsity falls with depth), and
#: the 0.1 margin (10 points of the entries masked) is ours, so that "layer-dependent" is more
#: than a tie.
_OSAKA_DEPTH_CITE = (
    "ours: thesis sec. 4.4.2 ('We observe again structured (layer-dependent) gradient "
    "sparsity emerge when using this algorithm (sparse-C-MAML)') gives no direction; held in "
    "sec. 4.3.1's for the same Conv-4 ('Gradient sparsity decreases with layer depth', figure "
    "4.1), by a margin of 0.1 (ours)"
)


def _osaka_sparsity_lines(p: str, rule: Claim) -> list[Claim]:
    """Sec. 4.4.2's layer-dependent sparsity, on the runs of the thesis-rule line ``rule``
    (the same configuration: no run of its own): its first convolution's gradient sparsity
    above its last one's."""
    name = f"sparse_cmaml (thesis eq. 4.4), p = {p}"
    basis = dataclasses.replace(rule, label=f"{name}: conv4 weight sparsity",
                                metric="final/sparsity/conv4.weight", versus=None, cite="")
    above = dataclasses.replace(rule, label=f"{name}: conv1 weight sparsity above conv4's by "
                                "0.1 (paired)", metric="final/sparsity/conv1.weight",
                                versus=basis.label, check="at_least", tolerance=-0.1,
                                provenance="derived", cite=_OSAKA_DEPTH_CITE)  # fmt: skip
    return [basis, above]


def _thesis_46() -> Table:
    claims = []
    for p in ("0.9", "0.98"):
        def seconds(key: str, p: str = p) -> float | None:
            return _OSAKA_QUICK_S[key][0 if p == "0.9" else 1]

        pair = f"p = {p} (paired)"
        claims += [
            _osaka_line(p, f"cmaml, p = {p}", "cmaml", seconds("cmaml"), basis=True),
            _osaka_line(p, f"cmaml >= online_adam, {pair}", "online_adam",
                        seconds("online_adam")),
            _osaka_line(p, f"cmaml >= online_finetune, {pair}", "online_finetune",
                        seconds("online_finetune")),
            _osaka_line(p, f"cmaml >= maml_frozen, {pair}", "maml_frozen",
                        seconds("maml_frozen")),
            _osaka_line(p, f"cmaml >= anil_frozen, {pair}", "anil_frozen",
                        seconds("anil_frozen")),
            # The thesis' line: eq. 4.4 for the masks (first order), the weights at C-MAML's
            # second order: sparse_cmaml as registered.
            _osaka_line(p, f"sparse_cmaml (thesis eq. 4.4) >= cmaml, {pair}", "sparse_cmaml",
                        seconds("thesis rule"), check="at_least",
                        cite="thesis table 4.6 and eq. 4.4"),
            # The suite's own variants, not the thesis' rule: first order throughout, and
            # second order throughout with the mask rate gamma_m = 0.01 chosen by the
            # alpha0 x gamma_m grid at p = 0.9 on seed 100
            # (sweeps/osaka_sparse_cmaml_grid.yaml).
            _osaka_line(p, f"suite's variant: sparse_cmaml first order throughout >= cmaml, "
                        f"{pair}", "sparse_cmaml", seconds("first order"), check="at_least",
                        settings={"first_order": "true", "modulation_first_order": "false"}),
            _osaka_line(p, "suite's variant: sparse_cmaml second order throughout (gamma_m "
                        f"0.01) >= cmaml, {pair}", "sparse_cmaml", seconds("second order"),
                        check="at_least",
                        settings={"first_order": "false", "modulation_first_order": "false",
                                  "modulation_lr": "0.01"}),
        ]  # fmt: skip
        rule = next(c for c in claims if c.label.startswith(f"sparse_cmaml (thesis eq. 4.4) "
                                                            f">= cmaml, p = {p} "))
        claims += _osaka_sparsity_lines(p, rule)
    return Table(
        "thesis-4.6",
        "OSAKA online fast adaptation: C-MAML above its baselines, sparse-C-MAML above C-MAML",
        "thesis table 4.6 and its text",
        tuple(claims),
        seeds="0-4",
        note="The thesis' claims are orderings; each line holds one method to cmaml's "
        "cumulative accuracy on the same stream (paired by seed). The thesis' sparse-C-MAML "
        "is its eq. 4.4 rule; the lines named \"suite's variant\" are ours. quick: 2,000 "
        "steps, 32 channels, 300 pre-training iterations; cpu: 4,000 steps and 600 "
        "iterations at 32 channels (costs extrapolated from quick); paper: the benchmark "
        "defaults (10,000 steps, 64 channels).",
    )


# -- the few-shot chapter (sparse-MAML): the thesis' miniImageNet 5-way 5-shot at `paper`, a
# labelled Omniglot 5-way 5-shot substitute at `quick` and `cpu` ------------------------------
_SUBSTITUTE = "omniglot-5w5s"
_THESIS_SET = "miniimagenet-5w5s"
#: The Omniglot substitute's budgets (MAML's split with rotations, as in maml-omniglot):
#: cpu shrinks the benchmark's 1,000 iterations of 32 tasks at 64 channels to 500 of 8 at 32.
_FEW_SHOT_BUDGET = {
    "quick": {"omniglot_split": "maml", "rotations": "true", "iterations": "60",
              "meta_batch": "4", "channels": "16", "val_every": "30", "val_tasks": "20",
              "test_tasks": "50"},
    "cpu": {"omniglot_split": "maml", "rotations": "true", "iterations": "500",
            "meta_batch": "8", "channels": "32", "val_every": "250", "test_tasks": "200"},
}  # fmt: skip
#: Seconds of one run at each preset: cpu measured 2026-11-26, one thread each, two
#: workers (sparse-MAML at one inner step: 310-396 s over 18 runs; the cross-domain
#: table's six runs 19.6 min of wall time); quick from the fixture-sized test run; paper not
#: measured (no miniImageNet here).
_FEW_SHOT_COST = {"quick": 15.0, "cpu": 330.0}
#: cpu seconds of a sparse-MAML run by inner steps (the same measurement: 3 steps 487-497 s,
#: 5 steps 648-668 s).
_COST_BY_STEPS = {"1": 330.0, "3": 490.0, "5": 660.0}
_FEW_SHOT_NOTE = (
    "`paper` runs miniImageNet 5-way 5-shot at the sparse-MAML public code's settings "
    "(run_sparse_MAML.sh: 35 inner steps at 0.25, meta-batch 2, mask rate 0.0075, 40k "
    "iterations; the thesis does not state them); without miniImageNet on this machine "
    "`quick` and `cpu` run Omniglot 5-way 5-shot as a labelled substitute (MAML's split with "
    "rotations; cpu: 500 iterations of 8 tasks, 32 channels)."
)


def _few_shot_line(label: str, method: str, metric: str, *, extra: dict[str, dict[str, str]]
                   | None = None, cost_s: dict[str, float] = _FEW_SHOT_COST,
                   **fields) -> Claim:  # fmt: skip
    """A few-shot chapter line: the substitute at quick / cpu, the thesis' set at paper;
    ``extra`` adds settings per preset (``"all"``: every preset). A published number is
    miniImageNet's: it judges the line at paper only (the substitute is measured)."""
    extra = extra or {}
    if fields.get("target") is not None:
        fields.setdefault("target_presets", ("paper",))
    budget = {preset: {**_FEW_SHOT_BUDGET.get(preset, {}), **extra.get("all", {}),
                       **extra.get(preset, {})} for preset in PRESETS}  # fmt: skip
    return Claim(label, _SUBSTITUTE, method, metric, budget=budget,
                 benchmark_at={"paper": _THESIS_SET}, benchmark_preset={"paper": "sparse-maml"},
                 cost_s=cost_s, **fields)  # fmt: skip


#: The depth ordering is stated in words (caption and text), not read off the plot: "with
#: gradually less sparsity from earlier to deeper layers" for the convolutional and output
#: layer weights (figure 4.1's caption); "Gradient sparsity decreases with layer depth"
#: (sec. 4.3.1).
_DEPTH_CITE = "thesis figure 4.1 (caption) and sec. 4.3.1"


def _sparse_depth() -> Table:
    claims = []
    layers = ["conv1", "conv2", "conv3", "conv4", "head"]
    for layer, deeper in zip(layers, layers[1:] + [None], strict=True):
        claims.append(
            _few_shot_line(f"{layer} weight", "sparse_maml", f"final/sparsity/{layer}.weight",
                           versus=None if deeper is None else f"{deeper} weight",
                           check="at_least", cite=_DEPTH_CITE)
        )  # fmt: skip
    return Table(
        "sparse-maml-depth",
        "sparse-MAML: gradient sparsity falls with depth, output layer included "
        "(conv1 >= conv2 >= conv3 >= conv4 >= head)",
        "thesis ch. 4 (figure 4.1)",
        tuple(claims),
        note="Each line holds a layer's sparsity to at least the next layer's, in the same "
        "runs (the direction only: the thesis gives no per-layer numbers in its text). "
        "Figure 4.1 is miniImageNet 5-way 5-shot. " + _FEW_SHOT_NOTE,
    )


#: The shots the levels table runs (miniImageNet 5-way 5-shot at paper): its column of
#: thesis table 4.3.
_LEVELS_SHOTS = 5


def _sparse_levels() -> Table:
    claims, published = [], []
    for method, name in (("sparse_maml", "sparse-MAML"), ("sparse_relu_maml", "sparse-ReLU-MAML")):
        mean, std = THESIS_TABLE_43[method][_LEVELS_SHOTS]
        published.append(f"{name} {mean:.2f} ± {std:.2f}%")
        claims += [
            _few_shot_line(f"{method}: test accuracy", method, "final/test_accuracy"),
            _few_shot_line(f"{method}: overall gradient sparsity {mean:.2f}%", method,
                           "final/sparsity/overall", target=round(mean / 100, 6),
                           tolerance=0.02, cite=f"thesis table 4.3, {_LEVELS_SHOTS}-shot "
                           f"({mean:.2f} ± {std:.2f}, 5 seeds)"),
        ]  # fmt: skip
    return Table(
        "sparse-maml-levels",
        "sparse-MAML and sparse-ReLU-MAML gate off about three quarters of the inner-loop "
        "gradient",
        "thesis ch. 4 (table 4.3)",
        tuple(claims),
        note="Overall sparsity: the parameter-weighted share of entries whose inner step is "
        f"zero at the end of training. Targets: thesis table 4.3's {_LEVELS_SHOTS}-shot column "
        "(miniImageNet 5-way, Conv-4; mean ± std over 5 seeds): " + ", ".join(published)
        + ". Band: 2 points either side (ours). No sparsity is published for the Omniglot "
        "substitute: at quick and cpu the sparsity lines are measured (basis), judged at "
        "paper only. " + _FEW_SHOT_NOTE,
    )


#: The sweep's points: inner steps and inner rates, at quick / cpu (ours, on the Omniglot
#: substitute: 1 step at 0.4 registered) and at paper. Paper's steps are thesis figure 4.2's
#: (sec. 4.3.2: "5, 15 or 25 gradient steps"); its rates are ours (the text scans "a large
#: range" and names no values), at the public code's 35 steps.
_SWEEP = {
    "inner_steps": {"cpu": ("1", "3", "5"), "paper": ("5", "15", "25")},
    "inner_lr": {"cpu": ("0.1", "0.4", "1.0"), "paper": ("0.05", "0.1", "0.25")},
}
#: The inner rate of the steps sweep at paper (figure 4.2's caption: "The inner-loop
#: learning rate is set to 0.1 when varying the number of steps").
_STEPS_SWEEP_LR = "0.1"
_SWEEP_CITE = "thesis figure 4.2 (caption) and sec. 4.3.2"


def _sparse_inner_sweep() -> Table:
    claims = []
    for setting, points in _SWEEP.items():
        labels = [f"{setting} {rank}" for rank in ("low", "middle", "high")]
        for i, label in enumerate(labels):
            extra = {preset: {setting: points[key][i]}
                     for preset, key in (("quick", "cpu"), ("cpu", "cpu"), ("paper", "paper"))}
            if setting == "inner_steps":  # test with the steps trained with (ours)
                for preset, key in (("quick", "cpu"), ("cpu", "cpu"), ("paper", "paper")):
                    extra[preset]["eval_steps"] = points[key][i]
                extra["paper"]["inner_lr"] = _STEPS_SWEEP_LR
            for metric, name in (("final/sparsity/overall", "sparsity"),
                                 ("final/test_accuracy", "accuracy")):
                previous = None if i == 0 else f"{labels[i - 1]}: {name}"
                steps = extra["cpu"].get("inner_steps", "1")
                claims.append(
                    _few_shot_line(f"{label}: {name}", "sparse_maml", metric, extra=extra,
                                   versus=previous, check="at_least", cite=_SWEEP_CITE,
                                   cost_s={**_FEW_SHOT_COST, "cpu": _COST_BY_STEPS[steps]})
                )  # fmt: skip
    return Table(
        "sparse-maml-inner",
        "sparse-MAML: more inner steps and larger inner rates raise both sparsity and accuracy",
        "thesis ch. 4 (figure 4.2: inner steps and inner learning rates)",
        tuple(claims),
        note="Points at paper: inner steps 5 / 15 / 25 at rate 0.1 (thesis figure 4.2 and "
        "sec. 4.3.2), tested with the steps trained with (ours: the thesis states no test "
        "steps); rates 0.05 / 0.1 / 0.25 (ours: the thesis names none) at the public code's "
        "35 steps. At quick and cpu (ours): steps 1 / 3 / 5 at rate 0.4 and rates 0.1 / 0.4 "
        "/ 1.0 at one step. Each step and rate is held to at least the one below it, paired "
        "by seed: the direction the thesis states (\"Both gradient sparsity and "
        "generalization performance increase with number of inner-loop learning steps "
        "(left) and learning rate (right)\", figure 4.2's caption), not its sizes. "
        + _FEW_SHOT_NOTE,
        # x is the point's rank: the presets sweep different values (the note gives them).
        figure=TableFigure(
            "thesis figure 4.2 (inner steps and inner rates)",
            tuple(Panel(title, "setting: low / middle / high (values in the note)", title,
                        tuple(Points(setting.replace("_", " "),
                                     tuple((rank, f"{setting} {name}: {what}") for rank, name
                                           in enumerate(("low", "middle", "high"), start=1)))
                              for setting in _SWEEP))
                  for title, what in (("overall gradient sparsity", "sparsity"),
                                      ("test accuracy", "accuracy"))),
        ),  # fmt: skip
    )


def _cross_domain() -> Table:
    test_set = {"all": {"test_dataset": "mnist"}, "paper": {"test_dataset": "cub"}}
    claims = [
        _few_shot_line("maml, cross-domain meta-test", "maml", "final/test_accuracy",
                       extra=test_set),
        _few_shot_line("sparse_maml >= maml, cross-domain meta-test (paired)", "sparse_maml",
                       "final/test_accuracy", extra=test_set,
                       versus="maml, cross-domain meta-test", check="at_least",
                       cite="thesis sec. 4.1 and sec. 4.3.4 (the ordering, stated in the "
                       "text; table 4.4's numbers are not encoded)"),
    ]  # fmt: skip
    return Table(
        "sparse-maml-cross-domain",
        "sparse-MAML above MAML when meta-tested on another image set",
        "thesis ch. 4 (sec. 4.3.4, table 4.4)",
        tuple(claims),
        note="Meta-trained on one set, meta-tested on another set's classes (`test_dataset`): "
        "miniImageNet -> CUB at paper (CUB's meta-test classes, Chen et al.'s split, from any "
        "supported format); Omniglot -> MNIST at quick and cpu (the substitute). The thesis "
        "meta-tests on TieredImageNet, CUB and Cars (table 4.4; its shots are not stated in "
        "the text); the suite runs CUB only. The ordering, held to its direction only: "
        "\"both ANIL and MAML are outperformed by the resulting sparse learners in "
        "cross-adaptation problems\" (sec. 4.1). " + _FEW_SHOT_NOTE,
    )


TABLES = (_thesis_45(), _lamaml_sparsity(), _lamaml_multipass(), _thesis_46(), _sparse_depth(),
          _sparse_levels(), _sparse_inner_sweep(), _cross_domain())
