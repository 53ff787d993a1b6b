"""In-context learning by gradient descent, as tables: von Oswald et al., "Transformers learn
in-context by gradient descent" (ICML 2023) and its thesis chapter (ch. 2). The budgets,
costs and shared lines here are also those of the ICLR 2024 blog post's tables
(:mod:`~benchmarks.published.icl_blog`) and GD-SSM's (:mod:`~benchmarks.published.gdssm`).

Lines that read the same configuration share its runs across tables (the one-layer LSA at
U(-0.5, 0.5) serves the one-step, alignment, out-of-distribution and repetition tables).
Where a paper states a relation only in a figure, the band is ours and the table says so.
"""

from __future__ import annotations

import dataclasses
import math

from benchmarks.published.claims import Claim, Table
from benchmarks.published.derived import GAMMA_CONTEXTS, MULTISTEP, PER_STEP, TIED_GAMMA
from benchmarks.published.figures import (
    Fixed,
    History,
    Level,
    Panel,
    Points,
    TableFigure,
    validation_curves,
)

LOSS = "final/test_loss"
_ICML23 = "von Oswald et al., Transformers learn in-context by gradient descent, ICML 2023"
_THESIS = "von Oswald, PhD thesis, ch. 2"
BLOG = "the ICLR 2024 blog post on transformers learning in context by GD"
SUSHMA = "Sushma et al., State-space models can learn in-context by gradient descent"
_DERIVED = "benchmarks.published.derived: fitted by L-BFGS, measured on 1M tasks"
HALF = {"input_range": "0.5", "queries": "20"}  # the public code's U(-0.5, 0.5)
_ONE = {"queries": "20"}  # the paper text's U(-1, 1)
#: The ICML'23 appendix's training (App. A.12): batches of 2,048 fresh tasks ("We use a
#: batchsize of 2048"), one query each (thesis eq. 2.9), 10^4 test tasks (thesis sec. 2.3).
PAPER_A12 = {"meta_batch": "2048", "queries": "1", "test_tasks": "10000"}
#: The width of a constructed token (x, y) at d = 10: the fan-in of every LSA weight.
_TOKEN = 11
#: An interleaved token of this suite: x (10), y (1) and a one-hot position (2N + 1, N = 10).
_INTERLEAVED_TOKEN = 10 + 1 + 2 * 10 + 1
#: Training steps, which A.12 leaves to "our training plots in the article": the public
#: code's. constructed_token_setup.ipynb trains recurrent models, every 1-layer model among
#: them, for 5,000 steps and untied deeper ones for 50,000; normal_token_construct.ipynb
#: (interleaved tokens) for 10,000.
STEPS_RECURRENT, STEPS_UNTIED, STEPS_INTERLEAVED = 5000, 50000, 10000


def run_budget(quick: int, cpu: int, paper: int, paper_extra: dict[str, str] | None = None,
            **extra: str) -> dict[str, dict[str, str]]:  # fmt: skip
    return {
        "quick": {"iterations": str(quick), "test_tasks": "2000", **extra},
        "cpu": {"iterations": str(cpu), **extra},
        "paper": {"iterations": str(paper), **extra, **(paper_extra or {})},
    }


def fan_in_std(scale: float, width: int) -> str:
    """The std of Haiku's default initialiser at ``scale`` (VarianceScaling: fan-in,
    truncated normal) on weights reading ``width`` inputs: sqrt(scale / width). The suite
    draws a plain normal of that std (no truncation at 2 std)."""
    return f"{math.sqrt(scale / width):.4g}"


def lsa_training(layers: int, width: int = _TOKEN) -> dict[str, str]:
    """ICML'23 App. A.12's training of an LSA of ``layers`` layers on constructed tokens, by
    depth. The text gives the rules with their values not legible (App. A.12: "learning
    rate of 0.001 for Transformer with depth [..] and 0.0005 otherwise", "gradients with
    global norm of [..]", "truncated normal and std [..] where [..] the number of layers",
    "clipped the token values to be in the range of [..]"); the values are the public
    code's (constructed_token_setup.ipynb, its config cell; src/transformer.py):

    - lr 1e-3 up to 3 layers, 5e-4 beyond;
    - gradients clipped to global norm 0.001 up to 2 layers, 10 beyond;
    - init: Haiku's fan-in truncated normal at scale 0.002 / L, i.e. std
      sqrt(0.002 / (L * width)) (0.0135 for one layer on 11-wide tokens, not 0.002);
    - tokens clipped to [-10, 10] after every layer beyond 3 layers, not clipped otherwise.

    Not set here: Adam's b2 (0.98 in the public code's src/config.py, "default parameters"
    in the text: the suite's Adam keeps the default 0.999)."""
    settings = {
        # public code (constructed_token_setup.ipynb): 1e-3 up to 3 layers, 5e-4 beyond
        "lr": "0.001" if layers <= 3 else "0.0005",
        # public code (constructed_token_setup.ipynb): norm 0.001 up to 2 layers, 10 beyond
        "grad_clip": "0.001" if layers <= 2 else "10",
        # public code (constructed_token_setup.ipynb: scale 0.002 / L; src/transformer.py:
        # Haiku's VarianceScaling, so std sqrt(scale / fan-in))
        "init_std": fan_in_std(0.002 / layers, width),
    }
    if layers > 3:
        # public code (constructed_token_setup.ipynb): [-10, 10] beyond 3 layers
        settings["clip"] = "10"
    return settings


def lsa_paper(layers: int, **more: str) -> dict[str, str]:
    """The ``paper`` preset's extras of an LSA of ``layers`` layers (tied or not: the public
    code sets them by the number of layers applied) on constructed tokens."""
    return {**PAPER_A12, **lsa_training(layers), **more}


def interleaved_paper(layers: int) -> dict[str, str]:
    """The ``paper`` preset's extras on interleaved tokens: normal_token_construct.ipynb's
    config cell (public code; A.12 gives no value legibly): lr 1e-3, gradients clipped to
    global norm 10, Haiku's fan-in init at scale 0.02 / L (std sqrt(0.02 / (L * 32)) on this
    suite's 32-wide tokens; the notebook's tokens are 20 wide), no token clipping."""
    return {**PAPER_A12, "lr": "0.001", "grad_clip": "10",
            "init_std": fan_in_std(0.02 / layers, _INTERLEAVED_TOKEN)}  # fmt: skip


def run_cost(quick: float, cpu: float, paper: float | None = None) -> dict[str, float]:
    return {"quick": quick, "cpu": cpu, **({"paper": paper} if paper is not None else {})}


# -- shared configurations ------------------------------------------------------------------
def gd_half(label: str, metric: str = LOSS, **target) -> Claim:
    """One fitted GD step at U(-0.5, 0.5), 20 queries (the GD line every table pairs with)."""
    return Claim(label, "linreg-icl", "gd", metric, HALF, run_budget(200, 500, 500, PAPER_A12),
                 cost_s=run_cost(1.8, 2.0, 3.0), **target)  # fmt: skip


def lsa_half(label: str, metric: str = LOSS, **target) -> Claim:
    """The trained 1-layer LSA at U(-0.5, 0.5), 20 queries: one run, many lines (validated,
    and its alignment with GD measured, every 100 steps: the alignment figure's curve)."""
    return Claim(label, "linreg-icl", "lsa", metric, {**HALF, "val_every": "100"},
                 run_budget(1000, 3000, STEPS_RECURRENT, lsa_paper(1)),
                 cost_s=run_cost(7.3, 17.0, 85.0), **target)  # fmt: skip


def _interpolation_cite(figures: str, band: str) -> str:
    """ICML'23's interpolation (sec. 3, "Interpolation"; App. A.3): the loss along the
    straight path from the trained products to the construction's, rescaled to the trained
    scale, as identical to both ends'."""
    return (f"ICML'23 sec. 3 ('Interpolation': 'an identical loss of GD, the trained "
            f"Transformer and the linearly interpolated weights') and App. A.3; {figures}; "
            f"band: 1% of one GD step's loss {band} (ours)")


#: The trained products against Prop. 1's, on the entries the prediction reads.
_RESEMBLANCE = ("thesis Fig. 2.4 (caption): 'We see (after scalar correction) a perfect "
                "resemblance of our construction'; ICML'23 App. A.4, Fig. 9 (at least 0.99: "
                "ours)")


def _lsa_one(label: str, metric: str = LOSS, **target) -> Claim:
    """The trained 1-layer LSA at the paper text's U(-1, 1), 20 queries."""
    return Claim(label, "linreg-icl", "lsa", metric, _ONE,
                 run_budget(1000, 5000, STEPS_RECURRENT, lsa_paper(1)),
                 cost_s=run_cost(7.1, 23.0, 85.0), **target)  # fmt: skip


def _icml23_one_step() -> Table:
    gd_h, gd_one = "one GD step, U(-0.5, 0.5)", "one GD step, U(-1, 1)"
    lsa_h = "1-layer LSA, U(-0.5, 0.5)"
    code = "its public notebook, constructed_token_setup.ipynb"
    path = "interpolated weights: no loss above the path's ends"
    return Table(
        "icml23-one-step",
        "One linear self-attention layer trained on linear regression = one step of GD",
        f"{_ICML23}, sec. 3",
        (
            gd_half(gd_h, target=0.2047, tolerance=0.02, relative=True,
                    provenance="public code", cite=code),
            lsa_half(lsa_h, target=0.2049, tolerance=0.02, relative=True,
                     provenance="public code", cite=code),
            lsa_half(f"{lsa_h} = GD (paired)", versus=gd_h, tolerance=0.01, relative=True,
                     cite="ICML'23 sec. 3"),
            lsa_half("sensitivity cosine LSA vs GD, U(-0.5, 0.5)", "final/align/sens_cosine",
                     target=0.9994, check="at_least", tolerance=0.002,
                     provenance="public code", cite=code),
            Claim(gd_one, "linreg-icl", "gd", LOSS, _ONE, run_budget(200, 500, 500, PAPER_A12),
                  target=0.825, tolerance=0.02, relative=True, provenance="derived",
                  cite="closed form of one GD step, LinRegTasks.one_step_gd_optimum",
                  cost_s=run_cost(1.8, 2.0, 3.0)),
            _lsa_one("1-layer LSA, U(-1, 1) = GD (paired)", versus=gd_one, tolerance=0.01,
                     relative=True, cite="ICML'23 sec. 3"),
            lsa_half(f"{path}, U(-0.5, 0.5)", "final/interp/max_excess", target=0.0,
                     check="at_most", tolerance=0.002,
                     cite=_interpolation_cite("ICML'23 Fig. 2", "at the range")),
            _lsa_one(f"{path}, U(-1, 1)", "final/interp/max_excess", target=0.0,
                     check="at_most", tolerance=0.008,
                     cite=_interpolation_cite("ICML'23 Fig. 2", "at the range")),
            *(line(f"trained {product} like the construction's (|cosine|), {rng}",
                   f"final/weights/{metric}", target=0.99, check="at_least",
                   provenance="derived", cite=_RESEMBLANCE)
              for line, rng in ((lsa_half, "U(-0.5, 0.5)"), (_lsa_one, "U(-1, 1)"))
              for product, metric in (("W_K^T W_Q", "key_query_cosine"),
                                      ("P W_V", "proj_value_cosine"))),
            # Fig. 2's prediction difference at the end of training; 5% of the targets'
            # RMS (sqrt(d E[x^2]): 0.91 at U(-0.5, 0.5), 1.83 at U(-1, 1)) is ours.
            *(line(f"prediction difference to GD at most {bound:g}, {rng}",
                   "final/align/pred_diff", target=bound, check="at_most", provenance="derived",
                   cite=f"ICML'23 sec. 3, Fig. 2 (the predictions' difference, here mean |y_LSA - "
                   f"y_GD| over held-out queries; "
                   f"at most {bound:g}, about 5% of the targets' RMS {rms}: ours)")
              for line, rng, bound, rms in ((lsa_half, "U(-0.5, 0.5)", 0.045, 0.91),
                                            (_lsa_one, "U(-1, 1)", 0.09, 1.83))),
            # Its sensitivity difference likewise: GD's input-gradient estimates the teacher
            # w ~ N(0, I), whose RMS norm is sqrt(d) = 3.16 at either range; 5% is ours.
            *(line(f"sensitivity difference to GD at most 0.16, {rng}",
                   "final/align/sens_diff", target=0.16, check="at_most", provenance="derived",
                   cite="ICML'23 sec. 3, Fig. 2 (the sensitivities' difference, here mean "
                   "||dy/dx_q, LSA - GD|| over held-out queries; at most 0.16, about 5% of "
                   "the gradients' RMS norm sqrt(d) = 3.16: ours)")
              for line, rng in ((lsa_half, "U(-0.5, 0.5)"), (_lsa_one, "U(-1, 1)"))),
        ),  # fmt: skip
        figure=TableFigure(
            "ICML'23 sec. 3, Fig. 2 (a trained LSA layer against one step of GD over training)",
            (Panel("Loss over training, U(-0.5, 0.5)", "iteration", "validation loss", (
                History("trained 1-layer LSA", lsa_h, "val/loss"),
                Level("one GD step (fitted rate)", line=gd_h))),
             Panel("Alignment with GD over training", "iteration", "sensitivity cosine", (
                 History("trained 1-layer LSA", lsa_h, "monitor/align/sens_cosine"),))),
        ),  # fmt: skip
        note="U(-1, 1) is the paper text's range, U(-0.5, 0.5) its public code's (0.2047 / "
        "0.2049 / 0.9994 are what the code's notebook reports, not numbers of the paper's "
        "text). cpu: batches of 256 tasks with 20 queries, 3,000 / 5,000 steps, init std "
        "0.02. paper: App. A.12's batches of 2,048 tasks with one query, and its training of "
        "one layer with the values its text leaves illegible read from the public code "
        "(constructed_token_setup.ipynb): Adam at 1e-3, gradients clipped to global norm "
        "0.001, Haiku's fan-in init at scale 0.002 (std sqrt(0.002 / 11) = 0.0135, not 0.002); "
        "5,000 steps, that notebook's count (the paper's are in its figures). At U(-1, 1) the "
        "suite saw an init std of 0.002 stay on the zero-predictor plateau for 20k steps and "
        "0.02 (cpu) leave it; the paper's 0.0135 lies between and has not been run, so "
        "whether the paper run leaves the plateau within 5,000 steps is an open expectation: "
        "a paper run still on the plateau (loss near the zero predictor's) is that stall, not "
        "evidence against the relation. Interpolation (App. A.3): W_K^T W_Q and P W_V of the "
        "trained layer, and Prop. 1's at the fitted rate rescaled by the mean of the trained "
        "W_K^T W_Q's diagonal (which leaves its function unchanged), mixed at 11 points "
        "alpha = 0, 0.1, ..., 1; the line holds the largest loss on the path to at most the "
        "larger of its two ends' (+ the band), on 2,000 held-out tasks at the end of "
        "training. The figure's interpolation curve over training is not measured. Weights "
        "(App. A.4, thesis Fig. 2.4): |cosine| of the trained W_K^T W_Q's columns that meet "
        "the query's x, and of P W_V's row that writes the prediction, with the "
        "construction's [I; 0] and e_y (blind to the scale the layer splits between them, "
        "as the paper's scalar correction is).",
    )


def _multistep() -> Table:
    claims = []
    # Seconds per run at the quick preset (GD / GD++ 2,000 steps, LSA 1,500), measured; the
    # cpu budgets (20,000 / 5,000) in proportion.
    quick_s = {2: (3.6, 5.7, 14.0), 3: (4.4, 12.4, 25.2)}
    for k in (2, 3):
        gd, gdpp = MULTISTEP[k, False], MULTISTEP[k, True]
        gd_label = f"{k} tied GD steps (fitted)"
        tied = {**HALF, "steps": str(k), "tied": "true"}
        lsa = {**HALF, "layers": str(k), "tied": "true"}
        if k == 2:  # the trained model beside the two derived optima (thesis Fig. 2.5)
            lsa.update(align_gd_etas=str(gd.eta), align_gdpp_etas=str(gdpp.eta),
                       align_gdpp_gammas=str(gdpp.gamma))
        gd_s, gdpp_s, lsa_s = quick_s[k]
        long = run_budget(2000, 20000, 20000, PAPER_A12)
        lsa_budget = run_budget(1500, 5000, STEPS_RECURRENT, lsa_paper(k))
        lsa_cost = run_cost(lsa_s, lsa_s * 5000 / 1500, lsa_s * 5000 / 1500 * 5)
        claims += [
            Claim(gd_label, "linreg-icl", "gd", LOSS, tied, long, target=gd.loss,
                  tolerance=0.01, relative=True, provenance="derived", cite=_DERIVED,
                  cost_s=run_cost(gd_s, gd_s * 10, gd_s * 30)),
            Claim(f"{k} tied GD++ steps (fitted)", "linreg-icl", "gdpp", LOSS, tied, long,
                  target=gdpp.loss, tolerance=0.01, relative=True, provenance="derived",
                  cite=_DERIVED, cost_s=run_cost(gdpp_s, gdpp_s * 10, gdpp_s * 30)),
            Claim(f"{k}-layer tied LSA = tied GD++ optimum", "linreg-icl", "lsa", LOSS, lsa,
                  lsa_budget, target=gdpp.loss, tolerance=0.03, relative=True,
                  provenance="derived",
                  cite=f"{_DERIVED}; the relation: ICML'23 sec. 3 (multiple steps), Fig. 3(a); "
                  "other depths: App. Figs. 7, 8", cost_s=lsa_cost),
            Claim(f"{k}-layer tied LSA below {k} tied GD steps (paired)", "linreg-icl", "lsa",
                  LOSS, lsa, lsa_budget, versus=gd_label, check="at_most",
                  cite="ICML'23 sec. 3 (multiple steps), Fig. 3(a); other depths: App. Figs. 7, 8",
                  cost_s=lsa_cost),
        ]  # fmt: skip
        if k != 2:
            continue
        # Alignment with GD and GD++ after training (thesis Fig. 2.5, top right and lower
        # left), both at their derived optima, on the same analysis tasks.
        aligned = ("thesis Fig. 2.5 (top right and lower left; caption: 'the TF aligns well "
                   "with GD in the beginning of training but aligns much better with GD++ "
                   "after training'); the references at the derived optima; no margin: the "
                   "caption gives none")
        for measure, word, check in (("sens_cosine", "sensitivity cosine", "at_least"),
                                     ("pred_diff", "prediction difference", "at_most")):
            basis = f"2-layer tied LSA: {word} with 2 tied GD steps"
            claims += [
                Claim(basis, "linreg-icl", "lsa", f"final/align/gdk_{measure}", lsa,
                      lsa_budget, cost_s=lsa_cost),
                Claim(f"2-layer tied LSA: {word} with 2 tied GD++ steps "
                      f"{'above' if check == 'at_least' else 'below'} GD's (paired)",
                      "linreg-icl", "lsa", f"final/align/gdpp_{measure}", lsa, lsa_budget,
                      versus=basis, check=check, cite=aligned, cost_s=lsa_cost),
            ]  # fmt: skip
        # Early in training (the first validation, after a tenth of cpu's steps): nearer GD
        # than GD++ (the same figure's first half, read off it).
        early = "2-layer tied LSA, first validation: sensitivity cosine with 2 tied GD++ steps"
        claims += [
            Claim(early, "linreg-icl", "lsa", "final/early/align/gdpp_sens_cosine", lsa,
                  lsa_budget, cost_s=lsa_cost),
            Claim("2-layer tied LSA, first validation: sensitivity cosine with 2 tied GD steps "
                  "at least GD++'s (paired)", "linreg-icl", "lsa",
                  "final/early/align/gdk_sens_cosine", lsa, lsa_budget, versus=early,
                  check="at_least", provenance="figure",
                  cite="thesis Fig. 2.5 (top right; caption: 'the TF aligns well with GD in the "
                  "beginning of training but aligns much better with GD++ after training'); "
                  "'the beginning' as the first validation (after 500 steps: a tenth of cpu's "
                  "and paper's, a third of quick's) is ours", cost_s=lsa_cost),
        ]  # fmt: skip
        # Out of distribution (thesis Fig. 2.5, lower right: the two-layer recurrent model
        # against GD++), at the scales and band of icml23-alignment's one-layer lines.
        for kind, alphas in (("input", (0.5, 2)), ("teacher", (2, 5))):
            for alpha in alphas:
                basis = f"2 tied GD++ steps (fitted), {kind} scaled by {alpha}"
                metric = f"final/ood/{kind}_x{alpha:g}_model"
                claims += [
                    Claim(basis, "linreg-icl", "gdpp", metric, tied, long,
                          cost_s=run_cost(gdpp_s, gdpp_s * 10, gdpp_s * 30)),
                    Claim(f"2-layer tied LSA = GD++ out of distribution, {kind} scaled by "
                          f"{alpha} (paired)", "linreg-icl", "lsa", metric, lsa, lsa_budget,
                          versus=basis, tolerance=0.1, relative=True, provenance="figure",
                          cite="thesis Fig. 2.5 (lower right; caption: 'TF performance (in "
                          "log-scale) mimics the one of GD++ well when testing on OOD tasks "
                          "(alpha != 1)'; sec. 2.3 item 2 for the two scalings); the 10% band "
                          "is ours, as icml23-alignment's one-layer lines", cost_s=lsa_cost),
                ]  # fmt: skip
    return Table(
        "multistep-lsa-gdpp",
        "Recurrent (tied) multi-layer LSA matches K tied steps of GD++, below K steps of GD",
        f"{_ICML23}, sec. 3 ('Multiple steps of gradient descent vs. multiple layers of "
        "self-attention'), Fig. 3(a), App. A.10; thesis sec. 2.3, Fig. 2.5",
        tuple(claims),
        note="No number of the paper: the targets are the optimal tied GD and GD++ losses, "
        "derived by the suite's simulation (python -m benchmarks.published.derived: rates "
        "fitted on 50,000 tasks, losses measured on 1,000,000 others, 95% half-width "
        "<= 0.4%); the fitted gd / gdpp lines check the references the other tables pair "
        "with. The band for the LSA (3%) is ours: the paper states the match in its figure. "
        "paper: App. A.12's training of K layers, its values from the public code "
        "(constructed_token_setup.ipynb): Adam at 1e-3, gradients clipped to global norm 0.001 "
        "(K = 2) or 10 (K = 3), Haiku's fan-in init at scale 0.002 / K (std "
        "sqrt(0.002 / 11K)); 5,000 steps, that notebook's count for recurrent models. The "
        "2-layer model's alignment with two GD and two GD++ steps (thesis Fig. 2.5) is read "
        "at the end of training against both at their derived optima, which the run is "
        "given as settings (align_gd_etas, align_gdpp_*: methods/analyses/step_alignment.py), "
        "on 10,000 analysis tasks; the figure's early half (the model nearer GD first) as the "
        "sensitivity cosines at the first validation (after 500 steps, on the monitor's "
        "tasks), GD's held to at least GD++'s (ours: the figure shows curves).",
        figure=TableFigure(
            "ICML'23 sec. 3, Fig. 3(a) (recurrent transformers against GD and GD++, by steps)",
            (Panel("Test loss by steps K (tied)", "steps / layers K", "test loss", (
                Points("tied LSA", tuple((k, f"{k}-layer tied LSA = tied GD++ optimum")
                                         for k in (2, 3))),
                Points("GD (fitted)", tuple((k, f"{k} tied GD steps (fitted)") for k in (2, 3))),
                Points("GD++ (fitted)", tuple((k, f"{k} tied GD++ steps (fitted)")
                                              for k in (2, 3))),
            )),),
        ),  # fmt: skip
    )


#: The smallest eigenvalue of X X^T across 10,000 tasks by N (thesis sec. 2.3; N = 10 is
#: "cut ... at 1e-10", so it gives no number).
SMALLEST_EIGENVALUE = {25: 0.097, 50: 0.666, 100: 2.870}


def _gamma() -> Table:
    # The thesis' gamma of trained recurrent 2-layer models and the largest eigenvalue of
    # X X^T beside it (sec. 2.3, Fig. 2.7), by context size N.
    published = {10: (0.179, 4.6), 25: (0.099, 7.712), 50: (0.056, 10.845), 100: (0.029, 17.196)}
    # Seconds per run, measured (N = 10 at 5,000 steps: 70 s); larger N in proportion to the
    # tokens and the fewer queries used there.
    cost = {10: 70.0, 25: 110.0, 50: 150.0, 100: 290.0}
    claims = []
    for n in GAMMA_CONTEXTS:
        gamma, eig = published[n]
        queries = "20" if n <= 25 else "5"
        settings = {"input_range": "0.5", "queries": queries, "shots": str(n), "layers": "2",
                    "tied": "true"}  # fmt: skip
        budget = run_budget(1000, 5000, STEPS_RECURRENT, lsa_paper(2))
        label = f"gamma of a trained recurrent 2-layer LSA, N = {n}"
        spent = run_cost(cost[n] / 5, cost[n], cost[n] * 5)
        claims += [
            Claim(label, "linreg-icl", "lsa", "final/gdpp/gamma", settings, budget,
                  target=gamma, tolerance=0.15, relative=True, cite="thesis sec. 2.3, Fig. 2.7",
                  cost_s=spent),
            Claim(f"{label} = tied GD++ optimum's", "linreg-icl", "lsa", "final/gdpp/gamma",
                  settings, budget, target=TIED_GAMMA[n], tolerance=0.15, relative=True,
                  provenance="derived", cite=_DERIVED, cost_s=spent),
            Claim(f"largest eigenvalue of X^T X over the analysis tasks, N = {n}", "linreg-icl",
                  "lsa", "final/data/xx_max_eig_largest", settings, budget, target=eig,
                  tolerance=0.2, relative=True, cite="thesis sec. 2.3, Fig. 2.7", cost_s=spent),
            Claim(f"gamma x largest eigenvalue at most 1 (eigenvalues within [0, 1/gamma]), "
                  f"N = {n}", "linreg-icl", "lsa", "final/gdpp/gamma_max_eig", settings, budget,
                  target=1.0, check="at_most", cite="thesis sec. 2.3 ('the observed "
                  "eigenvalues stay within [0, 1/gamma]')", cost_s=spent),
        ]  # fmt: skip
        if n in SMALLEST_EIGENVALUE:  # N = 10: the thesis cut it at 1e-10 (no number)
            claims.append(Claim(
                f"smallest eigenvalue of X^T X over the analysis tasks, N = {n}", "linreg-icl",
                "lsa", "final/data/xx_min_eig_smallest", settings, budget,
                target=SMALLEST_EIGENVALUE[n], tolerance=0.2, relative=True,
                cite="thesis sec. 2.3 (the minimum eigenvalues across 10000 tasks)",
                cost_s=spent))  # fmt: skip
        kappa = f"median condition number of X^T X over the analysis tasks, N = {n}"
        claims += [
            Claim(kappa, "linreg-icl", "lsa", "final/data/kappa_median", settings, budget,
                  cost_s=spent),
            Claim(f"median condition number after GD++'s transform at the trained gamma below "
                  f"it, N = {n} (paired)", "linreg-icl", "lsa", "final/gdpp/kappa_median",
                  settings, budget, versus=kappa, check="at_most",
                  cite="thesis sec. 2.3 (gamma chosen so that 'on average, across the "
                  "distribution of tasks, the data transformation ... decreases the condition "
                  "number'), Fig. 2.7 right (10,000 tasks at N = 25; the median is ours)",
                  cost_s=spent),
        ]  # fmt: skip
    for smaller, larger in zip(GAMMA_CONTEXTS, GAMMA_CONTEXTS[1:], strict=False):
        first = f"gamma of a trained recurrent 2-layer LSA, N = {smaller}"
        claims.append(
            Claim(f"gamma falls from N = {smaller} to {larger}", "linreg-icl", "lsa",
                  "final/gdpp/gamma", next(c for c in claims if c.label.endswith(
                      f"N = {larger}")).settings, run_budget(1000, 5000, STEPS_RECURRENT,
                                                           lsa_paper(2)),
                  versus=first, check="at_most", cite="thesis sec. 2.3, Fig. 2.7",
                  cost_s=run_cost(cost[larger] / 5, cost[larger], cost[larger] * 5))
        )  # fmt: skip
    return Table(
        "gdpp-gamma",
        "GD++'s gamma read from trained recurrent 2-layer LSAs falls with the context size N",
        f"{_THESIS}, sec. 2.3 ('Why does GD++ perform better?'), Fig. 2.7 (gamma and the "
        "largest eigenvalue of X X^T for N = 10, 25, 50, 100); ICML'23 App. A.10, Fig. 13",
        tuple(claims),
        note="gamma is read from the tied layer's weights (methods.analyses.in_context."
        "gdpp_parameters: -sum over heads of the mean diagonals of P W_V and W_K^T W_Q on the "
        "x block); the derived column is the optimal tied 2-step GD++'s. U(-0.5, 0.5), d = 10; "
        "20 queries per task (5 for N >= 50, to keep a run within minutes). Bands are ours "
        "(15% on gamma; 20% on the eigenvalues, the largest and the smallest over 10,000 tasks "
        "as in the thesis: 'across 10000 tasks', sec. 2.3; its smallest at N = 10 is cut at "
        "1e-10 and held to nothing). A smallest eigenvalue is a minimum over one draw of "
        "10,000 tasks, and it moves between draws more than that band: over 40 independent "
        "draws (python -m benchmarks.published.derived) it spans 0.064-0.107 at N = 25 "
        "(5%-95%; median 0.086), 0.61-0.79 at N = 50 and 2.56-2.91 at N = 100. At N = 25 "
        "this suite's draw (0.074, the same analysis tasks for every seed) and the thesis' "
        "(0.097) both lie inside that spread: its line is not reproduced by the draw, which "
        "says nothing against the thesis' number. The condition numbers are per task, their "
        "median over the 10,000 tasks (the thesis plots their distribution at N = 25, Fig. "
        "2.7 right): after the transform, the eigenvalues become lambda (1 - gamma lambda)^2 "
        "(methods.analyses.in_context.gdpp_condition). paper: the thesis states no training "
        "for these models; ICML'23 App. A.12's for 2 layers, its values from the public code "
        "(constructed_token_setup.ipynb): Adam at 1e-3, gradients clipped to global norm 0.001, "
        "init std sqrt(0.001 / 11) = 0.0095; 5,000 steps, that notebook's count for recurrent "
        "models.",
        figure=TableFigure(
            "thesis sec. 2.3, Fig. 2.7 (gamma of trained recurrent models by N)",
            (Panel("GD++ gamma by context size", "context size N", "gamma", (
                Points("trained LSA", tuple((n, f"gamma of a trained recurrent 2-layer LSA, "
                                                f"N = {n}") for n in GAMMA_CONTEXTS)),
                Fixed("thesis", tuple((n, published[n][0]) for n in GAMMA_CONTEXTS)),
                Fixed("tied GD++ optimum (derived)", tuple((n, TIED_GAMMA[n])
                                                           for n in GAMMA_CONTEXTS)),
            ), log_x=True),),
        ),  # fmt: skip
    )


def _alignment() -> Table:
    contexts = (5, 10, 20, 40)

    def at_context(n: int, label: str, metric: str, **target) -> Claim:
        """The trained 1-layer LSA at U(-0.5, 0.5) with N = ``n`` context points."""
        if n == 10:
            return lsa_half(label, metric, **target)
        settings = {**HALF, "shots": str(n)}
        return Claim(label, "linreg-icl", "lsa", metric, settings,
                     run_budget(1000, 3000, STEPS_RECURRENT, lsa_paper(1)),
                     cost_s=run_cost(7.0, 17.0 * max(1.0, n / 10), 85.0 * max(1.0, n / 10)),
                     **target)  # fmt: skip

    cosine = dict(target=0.99, check="at_least", provenance="figure",
                  cite="ICML'23 sec. 3, Fig. 2 (thesis Fig. 2.3) at N = 10; other N ours (the "
                  "text: 'a wide range of hyperparameters')")  # fmt: skip
    claims = [at_context(n, f"sensitivity cosine with GD, N = {n}", "final/align/sens_cosine",
                         **cosine) for n in contexts]  # fmt: skip
    # The interpolated weights by N (thesis Fig. 2.3, lower left: GD, the trained layer and
    # the interpolated weights for different N); the band is 1% of one GD step's loss at the
    # largest N (the smallest loss), so no N gets a wider one.
    claims += [at_context(n, f"interpolated weights: no loss above the path's ends, N = {n}",
                          "final/interp/max_excess", target=0.0, check="at_most",
                          tolerance=0.0008,
                          cite=_interpolation_cite("thesis Fig. 2.3 (lower left, by N)",
                                                   "at N = 40"))
               for n in contexts]  # fmt: skip
    for kind, alphas in (("input", (0.5, 2)), ("teacher", (2, 5))):
        for alpha in alphas:
            gd = f"one GD step, {kind} scaled by {alpha}"
            claims += [
                lsa_half(gd, f"final/ood/{kind}_x{alpha:g}_gd"),
                lsa_half(f"1-layer LSA degrades like GD, {kind} scaled by {alpha}",
                         f"final/ood/{kind}_x{alpha:g}_model", versus=gd, tolerance=0.1,
                         relative=True, provenance="figure",
                         cite="ICML'23 sec. 3, Fig. 2 and App. A.2, Fig. 6(a)"),
            ]  # fmt: skip
    one = "sensitivity cosine with GD, N = 10"
    return Table(
        "icml23-alignment",
        "A trained LSA layer aligns with one GD step over training, for every N, and out of "
        "distribution degrades as GD does",
        f"{_ICML23}, sec. 3",
        tuple(claims),
        note="Bands are ours, read from the paper's figures: a sensitivity cosine of at least "
        "0.99, and out-of-distribution losses within 10% of one GD step's (rate fitted at the "
        "training distribution). The alignment over training is logged at each "
        "meta-validation (monitor/align/*), on 1,000 held-out tasks.",
        figure=TableFigure(
            "ICML'23 sec. 3: alignment over training, by context size, out of distribution",
            (
                Panel("Alignment over training (N = 10)", "iteration", "cosine", (
                    History("sensitivity cosine", one, "monitor/align/sens_cosine"),)),
                Panel("Prediction difference over training (N = 10)", "iteration",
                      "mean |y_LSA - y_GD|", (
                          History("prediction difference", one, "monitor/align/pred_diff"),)),
                Panel("Alignment by context size", "context size N", "cosine", (
                    Points("sensitivity cosine", tuple((n, f"sensitivity cosine with GD, "
                                                           f"N = {n}") for n in contexts)),),
                      log_x=True),
                Panel("Input scaled by alpha at test", "alpha", "test loss", (
                    History("LSA", one, "analysis/ood_input_model", 0.01),
                    History("GD (1 step)", one, "analysis/ood_input_gd", 0.01)), log_y=True),
                Panel("Teacher scaled by alpha at test", "alpha", "test loss", (
                    History("LSA", one, "analysis/ood_teacher_model", 0.01),
                    History("GD (1 step)", one, "analysis/ood_teacher_gd", 0.01)), log_y=True),
            ),
        ),  # fmt: skip
    )


#: Thesis Fig. 2.6's alignment, read at 3 layers: the deepest with a GD++ reference.
_FIG_2_6 = ("thesis Fig. 2.6 (top right and lower left; caption: 'the TF aligns well with GD "
            "in the beginning of training but aligns much better with GD++ after training'; "
            "sec. 2.3: other depths give 'qualitatively equivalent results'): a 5-layer model "
            "there, 3 layers here; the references at the derived optima; no margin: the "
            "caption gives none")


def _listed(values: tuple[float, ...]) -> str:
    """A per-step setting as ``--set`` takes it (comma-separated)."""
    return ",".join(str(v) for v in values)


def _deep() -> Table:
    claims = []
    for k in range(1, 6):
        label = f"{k}-layer LSA (untied)"
        cite = (f"{_DERIVED}; the relation: ICML'23 sec. 3 (multiple steps), Fig. 3(b); "
                "other depths: App. Figs. 7, 8")
        # 2% above the optimum: our test tasks (10,000) are not the derivation's million.
        # paper: the public code trains untied models 10 times longer than 1-layer ones.
        steps = STEPS_UNTIED if k > 1 else STEPS_RECURRENT
        settings = {**HALF, "layers": str(k)}
        if k == 3:  # beside K GD and K GD++ steps at their derived optima (thesis Fig. 2.6)
            settings.update(
                align_gd_etas=_listed(PER_STEP[k, False].etas),
                align_gdpp_etas=_listed(PER_STEP[k, True].etas),
                align_gdpp_gammas=_listed(PER_STEP[k, True].gammas),
            )
        below = Claim(f"{label}: at most {k} GD step(s) + 2%, a rate per step", "linreg-icl",
                      "lsa", LOSS, settings,
                      run_budget(1000, 5000, steps, lsa_paper(k)),
                      target=PER_STEP[k, False].loss, check="at_most", tolerance=0.02,
                      relative=True, provenance="derived", cite=cite,
                      cost_s=run_cost(5.0 * k, 17.0 * k, 85.0 * k * steps / 5000))  # fmt: skip
        if k == 1:  # the one-step table's run
            below = lsa_half(below.label, target=below.target, check="at_most", tolerance=0.02,
                             relative=True, provenance="derived", cite=cite)  # fmt: skip
        claims.append(below)
        if (k, True) in PER_STEP and k > 1:
            claims.append(dataclasses.replace(
                below, label=f"{label}: at most {k} GD++ steps + 10%, a rate and gamma per step",
                target=PER_STEP[k, True].loss, tolerance=0.1, relative=True))  # fmt: skip
        if k == 3:
            # Thesis Fig. 2.6 (top right, lower left) at the deepest model with a GD++
            # reference: the sensitivity cosine only (a 3-layer model's losses on the
            # analysis tasks are heavy-tailed, and a mean prediction difference with them).
            basis = f"{label}: sensitivity cosine with {k} GD steps"
            claims += [
                Claim(basis, "linreg-icl", "lsa", "final/align/gdk_sens_cosine", settings,
                      below.budget, cost_s=below.cost_s),
                Claim(f"{label}: sensitivity cosine with {k} GD++ steps above GD's (paired)",
                      "linreg-icl", "lsa", "final/align/gdpp_sens_cosine", settings,
                      below.budget, versus=basis, check="at_least", cite=_FIG_2_6,
                      cost_s=below.cost_s),
            ]  # fmt: skip
    first = {k: next(c.label for c in claims if c.label.startswith(f"{k}-layer"))
             for k in range(1, 6)}  # fmt: skip
    gdpp_steps = [k for k in range(1, 6) if (k, True) in PER_STEP]
    return Table(
        "icml23-deep",
        "Deep untied LSA (up to 5 layers) against per-layer GD and GD++ steps",
        f"{_ICML23}, sec. 3 ('Multiple steps of gradient descent vs. multiple layers of "
        "self-attention'), Fig. 3(b); thesis sec. 2.3, Fig. 2.6",
        tuple(claims),
        note="The GD and GD++ references are their optima with a rate (and gamma) per step, "
        "derived by simulation (python -m benchmarks.published.derived); GD++ up to 3 steps "
        "only (beyond, the fitted rates blow up on rare tasks). Five GD++ steps fitted by the "
        "gdpp method instead (Adam on a rate and gamma per step, 20,000 steps of 256 tasks, "
        "2 seeds, 2026-11-29) reach 0.039-0.040 in distribution (5 GD steps: 0.079; the "
        "5-layer LSA: 0.032), whether that is GD++'s optimum unknown, and are not finite "
        "with the inputs scaled by 2: no out-of-distribution reference, so the thesis' "
        "comparison with GD++ there (Fig. 2.6, lower right) has no line. The 5-layer LSA's "
        "own losses out of distribution are logged (final/ood/*): at cpu it overflows with "
        "the inputs scaled by 2 or the teacher by 5 (the public code clips tokens to [-10, "
        "10] after each layer from 4 layers, as `paper` does; cpu does not). The 10% above "
        "GD++ is our band (the paper shows deep models against GD++ in a figure); 2% above "
        "GD allows for "
        "the sampling of our 10,000 test tasks. cpu: 5,000 steps of "
        "256 tasks with 20 queries (1 layer: the one-step table's 3,000). paper: App. A.12's "
        "training by depth, its values from the public code (constructed_token_setup.ipynb): "
        "Adam at 1e-3 (5e-4 for 4 and 5 layers), gradients clipped to global norm 0.001 (10 "
        "from 3 layers), Haiku's fan-in init at scale 0.002 / K (std sqrt(0.002 / 11K)), "
        "tokens clipped to [-10, 10] after every layer for 4 and 5 layers; 50,000 steps for "
        "2-5 layers, that notebook's count for untied models (1 layer: the one-step table's "
        "5,000).",
        figure=TableFigure(
            "ICML'23 sec. 3, Fig. 3(b): deep untied models against GD and GD++ by depth",
            (Panel("Test loss by layers / steps K", "K", "test loss", (
                Points("untied LSA", tuple(first.items())),
                Fixed("GD, a rate per step (derived)",
                      tuple((k, PER_STEP[k, False].loss) for k in range(1, 6))),
                Fixed("GD++, a rate and gamma per step (derived)",
                      tuple((k, PER_STEP[k, True].loss) for k in gdpp_steps)),
            ), log_y=True),),
        ),  # fmt: skip
    )


SINE = {"amplitude": "0.1,0.5", "queries": "10"}  # ICML'23 App. A.7's family
#: Interleaved tokens at U(-0.5, 0.5), one query, validated every 100 steps (the figure's
#: training curves: the plateau, then the drop); gdssm-peers reads the same runs.
INTERLEAVED_HALF = {"input_range": "0.5", "queries": "1", "val_every": "100"}


#: Thesis Fig. 2.8's comparisons of the trained model with its control (the caption's
#: words, our bands): (what, metric, band, panel and its words).
_TWIN_LINES = (
    ("initial predictions (after the MLP)", "init_rel_diff", 0.20,
     "left: 'We observe similar initial functions'"),
    ("final predictions", "pred_rel_diff", 0.10,
     "left: '... as well as solutions'; right: 'strong alignment when comparing the "
     "prediction'"),
    ("input-gradients of the predictions", "sens_rel_diff", 0.10,
     "right (mislabelled 'Left' in the caption): 'as well as the partial derivatives'"),
)


def _sine() -> Table:
    control = ("the same network with its attention fixed to one GD step (Prop. 1), "
               "the rate learned")
    trained = "token embedding + MLP + 1 trained LSA layer = the control (paired)"
    budget = run_budget(1000, 5000, 5000)
    # App. A.7: D = 40, 160 hidden units (in place of the benchmark's phi(x) embedding).
    network = {**SINE, "layers": "1", "embed": "0", "token_embed": "40"}
    # Thesis Fig. 2.8: the trained model and the control compared, the control trained in
    # the same run from the same initial weights on the same batches.
    twin = {**network, "twin_control": "true"}
    return Table(
        "icml23-sine",
        "Nonlinear (sine) regression: an MLP on the tokens then one trained LSA layer = the "
        "same MLP meta-learned through one GD step on a linear read-out",
        f"{_ICML23}, sec. 3 ('Transformers solve nonlinear regression tasks by gradient "
        "descent on deep data representations'), Fig. 4, App. A.7; thesis sec. 2.3, Fig. 2.8",
        (
            Claim(control, "sinusoid-icl", "lsa", LOSS, {**network, "construction": "gd"},
                  budget, cost_s=run_cost(13.0, 64.0)),
            Claim(trained, "sinusoid-icl", "lsa", LOSS, network, budget, versus=control,
                  tolerance=0.15, relative=True, provenance="figure",
                  cite="ICML'23 sec. 3 (nonlinear regression), Fig. 4, App. A.7",
                  cost_s=run_cost(15.0, 72.0)),  # cpu: measured 2026-11-28, 2 workers
            *(Claim(f"trained beside its control twin: {what} within {band:.0%} of the "
                    "twin's", "sinusoid-icl", "lsa", f"final/twin/{metric}", twin, budget,
                    target=band, check="at_most", cite=f"thesis Fig. 2.8 ({panel}), sec. 2.3; "
                    f"the {band:.0%} band ours", cost_s=run_cost(28.0, 140.0))
              for what, metric, band, panel in _TWIN_LINES),
        ),  # fmt: skip
        note="Amplitude U(0.1, 0.5), phase U(0, pi), x ~ U(-5, 5), 10 context points: the "
        "suite's family (App. A.7 follows Finn et al. 2017, but its values are not legible "
        "in the text). `paper` runs the cpu preset's 5,000 steps: App. A.7 states no "
        "schedule. Both models are App. A.7's: each token (x, y) (the query's (x, 0)) "
        "embedded in D = 40 by a linear map without bias, then through an MLP of 160 GELU "
        "units with the residual of a Transformer block (App. A.8), its last entry read as "
        "the target; then one attention layer, trained, or (the control, sec. 3) fixed to "
        "the GD construction with a learned rate, which trains the MLP by backpropagation "
        "through one GD step on a linear read-out. The same seed initialises both MLPs, as "
        "in App. A.7. The 15% band is ours (the paper shows the curves in a figure). Thesis "
        "Fig. 2.8's comparison: a run trains the model and, beside it, its control twin "
        "(twin_control: the same network with the layer fixed to the GD construction, from "
        "the same initial weights, on the same batches, its own Adam; the twin is part of "
        "the learner, so the best-validated state holds both), and compares them on 1,000 "
        "held-out tasks: mean ||a - b|| over mean ||b|| (b the twin's) of the initial "
        "prediction (the query's target slot after the token embedding and MLP, before "
        "attention), of the final prediction, and of its derivative with respect to the "
        "query's x (methods/analyses/twin.py). The caption gives no number: 'similar' as "
        "20% and 'strong alignment' as 10% are ours.",
        figure=validation_curves(
            "ICML'23 sec. 3, Fig. 4: sine regression, a trained LSA layer on the MLP's tokens "
            "against the GD control",
            ("MLP + 1 trained LSA layer", trained), ("MLP + 1 GD step (the control)", control)),
    )


def _interleaved() -> Table:
    claims = []
    for name, settings in (("U(-1, 1)", {"queries": "1", "val_every": "100"}),
                           ("U(-0.5, 0.5)", INTERLEAVED_HALF)):  # fmt: skip
        gd = f"one GD step, {name}"
        trained = f"trained 2-layer model (softmax, then linear) = one GD step, {name}"
        analysed = f"the trained model on the analysis tasks, {name}"
        two = f"two GD steps (a rate per step), {name}"
        budget = run_budget(1000, 5000, STEPS_INTERLEAVED, interleaved_paper(2))

        def lsa(label: str, metric: str, settings=settings, budget=budget, **target) -> Claim:
            return Claim(label, "linreg-icl-interleaved", "lsa", metric, settings, budget,
                         cost_s=run_cost(20.0, 96.0, 780.0 * STEPS_INTERLEAVED / 5000),
                         **target)  # fmt: skip

        claims += [
            Claim(gd, "linreg-icl-interleaved", "gd", LOSS, settings,
                  run_budget(200, 500, 500, PAPER_A12), cost_s=run_cost(1.8, 2.0, 3.0)),
            Claim(f"hand-built copy + GD layers = one GD step, {name} (paired)",
                  "linreg-icl-interleaved", "copy_gd", LOSS, settings,
                  run_budget(200, 500, 500, PAPER_A12), versus=gd, tolerance=0.01, relative=True,
                  cite="ICML'23 sec. 4, Prop. 3, App. A.5 (the copy construction)",
                  cost_s=run_cost(3.0, 4.0, 6.0)),
            lsa(trained, LOSS, versus=gd, tolerance=0.05, relative=True, provenance="figure",
                cite="ICML'23 sec. 4, Fig. 5; thesis Fig. 2.9 (the trained model matches one "
                "GD step)"),
            lsa(analysed, "final/interleaved/model_loss"),
            lsa(f"without its first layer's update of the query: unchanged, {name}",
                "final/interleaved/query_kept_loss", versus=analysed, tolerance=0.02,
                relative=True, provenance="derived",
                cite="our ablation: copy-then-GD needs the first layer for the context only"),
            # Thesis Fig. 2.9 right: the first layer's output at x_i depends on the next token
            # (y_i); at the end of training only (the figure's "before the jump" is not held).
            lsa(f"trained 2-layer model: its first layer's x tokens read their next token "
                f"(share at least 0.25), {name}", "final/interleaved/next_token_share",
                target=0.25, check="at_least", provenance="derived",
                cite="thesis Fig. 2.9 right and sec. 2.4: 'token e_j transformed by the first "
                "self-attention layer becomes notably dependant on the neighboring token "
                "e_{j+1} while staying independent on the others'; 0.25 ours: 10x the 1/40 "
                "of a layer reading the 40 other tokens alike"),
            # "matches one step of GD, not two" (thesis Fig. 2.9): two steps at fitted rates
            # on the same tasks, the trained model held above them.
            Claim(two, "linreg-icl-interleaved", "gd", LOSS, {**settings, "steps": "2"},
                  run_budget(500, 2000, 2000, PAPER_A12), cost_s=run_cost(3.0, 8.0, 10.0)),
            lsa(f"trained 2-layer model (softmax, then linear): above two GD steps, {name} "
                "(paired)", LOSS, versus=two, check="at_least", provenance="published",
                cite="thesis Fig. 2.9 (caption: 'The loss of trained TFs matches one step of "
                "GD, not two')"),
            # Without softmax the model did not train (ICML'23 sec. 4, thesis sec. 2.4),
            # though one-hot positions let a linear first layer copy each x_i exactly.
            lsa(f"2 linear layers (no softmax): at least one GD step + 10%, {name} (paired)",
                LOSS, settings={**settings, "first_layer": "same"}, versus=gd,
                check="at_least", tolerance=-0.1, relative=True, provenance="published",
                cite="ICML'23 sec. 4: 'we were not able to train the Transformer with linear "
                "self-attention layers, but had to incorporate the softmax operation in the "
                "first layer'; thesis sec. 2.4 (the 10% margin is ours)"),
        ]  # fmt: skip
    return Table(
        "icml23-interleaved",
        "Interleaved tokens x_1, y_1, ..., x_q: a softmax copy layer then a GD layer",
        f"{_ICML23}, sec. 4 ('Do self-attention layers build regression tasks?'), Prop. 3, "
        "App. A.5, Fig. 5; thesis sec. 2.4, Fig. 2.9",
        tuple(claims),
        note="The hand-built model (copy_gd) copies each x_i into its y_i token (softmax on "
        "positions, scale 50) and takes one GD step at the closed-form rate. The ablation "
        "takes the trained first layer's update off the query: a copy-then-GD model needs "
        "that layer for the context only, so its loss stays; where it does not, the first "
        "layer computes on the query too, and the model is not one GD step. The public code "
        "draws U(-0.5, 0.5) for this setting, the paper's text U(-1, 1). Bands (5%, 2%) are "
        "ours. cpu: one query, 256 tasks per step, 5,000 steps, init std 0.02. paper: 2,048 "
        "tasks, and the public code's training in this setting (normal_token_construct.ipynb; "
        "App. A.12 gives no value legibly): Adam at 1e-3, gradients clipped to global norm 10, "
        "Haiku's fan-in init at scale 0.02 / 2 (std 0.0177 on these 32-wide tokens; 0.0224 on "
        "the notebook's 20-wide ones), no token clipping, 10,000 steps. That init is near "
        "cpu's 0.02, which left the plateau at U(-1, 1): the suite's stall from std 0.002 is "
        "not expected here. The 2-layer all-linear model reads the same tokens, one-hot "
        "positions included, so its first layer can copy each x_i into its y_i token exactly "
        "(a shift of positions in W_K^T W_Q): its failure to train is not built in. The "
        "next-token share is the norm of the first layer's Jacobian at each x_i token with "
        "respect to y_i, over its sum over the other tokens (the x_i token itself, which the "
        "residual passes on, left out), on 16 sequences: 1 for a copy of y_i into x_i, 1/40 "
        "for a layer reading all tokens alike; an untrained model reads about 0.05. Which "
        "way the copy goes is the model's choice: the y tokens' share on their x is logged "
        "too (final/interleaved/previous_token_share).",
        figure=TableFigure(
            "ICML'23 sec. 4, Fig. 5: training on interleaved tokens (the plateau, then GD)",
            tuple(Panel(f"Validation loss over training, {name}", "iteration", "test loss", (
                History("trained 2-layer model", f"trained 2-layer model (softmax, then linear)"
                        f" = one GD step, {name}", "val/loss"),
                Level("GD (1 step)", line=f"one GD step, {name}"),
                Level("copy + GD (hand-built)",
                      line=f"hand-built copy + GD layers = one GD step, {name} (paired)"),
            ), log_y=True) for name in ("U(-1, 1)", "U(-0.5, 0.5)")),
        ),  # fmt: skip
    )


_DISTRIBUTIONS = ("uniform", "normal", "laplace", "exponential")


def _ood_inputs() -> Table:
    claims = []
    for dist in _DISTRIBUTIONS:
        gd = f"one GD step, {dist} inputs"
        claims += [
            lsa_half(gd, f"final/ood/dist_{dist}_gd"),
            lsa_half(f"1-layer LSA = one GD step, {dist} inputs", f"final/ood/dist_{dist}_model",
                     versus=gd, tolerance=0.1, relative=True, provenance="figure",
                     cite="ICML'23 App. A.2, Fig. 6 (other input distributions)"),
        ]  # fmt: skip
    return Table(
        "icml23-ood-inputs",
        "Trained on uniform inputs, tested on normal, Laplace and exponential ones: the LSA "
        "layer stays with one GD step",
        f"{_ICML23}, App. A.2, Fig. 6 (its two right columns)",
        tuple(claims),
        note="Each distribution has the training inputs' variance; normal and Laplace are "
        "centred, the exponential is not (a shift too). GD keeps the rate fitted on uniform "
        "inputs. The 10% band is ours.",
        figure=TableFigure(
            "ICML'23 App. A.2, Fig. 6: test inputs from other distributions",
            (Panel("Test loss by input distribution", "0 uniform, 1 normal, 2 Laplace, "
                   "3 exponential", "test loss", (
                       Points("LSA", tuple((i, f"1-layer LSA = one GD step, {d} inputs")
                                           for i, d in enumerate(_DISTRIBUTIONS))),
                       Points("GD (1 step)", tuple((i, f"one GD step, {d} inputs")
                                                   for i, d in enumerate(_DISTRIBUTIONS))),
                   ), log_y=True),),
        ),  # fmt: skip
    )


def _ablations() -> Table:
    gd = "one GD step, U(-0.5, 0.5)"
    budget = run_budget(1000, 3000, STEPS_RECURRENT, lsa_paper(1))

    def variant(label: str, settings: dict[str, str], cite: str, metric: str = LOSS,
                **target) -> Claim:  # fmt: skip
        target = {"versus": gd, "provenance": "figure", **target}
        return Claim(label, "linreg-icl", "lsa", metric, {**HALF, **settings}, budget,
                     cite=cite, cost_s=run_cost(8.0, 25.0, 120.0), **target)  # fmt: skip

    repeat = "50 dampened GD steps (damp 0.75)"
    # Multiple heads and MLPs: "qualitatively equivalent results" (sec. 4, App. Figs. 7-8);
    # softmax attention and LayerNorm: worse than GD (App. A.9, Figs. 12 and 14), a second
    # softmax head helping "drastically". Bands and directions as the text states them.
    same = "ICML'23 sec. 4: multiple heads and MLPs give 'qualitatively equivalent results' " \
        "(App. Figs. 7-8)"  # fmt: skip
    softmax = "ICML'23 App. A.9, Fig. 12"
    one_head = "1 layer, softmax attention, 1 head: above GD"
    variants = (
        ("2 heads = GD", {"heads": "2"}, same, dict(tolerance=0.02, relative=True)),
        ("4 heads = GD", {"heads": "4"}, same, dict(tolerance=0.02, relative=True)),
        ("an MLP (width 64) = GD", {"mlp": "64"}, same, dict(tolerance=0.1, relative=True)),
        ("LayerNorm: above GD", {"layernorm": "true"},
         "ICML'23 App. A.9, Fig. 14(a): LayerNorm before the layer, 'a decrease in performance "
         "compared to GD'", dict(check="at_least")),
        ("softmax attention, 1 head: above GD", {"softmax": "true"}, softmax,
         dict(check="at_least")),
        ("softmax attention, 2 heads: above GD", {"softmax": "true", "heads": "2"},
         f"{softmax}: two heads have 'difficulties to match the loss values of a model "
         "trained with GD'", dict(check="at_least")),
        ("softmax attention, 2 heads: below 1 head", {"softmax": "true", "heads": "2"},
         f"{softmax}: 'performance increases drastically when using two heads instead of "
         "one'", dict(check="at_most", versus=one_head)),
    )  # fmt: skip
    claims = [gd_half(gd)]
    claims += [variant(f"1 layer, {label}", settings, cite, **target)
               for label, settings, cite, target in variants]  # fmt: skip
    # Alignment with GD (ICML'23 App. A.9, Figs. 12 and 14; thesis Fig. 2.11's center
    # column), on the same runs: the sensitivity cosine, against the linear layer's.
    cosine, linear = "final/align/sens_cosine", "1 layer, linear: sensitivity cosine with GD"
    one_cosine = "1 layer, softmax attention, 1 head: cosine with GD below the linear layer's"
    below = dict(metric=cosine, check="at_most", versus=linear, provenance="published")
    claims += [
        lsa_half(linear, cosine),
        variant(one_cosine, {"softmax": "true"}, "thesis Fig. 2.11 (caption, center column): "
                "'The alignment suffers significantly for single-head softmax SA'", **below),
        variant("1 layer, softmax attention, 2 heads: cosine with GD at least 1 head's",
                {"softmax": "true", "heads": "2"}, "ICML'23 App. A.9: two heads lead 'to a "
                "very much improved alignment of the trained model and GD'", metric=cosine,
                check="at_least", versus=one_cosine, provenance="published"),
        variant("1 layer, softmax attention, 2 heads: cosine with GD below the linear layer's",
                {"softmax": "true", "heads": "2"}, "thesis Fig. 2.11 (caption, center "
                "column): 'good but not as precise alignment when compared to linear "
                "Transformers'", **below),
        variant("1 layer, LayerNorm: cosine with GD below the linear layer's",
                {"layernorm": "true"}, "ICML'23 App. A.9, Fig. 14: 'a decrease in alignment "
                "between models generated by the Transformer and models trained with GD'",
                **below),
    ]  # fmt: skip
    # Out of distribution (thesis Fig. 2.11, right column): two softmax heads nearer GD than
    # one. Each seed's GD reference is the same for both (its tasks), so the losses compare
    # directly. Teacher scaling only: scaled-up inputs saturate the softmax below GD's loss,
    # where "nearer GD" and "more robust" point opposite ways.
    robust = ("thesis Fig. 2.11 (caption, right column): 'The two-headed self-attention "
              "compared to the single-head layer shows similar robust out-of-distribution "
              "behavior compared to gradient descent'; the direction (2 heads' loss at most 1 "
              "head's, both above GD's) is our reading, no margin")
    for alpha in (2, 5):
        ood = f"final/ood/teacher_x{alpha}_model"
        one_ood = f"1 layer, softmax attention, 1 head: loss with the teacher scaled by {alpha}"
        claims += [
            variant(one_ood, {"softmax": "true"}, "", metric=ood, versus=None),
            variant(f"1 layer, softmax attention, 2 heads: loss with the teacher scaled by "
                    f"{alpha} at most 1 head's (paired)", {"softmax": "true", "heads": "2"},
                    robust, metric=ood, check="at_most", versus=one_ood,
                    provenance="derived"),
        ]  # fmt: skip
    # The two softmax heads' W_K^T W_Q, each scaled by the last diagonal entry of its P W_V
    # (ICML'23 App. A.9, Fig. 11; thesis Fig. 2.10): off-diagonals that cancel in the sum.
    heads = "1 layer, softmax attention, 2 heads: off-diagonal share of the more diagonal head"
    cancel = ("ICML'23 App. A.9, Fig. 11: 'an almost perfect cancellation (right plot) of the "
              "off-diagonal terms'; thesis Fig. 2.10")
    two = {"softmax": "true", "heads": "2"}
    claims += [
        variant(heads, two, "", metric="final/heads/offdiag_share_min", versus=None),
        variant("1 layer, softmax attention, 2 heads: their sum more diagonal than either head",
                two, cancel, metric="final/heads/offdiag_share_sum", check="at_most",
                versus=heads, provenance="published"),
        variant("1 layer, softmax attention, 2 heads: off-diagonals of opposite sign (cosine "
                "at most -0.5)", two, f"{cancel} (caption: 'almost perfect sign reversed values "
                "on the off-diagonal terms'; the -0.5 is ours)",
                metric="final/heads/offdiag_cosine", target=-0.5, check="at_most", versus=None,
                provenance="derived"),
    ]  # fmt: skip
    half = "50 dampened GD steps (damp 0.5)"
    quick = ("ICML'23 App. A.6, Fig. 10 left: 'for both methods we observe quick divergence "
             "when applied multiple times'; thesis App. 2.6.5, Fig. 2.12 left (worse than "
             "predicting zero within 50: ours)")
    claims += [
        lsa_half("trained layer repeated undampened: worse than predicting zero within 50",
                 "final/repeat/d1.0_diverge_k_model", target=50.0, check="at_most", cite=quick,
                 provenance="derived"),
        lsa_half("GD repeated undampened (fitted rate): worse than predicting zero within 50",
                 "final/repeat/d1.0_diverge_k_gd", target=50.0, check="at_most", cite=quick,
                 provenance="derived"),
        lsa_half(repeat, "final/repeat/d0.75_k50_gd"),
        lsa_half("trained layer repeated 50 times (damp 0.75) = dampened GD",
                 "final/repeat/d0.75_k50_model", versus=repeat, tolerance=0.1, relative=True,
                 provenance="published",
                 cite="thesis sec. 2.3 item 3, App. 2.6.5, Fig. 2.12 (dampened repetition)"),
        lsa_half(half, "final/repeat/d0.5_k50_gd"),
        lsa_half("trained layer repeated 50 times (damp 0.5) = dampened GD",
                 "final/repeat/d0.5_k50_model", versus=half, tolerance=0.1, relative=True,
                 provenance="figure",
                 cite="thesis App. 2.6.5, Fig. 2.12 (other dampenings), at a dampening of ours "
                 "(0.5)"),
    ]  # fmt: skip
    return Table(
        "icml23-ablations",
        "Heads, LayerNorm and MLPs, softmax attention, and a trained layer repeated 50 times",
        f"{_ICML23}, sec. 4, App. A.6 (Fig. 10) and A.9 (Figs. 7-8, 11, 12, 14); {_THESIS}, "
        "sec. 2.3 item 3, App. 2.6.5, Figs. 2.10, 2.12",
        tuple(claims),
        note="One layer at U(-0.5, 0.5), each variant against one fitted GD step on the same "
        "tasks. Directions are the paper's (App. A.9: softmax attention and LayerNorm do "
        "worse than GD, two softmax heads much better than one); bands are ours (the paper "
        "shows these in figures): 2% where the variant can express GD exactly, 10% where it "
        "must approximate it. The repetition applies the "
        "trained 1-layer model's update 50 times at 0.75 of its size, beside 50 GD steps "
        "dampened alike (thesis sec. 2.3 item 3, App. 2.6.5); undampened, the number of "
        "repetitions until the loss is first above the zero predictor's or not finite (51: "
        "not within 50; methods.analyses.in_context.diverged_at). The two softmax heads' "
        "weights: per head, W_K^T W_Q's x block scaled by the last diagonal entry of its P W_V "
        "(App. A.9), its off-diagonal share ||M - diag M|| / ||M||, that of the heads' sum, "
        "and the cosine between the heads' off-diagonal parts "
        "(methods.analyses.in_context.head_cancellation). Two of three cpu seeds show the "
        "paper's picture (cosine -0.98, the sum's off-diagonal share 0.03-0.04 against "
        "0.16-0.22 per head); seed 0 ends at a loss of 0.39 (0.29, 0.22 for the others) with "
        "heads that do not cancel: a seed-dependent outcome of training (App. A.11 "
        "describes seed-dependent instabilities of single-head layers in the main text's "
        "experiments, which two heads mitigate; it says nothing of softmax heads).",
        figure=TableFigure(
            "ICML'23 sec. 4 and App. A.9, thesis App. 2.6.5: variants, and the repeated layer",
            (
                Panel("Test loss by variant", "0 GD, 1-2 heads 2/4, 3 MLP, 4 LN, 5-6 softmax "
                      "1/2 heads", "test loss", (
                          Points("LSA variant", tuple((i + 1, f"1 layer, {label}") for i, (
                              label, _, _, _) in enumerate(variants[:-1]))),
                          Points("GD (1 step)", ((0, gd),)),
                      )),
                Panel("Trained layer repeated", "repetitions K", "test loss", (
                    History("repeated layer, damp 0.75", repeat, "analysis/repeat_d0.75_model"),
                    History("dampened GD, 0.75", repeat, "analysis/repeat_d0.75_gd"),
                    History("repeated layer, damp 0.5", repeat, "analysis/repeat_d0.5_model"),
                    History("dampened GD, 0.5", repeat, "analysis/repeat_d0.5_gd"),
                ), log_y=True),
            ),
        ),  # fmt: skip
    )


#: ICML'23 App. A.12, Fig. 16's sub-captions: one fixed batch of 128, 512 or 2,048 tasks
#: ((d), 8,192 tasks, is left out: four times 2,048's cost, and A.11's grokking run is
#: another model).
_BATCHES = (128, 512, 2048)


def _fixed_batch(size: int) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """Settings and budget of a 1-layer LSA trained on one fixed batch of ``size`` tasks:
    every step is that batch, whole (``pool_inputs``: teachers, inputs and targets fixed;
    ``meta_batch`` = the batch), at every preset."""
    batch = str(size)
    settings = {**HALF, "task_pool": batch, "pool_inputs": "true"}
    paper = {**lsa_paper(1), "meta_batch": batch}
    return settings, run_budget(1000, 3000, STEPS_RECURRENT, paper, meta_batch=batch)


#: ICML'23 App. A.11's grokking run: one block, LSA then a residual MLP (4x the token
#: width of 11: ours, the Transformer convention; A.11 gives no width), on one fixed dataset
#: of 8,192 tasks (teachers, inputs and targets) drawn in mini-batches of the preset's size.
_BLOCK = "one block (LSA + MLP) trained on a fixed dataset of 8192 tasks: test loss"
_BLOCK_SETTINGS = {**HALF, "task_pool": "8192", "pool_inputs": "true", "mlp": "44"}
_BLOCK_BUDGET = run_budget(1000, 5000, STEPS_RECURRENT, lsa_paper(1))


def _task_pool() -> Table:
    gd = "one GD step, U(-0.5, 0.5)"
    claims = [gd_half(gd)]
    cite = "ICML'23 App. A.12, Fig. 16 ({} tasks): 'align remarkable well with the provided " \
           "construction and therefore gradient descent even when provided with an arguably " \
           "very small number of training tasks'"
    # cpu: measured (the shipped runs, 2026-11-28); quick and paper: scaled by steps.
    costs = {128: run_cost(8.0, 17.0, 28.0), 512: run_cost(12.0, 28.0, 46.0),
             2048: run_cost(24.0, 62.0, 103.0)}  # fmt: skip
    for size in _BATCHES:
        settings, budget = _fixed_batch(size)
        basis = f"1-layer LSA trained on one fixed batch of {size} tasks: test loss"
        claims.append(Claim(basis, "linreg-icl", "lsa", LOSS, settings, budget,
                            cost_s=costs[size]))  # fmt: skip
        claims.append(
            Claim(f"trained on {size} fixed tasks = one GD step (paired)", "linreg-icl", "lsa",
                  LOSS, settings, budget, versus=gd, tolerance=0.05, relative=True,
                  cite=cite.format(size), cost_s=costs[size])
        )  # fmt: skip
    for smaller, larger in zip(_BATCHES, _BATCHES[1:], strict=False):
        settings, budget = _fixed_batch(larger)
        claims.append(
            Claim(f"test loss falls from {smaller} to {larger} training tasks", "linreg-icl",
                  "lsa", LOSS, settings, budget,
                  versus=f"1-layer LSA trained on one fixed batch of {smaller} tasks: test loss",
                  check="at_most", provenance="derived",
                  cite="ours: the trend across Fig. 16's batches (ICML'23 App. A.12)",
                  cost_s=costs[larger])
        )  # fmt: skip
    # App. A.11, Fig. 15 (right): one Transformer block (the LSA layer and an MLP) trained
    # on a fixed dataset of 8,192 tasks, in mini-batches; its test loss ends near GD's.
    claims += [
        Claim(_BLOCK, "linreg-icl", "lsa", LOSS, _BLOCK_SETTINGS, _BLOCK_BUDGET,
              cost_s=run_cost(12.0, 45.0, 110.0)),
        Claim(f"{_BLOCK} = one GD step, within 10% (paired)", "linreg-icl", "lsa", LOSS,
              _BLOCK_SETTINGS, _BLOCK_BUDGET, versus=gd, tolerance=0.10, relative=True,
              cite="ICML'23 App. A.11, Fig. 15 (right): a single Transformer block trained on "
              "8192 tasks, whose test loss rises, then drops, 'almost matching the desired GD "
              "loss'; 'almost' as 10% is ours", cost_s=run_cost(12.0, 45.0, 110.0)),
    ]  # fmt: skip
    settings, budget = _fixed_batch(_BATCHES[0])
    claims.append(
        Claim(f"trained on {_BATCHES[0]} fixed tasks: its own batch fits better than new tasks",
              "linreg-icl", "lsa", "final/pool/train_loss", settings, budget,
              versus=f"1-layer LSA trained on one fixed batch of {_BATCHES[0]} tasks: test loss",
              check="at_most", provenance="derived",
              cite="ours: memorisation, the training batch's loss against new tasks'",
              cost_s=costs[_BATCHES[0]])
    )  # fmt: skip
    return Table(
        "icml23-task-pool",
        "Training on one fixed batch of tasks (128, 512, 2,048): the LSA layer still "
        "matches one GD step on new tasks",
        f"{_ICML23}, App. A.12, Fig. 16 (training on a single fixed batch of tasks); App. "
        "A.11, Fig. 15 right (one block on a fixed dataset of 8,192 tasks)",
        tuple(claims),
        note="As App. A.12 trains: every step is the same fixed batch of K tasks, teachers, "
        "inputs and targets (task_pool = meta_batch = K, pool_inputs); validation and test "
        "tasks are new, and the meta-test uses the best-validated weights (early stopping "
        "on new tasks). The paper states the match in words ('align remarkable well'); the "
        "5% band is ours. The paper trains on one query per task (App. A.12's tokens); the "
        "cpu and quick presets use 20, as every U(-0.5, 0.5) table here; paper uses 1. "
        "The batch is drawn once from pool_seed (0), the same for every seed: the seeds "
        "vary the initialisation and the validation tasks, not the batch. "
        "Fig. 16(d), 8,192 tasks, is not run (four times 2,048's cost). The trend and "
        "memorisation lines are ours (final/pool/train_loss: the loss on the training "
        "batch itself). App. A.11's grokking run (Fig. 15, right): one block, the LSA layer "
        "then a residual MLP of 44 hidden units (4x the token width: ours; A.11 gives none), "
        "trained on a fixed dataset of 8,192 tasks in mini-batches of the preset's size "
        "(A.11, 'carefully tuning the learning rate and batchsize', states neither), 5,000 "
        "steps at cpu; the line holds its final test loss near one GD step's, and the "
        "figure shows its training and validation losses over training (A.11's "
        "transitions: the test loss first rising, then dropping).",
        figure=TableFigure(
            "memorisation and generalisation by the number of training tasks",
            (Panel("Test loss by training tasks", "training tasks (one fixed batch)",
                   "test loss", (
                Points("LSA, new tasks", tuple((k, f"1-layer LSA trained on one fixed batch "
                                                   f"of {k} tasks: test loss") for k in _BATCHES)),
                Points("LSA, its training batch", tuple(
                    (k, f"1-layer LSA trained on one fixed batch of {k} tasks: test loss")
                    for k in _BATCHES), metric="final/pool/train_loss"),
                Points("GD (1 step)", tuple((k, gd) for k in _BATCHES)),
            ), log_x=True, log_y=True),
             Panel("One block, 8,192 fixed tasks (Fig. 15 right)",
                   "iteration", "loss (MSE)", (
                       History("its training mini-batches", _BLOCK, "train/loss"),
                       History("validation (new tasks)", _BLOCK, "val/loss"),
                   ), log_y=True)),
        ),  # fmt: skip
    )


# -- the ICML 2023 tables (the blog post's are in icl_blog.py) ------------------------------
TABLES = (_icml23_one_step(), _multistep(), _gamma(), _alignment(), _deep(), _sine(),
          _interleaved(), _ood_inputs(), _ablations(), _task_pool())  # fmt: skip
