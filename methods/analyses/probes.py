"""Linear probes on a causal sequence model's residual stream (thesis ch. 3, the probing
figure): where in depth the pieces of the mesa-optimiser appear.

On autoregressive dynamics a mesa-optimiser predicts s_{t+1} by regressing s_t' on s_{t'-1}
over the transitions seen so far. Its pieces, at position t (keys s_{t'-1}, values s_t'):

- ``next_state``: the target s_{t+1} itself (W* s_t up to the transition noise);
- ``inverse_term``: R_t s_t with R_t = (sum_{t'<=t} s_{t'-1} s_{t'-1}^T + I / lam)^-1, the
  preconditioned query a mesa layer (or a stack approximating it) needs;
- ``gd_step``: (sum_{t'<=t} s_t' s_{t'-1}^T) s_t, the prediction of one gradient step from
  W = 0 (unscaled), which a single linear-attention layer computes.

A probe is a ridge regression from one layer's tokens (with a bias) to a target, fitted on
some sequences and scored by R^2 on others. Written here rather than taken from scikit-learn
(not a dependency): it is one linear solve.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mesabench_datasets.tasks import seeded_generator
from methods.analyses.sizes import analysis_tasks
from methods.reference.algorithms import autoregressive_gradient, previous_states

#: Ridge strength of the ``inverse_term`` target: the mesa layer's initial lam.
INVERSE_TERM_LAM = 1.0
#: The probes' own ridge (on standardised-scale tokens it only guards the solve).
PROBE_RIDGE = 1e-4


def probe_targets(sequence: Tensor, lam: float = INVERSE_TERM_LAM) -> dict[str, Tensor]:
    """``[B, T, D]`` inputs s_1..s_T -> the ``inverse_term`` and ``gd_step`` targets, ``[B, T,
    D]`` each, at every position (the ``next_state`` is the task's own target)."""
    previous = previous_states(sequence)
    eye = torch.eye(sequence.shape[-1], dtype=sequence.dtype, device=sequence.device)
    gram = torch.cumsum(previous[..., :, None] * previous[..., None, :], dim=1) + eye / lam
    return {
        "inverse_term": torch.linalg.solve(gram, sequence[..., None])[..., 0],
        "gd_step": autoregressive_gradient(sequence),
    }


def transition_moments(sequence: Tensor) -> Tensor:
    """``[B, T, D, D]``: sum_{t'<=t} s_t' s_{t'-1}^T at every position t (s_0 = 0)."""
    previous = previous_states(sequence)
    return torch.cumsum(sequence[..., :, None] * previous[..., None, :], dim=1)


def fit_probe(features: Tensor, target: Tensor, ridge: float = PROBE_RIDGE) -> Tensor:
    """Ridge weights ``[F + 1, D]`` (the last row a bias) from ``[N, F]`` features to ``[N, D]``."""
    x = torch.cat([features, torch.ones_like(features[:, :1])], dim=1).double()
    eye = torch.eye(x.shape[1], dtype=x.dtype, device=x.device)
    return torch.linalg.solve(x.T @ x + ridge * eye, x.T @ target.double())


def probe_r2(weights: Tensor, features: Tensor, target: Tensor) -> float:
    """R^2 of a fitted probe on held-out rows: 1 - SSE / SST, SST around the target's mean
    per dimension, both summed over dimensions."""
    x = torch.cat([features, torch.ones_like(features[:, :1])], dim=1).double()
    target = target.double()
    sse = (x @ weights - target).pow(2).sum()
    sst = (target - target.mean(dim=0)).pow(2).sum()
    return float(1.0 - sse / sst)


def probe_depths(
    fit_states: list[Tensor],
    fit_targets: Tensor,
    test_states: list[Tensor],
    test_targets: Tensor,
    first_position: int = 0,
) -> list[float]:
    """Held-out R^2 of a probe for one target at every depth (``states[k]``: ``[B, T, F]``
    tokens after k layers), over positions from ``first_position`` on."""

    def rows(t: Tensor) -> Tensor:
        return t[:, first_position:].reshape(-1, t.shape[-1])

    scores = []
    for fit, test in zip(fit_states, test_states, strict=True):
        weights = fit_probe(rows(fit), rows(fit_targets))
        scores.append(probe_r2(weights, rows(test), rows(test_targets)))
    return scores


def is_autoregressive_regression(problem) -> bool:
    """Whether each state is regressed on the ones before it (its inputs and targets are
    states of one width), as on linear dynamics."""
    return (problem.causal and problem.loss != "cross_entropy"
            and problem.input_shape == (problem.output_dim,))  # fmt: skip


#: Seed roles of the probes' sequences (fitted on one set, scored on another), apart from
#: training, validation and test draws.
_FIT_ROLE, _SCORE_ROLE = 6, 7


def probe_analysis(method, source, seed: int, sequences: int = 256) -> dict[str, float]:
    """``final/probe/<target>_layer<k>``: held-out R^2 of each target's probe after k layers
    (k = 0: the input tokens), over positions t >= D (where the transitions seen span the
    state space). Only on autoregressive tasks (the state predicts the next state)."""
    problem = source.problem
    if not is_autoregressive_regression(problem):
        return {}
    sequences = analysis_tasks(method, sequences)
    draws, inputs = [], []
    for role in (_FIT_ROLE, _SCORE_ROLE):
        batch = source.sample(sequences, seeded_generator(role, seed, device=method.device))
        with torch.no_grad():
            states = method.hidden_states(batch.query_x)
        targets = {"next_state": batch.query_y, **probe_targets(batch.query_x)}
        draws.append((states, targets))
        inputs.append(batch.query_x)
    (fit_states, fit_targets), (test_states, test_targets) = draws
    final = {}
    for name in fit_targets:
        scores = probe_depths(fit_states, fit_targets[name], test_states, test_targets[name],
                              first_position=problem.output_dim)  # fmt: skip
        final.update({f"final/probe/{name}_layer{k}": r2 for k, r2 in enumerate(scores)})
    final.update(implicit_targets(draws, tuple(inputs), problem.output_dim))
    return final


def implicit_targets(draws, sequences: tuple[Tensor, Tensor],
                     first_position: int) -> dict[str, float]:  # fmt: skip
    """Implicit target probing (thesis Fig. 3.13): at each depth the ``inverse_term`` probe's
    output p_t, mapped by eta (sum_{t'<=t} s_t' s_{t'-1}^T) p_t into a prediction of s_{t+1}
    (the least-squares prediction where p_t is exact and eta 1). Its loss (0.5 ||.||^2,
    positions from ``first_position`` on) beside one GD step's on the same positions, eta
    fitted for each by least squares on the fitting sequences (``sequences``: the fitting
    and the scoring inputs). ``final/probe/implicit_loss_layer<k>``, ``implicit_loss_best``
    (the best depth) and ``implicit_gd_loss``."""
    (fit_states, fit_targets), (test_states, test_targets) = draws
    moments = [transition_moments(x)[:, first_position:].double() for x in sequences]

    def rows(t: Tensor) -> Tensor:
        return t[:, first_position:].reshape(-1, t.shape[-1]).double()

    def implied(weights: Tensor, states: Tensor, moment: Tensor) -> Tensor:
        x = rows(states)
        probed = torch.cat([x, torch.ones_like(x[:, :1])], dim=1) @ weights
        probed = probed.reshape(*moment.shape[:2], -1)
        return (moment @ probed[..., None])[..., 0].reshape(-1, probed.shape[-1])

    def rate(prediction: Tensor, target: Tensor) -> float:
        return float((prediction * target).sum() / prediction.pow(2).sum().clamp_min(1e-300))

    def loss(prediction: Tensor, target: Tensor) -> float:
        return float(0.5 * (prediction - target).pow(2).sum(-1).mean())

    fit_next, test_next = rows(fit_targets["next_state"]), rows(test_targets["next_state"])
    final, losses = {}, []
    for k, (fit, test) in enumerate(zip(fit_states, test_states, strict=True)):
        weights = fit_probe(rows(fit), rows(fit_targets["inverse_term"]))
        eta = rate(implied(weights, fit, moments[0]), fit_next)
        losses.append(loss(eta * implied(weights, test, moments[1]), test_next))
        final[f"final/probe/implicit_loss_layer{k}"] = losses[-1]
    final["final/probe/implicit_loss_best"] = min(losses)
    eta = rate(rows(fit_targets["gd_step"]), fit_next)
    final["final/probe/implicit_gd_loss"] = loss(eta * rows(test_targets["gd_step"]), test_next)
    return final
