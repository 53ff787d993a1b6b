"""Continual throughput: our La-MAML vs avalanche's LaMAML (``lamaml_v2``) on one stream.

Both learners see the same MNIST-rotations samples (the first ``--tasks`` tasks, ``--samples``
per task) in batches of 10 with the same per-sample work: 10 single-sample first-order inner
steps per batch, a meta-loss on the batch plus 10 replayed samples after each step, learned
per-weight rates (init 0.15, lr 0.3), gradient clipping at 2.0, a 200-sample buffer.
Avalanche has no glances, so ours runs with ``glances=1``; the published ``glances=5`` is
printed too. The two are measured in alternation, ``--rounds`` times, and the best round of
each is kept (on a shared machine, the least disturbed one). Prints samples per second and
the ratio.

    python bench/lamaml_throughput.py [--tasks 2] [--samples 500] [--rounds 3] [--device cuda]
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
from torch import nn

from mesabench_datasets.streams import StreamConfig
from methods.continual.baselines import stream_network
from methods.continual.lamaml import LaMAMLConfig, LookAheadMetaLearner


class TaskAwareMLP(nn.Module):
    """Avalanche's LaMAML calls ``model(x, task_labels)``; the MLP ignores the labels."""

    def __init__(self, mlp: nn.Module):
        super().__init__()
        self.mlp = mlp

    def forward(self, x, task_labels=None):
        return self.mlp(x)


def ours(stream, tasks, glances: int, device: torch.device) -> float:
    torch.manual_seed(0)
    learner = LookAheadMetaLearner(LaMAMLConfig(glances=glances), stream.problem, device)
    data = [tuple(t.to(device) for t in stream.train_task(t, seed=0)) for t in range(tasks)]
    start = time.perf_counter()
    for t, (x, y) in enumerate(data):
        learner.begin_task(t)
        for i in range(0, len(x), 10):
            learner.observe(x[i : i + 10], y[i : i + 10])
        learner.end_task(t)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return sum(len(x) for x, _ in data) / (time.perf_counter() - start)


def avalanche(stream, tasks, device: torch.device) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from avalanche.training.plugins import EvaluationPlugin
        from avalanche.training.supervised.lamaml_v2 import LaMAML

        from methods.peers.avalanche import experience_of

        torch.manual_seed(0)
        model = TaskAwareMLP(stream_network(stream.problem, (100, 100), device))
        strategy = LaMAML(
            model=model,
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
            n_inner_updates=10,
            second_order=False,
            grad_clip_norm=2.0,
            learn_lr=True,
            lr_alpha=0.3,
            alpha_init=0.15,
            max_buffer_size=200,
            buffer_mb_size=10,
            train_mb_size=10,
            device=device,
            evaluator=EvaluationPlugin(loggers=[]),
        )
        experiences = [experience_of(*stream.train_task(t, seed=0)) for t in range(tasks)]
        start = time.perf_counter()
        for experience in experiences:
            strategy.train(experience, shuffle=False, num_workers=0)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - start
    return sum(len(e.dataset) for e in experiences) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    args = parser.parse_args()
    device = torch.device(args.device)
    stream = StreamConfig(tasks=max(args.tasks, 1), train_per_task=args.samples).build()
    stream.prepare()
    theirs = mine = 0.0
    for _ in range(args.rounds):
        theirs = max(theirs, avalanche(stream, args.tasks, device))
        mine = max(mine, ours(stream, args.tasks, 1, device))
    mine5 = ours(stream, args.tasks, 5, device)
    on = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(
        f"{on}, threads: {torch.get_num_threads()}, {args.tasks} tasks x {args.samples} samples, "
        f"best of {args.rounds} alternating rounds"
    )
    print(f"avalanche LaMAML (lamaml_v2): {theirs:8.1f} samples/s")
    print(f"ours, glances=1:              {mine:8.1f} samples/s  ratio {mine / theirs:.2f}x")
    print(f"ours, glances=5 (published):  {mine5:8.1f} samples/s  (5x the work per sample)")


if __name__ == "__main__":
    main()
