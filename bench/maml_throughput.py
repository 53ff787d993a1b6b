"""Meta-training throughput: our vmapped torch.func MAML vs a per-task loop with `higher`.

Same MLP (1-40-40-1), same sinusoid task batches (meta-batch 25), 5 inner steps, inner lr
0.01, Adam outer step; second order and first order. Prints tasks per second and the ratio.

    python bench/maml_throughput.py [--iterations 60] [--meta-batch 25] [--steps 5]
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import higher
import torch
import torch.nn.functional as F

from mesabench_datasets.regression import SinusoidConfig
from mesabench_datasets.tasks import seeded_generator
from methods.inner_loop import InnerLoop
from methods.modulation import FixedRate
from methods.networks import MLP


def ours_step(net, opt, loop, batch, steps):
    params = dict(net.named_parameters())
    loss = loop.batched_query_loss(params, {}, batch, steps).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def higher_step(net, opt, inner_opt, batch, steps, first_order):
    opt.zero_grad()
    for sx, sy, qx, qy in zip(*batch, strict=True):
        with higher.innerloop_ctx(
            net, inner_opt, copy_initial_weights=False, track_higher_grads=not first_order
        ) as (fnet, diffopt):
            for _ in range(steps):
                diffopt.step(F.mse_loss(fnet(sx), sy))
            (F.mse_loss(fnet(qx), qy) / batch.support_x.shape[0]).backward()
    opt.step()


def measure(step, batches, warmup: int = 5) -> float:
    for batch in batches[:warmup]:
        step(batch)
    start = time.perf_counter()
    for batch in batches[warmup:]:
        step(batch)
    elapsed = time.perf_counter() - start
    return sum(b.num_tasks for b in batches[warmup:]) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--meta-batch", type=int, default=25)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    source = SinusoidConfig(shots=5, queries=10).build()
    batches = [
        source.sample(args.meta_batch, seeded_generator(1, i)) for i in range(args.iterations + 5)
    ]
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"meta-batch {args.meta_batch}, {args.steps} inner steps, {args.iterations} iterations"
    )
    for first_order in (False, True):
        torch.manual_seed(0)
        net = MLP(1, (40, 40), 1)
        opt = torch.optim.Adam(net.parameters(), 1e-3)
        loop = InnerLoop(
            net,
            FixedRate(0.01),
            "mse",
            [n for n, _ in net.named_parameters()],
            first_order=first_order,
        )
        ours = measure(partial(ours_step, net, opt, loop, steps=args.steps), batches)
        torch.manual_seed(0)
        net = MLP(1, (40, 40), 1)
        opt = torch.optim.Adam(net.parameters(), 1e-3)
        inner_opt = torch.optim.SGD(net.parameters(), lr=0.01)
        peer = measure(
            partial(higher_step, net, opt, inner_opt, steps=args.steps, first_order=first_order),
            batches,
        )
        order = "first-order " if first_order else "second-order"
        print(
            f"{order}: ours {ours:8.0f} tasks/s | higher per-task loop {peer:8.0f} tasks/s "
            f"| ratio {ours / peer:5.2f}x"
        )


if __name__ == "__main__":
    main()
