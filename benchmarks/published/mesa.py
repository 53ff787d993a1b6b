"""The mesa layer (thesis ch. 3) as tables: one mesa layer against linear attention on
autoregressive linear dynamics, against deep linear and softmax stacks and the least-squares
optimum, and what linear probes read from a deep stack's residual stream."""

from __future__ import annotations

from benchmarks.published.claims import Claim, Table
from benchmarks.published.figures import History, Level, Panel, Points, TableFigure

_CH3 = "thesis ch. 3"
#: What the thesis states of its single layer's tokens, against the suite's.
_TOKENS_NOTE = (
    "The thesis' single layer reads the 3-channel tokens e_t = (0, s_t, s_t-1) and writes "
    "its prediction into the first channel (sec. 3.3, sec. 3.5.1); the suite's reads "
    "e_t = (s_t, s_t-1) and predicts through a learned linear readout. D = 10, T = 50, "
    "noise 0.01 and the training budget are the suite's: ch. 3 omits its experimental "
    "details (they are in the online version it points to).")


def _mesa() -> Table:
    lsa = "1 causal linear-attention layer, 2 heads"
    budget = {"quick": {"iterations": "300"}, "cpu": {}, "paper": {}}
    return Table(
        "mesa-lindyn",
        "One mesa layer beats one (2-head) linear-attention layer on linear dynamics",
        f"{_CH3}, sec. 3.5.1, Fig. 3.2 (the mesa-layer on autoregressive linear dynamics)",
        (
            # The thesis' baseline is a 2-head linear self-attention layer (Fig. 3.2B).
            Claim(lsa, "lindyn", "causal_lsa", "final/test_loss", {"heads": "2"}, budget,
                  cost_s={"quick": 8.5, "cpu": 120.0, "paper": 120.0}),
            Claim("1 mesa layer below it (paired)", "lindyn", "mesa", "final/test_loss", {},
                  budget, versus=lsa, check="at_most",
                  cite="thesis Fig. 3.2C (caption: 'Linear-SA is greatly outperformed by a "
                  "single mesa-layer'), sec. 3.5.1",
                  cost_s={"quick": 12.8, "cpu": 195.0, "paper": 195.0}),
            *(line for t in (5, 10, 49) for line in (
                Claim(f"{lsa}: loss at t = {t}", "lindyn", "causal_lsa", f"final/loss_t{t}",
                      {"heads": "2"}, budget, cost_s={"quick": 8.5, "cpu": 120.0,
                                                      "paper": 120.0}),
                Claim(f"1 mesa layer below it at t = {t} (paired)", "lindyn", "mesa",
                      f"final/loss_t{t}", {}, budget, versus=f"{lsa}: loss at t = {t}",
                      check="at_most", cite=_EVERY_T,
                      cost_s={"quick": 12.8, "cpu": 195.0, "paper": 195.0}),
            )),
        ),  # fmt: skip
        note="The cpu and paper presets are the benchmark's defaults (2,000 iterations of 64 "
        "sequences); quick trains 300. The lines hold the direction only (the thesis: "
        "'greatly outperformed'), over the whole sequence and at three of its positions "
        "(ours; at t = 1 no layer has seen a transition). " + _TOKENS_NOTE,
    )


#: Fig. 3.2C's caption on the mesa layer at each position of the sequence.
_EVERY_T = ("thesis Fig. 3.2C (caption: 'Linear-SA is greatly outperformed by a single "
            "mesa-layer, which optimally solves the autoregressive learning problem at every "
            "time point t'; the positions are ours)")


def _one_step() -> Table:
    gd = "one GD step on the transitions seen (rate fitted in closed form)"
    budget = {"quick": {"iterations": "300"}, "cpu": {}, "paper": {}}
    cite = ("thesis Fig. 3.2B-C (caption), sec. 3.5.1; table 3.1, app. 3.7.3.1 (the 2-head "
            "layer's L 0.892-0.894 against L_GD 0.902-0.915: 1.0-2.5% below it in each of "
            "5 seeds)")
    # The thesis reports the 2-head layer only: the 1-head line is the suite's own test.
    one_head = ("ours: the thesis reports the 2-head layer only (Fig. 3.2, table 3.1); "
                "app. 3.7.3.1 finds one head worse than two")

    def layer(heads: int, cost: float, **source) -> Claim:
        return Claim(f"1 causal linear-attention layer, {heads} head(s) = one GD step "
                     "(paired)", "lindyn", "causal_lsa", "final/test_loss",
                     {"heads": str(heads)}, budget, versus=gd, tolerance=0.03, relative=True,
                     cost_s={"quick": 8.5, "cpu": cost, "paper": cost}, **source)  # fmt: skip

    # Every line below reads the 2-head layer's runs (2,000 steps at cpu).
    two_head_cost = {"quick": 8.5, "cpu": 120.0, "paper": 120.0}
    layers = {2: layer(2, 120.0, cite=cite),
              1: layer(1, 100.0, provenance="derived", cite=one_head)}  # fmt: skip
    # The thesis' own relation between the two (app. 3.7.3.1), on the same runs.
    two_heads = Claim("1 causal linear-attention layer: 2 heads at or below 1 head (paired)",
                      "lindyn", "causal_lsa", "final/test_loss", {"heads": "2"}, budget,
                      versus=layers[1].label, check="at_most",
                      cite="thesis app. 3.7.3.1 ('a performance increase when changing from "
                      "single-head to two-head attention layers')",
                      cost_s=two_head_cost)  # fmt: skip

    # Fig. 3.10: the trained 2-head layer's weight products, against Eq. 3.5's construction.
    structure = Claim(
        "1 causal linear-attention layer, 2 heads: one mesa-GD step is its dominant pattern "
        "(|cosine| at least 0.71)", "lindyn", "causal_lsa", "final/weights/mesa_gd_cosine",
        {"heads": "2"}, budget, target=0.71, check="at_least",
        cite="thesis Fig. 3.10 (caption: 'The dominant pattern obtained after learning "
        "corresponds to our mesa-gradient descent construction'), sec. 3.5.1 ('the dominant "
        "pattern coincides with our one-step mesa-gradient descent construction, Eq. 3.5, "
        "plus some identification noise'); 0.71 ours: cos^2 = 0.5, the construction carrying "
        "half the products' squared norm", cost_s=two_head_cost)

    # Sec. 3.5.1, footnote 1: W* orthogonal on purpose, as converging dynamics led the
    # thesis' layers to other algorithms. Its weights against the same construction.
    converging = Claim(
        "1 causal linear-attention layer, 2 heads, converging dynamics (W* = 0.9 x "
        "orthogonal): its mesa-GD |cosine| at least 0.1 below the orthogonal dynamics' "
        "(paired)", "lindyn", "causal_lsa", "final/weights/mesa_gd_cosine",
        {"heads": "2", "contraction": "0.9"}, budget, versus=structure.label,
        check="at_most", tolerance=-0.1,
        cite="thesis sec. 3.5.1, footnote 1 ('This detail turns out to be important; we "
        "found that converging linear dynamics led to different inference algorithms'); "
        "the contraction 0.9 and the 0.1 margin ours: the footnote names neither a rate "
        "nor the algorithms", cost_s=two_head_cost)

    # Fig. 3.2B: RevAlg-1 (Eq. 3.56) read off the same layer, against the layer itself.
    layer_loss = "1 causal linear-attention layer, 2 heads: its loss on RevAlg-1's sequences"
    revalg = (
        Claim(layer_loss, "lindyn", "causal_lsa", "final/weights/layer_loss", {"heads": "2"},
              budget, cost_s=two_head_cost),
        Claim("1 causal linear-attention layer, 2 heads: RevAlg-1 (Eq. 3.56, read off its "
              "weights) = the layer, within 6%", "lindyn", "causal_lsa",
              "final/weights/revalg_loss", {"heads": "2"}, budget, versus=layer_loss,
              tolerance=0.06, relative=True,
              cite="thesis Fig. 3.2B (caption: 'A trained 2-head linear self-attention layer "
              "(linear-SA) is perfectly described by a reverse-engineered mesa-gradient "
              "descent algorithm (RevAlg-1; see Eq. 3.56)'), app. 3.7.3.1, table 3.1; the 6% "
              "band is table 3.1's own largest gap between L_reduced and L (5.3%, seed 3)",
              cost_s=two_head_cost),
        Claim("1 causal linear-attention layer, 2 heads: without its GD terms (lambda_A,3/4 "
              "= 0) the algorithm read off it at least 50% above the layer", "lindyn",
              "causal_lsa", "final/weights/revalg_ablated_loss", {"heads": "2"}, budget,
              versus=layer_loss, check="at_least", tolerance=-0.5, relative=True,
              cite="thesis table 3.1 and its caption ('we compute the algorithms performance "
              "when only setting lambda_A,3/4 = 0 and observe a drastic loss increase'; "
              "L_ablation 1.722-1.764 against L 0.892-0.894, 93-97% above it in each of 5 "
              "seeds), app. 3.7.3.1; 'drastic' as 50% ours", cost_s=two_head_cost),
    )  # fmt: skip

    return Table(
        "mesa-one-step",
        "One linear-attention layer trained on linear dynamics is one GD step on the "
        "autoregressive least-squares objective",
        f"{_CH3}, sec. 3.5.1, Fig. 3.2, app. 3.7.3.1, table 3.1 (the reverse-engineered "
        "single layer)",
        (
            # The closed-form rate settles within a few batches; 200 is plenty.
            Claim(gd, "lindyn", "ar_gd", "final/test_loss", {"iterations": "200"},
                  cost_s={"quick": 10.0, "cpu": 10.0, "paper": 10.0}),
            *layers.values(),
            two_heads,
            structure,
            converging,
            *revalg,
            Claim("one GD step: its loss climbs back before the sequence ends "
                  "(non-monotonic)", "lindyn", "ar_gd", "final/loss_t_rise",
                  {"iterations": "200"}, target=0.0, check="at_least", tolerance=-0.05,
                  cite="thesis Fig. 3.2C (caption: 'one-step GD runs into capacity issues, "
                  "exhibiting non-monotonic MSE as a function of sequence length'; a rise of "
                  "at least 0.05 from its lowest point to the last position: ours)",
                  cost_s={"quick": 10.0, "cpu": 10.0, "paper": 10.0}),
        ),  # fmt: skip
        note="The same runs as mesa-lindyn's linear-attention layer (2 heads), beside one "
        "gradient step from W = 0 on the transitions seen so far with the rate that minimises "
        "the training loss (computed in closed form, nothing else learned), on the same test "
        "sequences. The 3% band is ours, set by the gap table 3.1 reports between trained "
        "models (L) and the GD algorithms read off them (L_GD); it is symmetric by choice: "
        "in table 3.1 the trained layer is below L_GD in every seed (by 1.0-2.5%), and the "
        "text says one GD step describes it 'very well' (Fig. 3.2C caption). The thesis "
        "states the relation for a 2-head layer; the 1-head line is ours (derived), and the "
        "thesis' own finding that two heads do better than one (app. 3.7.3.1) is held as a "
        "paired relation. Table 3.1's own values are not comparable: the settings behind "
        "them (the loss's normalisation, sequence length and training) are not given in the "
        "text we cite. The 2-head layer's weights are held to Eq. 3.5's construction as one "
        "trilinear map (the readout times each head's P W_V, against its W_K^T W_Q, summed "
        "over heads and symmetrised over the two reads of the same token: "
        "methods/analyses/mesa_structure.py), by |cosine|, blind to the rate and to how the "
        "heads split it; the readout's own term (the thesis' learned W_0) is left out. "
        "RevAlg-1 is the same products with each D x D block at its diagonal's mean, keeping "
        "Eq. 3.56's terms (keys on s_t'-1, queries on s_t, and the readout's s_t block: "
        "table 3.1's L_reduced); its loss and the layer's are measured on 256 sequences of "
        "their own. The algorithm with every lambda (Eq. 3.55) is scored too "
        "(final/weights/revalg_full_loss); the lambdas themselves are not logged. "
        "Converging dynamics (sec. 3.5.1, footnote 1): W* = 0.9 x a random orthogonal "
        "matrix (the task's contraction setting), the same layer's weights held to the "
        "same construction, paired with the orthogonal runs. A stronger contraction says "
        "nothing of algorithms here: at 0.5 the states fall below the noise within about ten "
        "steps, and a 2-head layer trained on it (3 seeds, 2026-11-29) ends at the zero "
        "predictor's loss (0.0347; predicting 0 gives about 0.034 + the noise's 0.0007), its "
        "weights at |cosine| 0.01 with the construction: no algorithm, not another one. "
        + _TOKENS_NOTE,
        figure=TableFigure(
            f"{_CH3}: a trained linear-attention layer and one GD step, by time step",
            (
                Panel("Loss by time step", "time step t", "0.5 ||s_t+1 - f_t||^2", (
                    History("one GD step (fitted rate)", gd, "analysis/loss_by_t"),
                    *(History(f"linear attention, {heads} head(s)", line.label,
                              "analysis/loss_by_t") for heads, line in layers.items()),
                ), log_y=True),
            ),
        ),  # fmt: skip
    )


#: Seconds per training step of each line on the 2-core CPU (one core each; 64 sequences,
#: T = 50, D = 10, two heads), measured; a run adds about 20 s of validation and analysis.
_STEP_S = {("linear", 1): 0.047, ("linear", 2): 0.091, ("linear", 4): 0.179,
           ("linear", 6): 0.278, ("softmax", 1): 0.012, ("softmax", 2): 0.018,
           ("softmax", 4): 0.040, ("softmax", 6): 0.063, ("deltanet", 1): 0.081,
           ("gla", 1): 0.072,
           # mesa-lindyn's 1-layer mesa run: 195 s at 2,000 steps, less 20 s of analysis.
           ("mesa", 1): 0.088}  # fmt: skip


def _costs(step_s: float, overhead_s: float, quick: int = 300, cpu: int = 2000,
           paper: int = 2000) -> dict[str, float]:  # fmt: skip
    """Wall seconds of one run per preset: steps times a measured step, plus validation and
    analysis."""
    return {p: n * step_s + overhead_s for p, n in
            (("quick", quick), ("cpu", cpu), ("paper", paper))}  # fmt: skip


_METHOD = {"linear": "causal_lsa", "softmax": "causal_softmax", "deltanet": "deltanet",
           "gla": "gla"}  # fmt: skip
LINEAR_DEPTHS, SOFTMAX_DEPTHS = (1, 2, 4, 6), (1, 2, 4, 6)


def _norm(kind: str, layers: int) -> dict[str, str]:
    """Linear stacks of 2 layers or more read through a pre-LayerNorm: without it, 6 layers
    overflow (inf loss) within 31-70 steps on every seed, 4 layers on one of three."""
    return {"layernorm": "true"} if kind == "linear" and layers > 1 else {}


#: Token widths against the suite's (s_t, s_t-1): the step's cost in proportion.
_WIDER = {"slot": 1.5, "memory": 2.0}


def _deep_tokens(layers: int, tokens: str = "") -> dict[str, str]:
    """The tokens a stack of ``layers`` reads: ``tokens`` where given; for 2 layers or more
    the thesis' 4-channel e_t = (0, s_t, s_t, s_t-1) (sec. 3.5.1; app. 3.7.3.2: 'which we
    use throughout all experiments when training deep Transformers'); one layer reads the
    suite's (s_t, s_t-1), which the mesa-GD construction is held on."""
    tokens = tokens or ("memory" if layers > 1 else "")
    return {"tokens": tokens} if tokens else {}


def _depth() -> Table:
    budget = {"quick": {"iterations": "300"}, "cpu": {}, "paper": {}}
    lsq, mesa = "least squares on the transitions seen (closed form)", "1 mesa layer"

    def stack(kind: str, layers: int, label: str = "", tokens: str = "",
              **relation) -> Claim:  # fmt: skip
        settings = {"heads": "2", "layers": str(layers), **_norm(kind, layers),
                    **_deep_tokens(layers, tokens)}  # fmt: skip
        step_s = _STEP_S[(kind, layers)] * _WIDER.get(settings.get("tokens", ""), 1.0)
        return Claim(label or f"{kind}, {layers} layer(s), 2 heads", "lindyn", _METHOD[kind],
                     "final/test_loss", settings, budget, cost_s=_costs(step_s, 20),
                     **relation)  # fmt: skip

    not_reach = dict(versus=mesa, check="at_least",
                     cite="thesis sec. 3.1 (a single mesa-layer outperforms deep linear and "
                     "softmax Transformers); for 6 layers Fig. 3.3A (caption) and sec. 3.5.1 "
                     "(a 6-layer model 'coming close to but still not matching a single "
                     "mesa-layer'); Fig. 3.3A shows no other depth")  # fmt: skip
    claims = [
        Claim(lsq, "lindyn", "ar_least_squares", "final/test_loss", {"iterations": "1"},
              cost_s={"quick": 8.0, "cpu": 8.0, "paper": 8.0}),
        Claim(mesa, "lindyn", "mesa", "final/test_loss", {}, budget, versus=lsq,
              check="at_most", tolerance=0.10, relative=True,
              cite="thesis Fig. 3.2C (caption: one mesa-layer 'optimally solves the "
              "autoregressive learning problem'), sec. 3.5.1",
              cost_s={"quick": 12.8, "cpu": 195.0, "paper": 195.0}),
        *(stack("linear", n, **not_reach) for n in LINEAR_DEPTHS),
        *(stack("softmax", n, **not_reach) for n in SOFTMAX_DEPTHS),
        stack("linear", 6, "linear, 6 layers below 2 layers",
              versus="linear, 2 layer(s), 2 heads", check="at_most",
              cite="thesis sec. 3.5.1 ('performance strongly improves with depth'; "
              "Fig. 3.3A shows the 6-layer model only)"),
        stack("deltanet", 1),
        stack("gla", 1),
        # App. 3.7.3.2: the thesis' tokens with memory against its more compact ones, on
        # the 2-layer stack (the 6-layer one costs ~3x); and the suite's own beside them.
        stack("linear", 2, "linear, 2 layers, tokens (0, s_t, s_t-1): within 10% of (0, s_t, "
              "s_t, s_t-1) (paired)", tokens="slot", versus="linear, 2 layer(s), 2 heads",
              tolerance=0.10, relative=True,
              cite="thesis app. 3.7.3.2 ('in practice we still use e_t = (0, s_t, s_t, "
              "s_{t-1}) ... both constructions e.g. e_t = (0, 0, s_t, s_{t-1}) or e_t = (0, "
              "s_t, s_{t-1}) reach similar performance'); the 10% band ours ('similar')"),
        stack("linear", 2, "linear, 2 layers, the suite's tokens (s_t, s_t-1): above (0, s_t, "
              "s_t, s_t-1) (paired)", tokens="constructed", versus="linear, 2 layer(s), 2 heads",
              check="at_least", provenance="derived",
              cite="ours: the suite's one-layer tokens are narrower and have no zero slot to "
              "write the prediction in, which both of the thesis' constructions keep (sec. "
              "3.5.1, app. 3.7.3.2); which of the two costs the loss is not separated"),
    ]
    curves = {"least squares": lsq, "mesa": mesa,
              "linear, 1 layer": "linear, 1 layer(s), 2 heads",
              "linear, 6 layers": "linear, 6 layer(s), 2 heads",
              "softmax, 6 layers": "softmax, 6 layer(s), 2 heads",
              "DeltaNet": "deltanet, 1 layer(s), 2 heads",
              "gated linear attention": "gla, 1 layer(s), 2 heads"}  # fmt: skip
    return Table(
        "mesa-lindyn-depth",
        "Deep linear and softmax stacks approach but do not reach one mesa layer, which "
        "approaches the least-squares optimum",
        f"{_CH3}, sec. 3.5.1, Figs. 3.2-3.3 (linear dynamics: the mesa layer against deep "
        "stacks)",
        tuple(claims),
        note="Linear dynamics, D = 10, T = 50, noise 0.01; every trained line 2,000 iterations "
        "of 64 sequences (the benchmark's defaults) at cpu and paper, 300 at quick (the "
        "thesis states none of these). The attention layers have 2 heads and a learned "
        "readout. Stacks of 2 or more layers read the thesis' 4-channel tokens e_t = (0, s_t, "
        "s_t, s_t-1) (tokens=memory: sec. 3.5.1; app. 3.7.3.2: 'throughout all experiments "
        "when training deep Transformers'); one layer reads the suite's (s_t, s_t-1) (the "
        "thesis' single layer reads (0, s_t, s_t-1)). Until 2026-11-29 every stack here read "
        "(s_t, s_t-1), narrower and with no zero slot to write a prediction in: the 6-layer "
        "linear stack ended at 1.16 on them, against 0.62 on the thesis' tokens. The thesis' "
        "single linear layer has 2 heads (Fig. 3.2B); its 6-layer linear model has 4 per "
        "layer (Fig. 3.11, app. 3.7.4). Of two more compact tokens the thesis reports "
        "similar performance but 'more training difficulties and instabilities' for the more "
        "compact (app. 3.7.3.2): two lines hold the 2-layer linear stack on (0, s_t, s_t-1) "
        "and on the suite's (s_t, s_t-1) against its 4-channel run. It states no LayerNorm "
        "and no heads for the softmax stacks, and shows only the 6-layer linear model against "
        "the mesa layer (Fig. 3.3A; the softmax stacks rest on sec. 3.1's statement). Here "
        "linear stacks of 2 or more layers read through a pre-LayerNorm (without it, on the "
        "suite's tokens, 6 linear layers overflowed within 31-70 steps on every seed, and 4 "
        "layers on one seed of three). The least-squares line is "
        "the minimum-norm solution on the transitions seen so far, computed in closed form "
        "(nothing trained); the mesa layer solves a regularised one (eq. 3.7). The "
        "10% band on the mesa layer is ours (the thesis states that one mesa layer solves the "
        "task optimally, Fig. 3.2C caption and sec. 3.5.1, and shows no least-squares curve). "
        "DeltaNet and gated linear attention (flash-linear-attention's recurrences) are peers "
        "from the field; the thesis has no number for them.",
        figure=TableFigure(
            f"{_CH3}: loss by time step, and by depth",
            (
                Panel("Loss by time step", "time step t", "0.5 ||s_t+1 - f_t||^2",
                      tuple(History(name, line, "analysis/loss_by_t")
                            for name, line in curves.items()), log_y=True),
                Panel("Loss by depth", "layers", "test loss", (
                    Points("linear attention", tuple(
                        (n, f"linear, {n} layer(s), 2 heads") for n in LINEAR_DEPTHS)),
                    Points("softmax attention", tuple(
                        (n, f"softmax, {n} layer(s), 2 heads") for n in SOFTMAX_DEPTHS)),
                    Level("1 mesa layer", line=mesa),
                    Level("least squares", line=lsq),
                ), log_y=True),
            ),
        ),  # fmt: skip
    )


PROBED_DEPTH = 6


def _probes() -> Table:
    """Probes on the 6-layer linear stack of :func:`_depth` (the same runs)."""
    budget = {"quick": {"iterations": "300"}, "cpu": {}, "paper": {}}
    settings = {"heads": "2", "layers": str(PROBED_DEPTH), **_norm("linear", PROBED_DEPTH),
                **_deep_tokens(PROBED_DEPTH)}  # fmt: skip
    words = {"next_state": "the next state", "inverse_term": "the preconditioned state R_t s_t",
             "gd_step": "one gradient step's prediction"}  # fmt: skip

    def line(target: str, layer: int, label: str = "", **relation) -> Claim:
        where = "the input tokens" if layer == 0 else f"layer {layer}"
        return Claim(label or f"{words[target]}, after {where}", "lindyn", "causal_lsa",
                     f"final/probe/{target}_layer{layer}", settings, budget,
                     cost_s=_costs(_STEP_S[("linear", PROBED_DEPTH)], 20),
                     **relation)  # fmt: skip

    def rises(target: str, layer: int, **source) -> Claim:
        return line(target, layer, f"{words[target]}: after layer {layer} above the input",
                    versus=line(target, 0).label, check="at_least", **source)  # fmt: skip

    # The thesis states both probes improve across the layers of its 6-layer linear model
    # (Fig. 3.3B-C caption, sec. 3.5.1): each is held after the middle and the last layer.
    across = "an improvement in linear decoding performance across layers"
    stated = {"next_state": f"thesis Fig. 3.3B (caption: '{across}'), sec. 3.5.1",
              "inverse_term": f"thesis Fig. 3.3C (caption: '{across}'), sec. 3.5.1"}
    sanity = ("ours: a sanity control that no trained stack fails (layer 6 feeds the linear "
              "readout; W* is drawn anew per sequence, so the input holds little of s_t+1)")
    layers = range(PROBED_DEPTH + 1)
    middle = PROBED_DEPTH // 2
    claims = [line(target, k) for target in words for k in layers]
    claims += [rises("next_state", middle, cite=stated["next_state"]),
               rises("next_state", PROBED_DEPTH, provenance="derived", cite=sanity),
               rises("inverse_term", middle, cite=stated["inverse_term"]),
               rises("inverse_term", PROBED_DEPTH, cite=stated["inverse_term"]),
               rises("gd_step", middle, provenance="derived",
                     cite="ours: the thesis has no such probe (its Fig. 3.13 probes another "
                     "quantity)")]  # fmt: skip
    panel = Panel("Linear probes by depth", "layer (0: the input tokens)", "held-out R^2",
                  tuple(Points(words[t], tuple((k, line(t, k).label) for k in layers))
                        for t in words))  # fmt: skip
    return Table(
        "mesa-probes",
        "Linear probes find the mesa-optimiser's pieces in a deep linear stack's residual "
        "stream, more of them deeper in",
        f"{_CH3}, sec. 3.5.1, Fig. 3.3B-C (probing a trained deep linear stack)",
        tuple(claims),
        note=f"The {PROBED_DEPTH}-layer, 2-head linear stack of mesa-lindyn-depth (the same "
        "runs). A probe is a ridge regression (1e-4) from one layer's tokens to a target, fitted "
        "on 256 sequences and scored by R^2 on 256 others, over positions t >= D "
        "(methods.analyses.probes). Targets: the next state (the thesis' target probe); "
        "R_t s_t with R_t = (sum s_{t'-1} s_{t'-1}^T + I)^-1, the preconditioned state a mesa "
        "layer applies (the thesis' inverse probe, whose 1/lambda it does not state: 1 is "
        "ours); one gradient step's prediction (sum s_t' s_{t'-1}^T) s_t, the suite's own "
        "target (the thesis has none like it: its Fig. 3.13 multiplies inverse probes by "
        "eta S_t S_t-1^T). For its 6-layer linear model the thesis states that both of its "
        "probes improve across layers (Fig. 3.3B-C caption; 'decoding performance increasing "
        "with sequence length and network depth', sec. 3.5.1): each is held above the input "
        "tokens after the middle layer and after the last (the drop of the inverse probe at "
        "the last layer in Fig. 3.8 is said of the hybrid-linear model on raw tokens, not of "
        "this one). The next state after the last layer is a sanity control (derived), which "
        "no trained stack fails: layer 6 feeds the linear readout, and the input tokens hold "
        "little of s_t+1, W* being drawn anew for each sequence (sec. 3.5.1). The gradient "
        "step's relation is ours (derived). The thesis' probed model has 4 heads per layer "
        "(Fig. 3.11, app. 3.7.4) and reads the 4-channel tokens e_t = (0, s_t, s_t, s_t-1) "
        "(sec. 3.5.1), with no LayerNorm stated; ours has 2 heads, the same tokens "
        "(tokens=memory; before 2026-11-29 the suite's (s_t, s_t-1)) and a pre-LayerNorm.",
        figure=TableFigure("thesis Fig. 3.3B-C: R^2 of linear probes by layer", (panel,)),
    )


#: Seconds per step on raw tokens (width 2D + 16 = 36), 2 heads, on the 2-core CPU:
#: measured for the 2-layer hybrid, extrapolated by layer count for the others.
_HYBRID_STEP_S = {("mesa", 1): 0.06, ("mesa", 2): 0.08, ("causal_lsa", 7): 0.35,
                  ("causal_softmax", 7): 0.1}  # fmt: skip


_COPY_BASIS = "hybrid-mesa on the copy test's sequences"
_SHARE_CITE = ("ours: 'mostly' read as at least half of the sensitivity to earlier states "
               "falling on s_t-1 (stricter than the text, which counts the current state too, "
               "and it reaches f_t through the residual whatever the layer learned; a mean "
               "over positions where the text says every token), of thesis sec. 3.5.1: "
               "'Transformers of all three types learn copy layers', seen in the sensitivity "
               "norm ||d f_t / d s_t'|| of the first layer's output (residual included) for "
               "t' <= t and in attention maps; 'Both experiments provide evidence that after "
               "the first layer, every token mostly depends on itself and on the preceding "
               "token, as shown in Figure 3.4B'")
_COPY_CITE = (f"our sensitivity test of {_CH3}'s reading of the first layer as a copy that "
              "builds the mesa layer's inputs; bands ours")


def _hybrids() -> Table:
    budget = {"quick": {"iterations": "300"}, "cpu": {}, "paper": {}}

    def line(label: str, method: str, layers: int, hybrid: bool, metric="final/test_loss",
             sensitivity: bool = False, **relation) -> Claim:  # fmt: skip
        settings = {"tokens": "raw", "heads": "2", "layers": str(layers),
                    # as in the depth table (without it, the 7-layer hybrid-linear stack
                    # overflowed within 200-550 steps on every seed)
                    **_norm("linear" if method == "causal_lsa" else "other", layers)}
        if hybrid:
            settings["first_layer"] = "softmax"
        if sensitivity:  # its own runs: the analysis is a setting, off in the runs above
            settings["sensitivity"] = "true"
        return Claim(label, "lindyn", method, metric, settings, budget,
                     cost_s=_costs(_HYBRID_STEP_S[(method, layers)], 20),
                     **relation)  # fmt: skip

    hybrid = "hybrid: softmax, then 1 mesa layer"
    cite = ("thesis Fig. 3.4A (caption: 'the hybrid-mesa Transformer slightly outperforms the "
            "deep hybrid-linear and softmax-only models'), sec. 3.5.1")
    alone = ("ours: a sanity control (the thesis trains no mesa layer alone on raw tokens; "
             "sec. 3.5.1 reads the first layer as the copy that builds its inputs)")
    claims = (
        line(hybrid, "mesa", 2, True),
        line("first layer's attention on the previous token (hybrid-mesa)", "mesa", 2, True,
             metric="final/copy/previous_attention"),
        line("1 mesa layer alone (no copy layer): above the hybrid", "mesa", 1, False,
             versus=hybrid, check="at_least", provenance="derived", cite=alone),
        line("hybrid: softmax, then 6 linear layers: not below hybrid-mesa", "causal_lsa", 7,
             True, versus=hybrid, check="at_least", cite=cite),
        line("7 softmax layers: not below hybrid-mesa", "causal_softmax", 7, False,
             versus=hybrid, check="at_least", cite=cite),
        line(_COPY_BASIS, "mesa", 2, True, metric="final/copy/loss_learned"),
        line("its attention replaced by an exact copy of t - 1: within 10% of it", "mesa", 2,
             True, metric="final/copy/loss_exact", versus=_COPY_BASIS, tolerance=0.1,
             relative=True, provenance="derived", cite=_COPY_CITE),
        line("its copy layer removed: at least twice its loss", "mesa", 2, True,
             metric="final/copy/loss_without", versus=_COPY_BASIS, check="at_least",
             tolerance=-1.0, relative=True, provenance="derived",
             cite=f"{_COPY_CITE}; a sanity check, which a trained hybrid hardly fails"),
    )  # fmt: skip
    claims += tuple(_hybrid_probes(line))
    # Implicit target probing (thesis Fig. 3.13A, the softmax-only model): the inverse probe
    # times eta sum s_t' s_t'-1^T, at its best layer, against one GD step on the same
    # positions (methods/analyses/probes.py).
    implicit = (
        ("softmax-only", "causal_softmax", False, "thesis Fig. 3.13A (caption: 'For "
         "full-fledged softmax-only Transformers, we observe ... a gradual increase in probing "
         "performance across layers ..., where we are able to outperform a step of gradient "
         "descent')"),
        ("hybrid-linear", "causal_lsa", True, "thesis Fig. 3.13B (caption: 'For the hybrid "
         "model, we find similar results'; the hybrid of Fig. 3.12, softmax then linear "
         "layers)"),
    )
    for name, method, first_softmax, cite in implicit:
        gd_probe = f"{name} (7 layers): one GD step on the implicit probe's positions"
        claims += (
            line(gd_probe, method, 7, first_softmax, metric="final/probe/implicit_gd_loss"),
            line(f"{name} (7 layers): implicit target probe at its best layer below one GD "
                 "step (paired)", method, 7, first_softmax,
                 metric="final/probe/implicit_loss_best", versus=gd_probe, check="at_most",
                 cite=cite),
        )  # fmt: skip
    claims += tuple(
        line(f"first layer: at least half its sensitivity to earlier states on s_t-1 ({name})",
             method, layers, hybrid, metric="final/copy/previous_share", sensitivity=True,
             target=0.5, check="at_least", provenance="derived", cite=f"{_SHARE_CITE}; {fig}")
        for name, method, layers, hybrid, fig in (
            ("hybrid-mesa", "mesa", 2, True, "Fig. 3.4B caption: 'even more clean next-token "
             "copying behavior for hybrid-linear and hybrid-mesa Transformers'; no figure "
             "shows the hybrid-mesa's sensitivity"),
            ("hybrid-linear", "causal_lsa", 7, True, "Fig. 3.8A caption: 'high sensitivity to "
             "the current and previous tokens of the outputs of the first layer of a "
             "hybrid-linear Transformer'"),
            ("softmax-only", "causal_softmax", 7, False, "Fig. 3.4B caption: 'The first "
             "softmax layer groups together neighboring tokens' (of a softmax-only "
             "Transformer; the hybrids' copying 'even more clean')"),
        )
    )  # fmt: skip
    return Table(
        "mesa-hybrids",
        "On raw tokens a softmax layer copies the previous state; a 2-layer hybrid (softmax, "
        "mesa) does at least as well as 7-layer hybrid-linear and softmax stacks",
        f"{_CH3}, sec. 3.5.1, Fig. 3.4 (hybrid models)",
        claims,
        note="Linear dynamics as in mesa-lindyn-depth, but on raw tokens e_t = (s_t, 0, p_t) (p_t "
        "a sinusoidal position code): no layer is handed s_t-1, a first softmax layer must "
        "copy it. 2 heads per layer; the hybrid-linear stack reads through a pre-LayerNorm, "
        "as the depth table's linear stacks; 2,000 steps at cpu and paper, 300 at quick. The "
        "thesis' models read raw tokens e_t = s_t with positional encodings and input and "
        "output projections (sec. 3.5.1); its 1+6-layer hybrid-linear model has 4 heads per "
        "linear layer (Fig. 3.12, app. 3.7.4); it states no heads for the other two and no "
        "LayerNorm. The copy is measured as the first layer's mean attention on the previous "
        "position (1: an exact copy). The relations to the deep stacks are the direction "
        "stated in Fig. 3.4A's caption, at zero margin ('slightly outperforms'). The mesa "
        "layer alone is a sanity control (derived), not an experiment of the thesis: on raw "
        "tokens no single layer pairs s_t-1 with s_t, so it can hardly fail. The copy-layer "
        "sensitivity is our own test, not the thesis' experiment (whose settings the text we "
        "cite does not state): on the same 256 sequences, the trained hybrid's loss with its "
        "first layer's attention replaced by an exact copy of position t - 1 (a copy, if "
        "that is what it learned, changes little) and with the layer removed (the mesa layer "
        "then lacks s_t-1; a sanity check: removing one of two trained layers is nearly "
        "certain to cost that much). Probes (as in mesa-probes: ridge from a layer's tokens, "
        "held-out R^2) of the two 7-layer stacks, held to the captions of Figs. 3.4C-D "
        "(softmax-only) and 3.8B-C (hybrid-linear): the target probe's 'harsh transition in "
        "the last layer' as a rise of at least 0.5 in R^2 from layer 6 to 7 (ours), the "
        "inverse probe's gradual rise as layer 3 above the input tokens (the middle layer, "
        "as mesa-probes holds it), and the hybrid-linear's 'worse' inverse probe at the last "
        "layer as layer 7 at most layer 6. In the suite's softmax-only stack the target "
        "probe rises over layers 3-6 (R^2 0.84-0.94 after layer 6, 0.95-0.96 after the "
        "last, in every seed), not at the last layer: this run shows the caption's "
        "transition does not hold for this model (2 heads, D = 10, raw tokens with a "
        "sinusoidal position code, no input or output projection; the thesis states no head "
        "count for it and projects its inputs and outputs). Not tried: 4 heads, projections. "
        "The sensitivity lines (sec. 3.5.1, Figs. 3.4B and 3.8A; the hybrid-mesa's: the "
        "text and Fig. 3.4B's caption only) read each model's first layer through its "
        "Jacobian on 32 of the copy test's sequences (methods/analyses/sensitivity.py): of "
        "||d f_t / d s_t'|| over the earlier states t' < t, the share on s_t-1, averaged "
        "over positions t >= 2, counted from 0 (1: a copy; 1/t: an average of every earlier "
        "state, 0.073 over t = 2..49). They are runs of their own: the same training with "
        "the analysis switched on (sensitivity=true). The band is least supported for the "
        "softmax-only model, whose caption says only that its first layer 'groups together "
        "neighboring tokens': one spread over s_t-1 and s_t-2 would miss it and still agree "
        "with the thesis. Run at cpu (2026-11-29): the hybrid-mesa's share is 0.72-0.83 "
        "(reproduced). The hybrid-linear's is 0.88 and 0.97 on two seeds and 0.13 on the "
        "third, whose first layer put no more attention on the previous position than on "
        "any other (0.073, uniform) and whose loss is the worst of the three (0.698 against "
        "0.646-0.647): a copy learned or not by seed at this budget (inconclusive). The "
        "softmax-only model's is 0.12-0.18 (not reproduced), its attention on the previous "
        "position 0.10-0.16. Root cause, a run showing the thesis' copying does not emerge "
        "in this model here: trained 4x longer (8,000 steps, seed 0, one run outside the "
        "table), its loss falls from 0.832 to 0.746 but its share on s_t-1 falls too, to "
        "0.084, and its attention on the previous position to 0.04; its first layer matters "
        "(without it the loss is 2.66) but does not copy. The thesis states no head count "
        "for this model and projects its inputs and outputs; not tried: 4 heads, "
        "projections.",
        figure=TableFigure(f"{_CH3}: hybrid models, loss by time step", (Panel(
            "Loss by time step (raw tokens)", "time step t", "0.5 ||s_t+1 - f_t||^2",
            tuple(History(short, c.label, "analysis/loss_by_t")
                  for short, c in zip(("hybrid-mesa (2 layers)", None, "mesa alone",
                                       "hybrid-linear (7 layers)", "softmax (7 layers)"),
                                      claims[:5], strict=True) if short), log_y=True),)),
    )


def _hybrid_probes(line) -> list[Claim]:
    """Probe lines of mesa-hybrids' 7-layer stacks (``line``: that table's line builder)."""
    # Per model: its method, whether its first layer is softmax, and its figure's panels and
    # caption for the target probe and for the inverse (curvature-corrected) probe.
    models = {
        "hybrid-linear": ("causal_lsa", True, (
            "thesis Fig. 3.8B (caption: 'harsh phase transition in the last layer when "
            "measuring target probing'; the 0.5 is ours)",
            "thesis Fig. 3.8C (caption: 'intriguingly stable and gradual probing for "
            "curvature-corrected inputs')")),
        "softmax-only": ("causal_softmax", False, (
            "thesis Fig. 3.4C (caption: 'a rather harsh transition in the last layer when "
            "measuring target probing'; the 0.5 is ours)",
            "thesis Fig. 3.4D (caption: 'a gradual performance increase for early layers "
            "when probing for curvature-corrected inputs')")),
    }  # fmt: skip
    out = []
    for name, (method, hybrid, (target_cite, inverse_cite)) in models.items():
        def probe(label: str, target: str, layer: int, method=method, hybrid=hybrid,
                  name=name, **rel):  # fmt: skip
            return line(f"{name} (7 layers): {label}", method, 7, hybrid,
                        metric=f"final/probe/{target}_layer{layer}", **rel)

        last = probe("target probe after the last layer", "next_state", 7)
        given = probe("inverse probe on the input tokens", "inverse_term", 0)
        out += [
            last,
            probe("target probe after layer 6: at least 0.5 below the last layer's (paired)",
                  "next_state", 6, versus=last.label, check="at_most", tolerance=-0.5,
                  cite=target_cite),
            given,
            probe("inverse probe after layer 3 above the input (paired)", "inverse_term", 3,
                  versus=given.label, check="at_least", cite=inverse_cite),
        ]  # fmt: skip
        if hybrid:
            six = probe("inverse probe after layer 6", "inverse_term", 6)
            out += [six, probe(
                "inverse probe after the last layer at most layer 6's (paired)", "inverse_term",
                7, versus=six.label, check="at_most",
                cite="thesis Fig. 3.8C (caption: 'except for the last layer, where we "
                "hypothesize that the worse probing loss is explained by the computation of "
                "the actual predictions')")]  # fmt: skip
    return out


_REPURPOSE_SHOTS = (2, 5, 10, 15)


def _repurpose() -> Table:
    budget = {"quick": {"iterations": "300"}, "cpu": {}, "paper": {}}
    eos_cite = ("ours, by analogy with thesis Fig. 3.5B, whose end-of-sequence token is "
                "prompt-tuned (sec. 3.5.2); ours is an untuned zero state")

    def line(label: str, method: str, metric: str, **relation) -> Claim:
        settings = {"repurpose": "true", **({"heads": "2"} if method == "causal_lsa" else {})}
        step = _STEP_S[("linear" if method == "causal_lsa" else "mesa", 1)]
        return Claim(label, "lindyn", method, f"final/repurpose/{metric}", settings, budget,
                     cost_s=_costs(step, 25), **relation)  # fmt: skip

    def name(form: str, n: int) -> str:
        return f"{form}, {n} pairs"

    ls, eos, plain, lsa, continual = [], [], [], [], []
    for n in _REPURPOSE_SHOTS:
        ls.append(line(name("least squares on the pairs", n), "mesa", f"least_squares_n{n}"))
        eos.append(line(name("mesa, end-of-pair tokens", n), "mesa", f"eos_n{n}"))
        plain.append(line(name("mesa, plain prompt", n) + ": above end-of-pair (paired)",
                          "mesa", f"plain_n{n}", versus=eos[-1].label, check="at_least",
                          provenance="derived", cite=eos_cite))  # fmt: skip
        lsa.append(line(name("linear attention (2 heads), end-of-pair tokens", n), "causal_lsa",
                        f"eos_n{n}"))  # fmt: skip
        continual.append(line(name("mesa, another task's pairs first", n), "mesa",
                              f"continual_n{n}"))  # fmt: skip
    more = line("mesa, 15 pairs (end-of-pair): below 2 pairs by 20% (paired)", "mesa",
                "eos_n15", versus=eos[0].label, check="at_most", tolerance=-0.2, relative=True,
                cite="thesis Fig. 3.5B (caption: the error 'decreases gradually and "
                "significantly with the number of labeled examples'), sec. 3.5.2")
    claims = (*ls, *eos, *plain, *continual, *lsa, more)
    series = tuple(Points(label, tuple(zip(_REPURPOSE_SHOTS, (c.label for c in group),
                                           strict=True)))
                   for label, group in (("least squares", ls), ("mesa, end-of-pair", eos),
                                        ("mesa, plain", plain),
                                        ("mesa, another task first", continual),
                                        ("linear attention, end-of-pair", lsa)))  # fmt: skip
    return Table(
        "mesa-repurpose",
        "A model trained on linear dynamics, used as a few-shot regressor: its loss falls with "
        "the pairs shown, and end-of-pair tokens help",
        f"{_CH3}, sec. 3.5.2, Fig. 3.5 (repurposing the trained model for few-shot "
        "regression), at a CPU scale",
        claims,
        note="Models trained as in mesa-lindyn (1 layer on constructed tokens, linear dynamics "
        "D = 10, T = 50; 2,000 steps at cpu and paper, 300 at quick), then shown regression "
        "tasks y = W x (W Haar-orthogonal as the dynamics' W*, x ~ N(0, I), 256 tasks) as "
        "x_1, y_1, ..., x_n, y_n, x_q; the next-state prediction at x_q is the guess of y_q, "
        "scored 0.5 ||y_q - guess||^2. Plain prompts also show the transitions y_i -> x_i+1 "
        "of no task; the end-of-pair token (the zero state after each y_i) turns them into "
        "y_i -> 0 and 0 -> x_i+1. The thesis repurposes the 7-layer softmax Transformer of "
        "Fig. 3.4, on raw tokens (sec. 3.5.2); the suite's 1-layer models on constructed "
        "tokens are other models, not a smaller copy. The thesis prompt-tunes its "
        "end-of-sequence token (Fig. 3.5B, sec. 3.5.2) and says nothing of an untuned one: "
        "ours is fixed, so 'plain above end-of-pair' at every n is our analogue (derived). "
        "The loss falling with the pairs shown is stated (Fig. 3.5B caption, sec. 3.5.2); "
        "only its end points are held (15 pairs below 2 by 20%, band ours), not the "
        "'gradually' between them. Least squares on the n pairs alone is the ideal (exact "
        "from 10 pairs on); the thesis' control is least squares on D_N^mesa, the n pairs "
        "with the spurious pairs (y_i, x_i+1) (sec. 3.5.2), which the suite does not "
        "compute. Continual in-context learning, at this scale: another task's n pairs (with "
        "end-of-pair tokens) before this task's, measured without a target (the thesis gives "
        "none we can hold at this scale).",
        figure=TableFigure(f"{_CH3}: the trained model as a few-shot regressor", (Panel(
            "Few-shot regression by a model trained on dynamics", "pairs shown n",
            "0.5 ||y_q - guess||^2", series),)),  # linear y: least squares reaches 0
    )


_ZOOLOGY = "Arora et al. 2024 (Zoology), sec. 3"
_LAYER_NAMES = {"causal_softmax": "softmax attention", "causal_lsa": "linear attention",
                "mesa": "mesa layer", "deltanet": "DeltaNet", "gla": "gated linear attention",
                "causal_gd_ssm": "GD-SSM"}
#: Training steps at quick and cpu (paper: the benchmark's 2,000).
_STEPS = {"mqar": {"quick": 300, "cpu": 1000}, "lm-pydoc": {"quick": 200, "cpu": 1000}}
#: Seconds per step on the 2-core CPU, measured: mqar (1 layer, 2 heads), lm-pydoc (2 layers,
#: 2 heads).
_STEP_S_BY = {
    "mqar": {"causal_softmax": 0.017, "causal_lsa": 0.145, "mesa": 0.34, "deltanet": 0.095,
             "gla": 0.092},
    "lm-pydoc": {"causal_softmax": 0.025, "causal_lsa": 0.03, "mesa": 1.3, "deltanet": 0.28,
                 "gla": 0.29, "causal_gd_ssm": 0.34},
}  # fmt: skip


def _one_per_layer(benchmark: str, metric: str, settings: dict[str, str], shape: str,
                   overhead_s: float):  # fmt: skip
    """A line maker for a table with one line per kind of sequence layer, all trained alike
    on ``benchmark`` (``shape``: how the label describes the stack)."""
    steps = _STEPS[benchmark]
    budget = {**{p: {"iterations": str(n)} for p, n in steps.items()}, "paper": {}}

    def line(method: str, label: str = "", **relation) -> Claim:
        cost = _costs(_STEP_S_BY[benchmark][method], overhead_s, **steps)
        return Claim(label or f"{_LAYER_NAMES[method]}, {shape}", benchmark, method, metric,
                     settings, budget, cost_s=cost, **relation)  # fmt: skip

    return line


def _by_layer(source: str, title: str, ylabel: str, claims: tuple[Claim, ...]) -> TableFigure:
    """One panel, one point per line (x: the line's place in the table)."""
    short = {"causal_softmax": "softmax", "causal_lsa": "linear", "mesa": "mesa",
             "deltanet": "DeltaNet", "gla": "GLA", "causal_gd_ssm": "GD-SSM"}  # fmt: skip
    xlabel = ", ".join(f"{k} {short[c.method]}" for k, c in enumerate(claims, 1))
    points = tuple(Points(c.label, ((k, c.label),)) for k, c in enumerate(claims, 1))
    return TableFigure(source, (Panel(title, xlabel, ylabel, points),))


def _mqar() -> Table:
    line = _one_per_layer("mqar", "final/test_accuracy", {"heads": "2"}, "1 layer, 2 heads",
                          overhead_s=15)  # fmt: skip
    softmax = line("causal_softmax", "softmax attention solves it", target=0.99,
                   check="at_least", provenance="figure",
                   cite=f"{_ZOOLOGY} (attention solves MQAR at every model width)")
    claims = (
        softmax,
        line("causal_lsa", "linear attention below softmax (paired)", versus=softmax.label,
             check="at_most", tolerance=-0.05, provenance="figure",
             cite=f"{_ZOOLOGY} (the gap between attention and its sub-quadratic "
             "alternatives)"),
        line("mesa"),
        line("deltanet"),
        line("gla"),
    )  # fmt: skip
    return Table(
        "mqar",
        "Multi-query associative recall separates softmax attention from linear attention; "
        "the mesa layer, DeltaNet and gated linear attention beside them",
        f"{_ZOOLOGY} (MQAR), at a CPU scale",
        claims,
        note="A CPU-scale stand-in for Zoology's MQAR: vocabulary 64, 8 key-value pairs, "
        "sequences of 32, one-hot tokens embedded in 16 dimensions (tokens (e_t, e_t-1) of 32), "
        "one layer with 2 heads of each kind, trained alike (Adam 3e-3, init std 0.1, 64 "
        "sequences a step), 1,000 steps at cpu (the benchmark's 2,000 at paper, 300 at "
        "quick). Accuracy at the queried positions. The previous token's embedding is part "
        "of every token (our construction), so one layer can bind a key to its value without "
        "the induction head Zoology's models learn: an easier task than Zoology's. The thesis "
        "has no MQAR: the relations are Zoology's, read from its figures; linear attention "
        "below softmax by at least 5 points is our band. Zoology (Arora et al. 2024) is not "
        "among the texts the suite's references were re-read against: its 0.99 and its "
        "relations are not checked against its text. The mesa layer, DeltaNet and gated "
        "linear attention have no published number at this scale.",
        figure=_by_layer(f"{_ZOOLOGY}: MQAR accuracy by sequence layer",
                         "MQAR, 8 pairs, width 16", "accuracy at the queries", claims),
    )


def _language_model() -> Table:
    line = _one_per_layer("lm-pydoc", "final/test_perplexity", {}, "2 layers", overhead_s=30)
    linear = line("causal_lsa")
    claims = (
        line("causal_softmax"),
        linear,
        line("mesa", "mesa layer below linear attention (paired)", versus=linear.label,
             check="at_most",
             cite="thesis Fig. 3.6 (caption: 'improved perplexity ... when switching from "
             "standard linear self-attention to the mesa-layer'), Fig. 3.7 (caption), "
             "sec. 3.5.3"),
        line("deltanet"),
        line("gla"),
        line("causal_gd_ssm"),
    )  # fmt: skip
    return Table(
        "mesa-lm",
        "Character-level language modelling: the mesa layer against linear and softmax "
        "attention and GD-SSM at equal parameter count",
        f"{_CH3}, sec. 3.5.3, Figs. 3.6-3.7 (language models), as a CPU-scale stand-in",
        claims,
        note="A CPU-scale stand-in for the thesis' language models (trained on the Pile at "
        "scale): characters of pydoc's help topics (Python's standard library, PSF License; "
        "no download), 2 layers of 2 heads over a 32-wide character embedding for every kind "
        "of layer (75k parameters each, within 0.4% of each other, except gated linear "
        "attention, whose gates add 22%: final/num_params), "
        "Adam 3e-3, 32 sequences of 64 characters a step, 1,000 steps at cpu (2,000 at paper). "
        "Held-out test perplexity per character. The relation (mesa below linear attention) "
        "is the direction the thesis states 'across all our language modeling experiments' "
        "(Fig. 3.6 caption; Fig. 3.7; sec. 3.5.3); no number of the thesis applies at this "
        "scale. Its models are unlike ours: in Fig. 3.6 the first layer is always softmax "
        "attention, then softmax, mesa or linear layers (2 without MLPs, or 4 with), with "
        "DPFP features (nu = 3) on the linear and mesa layers and GPT-2 tokens of the Pile "
        "(sec. 3.5.3); Fig. 3.7 has one layer after a hard-coded one-step key shift. Ours "
        "stacks 2 layers of one kind on the tokens (e_t, e_t-1) (a key shift built into the "
        "tokens), without DPFP, on characters. GD-SSM here is its recurrence as a causal "
        "layer (a 3-token local attention feeding a decaying matrix state, on the "
        "projections every layer has; methods/in_context/ssm.py), the stream having no "
        "(x, y) pairs for the paper's stride-2 windows.",
        figure=_by_layer(f"{_CH3}: language-model perplexity by sequence layer",
                         "lm-pydoc, 2 layers", "test perplexity", claims),
    )


TABLES = (_mesa(), _one_step(), _depth(), _probes(), _hybrids(), _repurpose(), _mqar(),
          _language_model())
