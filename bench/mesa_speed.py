"""Mesa-layer inference: our recurrent form vs a per-step linear solve, and state memory.

At every step t the mesa layer needs W_t q_t = (sum v k^T) (sum k k^T + I / lam)^-1 q_t. The
peer keeps the same running sums and calls ``torch.linalg.solve`` at every step (what one
writes without Sherman-Morrison); ours updates the inverse in O(d^2) (``MesaState``), token
by token (``step``) or a block of ``--chunk`` tokens at a time (``block``: Woodbury, every
token's output still exact, the same O(d^2) state). All run on the same keys, values and
queries, in alternation, best of ``--rounds``; outputs are checked equal. Then the state
carried between tokens is measured at growing T (recurrent: constant) beside the parallel
training form's intermediates.

    python bench/mesa_speed.py [--length 256] [--batch 64] [--dim 10] [--chunk 16] [--rounds 5]
                               [--device cuda]
"""

from __future__ import annotations

import argparse
import time

import torch

from methods.layers.mesa import MesaState, mesa_chunked, mesa_parallel


def per_step_solve(keys, values, queries, lam):
    batch, steps, d = keys.shape
    eye = torch.eye(d, dtype=keys.dtype, device=keys.device)
    gram = eye / lam.view(-1, 1, 1)
    memory = keys.new_zeros(batch, values.shape[-1], d)
    outputs = []
    for t in range(steps):
        k, v, q = keys[:, t, :, None], values[:, t, :, None], queries[:, t, :, None]
        gram = gram + k @ k.transpose(1, 2)
        memory = memory + v @ k.transpose(1, 2)
        outputs.append((memory @ torch.linalg.solve(gram, q))[..., 0])
    return torch.stack(outputs, dim=1)


def recurrent(keys, values, queries, lam):
    state = MesaState(lam, keys.shape[-1], values.shape[-1], keys)
    outputs = [state.step(keys[:, t], values[:, t], queries[:, t]) for t in range(keys.shape[1])]
    return torch.stack(outputs, dim=1)


def best_time(fn, args, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn(*args)
        if args[0].is_cuda:  # the kernels done, not only queued
            torch.cuda.synchronize(args[0].device)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--chunk", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    args = parser.parse_args()
    torch.manual_seed(0)
    b, t, d, on = args.batch, args.length, args.dim, torch.device(args.device)
    f64 = {"dtype": torch.float64, "device": on}
    keys, values, queries = (torch.randn(b, t, d, **f64) for _ in range(3))
    lam = torch.full((b,), 1.0, **f64)
    data = (keys, values, queries, lam)
    chunked = (*data, args.chunk)
    reference = per_step_solve(*data)
    torch.testing.assert_close(recurrent(*data), reference)
    torch.testing.assert_close(mesa_chunked(*chunked), reference)

    ours, blocks, peer = [], [], []
    for _ in range(args.rounds):  # alternate, so that all see the same machine load
        ours.append(best_time(recurrent, data, 1))
        blocks.append(best_time(mesa_chunked, chunked, 1))
        peer.append(best_time(per_step_solve, data, 1))
    name = torch.cuda.get_device_name(on) if on.type == "cuda" else "CPU"
    print(f"torch {torch.__version__}, {name}, threads {torch.get_num_threads()}, B={b} T={t} "
          f"d={d}")  # fmt: skip
    print(f"per-step linear solve              {min(peer) * 1e3:8.1f} ms")
    for label, times in (
        ("ours, Sherman-Morrison per token", ours),
        (f"ours, Woodbury per {args.chunk:3d} tokens ", blocks),
    ):
        ratio = min(peer) / min(times)
        print(f"{label}   {min(times) * 1e3:8.1f} ms | ratio {ratio:5.2f}x")

    print("state carried between tokens (recurrent) vs parallel-form intermediates:")
    for length in (256, 1024, 4096):
        state = MesaState(lam, d, d, keys)
        x = torch.randn(b, d, **f64)
        for _ in range(length):
            state.step(x, x, x)
        parallel = b * length * (d * d + length) * 8  # cumulative k k^T, T x T scores; f64
        print(f"  T={length:5d}  recurrent {state.nbytes() / 1024:8.1f} KiB"
              f"   parallel {parallel / 2**20:8.1f} MiB")  # fmt: skip
    mesa_parallel(keys, values, queries, lam)  # the form the parallel figure describes


if __name__ == "__main__":
    main()
