"""``leaderboard --format latex``: booktabs, mean ± the Student-t 95% CI half-width over
seeds, n per row, the best and those not significantly worse (paired t-test) in bold;
compiled by pdflatex where it is installed."""

from __future__ import annotations

import math
import statistics

from benchmarks.cli.main import main
from tests.helpers import assert_compiles, fake_run

#: Seeds 0-4 of three methods: fomaml is maml's equal (paired differences of both signs),
#: anil clearly worse; lasso shares one seed with the best (no test possible).
LOSSES = {
    "maml": [0.500, 0.520, 0.490, 0.510, 0.500],
    "fomaml": [0.530, 0.500, 0.500, 0.500, 0.520],
    "anil": [0.900, 0.950, 0.910, 0.930, 0.920],
}
T_975_4 = 2.7764451  # Student t, 97.5% quantile, 4 degrees of freedom (printed tables)


def _half_width(values: list[float]) -> float:
    return T_975_4 * statistics.stdev(values) / math.sqrt(len(values))


def test_a_board_as_latex_bolds_the_best_and_its_statistical_ties(store, capsys, tmp_path):
    for method, losses in LOSSES.items():
        for seed, loss in enumerate(losses):
            fake_run(store, method, seed, {"final/test_loss": loss})
    fake_run(store, "metasgd", 0, {"final/test_loss": 0.6})  # one seed: nothing to test
    capsys.readouterr()
    assert main(["leaderboard", "--benchmark", "sinusoid-5shot", "--metric", "final/test_loss",
                 "--columns", "final/test_loss", "--no-references", "--format", "latex",
                 "--tracking-uri", store]) == 0  # fmt: skip
    tex = capsys.readouterr().out
    for command in ("\\toprule", "\\midrule", "\\bottomrule", "\\begin{tabular}{llrr}"):
        assert command in tex
    lines = [line for line in tex.splitlines() if line.endswith("\\\\") and " & " in line]
    rows = {line.split(" & ")[0]: line.split(" & ") for line in lines[1:]}  # after the header
    for method, losses in LOSSES.items():
        text = f"{statistics.mean(losses):.4f} $\\pm$ {_half_width(losses):.4f}"
        bold = method in ("maml", "fomaml")
        assert rows[method][2] == "5"
        assert rows[method][3].removesuffix(" \\\\") == (f"\\textbf{{{text}}}" if bold else text)
    assert rows["metasgd"][2] == "1" and rows["metasgd"][3] == "0.6000 \\\\"
    assert "Student $t$" in tex and "paired" in tex and "sinusoid-5shot" in tex
    assert_compiles(tex, tmp_path)
