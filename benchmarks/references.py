"""Published numbers shown beside ours on the leaderboards, never mixed into our statistics.

A versioned table: when a number is corrected or added, bump ``REFERENCE_VERSION`` so a
report says which table it used. Accuracies are fractions, like ours; the sources are
``../shared/REFERENCE.md`` (sections 1, 4 and 5) and the papers it cites.
"""

from __future__ import annotations

from dataclasses import dataclass, field

REFERENCE_VERSION = "2026-11-22"


@dataclass(frozen=True)
class ReferenceRow:
    method: str
    source: str
    metrics: dict[str, float] = field(default_factory=dict)
    note: str = ""


def _continual(rows: dict[str, tuple[float, float]], source: str) -> list[ReferenceRow]:
    return [
        ReferenceRow(method, source, {"final/ra": ra / 100, "final/bti": bti / 100})
        for method, (ra, bti) in rows.items()
    ]


_TABLE_45 = "thesis tab. 4.5"
_MAML = "Finn 2017"
_SPARSE = "sparse-MAML, Conv-4"

REFERENCES: dict[str, list[ReferenceRow]] = {
    "omniglot-5w1s": [ReferenceRow("maml", _MAML, {"final/test_accuracy": 0.987})],
    "omniglot-5w5s": [ReferenceRow("maml", _MAML, {"final/test_accuracy": 0.999})],
    "omniglot-20w1s": [ReferenceRow("maml", _MAML, {"final/test_accuracy": 0.958})],
    "omniglot-20w5s": [ReferenceRow("maml", _MAML, {"final/test_accuracy": 0.989})],
    "miniimagenet-5w1s": [
        ReferenceRow("maml", _MAML, {"final/test_accuracy": 0.4870}, "32 channels"),
        ReferenceRow("fomaml", _MAML, {"final/test_accuracy": 0.4807}, "32 channels"),
        ReferenceRow("sparse_maml", _SPARSE, {"final/test_accuracy": 0.5035}),
        ReferenceRow("sparse_relu_maml", _SPARSE, {"final/test_accuracy": 0.5015}),
    ],
    "miniimagenet-5w5s": [
        ReferenceRow("maml", _MAML, {"final/test_accuracy": 0.6311}, "32 channels"),
        ReferenceRow("fomaml", _MAML, {"final/test_accuracy": 0.6315}, "32 channels"),
        ReferenceRow("sparse_maml", _SPARSE, {"final/test_accuracy": 0.6703}),
        ReferenceRow("sparse_relu_maml", _SPARSE, {"final/test_accuracy": 0.6680}),
    ],
    "linreg-icl": [
        ReferenceRow(
            "gd",
            "von Oswald 2023",
            {"final/test_loss": 0.825},
            "one GD step at the optimal rate, x ~ U(-1, 1); 0.206 with input_range=0.5",
        )
    ],
    "mnist-rotations": _continual(
        {
            "online_sgd": (53.38, -5.44),
            "gem": (67.38, -18.02),
            "mer": (77.42, -5.60),
            "lamaml": (77.42, -8.64),
            "sparse_lamaml": (77.77, -8.16),
        },
        _TABLE_45,
    ),
    "mnist-permutations": _continual(
        {
            "online_sgd": (55.42, -13.76),
            "gem": (55.42, -24.42),
            "mer": (73.46, -9.96),
            "lamaml": (74.34, -7.60),
            "sparse_lamaml": (76.88, -8.39),
        },
        _TABLE_45,
    ),
    "mnist-many-permutations": _continual(
        {
            "online_sgd": (32.62, -19.06),
            "gem": (32.14, -23.52),
            "mer": (47.40, -17.78),
            "lamaml": (48.46, -12.96),
            "sparse_lamaml": (50.81, -13.73),
        },
        _TABLE_45,
    ),
}


def references_for(benchmark: str) -> list[ReferenceRow]:
    return REFERENCES.get(benchmark, [])
