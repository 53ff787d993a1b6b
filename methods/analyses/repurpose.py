"""A sequence model trained on linear dynamics, used as a few-shot regressor (thesis ch. 3,
"repurposing" the mesa-optimiser for supervised few-shot learning).

A task y = W x (W drawn as the dynamics' W*: Haar-random orthogonal; x ~ N(0, I), no noise)
is shown as the sequence x_1, y_1, ..., x_n, y_n, x_q and the model's next-state prediction
at x_q is read as its guess of y_q. Plain interleaving also shows the model the transitions
y_i -> x_i+1, which belong to no task; an end-of-pair token (here the zero state) after each
y_i turns them into y_i -> 0 and 0 -> x_i+1, the second of which a regression on the
previous state cannot use. Scored beside least squares on the n pairs alone.

Continual in-context learning: the prompt of another task (its n pairs, with end-of-pair
tokens) comes first, then this task's; how much the first task's pairs hurt the guess.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from mesabench_datasets.dynamics import random_orthogonal
from mesabench_datasets.tasks import seeded_generator

#: Seed role of the repurposing tasks (apart from training, validation, test and the other
#: analyses' roles).
_ROLE = 9
#: Numbers of (x, y) pairs shown, and the prompt forms scored at each.
SHOTS = (2, 5, 10, 15)
FORMS = ("plain", "eos", "continual")


def regression_prompt(x: Tensor, y: Tensor, eos: bool) -> Tensor:
    """``[B, n + 1, D]`` inputs and ``[B, n, D]`` targets -> the sequence x_1, y_1, (0,) ...,
    x_n, y_n, (0,) x_q: ``[B, 2n + 1 (+ n), D]``."""
    parts = [x[:, :-1], y]
    if eos:
        parts.append(torch.zeros_like(y))
    pairs = torch.stack(parts, dim=2).flatten(1, 2)  # x_1, y_1, (0,) x_2, ...
    return torch.cat([pairs, x[:, -1:]], dim=1)


def least_squares_guess(x: Tensor, y: Tensor) -> Tensor:
    """The minimum-norm least-squares map fitted on the n pairs, applied to x_q: ``[B, D]``."""
    fitted = torch.linalg.pinv(x[:, :-1]) @ y  # [B, D, D]: y ~ x @ fitted
    return (x[:, -1:] @ fitted)[:, 0]


def repurposing_scores(
    predict: Callable[[Tensor], Tensor],
    dim: int,
    seed: int,
    device: torch.device,
    shots: Sequence[int] = SHOTS,
    tasks: int = 256,
) -> dict[str, float]:
    """``final/repurpose/<form>_n<n>`` for the model (``predict``: a ``[B, T, D]`` sequence
    to its ``[B, T, D]`` next-state predictions; forms: plain, eos, continual) and
    ``least_squares_n<n>``: the loss
    0.5 ||y_q - guess||^2, mean over tasks (as the dynamics' loss per step)."""
    generator = seeded_generator(_ROLE, seed, device=device)
    scores = {}
    for n in shots:
        weights = random_orthogonal(tasks, dim, generator)
        x = torch.randn(tasks, n + 1, dim, generator=generator, device=device)
        y = x @ weights.transpose(1, 2)  # y_i = W x_i
        target = y[:, -1]
        y = y[:, :-1]
        # Another task's n pairs, shown first in the continual prompt.
        other_x = torch.randn(tasks, n, dim, generator=generator, device=device)
        other_y = other_x @ random_orthogonal(tasks, dim, generator).transpose(1, 2)
        other = regression_prompt(torch.cat([other_x, x[:, :1]], 1), other_y, eos=True)[:, :-1]
        prompts = {"plain": regression_prompt(x, y, eos=False),
                   "eos": regression_prompt(x, y, eos=True)}  # fmt: skip
        prompts["continual"] = torch.cat([other, prompts["eos"]], dim=1)
        guesses = {"least_squares": least_squares_guess(x, y)}
        for form in FORMS:
            with torch.no_grad():
                guesses[form] = predict(prompts[form])[:, -1]
        for name, guess in guesses.items():
            loss = 0.5 * (target - guess).pow(2).sum(-1).mean().item()
            scores[f"final/repurpose/{name}_n{n}"] = loss
    return scores
