"""Named benchmark specs: a task source, a protocol with its budget, and method defaults.

Specs are frozen and printable (``python -m benchmarks show NAME``); every field is
overridable from the command line with ``--set key=value``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from benchmarks.catalog.baseline_settings import MER_CODE_BASELINES, PER_SAMPLE
from benchmarks.protocols import ContinualConfig, EpisodicConfig, OnlineConfig, protocol_for
from mesabench_core import as_dict
from mesabench_datasets.dynamics import LinDynConfig
from mesabench_datasets.fewshot import FewShotConfig
from mesabench_datasets.osaka import OsakaConfig
from mesabench_datasets.recall import RecallConfig
from mesabench_datasets.regression import LinRegConfig, SinusoidConfig
from mesabench_datasets.streams import StreamConfig
from mesabench_datasets.tasks import TaskConfig
from mesabench_datasets.text import TextConfig
from methods.registry import BUILTIN, Registry


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str
    description: str
    task: TaskConfig
    protocol: Any  # a protocol config (EpisodicConfig, ...): it decides the protocol
    #: Derived from the protocol config's type; a spec may state it, and then it must agree.
    protocol_name: str | None = None
    method_defaults: Mapping[str, Any] = field(default_factory=dict)
    #: Published settings of one method on this benchmark (method name -> settings); they
    #: win over ``method_defaults`` and the method's own variant defaults.
    method_settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: Named override sets (``--preset NAME``), e.g. another paper's settings.
    presets: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    reference: str = ""
    #: Leaderboard columns by default (see ``Protocol.headline``); empty: the protocol's.
    headline: tuple[str, ...] = ()
    #: Numbers to show beside the runs (``ReferenceRow``: method, source, metrics, the
    #: settings they were measured under, published or derived).
    references: tuple[Any, ...] = ()
    #: The fewest test episodes a result on this benchmark may rest on (None: no minimum).
    #: A run below it is flagged when it starts and on every board (not refused).
    min_test_tasks: int | None = None
    #: Reference points of an aggregate across benchmarks (``catalog.anchors.ScoreAnchors``);
    #: None: the task family's own (regression, few-shot classification), if it has them.
    score_anchors: Any = None
    #: How far a final metric re-run on another platform (machine, torch version, device)
    #: may stray, relative, for ``verify`` to count it as agreeing (on the same platform it
    #: must be identical). Ours, 1%: float reductions differ between platforms, and a short
    #: run carries the difference to its end.
    verify_rtol: float = 0.01
    #: The plugin API version a plugin benchmark was written for (``benchmarks.plugin_api``);
    #: the registry refuses a plugin spec without it. Built-ins need none.
    api_version: int | None = None

    def __post_init__(self) -> None:
        derived = protocol_for(self.protocol).name
        if self.protocol_name not in (None, derived):
            raise ValueError(
                f"benchmark {self.name!r} states protocol_name {self.protocol_name!r}, but its "
                f"protocol config {type(self.protocol).__name__} is the {derived!r} protocol's"
            )
        object.__setattr__(self, "protocol_name", derived)  # frozen: set once, here

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
            "method_settings": {k: dict(v) for k, v in self.method_settings.items()},
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
_LINREG_ICL_PROTOCOL = EpisodicConfig(
    iterations=2000,
    meta_batch=256,
    val_every=500,
    val_tasks=1000,
    test_tasks=10_000,
    eval_steps=(1,),
    eval_chunk=1000,
    checkpoint_every=1000,
)
_LINREG_ICL_REFERENCE = (
    "von Oswald et al. 2023 (paper text: U(-1,1); the public code used U(-0.5,0.5): "
    "--set input_range=0.5)"
)
register_benchmark(
    BenchmarkSpec(
        name="linreg-icl",
        description=(
            "in-context linear regression: d=10, N=10 context points, x~U(-1,1), w~N(0,I), "
            "loss 0.5*squared error; gradient learners default to the optimal one-step rate"
        ),
        task=LinRegConfig(dim=10, shots=10, queries=1, input_range=1.0),
        protocol=_LINREG_ICL_PROTOCOL,
        reference=_LINREG_ICL_REFERENCE,
    )
)
register_benchmark(
    BenchmarkSpec(
        name="linreg-icl-interleaved",
        description=(
            "linreg-icl with the natural token sequence x_1, y_1, ..., x_N, y_N, x_q for "
            "token-based learners (lsa gets one-hot positions; a softmax first layer can pair "
            "each y with its x); the same tasks and references"
        ),
        task=LinRegConfig(dim=10, shots=10, queries=1, input_range=1.0, tokens="interleaved"),
        protocol=_LINREG_ICL_PROTOCOL,
        method_settings={"lsa": {"first_layer": "softmax", "layers": 2}},
        reference=_LINREG_ICL_REFERENCE + "; sec. 4 (Do self-attention layers build "
        "regression tasks?)",
    )
)
register_benchmark(
    BenchmarkSpec(
        name="sinusoid-icl",
        description=(
            "the MAML sinusoid family learned in context: 10 context points, 10 queries, MSE; "
            "token-based learners see (phi(x), y) with a learned MLP feature map phi"
        ),
        task=SinusoidConfig(shots=10, queries=10),
        protocol=EpisodicConfig(
            iterations=5000,
            meta_batch=128,
            val_every=1000,
            val_tasks=500,
            test_tasks=2000,
            eval_steps=(10,),
            eval_chunk=1000,
            checkpoint_every=1000,
        ),
        method_settings={
            "lsa": {"embed": 40, "layers": 2},
            "gdssm": {"embed": 40, "head": "gated"},
        },
        reference="von Oswald et al. 2023 (nonlinear regression with an MLP embedding)",
    )
)


#: The episodic budget of the sequence benchmarks (one training sequence is one task).
_SEQUENCES = EpisodicConfig(
    iterations=2000,
    meta_batch=64,
    val_every=500,
    val_tasks=500,
    test_tasks=2000,
    eval_steps=(1,),
    eval_chunk=500,
    checkpoint_every=1000,
)

register_benchmark(
    BenchmarkSpec(
        name="lindyn",
        description="autoregressive linear dynamics: D=10, T=50, random orthogonal W* per "
        "sequence, noise 0.01; causal, loss 0.5||s_t+1 - f_t||^2 averaged over t",
        task=LinDynConfig(dim=10, length=50, noise=0.01),
        protocol=_SEQUENCES,
        reference="von Oswald et al. 2023, mesa-layer (thesis ch. 3)",
    )
)


_SEQUENCE_LEARNERS = ("mesa", "causal_lsa", "causal_softmax", "deltanet", "gla", "causal_gd_ssm")

register_benchmark(
    BenchmarkSpec(
        name="mqar",
        description="multi-query associative recall (Arora et al. 2024): V=64 one-hot tokens, "
        "8 key-value pairs then a query of every key in T=32; causal, cross-entropy and "
        "accuracy at the queries only",
        task=RecallConfig(vocab=64, pairs=8, length=32),
        protocol=_SEQUENCES,
        # Sequence learners embed the one-hot tokens first (a CPU-sized model width), all
        # alike. At the lindyn defaults (lr 1e-3, init std 0.02) softmax attention stays at
        # chance for 300 steps; at these it solves the task within 300.
        method_settings={
            name: {"embed": 16, "lr": 3e-3, "init_std": 0.1} for name in _SEQUENCE_LEARNERS
        },
        reference="Arora et al. 2024, Zoology (MQAR), at a CPU scale",
    )
)


register_benchmark(
    BenchmarkSpec(
        name="lm-pydoc",
        description="character-level language modelling on pydoc's help topics (Python's "
        "standard library, PSF License): 97 symbols, T=64, topics split train / val / test; "
        "causal, cross-entropy, perplexity",
        task=TextConfig(length=64),
        # Longer sequences of a wider vocabulary: half the batch and fewer evaluation tasks.
        protocol=replace(_SEQUENCES, meta_batch=32, val_tasks=200, test_tasks=1000,
                         eval_chunk=250),  # fmt: skip
        # Every sequence layer alike: a 32-wide character embedding, 2 layers of 2 heads.
        method_settings={
            name: {"embed": 32, "layers": 2, "heads": 2, "lr": 3e-3}
            for name in _SEQUENCE_LEARNERS
        },
        reference="a CPU-scale stand-in for the thesis' language models (ch. 3, the Pile)",
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


#: Few-shot image results rest on at least 600 test episodes: the field's convention (Ravi &
#: Larochelle 2017, Finn et al. 2017), below which a 95% interval is wider than the gaps
#: papers report.
FEW_SHOT_MIN_TEST_TASKS = 600


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
                min_test_tasks=FEW_SHOT_MIN_TEST_TASKS,
            )
        )


def _natural_image_episodes(meta_batch: int) -> EpisodicConfig:
    """The miniImageNet protocol (Finn et al. 2017): 60,000 iterations, 600 test episodes
    scored after 10 inner steps; shared by every 84x84 / 32x32 natural-image benchmark."""
    return EpisodicConfig(
        iterations=60000,
        meta_batch=meta_batch,
        val_every=1000,
        val_tasks=100,
        test_tasks=600,
        eval_steps=(10,),
        eval_chunk=5,
        log_every=10,
        checkpoint_every=500,
    )


#: Conv-4 MAML's inner loop on natural images (Finn et al. 2017).
_NATURAL_IMAGE_DEFAULTS = {"inner_lr": 0.01, "inner_steps": 5, "test_inner_steps": 10}

for _shots, _batch in ((1, 4), (5, 2)):
    register_benchmark(
        BenchmarkSpec(
            name=f"miniimagenet-5w{_shots}s",
            description=f"miniImageNet 5-way {_shots}-shot, 15 queries per class, Conv-4",
            task=FewShotConfig(dataset="miniimagenet", ways=5, shots=_shots, queries=15),
            protocol=_natural_image_episodes(_batch),
            method_defaults=dict(_NATURAL_IMAGE_DEFAULTS),
            presets={"paper-32ch": {"channels": "32"}, "sparse-maml": _sparse_maml_preset(_shots)},
            reference="Finn et al. 2017: 48.70 / 63.11 (1 / 5-shot, 32 channels); sparse-MAML "
            "50.35 / 67.03 (Conv-4)",
            min_test_tasks=FEW_SHOT_MIN_TEST_TASKS,
        )
    )


# CIFAR-FS, FC100, tiered-ImageNet and CUB: miniImageNet's episodic settings (Conv-4, 5
# inner steps at 0.01, 600 test episodes) on their standard class splits.
_FEWSHOT_SETS = {
    "cifarfs": ("CIFAR-FS", "Bertinetto et al. 2019 (64/16/20 CIFAR-100 classes, 32x32)"),
    "fc100": ("FC100", "Oreshkin et al. 2018 (60/20/20 classes, superclass-disjoint, 32x32)"),
    "tiered_imagenet": ("tiered-ImageNet", "Ren et al. 2018 (351/97/160 classes, 84x84)"),
    "cub": (
        "CUB-200-2011",
        "Wah et al. 2011; Chen et al. 2019's 100/50/50 split, or the image folders' (84x84)",
    ),
}
for _dataset, (_title, _source) in _FEWSHOT_SETS.items():
    for _shots, _batch in ((1, 4), (5, 2)):
        register_benchmark(
            BenchmarkSpec(
                name=f"{_dataset.replace('_', '-')}-5w{_shots}s",
                description=f"{_title} 5-way {_shots}-shot, 15 queries per class, Conv-4",
                task=FewShotConfig(dataset=_dataset, ways=5, shots=_shots, queries=15),
                protocol=_natural_image_episodes(_batch),
                method_defaults=dict(_NATURAL_IMAGE_DEFAULTS),
                reference=_source,
                min_test_tasks=FEW_SHOT_MIN_TEST_TASKS,
            )
        )


# Continual MNIST streams (La-MAML protocol, thesis table 4.5). The method defaults are the
# La-MAML paper's settings per stream; they reach every method that has such a field.
_LAMAML_TABLE = "Gupta et al. 2020 / thesis table 4.5 (RA / BTI, 5 seeds)"
# The baselines' settings are the MER authors' code's, one sample per step as there
# (benchmarks.catalog.baseline_settings.MER_CODE_BASELINES says where each number is).
def _baselines(stream: str) -> dict[str, dict]:
    return {method: {**settings, PER_SAMPLE[method]: 1}
            for method, settings in MER_CODE_BASELINES[stream].items()}  # fmt: skip


# A 100-task stream scored on every task after every task is 10,100 passes over the 10k test
# images, most of a run's time: many permutations scores only the ~400 entries its metrics
# read (the same scores; `--set evaluate=all` for the whole matrix).
_ALL_ENTRIES, _METRIC_ENTRIES = ContinualConfig(), ContinualConfig(evaluate="metrics")
for _name, _stream, _settings, _per_method, _ref, _scoring in (
    (
        "mnist-rotations",
        StreamConfig(transform="rotations", tasks=20, train_per_task=1000),
        {"glances": 5, "modulation_lr": 0.3, "rate_init": 0.15, "buffer_size": 200},
        {**_baselines("mnist-rotations"),
         "ewc": {"lr": 0.01, "ewc_lambda": 1000.0}},  # fmt: skip
        "La-MAML 77.42 / -8.64, sparse-La-MAML 77.77 / -8.16, online SGD 53.38 / -5.44",
        _ALL_ENTRIES,
    ),
    (
        "mnist-permutations",
        StreamConfig(transform="permutations", tasks=20, train_per_task=1000),
        {"glances": 5, "modulation_lr": 0.3, "rate_init": 0.15, "buffer_size": 200},
        _baselines("mnist-permutations"),
        "La-MAML 74.34 / -7.60, sparse-La-MAML 76.88 / -8.39, online SGD 55.42 / -13.76",
        _ALL_ENTRIES,
    ),
    (
        "mnist-many-permutations",
        StreamConfig(transform="permutations", tasks=100, train_per_task=200),
        {"glances": 10, "modulation_lr": 0.1, "rate_init": 0.1, "buffer_size": 500},
        _baselines("mnist-many-permutations"),
        "La-MAML 48.46 / -12.96, sparse-La-MAML 50.81 / -13.73, online SGD 32.62 / -19.06",
        _METRIC_ENTRIES,
    ),
):
    register_benchmark(
        BenchmarkSpec(
            name=_name,
            description=(
                f"continual MNIST {_stream.transform}: {_stream.tasks} tasks x "
                f"{_stream.train_per_task} samples, batches of 10, one pass, shared 10-way head"
                + ("" if _scoring.evaluate == "all" else "; scores the entries its metrics read")
            ),
            task=_stream,
            protocol=_scoring,
            method_defaults=_settings,
            method_settings=_per_method,
            reference=f"{_LAMAML_TABLE}: {_ref}",
        )
    )


# Online fast adaptation (OSAKA, thesis table 4.6). The benchmark defaults are the public
# C-MAML settings for its p; the baselines keep their public rates, but every learner that
# adapts uses the benchmark's inner-step count (the public MAML / ANIL baselines used 16
# steps: one --set away, at eight times the cost).
_OSAKA_REF = "Caccia et al. 2020 (OSAKA) / thesis table 4.6: cumulative accuracy, 3 seeds"
for _p, _settings, _per_method in (
    (
        0.9,
        {"online_lr": 5e-4, "inner_steps": 2, "inner_lr": 0.001},
        {"online_adam": {"online_lr": 1e-3}, "anil_frozen": {"inner_lr": 0.05}},
    ),
    (
        0.98,
        {"online_lr": 1e-4, "inner_steps": 1, "inner_lr": 0.1},
        {"online_adam": {"online_lr": 5e-3}, "anil_frozen": {"inner_lr": 0.5}},
    ),
):
    register_benchmark(
        BenchmarkSpec(
            name=f"osaka-omniglot-p{_p}",
            description=(
                f"OSAKA: Omniglot pre-training, then 10,000 test-then-train steps of 10-way "
                f"5-shot batches; the task switches with probability {1 - _p:.2f} to "
                "Omniglot (0.5), MNIST (0.25) or Fashion-MNIST (0.25)"
            ),
            task=OsakaConfig(p=_p),
            protocol=OnlineConfig(),
            method_defaults=_settings,
            method_settings={
                **_per_method,
                # Its pre-training is plain MAML: the public fine-tuning baseline's step.
                "online_finetune": {"online_lr": 1e-3, "inner_lr": 0.05, "inner_steps": 1},
                "maml_frozen": {"inner_lr": 0.1},
                "sparse_cmaml": {"inner_lr": 0.1},
                "sparse_relu_cmaml": {"inner_lr": 0.1},
            },
            # A first look in minutes rather than hours: a fifth of the stream, 32 channels.
            presets={"quick": {"channels": "32", "steps": "2000", "pretrain_iterations": "300"}},
            reference=_OSAKA_REF,
        )
    )
