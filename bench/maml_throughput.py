"""MAML meta-training speed: ours (torch.func, vmapped over tasks) vs learn2learn vs higher.

Every implementation starts from the same weights and takes the same outer steps on the same
task batches of a benchmark (default sinusoid-5shot: MLP 1-40-40-1, meta-batch 25, the
benchmark's own inner steps and rate, Adam outer step), at a fixed thread count. Timing is
round-robin: each repeat times one outer step of every implementation, in an order that
rotates, so that machine load falls on all alike; the median per implementation is compared.
Both second order and first order:

- ours: ``InnerLoop.batched_query_loss`` (what ``maml`` / ``fomaml`` run);
- learn2learn: ``l2l.algorithms.MAML`` ``clone()``/``adapt()`` per task (``first_order``);
- higher: ``innerloop_ctx`` per task; its first order detaches each inner gradient
  (``grad_callback``), which keeps the meta-gradient; ``track_higher_grads=False`` would
  cut the graph and yield no meta-gradient at all.

Before timing, the meta-gradients of the three are checked to agree (so that the same work
is timed). learn2learn is optional (``bash bench/install_learn2learn.sh``); without it its
column is left out and says why.

    python bench/maml_throughput.py [--benchmark sinusoid-5shot] [--repeats 40] [--threads 1]
                                    [--device cuda]

On a GPU each timed step ends with a synchronisation, and the absolute times are printed
beside the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import higher
import torch

from benchmarks.planning.plan import plan_run
from mesabench_datasets.tasks import seeded_generator
from methods.common.losses import task_loss
from methods.common.networks import build_network, network_for
from methods.gradient.inner_loop import InnerLoop
from methods.gradient.modulation import FixedRate
from methods.peers.l2l import import_learn2learn, learn2learn_installed

Step = Callable[[object], None]


def _network(plan, seed: int = 0):
    torch.manual_seed(seed)
    problem = plan.source.problem
    name = network_for(plan.method.network, problem)
    net = build_network(name, problem, plan.method.hidden, plan.method.channels, vmapped=True)
    return net.to(plan.device)


def ours(plan, first_order: bool) -> tuple[torch.nn.Module, Step]:
    net = _network(plan)
    loop = InnerLoop(net, FixedRate(plan.method.inner_lr), plan.source.problem.loss,
                     [n for n, _ in net.named_parameters()], first_order=first_order)  # fmt: skip
    params, buffers = dict(net.named_parameters()), dict(net.named_buffers())

    def step(batch) -> None:
        loop.batched_query_loss(params, buffers, batch, plan.method.inner_steps).mean().backward()

    return net, step


def learn2learn(plan, first_order: bool) -> tuple[torch.nn.Module, Step]:
    l2l = import_learn2learn()

    net = _network(plan)
    maml = l2l.algorithms.MAML(net, lr=plan.method.inner_lr, first_order=first_order)
    loss_kind, steps = plan.source.problem.loss, plan.method.inner_steps

    def step(batch) -> None:
        tasks = batch.support_x.shape[0]
        for sx, sy, qx, qy in zip(*batch, strict=True):
            learner = maml.clone()
            for _ in range(steps):
                learner.adapt(task_loss(learner(sx), sy, loss_kind))
            (task_loss(learner(qx), qy, loss_kind) / tasks).backward()

    return net, step


def higher_loop(plan, first_order: bool) -> tuple[torch.nn.Module, Step]:
    net = _network(plan)
    inner = torch.optim.SGD(net.parameters(), lr=plan.method.inner_lr)
    loss_kind, steps = plan.source.problem.loss, plan.method.inner_steps
    detach = (lambda grads: [g.detach() for g in grads]) if first_order else None

    def step(batch) -> None:
        tasks = batch.support_x.shape[0]
        for sx, sy, qx, qy in zip(*batch, strict=True):
            with higher.innerloop_ctx(net, inner, copy_initial_weights=False) as (fnet, opt):
                for _ in range(steps):
                    opt.step(task_loss(fnet(sx), sy, loss_kind), grad_callback=detach)
                (task_loss(fnet(qx), qy, loss_kind) / tasks).backward()

    return net, step


def outer_step(net: torch.nn.Module, step: Step, optimizer) -> Step:
    def run(batch) -> None:
        optimizer.zero_grad(set_to_none=True)
        step(batch)
        optimizer.step()

    return run


def check_same_gradient(plan, builders, first_order: bool, batch) -> float:
    """Largest difference between the meta-gradients of the implementations (float64)."""
    grads = []
    for build in builders.values():
        torch.set_default_dtype(torch.float64)
        try:
            net, step = build(plan, first_order)
            step(batch.to(plan.device, torch.float64))
            grads.append(torch.cat([p.grad.flatten() for p in net.parameters()]))
        finally:
            torch.set_default_dtype(torch.float32)
    return max((g - grads[0]).abs().max().item() for g in grads)


def where(device: torch.device, threads: int) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}"
    return f"CPU, {threads} thread(s)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="sinusoid-5shot")
    parser.add_argument("--repeats", type=int, default=40, help="timed outer steps per peer")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=None, help="default: the benchmark's")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    overrides = {} if args.steps is None else {"inner_steps": args.steps}
    plan = plan_run("maml", args.benchmark, 0, overrides, device=args.device)
    device = torch.device(plan.device)
    meta_batch = plan.protocol.meta_batch
    batches = [
        plan.source.sample(meta_batch, seeded_generator(1, 0, i, device=device), "train")
        for i in range(args.warmup + args.repeats)
    ]
    builders = {"ours": ours, "learn2learn": learn2learn, "higher": higher_loop}
    if not learn2learn_installed():
        del builders["learn2learn"]
        print("learn2learn: not installed (bash bench/install_learn2learn.sh); left out")
    print(
        f"{args.benchmark}: torch {torch.__version__}, {where(device, args.threads)}, meta-batch "
        f"{meta_batch}, {plan.method.inner_steps} inner steps at rate {plan.method.inner_lr}, "
        f"{args.repeats} timed outer steps each (median), round-robin"
    )
    for first_order in (False, True):
        order = "first order " if first_order else "second order"
        gap = check_same_gradient(plan, builders, first_order, batches[0])
        steps = {}
        for name, build in builders.items():
            net, step = build(plan, first_order)
            steps[name] = outer_step(net, step, torch.optim.Adam(net.parameters(), 1e-3))
        times: dict[str, list[float]] = {name: [] for name in steps}
        names = list(steps)
        for i, batch in enumerate(batches):
            for name in names[i % len(names) :] + names[: i % len(names)]:  # rotate the order
                began = time.perf_counter()
                steps[name](batch)
                if device.type == "cuda":  # the step's kernels done, not only queued
                    torch.cuda.synchronize(device)
                if i >= args.warmup:
                    times[name].append(time.perf_counter() - began)
        rate = {name: meta_batch / statistics.median(t) for name, t in times.items()}
        line = " | ".join(
            f"{name} {value:7.0f} tasks/s ({statistics.median(times[name]) * 1e3:.1f} ms/step)"
            for name, value in rate.items()
        )
        ratios = ", ".join(
            f"ours/{name} {rate['ours'] / rate[name]:.1f}x" for name in rate if name != "ours"
        )
        print(f"{order}: {line} | {ratios} | meta-gradients agree to {gap:.1e} (float64)")


if __name__ == "__main__":
    main()
