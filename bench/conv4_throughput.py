"""Conv-4 meta-training throughput on identical Omniglot batches: our inner loop vmapped,
our inner loop looped over tasks, and a per-task loop written with `higher`.

5-way 1-shot, 15 queries, 64 channels, 1 inner step at lr 0.4 (MAML's Omniglot setting),
second order; needs omniglot28.npz (``--data-root`` or ``MESABENCH_DATA``).

    python bench/conv4_throughput.py [--iterations 6] [--meta-batch 8] [--data-root DIR]
"""

from __future__ import annotations

import argparse
import os
import time
from functools import partial

import higher
import torch
import torch.nn.functional as F

from datasets.fewshot import FewShotConfig
from datasets.tasks import seeded_generator
from methods.inner_loop import InnerLoop
from methods.modulation import FixedRate
from methods.networks import Conv4


def ours_step(net, opt, loop, batch, steps):
    loss = loop.batched_query_loss(dict(net.named_parameters()), {}, batch, steps).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def higher_step(net, opt, inner_opt, batch, steps):
    opt.zero_grad()
    for sx, sy, qx, qy in zip(*batch, strict=True):
        with higher.innerloop_ctx(net, inner_opt, copy_initial_weights=False) as (fnet, diffopt):
            for _ in range(steps):
                diffopt.step(F.cross_entropy(fnet(sx), sy))
            (F.cross_entropy(fnet(qx), qy) / batch.num_tasks).backward()
    opt.step()


def measure(step, batches) -> float:
    step(batches[0])  # warm-up
    start = time.perf_counter()
    for batch in batches[1:]:
        step(batch)
    return sum(b.num_tasks for b in batches[1:]) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--meta-batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--data-root", default=None)
    args = parser.parse_args()
    if args.data_root:
        os.environ["MESABENCH_DATA"] = args.data_root
    source = FewShotConfig(dataset="omniglot", ways=5, shots=1, queries=15).build()
    batches = [
        source.sample(args.meta_batch, seeded_generator(1, i), "train")
        for i in range(args.iterations + 1)
    ]
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, Omniglot 5-way 1-shot, "
        f"meta-batch {args.meta_batch}, {args.steps} inner step(s), second order"
    )
    rates = {}
    for label, vectorize in (("ours, vmap over tasks", True), ("ours, loop over tasks", False)):
        torch.manual_seed(0)
        net = Conv4(1, 28, 64, 5, fused_norm=not vectorize)
        opt = torch.optim.Adam(net.parameters(), 1e-3)
        loop = InnerLoop(
            net,
            FixedRate(0.4),
            "cross_entropy",
            [n for n, _ in net.named_parameters()],
            vectorize=vectorize,
        )
        rates[label] = measure(partial(ours_step, net, opt, loop, steps=args.steps), batches)
    torch.manual_seed(0)
    net = Conv4(1, 28, 64, 5, fused_norm=True)
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    inner_opt = torch.optim.SGD(net.parameters(), lr=0.4)
    peer = measure(partial(higher_step, net, opt, inner_opt, steps=args.steps), batches)
    print(f"higher per-task loop    {peer:7.2f} tasks/s")
    for label, rate in rates.items():
        print(f"{label:22s}  {rate:7.2f} tasks/s | ratio {rate / peer:5.2f}x")


if __name__ == "__main__":
    main()
