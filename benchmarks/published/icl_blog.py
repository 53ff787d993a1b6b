"""The ICLR 2024 blog post on transformers learning in context by gradient descent, as
tables: depth against context size, the GD step size, an LSTM beside the transformer."""

from __future__ import annotations

from benchmarks.published.claims import Claim, Table
from benchmarks.published.figures import Panel, Points, TableFigure
from benchmarks.published.in_context import (
    BLOG,
    LOSS,
    run_budget,
    run_cost,
)

#: The blog's task: D = 5, x ~ U(-1, 1), one query (5 here: the same expected loss, less
#: noise per step).
_BLOG_TASK = {"dim": "5", "queries": "5"}
_CONTEXTS = (2, 5, 10, 20, 50)
#: The blog's numbers at C = 10 (its figure's table): LSA by layers, and GD.
_BLOG_C10 = {1: 0.2726, 2: 0.040, 3: 0.0026, 4: 0.0001}


def _blog_depth() -> Table:
    budget = run_budget(1000, 5000, 5000)
    claims = []
    for c in _CONTEXTS:
        gd = f"one GD step, C = {c}"
        task = {**_BLOG_TASK, "shots": str(c)}
        claims.append(Claim(gd, "linreg-icl", "gd", LOSS, task, run_budget(200, 500, 500),
                            target=0.2725 if c == 10 else None, tolerance=0.02, relative=True,
                            provenance="figure",
                            cite="blog post, C = 10 (read off a plot; not in its text)",
                            cost_s=run_cost(1.5, 2.0)))  # fmt: skip
        for layers in (1, 2, 3):
            label = f"linear, {layers} layer(s), C = {c}"
            if layers == 1:
                claims.append(Claim(f"{label} = GD (paired)", "linreg-icl", "lsa", LOSS, task,
                                    budget, versus=gd, tolerance=0.02, relative=True,
                                    cite="blog post (1 layer = 1 GD step)",
                                    cost_s=run_cost(4.0, 18.0)))  # fmt: skip
            else:
                claims.append(Claim(label, "linreg-icl", "lsa", LOSS,
                                    {**task, "layers": str(layers)}, budget,
                                    cost_s=run_cost(4.0 * layers, 18.0 * layers)))  # fmt: skip
        for layers in (1, 2):
            claims.append(Claim(f"softmax, {layers} layer(s), C = {c}", "linreg-icl", "lsa",
                                LOSS, {**task, "layers": str(layers), "softmax": "true"},
                                budget, cost_s=run_cost(5.0 * layers, 22.0 * layers)))  # fmt: skip
    c10 = {**_BLOG_TASK, "shots": "10"}
    for layers, value in _BLOG_C10.items():
        settings = c10 if layers == 1 else {**c10, "layers": str(layers)}
        claims.append(Claim(f"linear, {layers} layer(s), C = 10: the blog's number", "linreg-icl",
                            "lsa", LOSS, settings, budget, target=value, tolerance=0.25,
                            relative=True, provenance="figure", cite="blog post, Fig. 8, C = 10",
                            cost_s=run_cost(4.0 * layers, 18.0 * layers)))  # fmt: skip

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
        f"{BLOG} (D = 5, U(-1, 1), C = 2 ... 100)",
        tuple(claims),
        note="cpu shrinks the blog's grid to C = 2, 5, 10, 20, 50 and 1-3 layers (4 at C = 10 "
        "for its number), 5,000 steps of 256 tasks. The blog's numbers at C = 10 are read off "
        "its plots (its text gives none); 1 linear layer = GD is in its text (Fig. 9). Band "
        "25% on the multi-layer numbers (ours: they are small and fall steeply with training).",
        figure=TableFigure(
            "the blog post's figure: loss by context size, by depth, linear and softmax",
            (Panel("Linear attention", "context size C", "test loss",
                   (points("linear", 1), points("linear", 2), points("linear", 3), gd_points),
                   log_x=True, log_y=True),
             Panel("Softmax attention", "context size C", "test loss",
                   (points("softmax", 1), points("softmax", 2), gd_points),
                   log_x=True, log_y=True)),
        ),  # fmt: skip
    )


_RATES = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0)


def _blog_gd_rate() -> Table:
    task = {**_BLOG_TASK, "shots": "10"}
    fitted = "one GD step at the fitted rate"
    claims = [Claim(fitted, "linreg-icl", "gd", LOSS, task, run_budget(200, 500, 500),
                    cost_s=run_cost(1.5, 2.0))]  # fmt: skip
    for rate in _RATES:
        claims.append(
            Claim(f"rate {rate:g}: not below the fitted rate's loss (paired)", "linreg-icl",
                  "gd", LOSS, {**task, "eta": str(rate)}, run_budget(1, 1, 1), versus=fitted,
                  check="at_least", tolerance=0.001, relative=True, provenance="derived",
                  cite="the fitted rate is the optimum (the blog's rate sweep)",
                  cost_s=run_cost(1.0, 1.0))
        )  # fmt: skip
    return Table(
        "blog-gd-rate",
        "One GD step's loss by learning rate: the fitted rate is the sweep's best",
        f"{BLOG} (its GD learning-rate sweep; D = 5, C = 10, U(-1, 1))",
        tuple(claims),
        note="Fixed rates fit nothing (1 iteration); the fitted rate is the closed form over "
        "the training batches (about 2.0 here: N / (s2 (N + d + k - 2)) = 2.03). The band "
        "allows 0.1% below it: a rate within a few percent of the optimum ties with it (the "
        "loss is flat there to second order), and the fitted rate is the training batches' "
        "optimum, not the test tasks'.",
        figure=TableFigure(
            "the blog post's GD learning-rate sweep",
            (Panel("One GD step by rate", "learning rate", "test loss", (
                Points("GD, fixed rate", tuple(
                    (r, f"rate {r:g}: not below the fitted rate's loss (paired)")
                    for r in _RATES)),
                Points("GD, fitted rate", ((2.03, fitted),)),
            ), log_y=True),),
        ),  # fmt: skip
    )


def _blog_lstm() -> Table:
    # The blog's setup "as before" (its sec. on LSTMs): the constructed tokens (x_i, y_i) and
    # (x_q, 0) as the sequence, D = C = 10, U(-1, 1). The rate is ours (the blog states
    # none): at 1e-3 the LSTMs are far from trained after 3,000 steps (1.16 / 1.48).
    task = {"queries": "1"}  # D = C = 10, U(-1, 1): the benchmark's own
    lstm = {**task, "input_tokens": "pairs", "lr": "0.003"}
    gd = "one GD step (D = C = 10)"
    budget = run_budget(500, 3000, 10000)
    text = "blog post, sec. 'Is this just for transformers? What about LSTMs?'"
    claims = [Claim(gd, "linreg-icl", "gd", LOSS, task, run_budget(200, 500, 500), target=0.819,
                    tolerance=0.02, relative=True, provenance="figure",
                    cite="blog post, Fig. 14 (LSTM comparison)",
                    cost_s=run_cost(1.5, 2.0))]  # fmt: skip
    for layers in (1, 2):
        claims.append(
            Claim(f"LSTM, {layers} layer(s): above GD (paired)", "linreg-icl", "lstm", LOSS,
                  {**lstm, "layers": str(layers)}, budget, versus=gd, check="at_least",
                  cite=f"{text}: the uni-directional LSTM's test loss 'is always higher than' "
                  "the GD transformer's", cost_s=run_cost(5.0 * layers, 40.0 * layers))
        )  # fmt: skip
    for layers in (1, 2):
        claims.append(
            Claim(f"bi-LSTM, {layers} layer(s): below the LSTM of as many layers (paired)",
                  "linreg-icl", "bilstm", LOSS, {**lstm, "layers": str(layers)}, budget,
                  versus=f"LSTM, {layers} layer(s): above GD (paired)", check="at_most",
                  cite=f"{text}: bi-directional LSTMs 'learn linear functions in-context "
                  "better than uni-directional LSTMs'", cost_s=run_cost(10.0 * layers,
                                                                         64.0 * layers))
        )  # fmt: skip
    claims.append(
        Claim("bi-LSTM, 4 layers: near GD (paired)", "linreg-icl", "bilstm", LOSS,
              {**lstm, "layers": "4"}, budget, versus=gd, check="at_most", tolerance=0.05,
              relative=True, provenance="figure",
              cite="blog post, Fig. 14: the bi-LSTM's loss 'approaches that of the "
              "GD-equivalent transformer as we increase the number of layers' (band ours; "
              "the blog calls it 'not a conclusive result')",
              cost_s=run_cost(40.0, 256.0))
    )  # fmt: skip
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
        "tasks, 1-2 uni- and 1, 2, 4 bi-directional layers (the blog's slider: 1-5). The "
        "blog's numbers are read off its plot only (GD 0.819); its text states the relations "
        "held here.",
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
            )),),
        ),  # fmt: skip
    )

TABLES = (_blog_depth(), _blog_gd_rate(), _blog_lstm())  # fmt: skip
