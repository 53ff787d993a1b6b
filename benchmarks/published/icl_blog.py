"""The ICLR 2024 blog post on transformers learning in context by gradient descent, as
tables: depth against context size, the GD step size, an LSTM beside the transformer."""

from __future__ import annotations

from benchmarks.published.claims import Claim, Table
from benchmarks.published.figures import History, Panel, Points, TableFigure
from benchmarks.published.in_context import (
    BLOG,
    LOSS,
    run_budget,
    run_cost,
)

#: The blog's task: x ~ U(-1, 1) and w ~ N(0, alpha^2 I) (its setup section); it states
#: neither D nor alpha, so D = 5 is ours; one query (5 here: the same expected loss, less
#: noise per step).
_BLOG_TASK = {"dim": "5", "queries": "5"}
_CONTEXTS = (2, 5, 10, 20, 50)
#: The linear transformers' losses at C = 10 read off the blog's Fig. 8 (its text gives no
#: numbers), by layers.
_BLOG_C10 = {1: 0.2726, 2: 0.040, 3: 0.0026, 4: 0.0001}


_FIG_7 = ("blog post, Fig. 7 (caption): 'The test loss decreases as the context size "
          "increases, and as the number of layers increases'")
_LINEAR_LOWER = ("blog post, sec. 'Linear self-attention is sufficient', key takeaways: 'The "
                 "test loss for the linear transformer actually reaches lower values than for "
                 "the softmax transformer'")


#: The trained transformers' budget (GD's is its own).
_DEPTH_BUDGET = run_budget(1000, 5000, 5000)


def _depth_line(kind: str, layers: int, c: int, label: str, metric: str = LOSS,
                **target) -> Claim:  # fmt: skip
    """A trained ``kind`` ("linear" or "softmax") transformer of ``layers`` layers at context
    size ``c``: one run, read by every line of that configuration (its ``metric``)."""
    settings = {**_BLOG_TASK, "shots": str(c)}
    if kind == "softmax":
        settings.update(layers=str(layers), softmax="true")
        cost = run_cost(5.0 * layers, 22.0 * layers)
    else:  # one linear layer: the method's default depth, not set
        settings.update({} if layers == 1 else {"layers": str(layers)})
        cost = run_cost(4.0 * layers, 18.0 * layers)
    return Claim(label, "linreg-icl", "lsa", metric, settings, _DEPTH_BUDGET, cost_s=cost,
                 **target)  # fmt: skip


def _depth_context_relations() -> list[Claim]:
    """The blog's relations on its softmax lines, on the runs the table's lines make: the
    softmax loss falls with C and with depth (Fig. 7), and the linear transformer's is lower
    than the softmax one's of as many layers (the key takeaways)."""
    claims = []
    for layers in (1, 2):
        for fewer, c in zip(_CONTEXTS, _CONTEXTS[1:], strict=False):
            claims.append(_depth_line("softmax", layers, c, f"softmax, {layers} layer(s): "
                                      f"C = {c} at most C = {fewer} (paired)",
                                      versus=f"softmax, {layers} layer(s), C = {fewer}",
                                      check="at_most", cite=_FIG_7))
    for c in _CONTEXTS:
        claims.append(_depth_line("softmax", 2, c, f"softmax, C = {c}: 2 layers at most 1 "
                                  "layer (paired)", versus=f"softmax, 1 layer(s), C = {c}",
                                  check="at_most", cite=_FIG_7))
        for layers in (1, 2):
            claims.append(_depth_line("linear", layers, c, f"linear at most softmax, {layers} "
                                      f"layer(s), C = {c} (paired)",
                                      versus=f"softmax, {layers} layer(s), C = {c}",
                                      check="at_most", cite=_LINEAR_LOWER))
    return claims


#: Fig. 10's caption: the trained linear transformer's predictions and input-gradients
#: "converge to" the GD transformer's.
_FIG_10 = ("blog post, Fig. 10 (caption: 'The predictions of the linear transformer converge "
           "to the predictions of the GD-transformer and the gradients of the linear "
           "transformer converge to the gradients of the GD-transformer')")


def _alignment_by_context() -> list[Claim]:
    """Fig. 10's measures at the end of training, on the 1-layer linear runs by C: the
    prediction difference to the GD step (mean |y_LSA - y_GD|; at most 5% of the targets'
    RMS, sqrt(D / 3) = 1.29 at U(-1, 1), D = 5: ours), the input-gradients' difference (mean
    ||dy/dx_q, LSA - GD||; at most 5% of the gradients' RMS norm: GD's input-gradient
    estimates the teacher w ~ N(0, I), whose RMS norm is sqrt(D) = 2.24, so 0.11: ours) and
    their cosine (at least 0.99: ours)."""
    return [line for c in _CONTEXTS for line in (
        _depth_line("linear", 1, c, f"linear, 1 layer, C = {c}: prediction difference to GD "
                    "at most 0.065", "final/align/pred_diff", target=0.065, check="at_most",
                    provenance="derived", cite=f"{_FIG_10}; 0.065, 5% of the targets' RMS: "
                    "ours"),
        _depth_line("linear", 1, c, f"linear, 1 layer, C = {c}: input-gradient difference to "
                    "GD at most 0.11", "final/align/sens_diff", target=0.11, check="at_most",
                    provenance="derived", cite=f"{_FIG_10}; 0.11, 5% of the gradients' RMS "
                    "norm sqrt(D): ours"),
        _depth_line("linear", 1, c, f"linear, 1 layer, C = {c}: input-gradient cosine with GD "
                    "at least 0.99", "final/align/sens_cosine", target=0.99, check="at_least",
                    provenance="derived", cite=f"{_FIG_10}; 0.99: ours"),
    )]


def _blog_depth() -> Table:
    claims = []
    for c in _CONTEXTS:
        gd = f"one GD step, C = {c}"
        task = {**_BLOG_TASK, "shots": str(c)}
        claims.append(Claim(gd, "linreg-icl", "gd", LOSS, task, run_budget(200, 500, 500),
                            target=0.2725 if c == 10 else None, tolerance=0.02, relative=True,
                            provenance="figure",
                            cite="blog post, Fig. 9, C = 10 (the GD transformer's loss, read off "
                            "a plot; not in its text)",
                            cost_s=run_cost(1.5, 2.0)))  # fmt: skip
        claims.append(_depth_line("linear", 1, c, f"linear, 1 layer(s), C = {c} = GD (paired)",
                                  versus=gd, tolerance=0.02, relative=True,
                                  cite="blog post, Fig. 9 and its text: a trained 1-layer "
                                  "linear transformer converges to the GD step's loss"))
        claims += [_depth_line("linear", layers, c, f"linear, {layers} layer(s), C = {c}")
                   for layers in (2, 3)]
        claims += [_depth_line("softmax", layers, c, f"softmax, {layers} layer(s), C = {c}")
                   for layers in (1, 2)]
    claims += _depth_context_relations()
    claims += _alignment_by_context()
    claims += [_depth_line("linear", layers, 10, f"linear, {layers} layer(s), C = 10: the "
                           "blog's number", target=value, tolerance=0.25, relative=True,
                           provenance="figure", cite="blog post, Fig. 8, C = 10")
               for layers, value in _BLOG_C10.items()]

    def points(kind: str, layers: int) -> Points:
        def label(c: int) -> str:
            if kind == "linear" and layers == 1:
                return f"linear, 1 layer(s), C = {c} = GD (paired)"
            return f"{kind}, {layers} layer(s), C = {c}"

        return Points(f"{kind}, {layers} layer{'s' if layers > 1 else ''}",
                      tuple((c, label(c)) for c in _CONTEXTS))  # fmt: skip

    gd_points = Points("GD (1 step)", tuple((c, f"one GD step, C = {c}") for c in _CONTEXTS))
    return Table(
        "blog-depth-context",
        "Linear and softmax transformers of 1-3 layers against one GD step, by context size",
        f"{BLOG}, Figs. 7 (softmax) and 8 (linear) (U(-1, 1), C = 2 ... 100; D = 5 ours)",
        tuple(claims),
        note="cpu shrinks the blog's grid to C = 2, 5, 10, 20, 50 and 1-3 layers (4 at C = 10 "
        "for its number), 5,000 steps of 256 tasks. The blog's numbers at C = 10 are read off "
        "its plots (its text gives none); 1 linear layer = GD is in its text (Fig. 9). Band "
        "25% on the multi-layer numbers (ours: they are small and fall steeply with training). "
        "The softmax lines are held to the blog's relations, paired by seed on the same runs: "
        "falling with C (each C against the one below it) and with depth (Fig. 7), and above "
        "the linear transformer of as many layers (its key takeaways); directions only.",
        figure=TableFigure(
            "the blog post's Figs. 8 (linear) and 7 (softmax): loss by context size and depth; "
            "the GD step (its Fig. 9) drawn on both",
            (Panel("Linear attention", "context size C", "test loss",
                   (points("linear", 1), points("linear", 2), points("linear", 3), gd_points),
                   log_x=True, log_y=True),
             Panel("Softmax attention", "context size C", "test loss",
                   (points("softmax", 1), points("softmax", 2), gd_points),
                   log_x=True, log_y=True)),
        ),  # fmt: skip
    )


#: The fixed rates of the sweep (ours: the blog's slider states none), around the fitted
#: rate, about 2.03 here.
_RATES = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0)
#: The fitted rate at this setting (the note's closed form), where the figure marks it.
_FITTED_RATE = 2.03
_SWEEP = "the blog's GD learning-rate sweep (sec. 'The effect of the GD learning rate', Fig. 12)"


def _rate_line(rate: float) -> str:
    return f"rate {rate:g}: prediction difference at least the fitted rate's (paired)"


def _blog_gd_rate() -> Table:
    # One trained LSA, compared at the end of training with one GD step at the fitted rate
    # (final/align/pred_diff) and at each fixed rate (pred_diff_rate{r}), on the same 10,000
    # held-out tasks: every line reads the same run, paired task by task. The sensitivity
    # cosine is the same at every rate (GD's sensitivity is proportional to it): no lines.
    task = {**_BLOG_TASK, "shots": "10", "align_rates": ",".join(f"{r:g}" for r in _RATES)}
    budget = run_budget(1000, 5000, 5000)
    # Measured at quick on the 2-core machine while both cores ran other measured runs (an
    # upper bound): 76 s (37 s of training, 39 s of analyses; the other seeds 126 and 140 s);
    # cpu and paper extrapolated from the steps, 5 x 37 + 39 s. Idle, the like 1-layer LSA
    # of icml23-one-step (U(-1, 1), D = 10, 5,000 steps) shipped at 53 s.
    cost = run_cost(76.0, 222.0, 222.0)
    fitted = "trained LSA: prediction difference to GD at the fitted rate"
    claims = [Claim(fitted, "linreg-icl", "lsa", "final/align/pred_diff", task, budget,
                    cost_s=cost)]  # fmt: skip
    for rate in _RATES:
        claims.append(
            Claim(_rate_line(rate), "linreg-icl", "lsa", f"final/align/pred_diff_rate{rate:g}",
                  task, budget, versus=fitted, check="at_least", tolerance=0.05,
                  relative=True, provenance="figure",
                  cite=f"{_SWEEP}: 'The agreement between the two is maximized for a specific "
                  "GD learning rate, which must be found by line search'; its key takeaways: "
                  "'Only a specific GD learning rate succeeds in optimizing all three "
                  "similarity metrics'; the analytic rate 'agrees well with the line search' "
                  "(sec. 'Analytical derivation of the best GD learning rate'). The L2 error "
                  "by rate is shown in the figure only; band ours",
                  cost_s=cost)
        )  # fmt: skip
    # The same for the input-gradients' L2 difference (Fig. 12's middle panel): GD's
    # gradient at rate r is r times its gradient at rate 1, so it too is nearest the
    # model's at one rate.
    grads = "trained LSA: gradient difference to GD at the fitted rate"
    claims.append(Claim(grads, "linreg-icl", "lsa", "final/align/sens_diff", task, budget,
                        cost_s=cost))  # fmt: skip
    for rate in _RATES:
        claims.append(
            Claim(f"rate {rate:g}: gradient difference at least the fitted rate's (paired)",
                  "linreg-icl", "lsa", f"final/align/sens_diff_rate{rate:g}", task, budget,
                  versus=grads, check="at_least", tolerance=0.05, relative=True,
                  provenance="figure",
                  cite=f"{_SWEEP}, its L2 error of the gradients w.r.t. the inputs: 'Only a "
                  "specific GD learning rate succeeds in optimizing all three similarity "
                  "metrics' (key takeaways); shown in the figure only; band ours",
                  cost_s=cost)
        )  # fmt: skip
    # The blog's analytic rate against its line search (sec. 'Analytical derivation of the
    # best GD learning rate'): one GD step's runs with the comparison switched on.
    searched = "one GD step: its rate by a line search on 10,000 tasks"
    rates = {**_BLOG_TASK, "shots": "10", "line_search": "true"}
    gd_budget, gd_cost = run_budget(200, 500, 500), run_cost(3.0, 4.0, 4.0)
    claims += [
        Claim(searched, "linreg-icl", "gd", "final/gd/eta_line_search", rates, gd_budget,
              cost_s=gd_cost),
        Claim("one GD step: its rate in closed form = the line search's on the same tasks",
              "linreg-icl", "gd", "final/gd/eta_closed_form", rates, gd_budget,
              versus=searched, tolerance=0.005, relative=True,
              cite="blog post, sec. 'Some comments on the analytical solution': 'This "
              "derivation of the optimal GD learning rate eta* agrees well with the line "
              "search procedure (up to the numerical precision of the line search procedure "
              "itself)'; the 0.5% band ours", cost_s=gd_cost),
    ]  # fmt: skip
    return Table(
        "blog-gd-rate",
        "A trained linear transformer agrees best with one GD step at the fitted rate: its "
        "prediction and gradient differences to GD by learning rate",
        f"{BLOG} ({_SWEEP}; D = 5, C = 10, U(-1, 1))",
        tuple(claims),
        note="One 1-layer linear transformer trained as blog-depth-context's (5,000 steps of "
        "256 tasks at cpu and paper, 1,000 at quick), then compared on 10,000 held-out tasks "
        "with one GD step from zero weights at the rate fitted in closed form on other tasks "
        "(about 2.03: N / (s2 (N + d + k - 2))) and at each fixed rate 0.5-4 (ours; the "
        "blog's slider states none): mean |y_LSA - y_GD| (the blog's L2 error of the "
        "predictions, squared there), paired task by task. Each line holds if the difference "
        "at its rate is not more than 5% below the fitted rate's. The band is ours: the "
        "fitted rate (one for all seeds: the analysis draws the test seed's tasks) is known "
        "to about 0.5% (fits on other draws of 10,000 tasks: 2.019-2.038), and a rate that "
        "far off moves the difference at the minimum by a few percent; a line could not "
        "fail only with a band of |r - 2.03| E|y_GD(1)| / (the fitted rate's difference), "
        "about 40% for rate 2 and over 500% for the others. Rate 2 is 1.5% from the fitted "
        "rate and asks whether the model's own rate lies nearer 2.03 than 2 (three models "
        "trained 5,000 steps in a check: 2.010, 2.041, 2.014): expect it inconclusive. The "
        "cosine of the sensitivities is the same at every rate (GD's is proportional to "
        "it), so the blog's 'converging to 1 for all GD learning rates' is one claim, "
        "held by blog-depth-context's line 'linear, 1 layer, C = 10: input-gradient cosine "
        "with GD at least 0.99' on the same cells. The input-gradients' difference (mean "
        "||s_LSA - s_GD||, the blog's L2 error of the gradients, squared there) is held the "
        "same way, rate by rate, with the same 5% band. The blog's analytic rate is held to "
        "its line search on the same 10,000 tasks (GD's own runs, line_search=true): the "
        "closed form against scipy's bounded Brent search on [0, 100], blind to it. The loss "
        "is quadratic in the rate, so a right derivation agrees to the search's tolerance "
        "(the blog: 'this is expected'); the line checks the derivation, not a learner. "
        "The blog's timing (10 s for the line search against 10 ms, on a GPU) is logged "
        "(final/gd/line_search_time_s, closed_form_time_s) but held to nothing: it counts "
        "the search's loss evaluations, which its text does not give.",
        figure=TableFigure(
            f"{_SWEEP}: the L2 error of the predictions by GD learning rate",
            (Panel("Trained LSA against one GD step, by rate", "GD learning rate",
                   "mean |y_LSA - y_GD|", (
                Points("GD at a fixed rate", tuple((r, _rate_line(r)) for r in _RATES)),
                Points("GD at the fitted rate", ((_FITTED_RATE, fitted),)),
            ), log_y=True),),
        ),  # fmt: skip
    )


_FIG_15 = "blog post, Fig. 15 and its text (uni-directional LSTMs)"
#: Fig. 16's measures of the bi-LSTM against one GD step, and the direction "aligns better"
#: takes for each: the two differences fall, the cosine rises.
_BI_ALIGNMENT = (("final/align/pred_diff", "prediction difference to GD", "at_most"),
                 ("final/align/sens_diff", "gradient difference to GD", "at_most"),
                 ("final/align/sens_cosine", "sensitivity cosine with GD", "at_least"))
_BETTER = {"at_most": "at most", "at_least": "at least"}


#: The 1-layer LSTM pair trained again 4x the cpu budget's 3,000 steps.
LONGER_STEPS = 12000


def _blog_lstm() -> Table:
    # The blog's setup "as before" (its sec. on LSTMs): the constructed tokens (x_i, y_i) and
    # (x_q, 0) as the sequence, U(-1, 1); D = C = 10 is ours (the blog states no D, and its
    # Fig. 14 no C), the benchmark's own. The rate is ours too (the blog states none): at
    # 1e-3 the LSTMs are far from trained after 3,000 steps (1.16 / 1.48).
    task = {"queries": "1"}  # D = C = 10, U(-1, 1): the benchmark's own
    lstm = {**task, "input_tokens": "pairs", "lr": "0.003"}
    gd = "one GD step (D = C = 10)"
    budget = run_budget(500, 3000, 10000)
    text = "blog post, sec. 'Is this just for transformers? What about LSTMs?'"
    claims = [Claim(gd, "linreg-icl", "gd", LOSS, task, run_budget(200, 500, 500), target=0.819,
                    tolerance=0.02, relative=True, provenance="figure",
                    cite="blog post, Fig. 14 (LSTM comparison)",
                    cost_s=run_cost(1.5, 2.0))]  # fmt: skip
    def uni(layers: int, label: str, metric: str = LOSS, **target) -> Claim:
        return Claim(label, "linreg-icl", "lstm", metric, {**lstm, "layers": str(layers)},
                     budget, cost_s=run_cost(5.0 * layers, 40.0 * layers), **target)

    def bi(layers: int, label: str, metric: str = LOSS, **target) -> Claim:
        cost = run_cost(40.0, 256.0) if layers == 4 else run_cost(10.0 * layers, 64.0 * layers)
        return Claim(label, "linreg-icl", "bilstm", metric, {**lstm, "layers": str(layers)},
                     budget, cost_s=cost, **target)

    for layers in (1, 2):
        claims.append(uni(layers, f"LSTM, {layers} layer(s): above GD (paired)", versus=gd,
                          check="at_least", cite=f"{text}: the uni-directional LSTM's test "
                          "loss 'is always higher than' the GD transformer's"))
    for layers in (1, 2):
        claims.append(bi(layers,
                         f"bi-LSTM, {layers} layer(s): below the LSTM of as many layers (paired)",
                         versus=f"LSTM, {layers} layer(s): above GD (paired)", check="at_most",
                         cite=f"{text}: bi-directional LSTMs 'learn linear functions "
                         "in-context better than uni-directional LSTMs'"))
    # The same two relations at one layer trained 4x longer (at cpu and paper): whether
    # the cpu budget decides them. The blog states no training length.
    longer = run_budget(2000, LONGER_STEPS, LONGER_STEPS)
    long_lstm = f"LSTM, 1 layer, {LONGER_STEPS:,} steps: above GD (paired)"
    claims += [
        Claim(long_lstm, "linreg-icl", "lstm", LOSS, {**lstm, "layers": "1"}, longer,
              versus=gd, check="at_least", cost_s=run_cost(20.0, 160.0),
              cite=f"{text}: the uni-directional LSTM's test loss 'is always higher than' the "
              "GD transformer's; 12,000 steps ours"),
        Claim(f"bi-LSTM, 1 layer, {LONGER_STEPS:,} steps: below the LSTM (paired)", "linreg-icl",
              "bilstm", LOSS, {**lstm, "layers": "1"}, longer, versus=long_lstm,
              check="at_most", cost_s=run_cost(40.0, 256.0),
              cite=f"{text}: bi-directional LSTMs 'learn linear functions in-context better "
              "than uni-directional LSTMs'; 12,000 steps ours"),
    ]  # fmt: skip
    claims.append(bi(4, "bi-LSTM, 4 layers: near GD (paired)", versus=gd, check="at_most",
                     tolerance=0.05, relative=True, provenance="figure",
                     cite="blog post, Fig. 14: the bi-LSTM's loss 'approaches that of the "
                     "GD-equivalent transformer as we increase the number of layers' (band "
                     "ours; the blog calls it 'not a conclusive result')"))
    # Alignment with one GD step, at the end of training (the blog's figures follow it over
    # training): Fig. 15 (uni-directional) and Fig. 16 (bi-directional), on the same runs.
    for layers in (1, 2):
        claims += [
            uni(layers, f"LSTM, {layers} layer(s): sensitivity cosine with GD well below 1",
                "final/align/sens_cosine", target=0.99, check="at_most",
                provenance="derived", cite=f"{_FIG_15}: the cosine 'remains well below 1' "
                "(at most 0.99: ours)"),
            uni(layers, f"LSTM, {layers} layer(s): prediction difference to GD not near 0",
                "final/align/pred_diff", target=0.1, check="at_least", provenance="derived",
                cite=f"{_FIG_15}: the L2 errors 'do not converge to 0' (at least 0.1: ours, "
                "twice what a trained 1-layer LSA reaches at U(-1, 1) in icml23-one-step)"),
            uni(layers, f"LSTM, {layers} layer(s): gradient difference to GD not near 0",
                "final/align/sens_diff", target=0.2, check="at_least", provenance="derived",
                cite=f"{_FIG_15}: the L2 error of the gradients w.r.t. the inputs does 'not "
                "converge to 0' (at least 0.2: ours, twice what a trained 1-layer LSA reaches "
                "at U(-1, 1) in icml23-one-step, 0.09-0.11)"),
        ]  # fmt: skip
    for metric, what, check in _BI_ALIGNMENT:
        previous = f"bi-LSTM, 1 layer(s): {what}"
        claims.append(bi(1, previous, metric))
        for layers, fewer in ((2, 1), (4, 2)):
            label = (f"bi-LSTM, {layers} layers: {what} {_BETTER[check]} the {fewer}-layer "
                     "bi-LSTM's (paired)")
            claims.append(bi(layers, label, metric, versus=previous, check=check,
                             cite="blog post, Fig. 16 (caption): bi-directional LSTMs 'align "
                             "better with the GD-equivalent transformer as we increase the "
                             "number of layers'"))
            previous = label
    return Table(
        "blog-lstm",
        "LSTMs on in-context regression: uni-directional ones stay above GD, bi-directional "
        "ones do better and approach it with depth",
        f"{BLOG} (D = C = 10, U(-1, 1))",
        tuple(claims),
        note="The blog's setup: the constructed tokens (x_i, y_i), ..., (x_q, 0) as the "
        "sequence (`input_tokens=pairs`; the blog: 'the same experimental setup as before'). "
        "Ours: hidden width 64, Adam at 0.003, gradient clipping 1.0, and the bi-LSTM's "
        "readout (forward state at the query, backward state at the first token); the blog "
        "states none of them, nor its training length. cpu: 3,000 steps of 256 one-query "
        "tasks, 1-2 uni- and 1, 2, 4 bi-directional layers (the blog's slider: 1-5); the "
        "1-layer pair again at 12,000 steps, whether the budget decides its relations. The "
        "blog's numbers are read off its plot only (GD 0.819); its text states the relations "
        "held here. Alignment (Figs. 15-16) at the end of training, against one GD step at "
        "the fitted rate on 10,000 held-out tasks: the suite's mean |y - y_GD| and mean "
        "||dy/dx_q - dy_GD/dx_q|| where the blog plots their squares, and the cosine of the "
        "two input gradients. The blog's 'well below 1' and 'not converge to 0' are held to "
        "thresholds of ours (0.99; 0.1, twice a trained 1-layer LSA's difference at this "
        "range).",
        figure=TableFigure(
            "the blog post's LSTM comparison",
            (Panel("Test loss by layers", "layers", "test loss", (
                Points("LSTM", ((1, "LSTM, 1 layer(s): above GD (paired)"),
                                (2, "LSTM, 2 layer(s): above GD (paired)"))),
                Points("bi-LSTM", (
                    (1, "bi-LSTM, 1 layer(s): below the LSTM of as many layers (paired)"),
                    (2, "bi-LSTM, 2 layer(s): below the LSTM of as many layers (paired)"),
                    (4, "bi-LSTM, 4 layers: near GD (paired)"))),
                Points("GD (1 step)", tuple((k, gd) for k in (1, 2, 4))),
            )),) + tuple(
                Panel(f"{title} by layers (Figs. 15-16)", "layers", title, (
                    Points("LSTM", tuple((k, f"LSTM, {k} layer(s): above GD (paired)")
                                         for k in (1, 2)), metric),
                    Points("bi-LSTM", (
                        (1, "bi-LSTM, 1 layer(s): below the LSTM of as many layers (paired)"),
                        (2, "bi-LSTM, 2 layer(s): below the LSTM of as many layers (paired)"),
                        (4, "bi-LSTM, 4 layers: near GD (paired)")), metric)))
                for metric, title, _ in _BI_ALIGNMENT),
        ),  # fmt: skip
    )


_FIG_13 = "blog post, sec. 'If one layer is a GD step, what about multiple layers?', Fig. 13"


def _blog_repeat() -> Table:
    # One trained linear layer at C = 10 (blog-depth-context's training), repeated with
    # dampening at the analysis (methods.analyses.in_context.lsa_weight_analyses), beside as
    # many GD steps at the dampened fitted rate, on the same tasks: every line reads its runs.
    settings = {**_BLOG_TASK, "shots": "10", "repeat_dampenings": "1,0.75,0.7,0.5"}
    cost = run_cost(4.0, 18.0)

    def line(label: str, metric: str, **target) -> Claim:
        return Claim(label, "linreg-icl", "lsa", metric, settings, _DEPTH_BUDGET, cost_s=cost,
                     **target)  # fmt: skip

    diverges = dict(target=50.0, check="at_most", cite=f"{_FIG_13}, key takeaways: 'The test "
                    "loss for both the linear transformer and the transformer implementing a "
                    "gradient descent step diverges as we increase the number of layers'; "
                    "'diverges' read as worse than predicting zero within 50 repetitions "
                    "(ours)")  # fmt: skip
    gd = "50 dampened GD steps (damp 0.7)"
    return Table(
        "blog-repeat",
        "A trained 1-layer linear transformer applied recursively: it diverges undampened, as "
        "GD does, and at the blog's dampening of 0.7 matches as many dampened GD steps",
        f"{BLOG} ({_FIG_13}; D = 5, C = 10, U(-1, 1))",
        (
            line("trained layer repeated undampened: worse than predicting zero within 50",
                 "final/repeat/d1.0_diverge_k_model", **diverges),
            line("GD repeated undampened (fitted rate): worse than predicting zero within 50",
                 "final/repeat/d1.0_diverge_k_gd", **diverges),
            line("trained layer repeated at damp 0.75: worse than predicting zero within 50",
                 "final/repeat/d0.75_diverge_k_model", target=50.0, check="at_most",
                 cite=f"{_FIG_13}: 'the authors suggest that a dampening factor of "
                 "lambda=0.75 is generally sufficient ... in our investigations we do not find "
                 "this to be the case'; not sufficient read as diverging (ours)"),
            line(gd, "final/repeat/d0.7_k50_gd"),
            line("trained layer repeated 50 times (damp 0.7) = dampened GD",
                 "final/repeat/d0.7_k50_model", versus=gd, tolerance=0.1, relative=True,
                 cite=f"{_FIG_13}: 'we need at least lambda=0.70 to obtain the same behavior'; "
                 "key takeaways: 'The test loss of the linear transformer with multiple layers "
                 "converges to the test loss of the transformer implementing a gradient "
                 "descent step for a specific value of the dampening factor'; 50 repetitions "
                 "and the 10% band ours"),
        ),
        note="One trained linear layer as blog-depth-context's at C = 10 (5,000 steps of 256 "
        "tasks at cpu and paper), then applied K = 1 ... 50 times to the same tokens with "
        "each update scaled by lambda (the blog's E <- E + lambda W^P V (K^T Q)), beside K "
        "GD steps at lambda times the rate fitted in closed form, on 2,000 held-out tasks. "
        "A curve diverges at the first K where its loss passes predicting zero (or is not "
        "finite). The blog's text names 0.75 (the ICML paper's) as not sufficient and 0.70 "
        "as needed; it shows the rest on a slider (Fig. 13), so 0.70 is the one dampening "
        "held to GD here, at K = 50. Its wording 'at least lambda=0.70' reads as at most "
        "0.70 of the update (more dampening), the direction in which the repeated layer "
        "stops diverging; only 0.70 itself is held. The runs repeat at 1, 0.75, 0.7 and "
        "0.5 (final/repeat/d*), so 0.5 is logged too, held to nothing. Run at cpu "
        "(2026-11-29): undampened both diverge (the layer within 5-10 repetitions, GD at "
        "15), as the blog says; at 0.7 the layer diverges on two seeds of three (at "
        "repetitions 30 and 50) and ends 12x above dampened GD on the third (0.0159 against "
        "0.00125): not reproduced. Root cause, a run showing the relation does not hold for "
        "these trained layers: one trained step is close to GD's but not equal to it (on the "
        "same 10,000 tasks 0.2725-0.2730 against one GD step's 0.2723), and repeated 50 "
        "times the difference compounds, as icml23-ablations finds at 0.75 in the ICML "
        "setting. At 0.5 every seed stays finite, 4-6x above "
        "dampened GD (0.011-0.017 against 0.0029).",
        figure=TableFigure(
            f"{_FIG_13}: the trained layer repeated with dampening, against dampened GD",
            (Panel("Repeated K times", "repetitions K", "test loss", (
                History("repeated layer, damp 0.7", gd, "analysis/repeat_d0.7_model"),
                History("dampened GD, 0.7", gd, "analysis/repeat_d0.7_gd"),
                History("repeated layer, damp 0.5", gd, "analysis/repeat_d0.5_model"),
                History("dampened GD, 0.5", gd, "analysis/repeat_d0.5_gd"),
            ), log_y=True),),
        ),  # fmt: skip
    )

TABLES = (_blog_depth(), _blog_gd_rate(), _blog_repeat(), _blog_lstm())  # fmt: skip
