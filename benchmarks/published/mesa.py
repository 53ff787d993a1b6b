"""The mesa layer (thesis ch. 3) as tables: one mesa layer against linear attention on
autoregressive linear dynamics."""

from __future__ import annotations

from benchmarks.published.claims import Claim, Table

_CH3 = "thesis ch. 3"


def _mesa() -> Table:
    lsa = "1 causal linear-attention layer, 2 heads"
    budget = {"quick": {"iterations": "300"}, "cpu": {}, "paper": {}}
    return Table(
        "mesa-lindyn",
        "One mesa layer beats one (2-head) linear-attention layer on linear dynamics",
        f"{_CH3} (the mesa-layer on autoregressive linear dynamics)",
        (
            # The thesis' baseline is a 2-head linear self-attention layer (ch. 3).
            Claim(lsa, "lindyn", "causal_lsa", "final/test_loss", {"heads": "2"}, budget,
                  cost_s={"quick": 8.5, "cpu": 120.0, "paper": 120.0}),
            Claim("1 mesa layer below it (paired)", "lindyn", "mesa", "final/test_loss", {},
                  budget, versus=lsa, check="at_most", cite=_CH3,
                  cost_s={"quick": 12.8, "cpu": 195.0, "paper": 195.0}),
        ),  # fmt: skip
        note="The cpu and paper presets are the benchmark's defaults (2,000 iterations of 64 "
        "sequences); quick trains 300.",
    )


TABLES = (_mesa(),)
