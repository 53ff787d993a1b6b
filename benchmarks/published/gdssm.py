"""Sushma et al., "State-space models can learn in-context by gradient descent" (GD-SSM), as
tables: one GD-SSM layer = one step of GD, beside its peers, and over task shapes."""

from __future__ import annotations

from benchmarks.published.claims import Claim, Table
from benchmarks.published.derived import PER_STEP
from benchmarks.published.figures import (
    Fixed,
    History,
    Level,
    Panel,
    Points,
    TableFigure,
    validation_curves,
)
from benchmarks.published.in_context import (
    HALF,
    INTERLEAVED_HALF,
    LOSS,
    PAPER_A12,
    SINE,
    STEPS_INTERLEAVED,
    SUSHMA,
    gd_half,
    interleaved_paper,
    run_budget,
    run_cost,
)

#: The GD-SSM appendix: Adam 2e-4 (1e-4 for the recurrence), a cosine schedule, batches of 64;
#: one test point per sequence (sec. 4: "the prediction for the query (test) given in the last
#: timestep"); 10,000 steps are ours (App. A.5 trains "a maximum of 300,000 epochs" at batch
#: 64, A.6 "a similar setup": far beyond a CPU).
_GDSSM_PAPER = {"lr": "2e-4", "recurrent_lr": "1e-4", "lr_schedule": "cosine",
                "meta_batch": "64", "queries": "1"}  # fmt: skip


def gdssm_half(label: str, metric: str = LOSS, **target) -> Claim:
    """The trained 1-layer GD-SSM at U(-0.5, 0.5) (Adam 1e-3 at cpu): one run, many lines."""
    return Claim(label, "linreg-icl", "gdssm", metric, {**HALF, "lr": "1e-3"},
                 run_budget(600, 3000, 10000, _GDSSM_PAPER), cost_s=run_cost(10.4, 40.0, 140.0),
                 **target)  # fmt: skip


_ALIGNMENT = "Sushma et al. sec. 4.2, Fig. 2 ('an excellent match with the construction')"


def _gdssm() -> Table:
    gd = "one GD step, U(-0.5, 0.5)"
    parameter = dict(check="at_least", target=0.9, provenance="figure",
                     cite="Sushma et al. sec. 4.2, Fig. 3 (learned parameters against the "
                     "construction; threshold ours)")
    claims = [
        gd_half(gd),
        gdssm_half("1-layer GD-SSM = GD (paired)", versus=gd, tolerance=0.02, relative=True,
                   cite="Sushma et al. secs. 4.1-4.2, Figs. 1, 2 and 4C (trained GD-SSM = "
                   "one GD step)"),
        *(gdssm_half(f"{part} parameters like the construction's (|cosine|)",
                     f"final/gdssm/{part}_cosine", **parameter)
          for part in ("local", "select", "readout")),
        gdssm_half("one GD step's fitted rate", "final/gdssm/gd_eta"),
        gdssm_half("the rate the trained layer implements = GD's", "final/gdssm/eta",
                   versus="one GD step's fitted rate", tolerance=0.05, relative=True,
                   provenance="figure", cite="Sushma et al. sec. 4.2, Fig. 3 (learned "
                   "parameters)"),
        # Sec. 4.2 (Fig. 2): "the same comparisons as in Section 4.1" (its metrics 1-3: the
        # predictions' and sensitivities' differences, the sensitivities' cosine) show "an
        # excellent match"; "excellent" is held to thresholds of ours.
        gdssm_half("1-layer GD-SSM: sensitivity cosine with GD near 1",
                   "final/align/sens_cosine", target=0.99, check="at_least",
                   provenance="derived", cite=f"{_ALIGNMENT} (at least 0.99: ours, as "
                   "icml23-alignment's)"),
        gdssm_half("1-layer GD-SSM: prediction difference to GD near 0",
                   "final/align/pred_diff", target=0.05, check="at_most", provenance="derived",
                   cite=f"{_ALIGNMENT} (at most 0.05: ours, about 5% of the targets' RMS, 0.91)"),
    ]  # fmt: skip
    for kind in ("input", "teacher"):
        base = f"one GD step, {kind} scaled by 2"
        claims += [
            gdssm_half(base, f"final/ood/{kind}_x2_gd"),
            gdssm_half(f"GD-SSM degrades like GD, {kind} scaled by 2",
                       f"final/ood/{kind}_x2_model", versus=base, tolerance=0.1, relative=True,
                       provenance="derived" if kind == "teacher" else "figure",
                       cite="Sushma et al. sec. 4.1 metric 4 (inputs from another range)"
                       if kind == "input" else "ours: the paper scales only the inputs (sec. 4.1 "
                       "metric 4); the teacher, as ICML'23 sec. 3 does, is our extension"),
        ]  # fmt: skip
    one = "1-layer GD-SSM = GD (paired)"
    return Table(
        "gdssm-one-step",
        "A trained 1-layer GD-SSM equals one step of GD, with the construction's parameters, "
        "in and out of distribution",
        SUSHMA,
        tuple(claims),
        note="Parameters are compared in quantities rescaling leaves alone (|cosine| of the "
        "local attention W, the selection D and the readout C with the construction's; the "
        "rate -N W_xy D_q c). Bands are ours (the paper shows these in figures). cpu: Adam "
        "1e-3, 3,000 steps; paper: the appendix's Adam 2e-4 / 1e-4, cosine, batches of 64.",
        figure=TableFigure(
            "Sushma et al.: training, parameters against the construction, out of distribution",
            (
                Panel("Validation loss over training", "iteration", "test loss", (
                    History("GD-SSM", one, "val/loss"), Level("GD (1 step)", line=gd),
                ), log_y=True),
                Panel("Parameters against the construction", "1 W, 2 D, 3 C", "|cosine|", (
                    Points("GD-SSM", tuple(
                        (i, f"{part} parameters like the construction's (|cosine|)")
                        for i, part in enumerate(("local", "select", "readout"), start=1))),
                )),
                Panel("Input scaled by alpha at test", "alpha", "test loss", (
                    History("GD-SSM", one, "analysis/ood_input_model", 0.01),
                    History("GD (1 step)", one, "analysis/ood_input_gd", 0.01)), log_y=True),
            ),
        ),  # fmt: skip
    )


#: The loss of predicting zero at U(-0.5, 0.5), d = 10: 0.5 d E[x^2] E[w^2] = 10 / 24.
_ZERO = 10 / 24
_S5 = "1-layer S5 (its GELU block) above one GD step (paired)"


def _gdssm_peers() -> Table:
    gd = "one GD step, U(-0.5, 0.5)"
    natural_gd = "one GD step, U(-0.5, 0.5), on the natural sequence"
    gdssm_two = "2-layer GD-SSM at most two GD steps (a rate per step)"
    transformer = "2-layer transformer on the natural sequence = one GD step (paired)"
    fig4c = "Sushma et al. sec. 4 ('only the GD-SSM and a 2-layer transformer reached the "
    # The ICML'23 interleaved table's model and GD basis at U(-0.5, 0.5): the same runs.
    natural = INTERLEAVED_HALF
    claims = [
        gd_half(gd),
        gdssm_half("1-layer GD-SSM = GD (paired)", versus=gd, tolerance=0.02, relative=True,
                   cite=fig4c + "same loss as actual GD'), Fig. 4C"),
        Claim(gdssm_two, "linreg-icl", "gdssm", LOSS, {**HALF, "lr": "1e-3", "layers": "2"},
              run_budget(600, 3000, 10000, _GDSSM_PAPER), target=PER_STEP[2, False].loss,
              check="at_most", provenance="derived",
              cite="Sushma et al. sec. 4.3 ('reach the same loss as the multi-step GD'), "
              "Fig. 4A; App. A.7 (two layers better than the construction)",
              cost_s=run_cost(20.0, 90.0, 300.0)),
        Claim(_S5, "linreg-icl", "s5", LOSS, {**HALF, "lr": "1e-3", "block": "gelu"},
              run_budget(600, 3000, 10000, {"lr": "2e-4", "meta_batch": "64"}),
              versus=gd, check="at_least", provenance="figure",
              cite="Sushma et al. sec. 4 ('S5 struggle[s] to perform ICL with 1 layer'), "
              "Fig. 4C", cost_s=run_cost(90.0, 433.0, 350.0)),  # cpu: measured 2026-11-28
        Claim(natural_gd, "linreg-icl-interleaved", "gd", LOSS, natural,
              run_budget(200, 500, 500, PAPER_A12), cost_s=run_cost(1.8, 2.0, 3.0)),
        Claim(transformer, "linreg-icl-interleaved", "lsa", LOSS,
              {**natural, "layers": "2", "first_layer": "softmax"},
              run_budget(1000, 5000, STEPS_INTERLEAVED, interleaved_paper(2)),
              versus=natural_gd, tolerance=0.05, relative=True, provenance="figure",
              cite=fig4c + "same loss as actual GD'), Fig. 4C",
              cost_s=run_cost(20.0, 96.0, 780.0 * STEPS_INTERLEAVED / 5000)),
    ]  # fmt: skip
    return Table(
        "gdssm-peers",
        "GD-SSM against S5 and a 2-layer transformer on the same sequence",
        SUSHMA,
        tuple(claims),
        note="The GD-SSM and S5 read the natural sequence x_1, y_1, ..., x_q through their "
        "own tokens (`linreg-icl`); the transformer reads it as interleaved tokens "
        "(`linreg-icl-interleaved`), paired with GD on that benchmark's tasks. The "
        "transformer is the ICML'23 interleaved table's (a softmax layer, then a linear "
        "one; its settings are ours, the paper states none), the 5% band ours. The paper's "
        "1-layer transformer, which did not reach GD, is no line: one attention layer over "
        "the natural sequence cannot pair any x_i with its y_i (they are in different "
        "tokens), so it cannot beat the zero predictor, whatever its training. S5 runs its "
        "block (Smith et al.): the diagonal SSM's output through a GELU and a position-wise "
        "linear layer; without the GELU it is linear in its tokens and could not go below "
        f"the zero predictor ({_ZERO:.4f}, derived) either. The 2-layer GD-SSM is held to "
        "two GD steps with a rate each, fitted (derived, `python -m benchmarks.published."
        "derived`). S5's training settings are not stated (the `paper` preset's are ours).",
        figure=TableFigure(
            "Sushma et al. Figs. 4A and 4C: GD-SSM (1 and 2 layers), S5 and a 2-layer "
            "transformer against GD",
            (Panel("Test loss", "0 GD, 1 GD-SSM, 2 GD-SSM x2, 3 S5, 4 GD (natural), "
                   "5 transformer x2", "test loss", (
                       Points("model", ((0, gd), (1, "1-layer GD-SSM = GD (paired)"),
                                        (2, gdssm_two), (3, _S5), (4, natural_gd),
                                        (5, transformer))),
                       Fixed("zero predictor", ((0, _ZERO), (5, _ZERO))),
                       Fixed("two GD steps, a rate each (derived)",
                             ((0, PER_STEP[2, False].loss), (5, PER_STEP[2, False].loss))),
                   ), log_y=True),),
        ),  # fmt: skip
    )


_DIMS = (5, 10, 20)


def _gdssm_shapes() -> Table:
    claims = []
    for outputs in (1, 5):
        for dim in _DIMS if outputs == 1 else (10,):
            task = {**HALF, "dim": str(dim), "outputs": str(outputs)}
            name = f"d = {dim}" + (f", {outputs} outputs" if outputs > 1 else "")
            gd = f"one GD step, {name}"
            claims += [
                Claim(gd, "linreg-icl", "gd", LOSS, task, run_budget(200, 500, 500),
                      cost_s=run_cost(1.8, 2.0)),
                Claim(f"1-layer GD-SSM = GD, {name} (paired)", "linreg-icl", "gdssm", LOSS,
                      {**task, "lr": "1e-3"}, run_budget(600, 3000, 10000, _GDSSM_PAPER),
                      versus=gd, tolerance=0.02, relative=True,
                      cite="Sushma et al. sec. 4.1 item 5 (feature dimensions), Fig. 1; "
                      "sec. 4.2 (targets of arbitrary dimension), Fig. 2",
                      cost_s=run_cost(10.0 * dim / 10 * outputs, 40.0 * dim / 10 * outputs)),
            ]  # fmt: skip
    return Table(
        "gdssm-shapes",
        "GD-SSM = one GD step across feature dimensions and with vector-valued targets",
        SUSHMA,
        tuple(claims),
        note="N = 10 context points throughout; d = 5, 10, 20 with one output, and d = 10 with "
        "5 outputs (y = W x, W ~ N(0, I); the loss sums the outputs' half squared errors). "
        "The relation (the trained layer matches GD across dimensions and for vector "
        "targets) is the paper's; the dimensions, the 5 outputs and the 2% band are ours "
        "(the text's values are not legible). The paper's by-dimension comparison (Fig. 1) "
        "is sec. 4.1's, on constructed tokens; these runs are sec. 4.2's GD-SSM on the "
        "natural sequence, which sec. 4.2 compares 'the same' way (Fig. 2).",
        figure=TableFigure(
            "Sushma et al.: by feature dimension",
            (Panel("Test loss by feature dimension", "d", "test loss", (
                Points("GD-SSM", tuple((d, f"1-layer GD-SSM = GD, d = {d} (paired)")
                                       for d in _DIMS)),
                Points("GD (1 step)", tuple((d, f"one GD step, d = {d}") for d in _DIMS)),
            ), log_y=True),),
        ),  # fmt: skip
    )


def _gdssm_nonlinear() -> Table:
    # App. A.7: an input embedding, the linear GD-SSM layer, then a weighted sigmoid gated
    # unit on its output, on the sine tasks of icml23-sine (Finn et al. 2017 as ICML'23
    # builds them); widths 40 as that table's MLP (ours: the paper states none).
    network = {**SINE, "embed": "40", "head": "gated", "head_width": "40", "lr": "1e-3"}
    budget = run_budget(600, 5000, 10000, _GDSSM_PAPER)
    # Seconds: 300 steps took 16-20 s of training beside three other jobs on the 2 cores
    # (an upper bound), extrapolated by steps, plus ~5 s of analyses.
    cost = run_cost(45.0, 330.0, 660.0)
    control = ("embedding + GD-SSM layer fixed to one GD step (its construction, the rate "
               "learned) + gated unit")
    a7 = ("Sushma et al. App. A.7: 'the trained model loss is compared with a model with "
          "GD-SSM layer/layers based on gradient descent construction and trained "
          "non-linearity layer/layers ... we observe the GD-SSM performance better than the "
          "GD-SSM initialised with the parameters from our construction'")
    trained = "embedding + trained GD-SSM layer + gated unit: at most the control (paired)"
    claims = (
        Claim(control, "sinusoid-icl", "gdssm", LOSS, {**network, "construction": "gd"},
              budget, cost_s=cost),
        Claim(trained, "sinusoid-icl", "gdssm", LOSS, network, budget, versus=control,
              check="at_most", cite=f"{a7}; sec. 4.3 ('the trained model is able to reach the "
              "same level of performance as performing GD directly on the dataset'), Fig. 4B",
              cost_s=cost),
    )  # fmt: skip
    return Table(
        "gdssm-nonlinear",
        "GD-SSM with an input embedding and a gated unit on sine regression: at least as "
        "good as its GD construction with a trained embedding and unit",
        f"{SUSHMA}, sec. 4.3, Fig. 4B, App. A.7",
        claims,
        note="Sine regression as icml23-sine (amplitudes 0.1-0.5, 10 queries). The model: "
        "a learned MLP feature map phi(x) of width 40 (the paper's input embedding), one "
        "GD-SSM layer on the natural sequence phi(x_1), y_1, ..., phi(x_q), and a weighted "
        "sigmoid gated unit of width 40 on the query's token added to its prediction (App. "
        "A.7; widths ours). The control is the same network with the GD-SSM layer fixed to "
        "its one-step construction (sec. 3.1) and its rate learned, the embedding and unit "
        "trained (construction=gd): App. A.7's comparison model. Sec. 4.3's 'reach the same "
        "level of performance as performing GD directly on the dataset' is read as reaching "
        "at least this control's level (the GD step the construction takes on learned "
        "features), as App. A.7 states it: better than the construction, no band. cpu: "
        "5,000 steps (Adam 1e-3); "
        "paper: the appendix's optimiser settings for 10,000 steps (ours: App. A.5 trains up "
        "to 300,000 epochs).",
        figure=validation_curves(
            "Sushma et al. Fig. 4B: GD-SSM with a nonlinearity on sine regression against its "
            "GD construction",
            ("embedding + trained GD-SSM + gated unit", trained),
            ("embedding + GD construction + gated unit (the control)", control)),
    )


TABLES = (_gdssm(), _gdssm_peers(), _gdssm_shapes(), _gdssm_nonlinear())  # fmt: skip
