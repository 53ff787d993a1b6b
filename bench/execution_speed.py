"""What bf16 autocast and torch.compile buy per training step, method by method.

For each method and benchmark: the same task batches, fp32 eager vs bf16 autocast vs
``compile=inductor`` (and both), through the run's own ``executing`` context. Prints the
median milliseconds per step after warm-up (compilation is paid in the warm-up and printed
apart) and the ratio to fp32 eager, so that "where it helps" is a measurement.

    python bench/execution_speed.py [--device cuda] [--steps 30] [--warmup 5]
                                    [--cases maml:omniglot-5w1s,lsa:linreg-icl]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.planning.plan import plan_run
from benchmarks.protocols.base import executing
from benchmarks.running.execute import build_method, prepare_data
from mesabench_datasets.tasks import seeded_generator

VARIANTS = {
    "fp32": {},
    "bf16": {"precision": "bf16"},
    "compiled": {"compile": "inductor"},
    "bf16+compiled": {"precision": "bf16", "compile": "inductor"},
}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(method_name: str, benchmark: str, settings: dict, device: str, steps: int,
            warmup: int) -> tuple[float, float]:  # fmt: skip
    plan = plan_run(method_name, benchmark, overrides=settings, device=device)
    prepare_data(plan)
    on = torch.device(plan.device)
    batches = [plan.source.sample(plan.protocol.meta_batch, seeded_generator(1, 0, i, device=on))
               for i in range(warmup + steps)]  # fmt: skip
    method = build_method(plan)
    times, first = [], 0.0
    with executing(plan.protocol, method, on):
        began = time.perf_counter()
        for i, batch in enumerate(batches):
            start = time.perf_counter()
            method.meta_train_step(batch)
            sync(on)
            if i == warmup - 1:
                first = time.perf_counter() - began
            if i >= warmup:
                times.append(time.perf_counter() - start)
    return first, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--cases", default="maml:omniglot-5w1s,lsa:linreg-icl")
    args = parser.parse_args()
    on = torch.device(args.device)
    name = torch.cuda.get_device_name(on) if on.type == "cuda" else "CPU"
    print(f"torch {torch.__version__}, {name}; median of {args.steps} steps after {args.warmup}")
    for case in args.cases.split(","):
        method, benchmark = case.split(":")
        base = None
        for label, settings in VARIANTS.items():
            try:
                warm, step = measure(method, benchmark, settings, args.device, args.steps,
                                     args.warmup)  # fmt: skip
            except Exception as err:  # noqa: BLE001 - a variant that fails is reported, not fatal
                print(f"{method:6s} {benchmark:16s} {label:14s} failed: {str(err)[:160]}")
                continue
            base = base or step
            print(f"{method:6s} {benchmark:16s} {label:14s} {step * 1e3:8.2f} ms/step  "
                  f"x{base / step:5.2f} vs fp32  (warm-up {warm:6.1f} s)")  # fmt: skip


if __name__ == "__main__":
    main()
