"""Conv-4 meta-training throughput on identical Omniglot batches: our inner loop vmapped,
our inner loop looped over tasks, and a per-task loop written with `higher`.

5-way 1-shot, 15 queries, 64 channels, 1 inner step at lr 0.4 (MAML's Omniglot setting),
second order; needs omniglot28.npz (``--data-root`` or ``MESABENCH_DATA``). Each line also
prints how far the meta-gradient at the same weights and batch is from `higher`'s: float
error only (``--dtype float64`` shows the algorithms agree to ~1e-15).

    python bench/conv4_throughput.py [--iterations 6] [--meta-batch 8] [--data-root DIR]
                                     [--device cuda] [--dtype float64]
"""

from __future__ import annotations

import argparse
import os
import time
from functools import partial

import higher
import torch
import torch.nn.functional as F

from mesabench_datasets.fewshot import FewShotConfig
from mesabench_datasets.tasks import seeded_generator
from methods.common.networks import Conv4
from methods.gradient.inner_loop import InnerLoop
from methods.gradient.modulation import FixedRate


def ours_backward(net, loop, steps, batch):
    loop.batched_query_loss(dict(net.named_parameters()), {}, batch, steps).mean().backward()


def higher_backward(net, inner_opt, steps, batch):
    for sx, sy, qx, qy in zip(*batch, strict=True):
        with higher.innerloop_ctx(net, inner_opt, copy_initial_weights=False) as (fnet, diffopt):
            for _ in range(steps):
                diffopt.step(F.cross_entropy(fnet(sx), sy))
            (F.cross_entropy(fnet(qx), qy) / batch.num_tasks).backward()


def train_step(backward, opt, batch):
    opt.zero_grad()
    backward(batch)
    opt.step()


def meta_gradient(backward, net, batch) -> torch.Tensor:
    """The meta-gradient at the current weights, flattened (so the two loops can be compared)."""
    net.zero_grad()
    backward(batch)
    return torch.cat([p.grad.flatten() for p in net.parameters()])


def synchronize(device: torch.device) -> None:
    # CUDA kernels run asynchronously: time only finished work.
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(step, batches, device: torch.device) -> float:
    step(batches[0])  # warm-up
    synchronize(device)
    start = time.perf_counter()
    for batch in batches[1:]:
        step(batch)
    synchronize(device)
    return sum(b.num_tasks for b in batches[1:]) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--meta-batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    parser.add_argument(
        "--dtype",
        choices=("float32", "float64"),
        default="float32",
        help="float64 separates the algorithms' agreement from float error (and TF32 on a GPU)",
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_default_dtype(getattr(torch, args.dtype))
    if args.data_root:
        os.environ["MESABENCH_DATA"] = args.data_root
    source = FewShotConfig(dataset="omniglot", ways=5, shots=1, queries=15).build()
    batches = [
        source.sample(args.meta_batch, seeded_generator(1, i), "train").to(
            device, torch.get_default_dtype()
        )
        for i in range(args.iterations + 1)
    ]
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"torch {torch.__version__}, {where}, threads {torch.get_num_threads()}, "
        "Omniglot 5-way 1-shot, "
        f"meta-batch {args.meta_batch}, {args.steps} inner step(s), second order, {args.dtype}"
    )
    rates, gradients = {}, {}
    for label, vectorize in (("ours, vmap over tasks", True), ("ours, loop over tasks", False)):
        torch.manual_seed(0)
        net = Conv4(1, 28, 64, 5, fused_norm=not vectorize).to(device)
        opt = torch.optim.Adam(net.parameters(), 1e-3)
        loop = InnerLoop(
            net,
            FixedRate(0.4),
            "cross_entropy",
            [n for n, _ in net.named_parameters()],
            vectorize=vectorize,
        )
        backward = partial(ours_backward, net, loop, args.steps)
        gradients[label] = meta_gradient(backward, net, batches[0])
        rates[label] = measure(partial(train_step, backward, opt), batches, device)
    torch.manual_seed(0)
    net = Conv4(1, 28, 64, 5, fused_norm=True).to(device)
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    inner_opt = torch.optim.SGD(net.parameters(), lr=0.4)
    backward = partial(higher_backward, net, inner_opt, args.steps)
    reference = meta_gradient(backward, net, batches[0])
    peer = measure(partial(train_step, backward, opt), batches, device)
    print(f"higher per-task loop    {peer:7.2f} tasks/s")
    for label, rate in rates.items():
        # Same initial weights and batch: the meta-gradients must agree up to float error.
        error = (gradients[label] - reference).abs().max() / reference.abs().max()
        print(
            f"{label:22s}  {rate:7.2f} tasks/s | ratio {rate / peer:5.2f}x"
            f" | meta-gradient max rel. diff vs higher {error:.1e}"
        )


if __name__ == "__main__":
    main()
