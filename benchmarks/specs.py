"""Named benchmark specs: a task source, a protocol with its budget, and method defaults.

Specs are frozen and printable (``python -m benchmarks show NAME``); every field is
overridable from the command line with ``--set key=value``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from benchmarks.config import as_dict
from benchmarks.protocols import EpisodicConfig
from datasets.dynamics import LinDynConfig
from datasets.fewshot import FewShotConfig
from datasets.regression import LinRegConfig, SinusoidConfig
from methods.registry import BUILTIN, Registry


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str
    description: str
    task: Any  # a task-source config dataclass with a build() method
    protocol: Any  # a protocol config (EpisodicConfig, ...)
    protocol_name: str = "episodic"
    method_defaults: Mapping[str, Any] = field(default_factory=dict)
    #: Named override sets (``--preset NAME``), e.g. another paper's settings.
    presets: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    reference: str = ""

    def sections(self) -> dict[str, Any]:
        return {"task": self.task, "protocol": self.protocol}

    def describe(self) -> str:
        body = {
            "name": self.name,
            "description": self.description,
            "protocol_name": self.protocol_name,
            "task_family": type(self.task).__name__,
            "task": as_dict(self.task),
            "protocol": as_dict(self.protocol),
            "method_defaults": dict(self.method_defaults),
            "presets": {k: dict(v) for k, v in self.presets.items()},
            "reference": self.reference,
        }
        return json.dumps(body, indent=2, default=str)


BENCHMARKS: Registry[BenchmarkSpec] = Registry("benchmark")


def register_benchmark(spec: BenchmarkSpec, source: str = BUILTIN) -> BenchmarkSpec:
    BENCHMARKS.add(spec.name, spec, source, spec.description)
    return spec


# Sinusoid budgets are sized to finish in well under a minute on 2 CPU cores; the MAML
# paper's 70k iterations are one --set away.
_SINUSOID_PROTOCOL = EpisodicConfig(
    iterations=10_000,
    meta_batch=25,
    val_every=1000,
    val_tasks=200,
    test_tasks=1000,
    eval_steps=(1, 10),
    checkpoint_every=2000,
)

for _shots in (5, 10):
    register_benchmark(
        BenchmarkSpec(
            name=f"sinusoid-{_shots}shot",
            description=f"MAML sinusoid regression, {_shots}-shot support, 10 queries, MSE",
            task=SinusoidConfig(shots=_shots, queries=10),
            protocol=_SINUSOID_PROTOCOL,
            reference="Finn et al. 2017, section 5.1 (MLP 1-40-40-1, inner lr 0.01, meta-batch 25)",
        )
    )
register_benchmark(
    BenchmarkSpec(
        name="linreg-icl",
        description=(
            "in-context linear regression: d=10, N=10 context points, x~U(-1,1), w~N(0,I), "
            "loss 0.5*squared error; gradient learners default to the optimal one-step rate"
        ),
        task=LinRegConfig(dim=10, shots=10, queries=1, input_range=1.0),
        protocol=EpisodicConfig(
            iterations=2000,
            meta_batch=256,
            val_every=500,
            val_tasks=1000,
            test_tasks=10_000,
            eval_steps=(1,),
            eval_chunk=1000,
            checkpoint_every=1000,
        ),
        reference=(
            "von Oswald et al. 2023 (paper text: U(-1,1); the public code used U(-0.5,0.5): "
            "--set input_range=0.5)"
        ),
    )
)


register_benchmark(
    BenchmarkSpec(
        name="lindyn",
        description="autoregressive linear dynamics: D=10, T=50, random orthogonal W* per "
        "sequence, noise 0.01; causal, loss 0.5||s_t+1 - f_t||^2 averaged over t",
        task=LinDynConfig(dim=10, length=50, noise=0.01),
        protocol=EpisodicConfig(
            iterations=2000,
            meta_batch=64,
            val_every=500,
            val_tasks=500,
            test_tasks=2000,
            eval_steps=(1,),
            eval_chunk=500,
            checkpoint_every=1000,
        ),
        reference="von Oswald et al. 2023, mesa-layer (thesis ch. 3)",
    )
)


# Few-shot image classification. Defaults are the MAML paper's settings (Finn et al. 2017,
# section 5.2) except the iteration budget, sized to finish in about half an hour (5-way)
# to an hour (20-way) on 2 CPU cores; `--preset paper` restores 60k iterations and
# `--preset sparse-maml` gives the sparse-MAML public code's settings.
_OMNIGLOT_MAML = {
    5: {"inner_lr": 0.4, "inner_steps": 1, "test_steps": 3, "meta_batch": 32, "iterations": 1000},
    20: {"inner_lr": 0.1, "inner_steps": 5, "test_steps": 5, "meta_batch": 16, "iterations": 500},
}


def _sparse_maml_preset(shots: int) -> dict[str, str]:
    return {
        "inner_steps": "35",
        "inner_lr": "0.25" if shots >= 5 else "0.1",
        "modulation_lr": "0.0075",
        "meta_batch": "2",
        "iterations": "40000",
        "eval_steps": "35",
    }


for _ways in (5, 20):
    for _shots in (1, 5):
        _m = _OMNIGLOT_MAML[_ways]
        register_benchmark(
            BenchmarkSpec(
                name=f"omniglot-{_ways}w{_shots}s",
                description=f"Omniglot {_ways}-way {_shots}-shot, 15 queries per class, Conv-4",
                task=FewShotConfig(dataset="omniglot", ways=_ways, shots=_shots, queries=15),
                protocol=EpisodicConfig(
                    iterations=_m["iterations"],
                    meta_batch=_m["meta_batch"],
                    val_every=250,
                    val_tasks=100,
                    test_tasks=600,
                    eval_steps=(_m["test_steps"],),
                    eval_chunk=10,
                    log_every=10,
                    checkpoint_every=250,
                ),
                method_defaults={
                    "inner_lr": _m["inner_lr"],
                    "inner_steps": _m["inner_steps"],
                    "test_inner_steps": _m["test_steps"],
                },
                presets={
                    "paper": {"iterations": "60000"},
                    "sparse-maml": _sparse_maml_preset(_shots),
                },
                reference="Finn et al. 2017 (Omniglot: background/evaluation alphabets here; "
                "--set omniglot_split=maml --set rotations=true for the MAML split)",
            )
        )

for _shots, _batch in ((1, 4), (5, 2)):
    register_benchmark(
        BenchmarkSpec(
            name=f"miniimagenet-5w{_shots}s",
            description=f"miniImageNet 5-way {_shots}-shot, 15 queries per class, Conv-4",
            task=FewShotConfig(dataset="miniimagenet", ways=5, shots=_shots, queries=15),
            protocol=EpisodicConfig(
                iterations=60000,
                meta_batch=_batch,
                val_every=1000,
                val_tasks=100,
                test_tasks=600,
                eval_steps=(10,),
                eval_chunk=5,
                log_every=10,
                checkpoint_every=500,
            ),
            method_defaults={"inner_lr": 0.01, "inner_steps": 5, "test_inner_steps": 10},
            presets={"paper-32ch": {"channels": "32"}, "sparse-maml": _sparse_maml_preset(_shots)},
            reference="Finn et al. 2017: 48.70 / 63.11 (1 / 5-shot, 32 channels); sparse-MAML "
            "50.35 / 67.03 (Conv-4)",
        )
    )
