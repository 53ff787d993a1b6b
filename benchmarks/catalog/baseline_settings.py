"""Settings of published baselines taken from their authors' public code, where the paper
that reports the numbers states none (imports nothing: the benchmark specs and the
published tables both read it)."""

from __future__ import annotations

#: The settings of table 4.5's baseline rows, from the MER authors' code (mattriemer/MER at
#: 4b7b9c9, ``mer_examples.sh``). The thesis states none (it takes the GEM, MER and SGD rows
#: from La-MAML [160], sec. 4.4.1 and the caption of table 4.5); La-MAML's budgets (200
#: memories on rotations and permutations, 500 on many permutations, its public
#: ``run_experiments.sh``) are that script's blocks of the same size. The script runs every
#: baseline one sample at a time (``--batch_size 1``, l. 4-6), so its rates are per sample.
#: Per stream: online SGD's rate (l. 10, 12, 14); GEM's rate, memories per task and
#: ``memory_strength`` (l. 50, 52, 46); MER (algorithm 1)'s rate, ``memories``,
#: ``replay_batch_size``, ``batches_per_example`` and beta, gamma 1.0 (l. 116, 118, 112).
MER_CODE_BASELINES: dict[str, dict[str, dict[str, float]]] = {
    "mnist-rotations": {
        "online_sgd": {"lr": 0.0003},
        "gem": {"lr": 0.01, "patterns_per_task": 10, "memory_strength": 0.0},
        "mer": {"lr": 0.1, "mer_buffer": 200, "mer_replay": 10, "mer_steps": 5,
                "mer_beta": 0.01, "mer_gamma": 1.0},
    },
    "mnist-permutations": {
        "online_sgd": {"lr": 0.003},
        "gem": {"lr": 0.01, "patterns_per_task": 10, "memory_strength": 0.0},
        "mer": {"lr": 0.03, "mer_buffer": 200, "mer_replay": 10, "mer_steps": 10,
                "mer_beta": 0.03, "mer_gamma": 1.0},
    },
    "mnist-many-permutations": {
        "online_sgd": {"lr": 0.003},
        "gem": {"lr": 0.003, "patterns_per_task": 5, "memory_strength": 0.1},
        "mer": {"lr": 0.03, "mer_buffer": 500, "mer_replay": 5, "mer_steps": 10,
                "mer_beta": 0.03, "mer_gamma": 1.0},
    },
}  # fmt: skip
#: The field that makes each baseline step on one sample at a time (the MER code's batch 1).
PER_SAMPLE = {"online_sgd": "step_batch", "gem": "train_batch", "mer": "train_batch"}
