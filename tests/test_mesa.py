"""The mesa layer equals ridge regression at every step, in both of its forms."""

from __future__ import annotations

import pytest
import torch

from methods.layers.mesa import MesaLayer, MesaState, mesa_chunked, mesa_parallel, mesa_recurrent


def _ridge_at_every_step(keys, values, queries, lam):
    outs = []
    for t in range(keys.shape[1]):
        k, v = keys[:, : t + 1], values[:, : t + 1]
        eye = torch.eye(keys.shape[-1], dtype=keys.dtype)
        # W = argmin 0.5 sum ||v - W k||^2 + ||W||^2 / (2 lam)  =>  W (K^T K + I/lam) = V^T K
        gram = k.transpose(1, 2) @ k + eye / lam.view(-1, 1, 1)
        w = torch.linalg.solve(gram, (v.transpose(1, 2) @ k).transpose(1, 2)).transpose(1, 2)
        outs.append((w @ queries[:, t, :, None])[..., 0])
    return torch.stack(outs, dim=1)


def test_every_form_equals_the_ridge_solution_at_every_step():
    torch.manual_seed(0)
    keys, values, queries = (torch.randn(3, 12, 4, dtype=torch.float64) for _ in range(3))
    values = values[..., :3]
    lam = torch.tensor([0.5, 1.0, 4.0], dtype=torch.float64)
    expected = _ridge_at_every_step(keys, values, queries, lam)
    torch.testing.assert_close(mesa_parallel(keys, values, queries, lam), expected)
    torch.testing.assert_close(mesa_recurrent(keys, values, queries, lam), expected)
    for chunk in (1, 5, 12, 40):  # blocks that divide T, that do not, and one past T
        torch.testing.assert_close(mesa_chunked(keys, values, queries, lam, chunk), expected)


def test_blocks_and_single_steps_can_be_mixed_on_one_state():
    torch.manual_seed(3)
    lam = torch.full((2,), 2.0, dtype=torch.float64)
    keys, values, queries = (torch.randn(2, 20, 5, dtype=torch.float64) for _ in range(3))
    expected = mesa_parallel(keys, values, queries, lam)
    state = MesaState(lam, 5, 5, keys)
    outs = [state.block(keys[:, :7], values[:, :7], queries[:, :7])]
    outs += [state.step(keys[:, t], values[:, t], queries[:, t])[:, None] for t in range(7, 9)]
    outs.append(state.block(keys[:, 9:], values[:, 9:], queries[:, 9:]))
    torch.testing.assert_close(torch.cat(outs, dim=1), expected)


@pytest.mark.parametrize("form", ["parallel", "chunked"])
def test_training_forms_give_the_same_gradients(form):
    torch.manual_seed(4)
    layer = MesaLayer(6, heads=2, init_std=0.3).double()
    tokens = torch.randn(2, 9, 6, dtype=torch.float64)
    grads = {}
    for name in ("recurrent", form):
        layer.form = name
        layer.zero_grad()
        layer(tokens).pow(2).sum().backward()
        grads[name] = [p.grad.clone() for p in layer.parameters()]
    for ours, reference in zip(grads[form], grads["recurrent"], strict=True):
        torch.testing.assert_close(ours, reference)


def test_layer_forms_agree_and_are_causal():
    torch.manual_seed(1)
    layer = MesaLayer(6, heads=2, init_std=0.3).double()
    tokens = torch.randn(2, 9, 6, dtype=torch.float64)
    parallel = layer(tokens)
    for form in ("recurrent", "chunked"):
        layer.form = form
        torch.testing.assert_close(layer(tokens), parallel)
    changed = tokens.clone()
    changed[:, 5:] += 1.0  # the future must not change the past
    torch.testing.assert_close(layer(changed)[:, :5], parallel[:, :5])


def test_recurrent_inference_carries_a_state_of_constant_size():
    torch.manual_seed(2)
    lam = torch.ones(2, dtype=torch.float64)
    keys, values, queries = (torch.randn(2, 300, 4, dtype=torch.float64) for _ in range(3))
    expected = mesa_parallel(keys, values, queries, lam)
    state = MesaState(lam, 4, 4, keys)
    sizes = []
    for t in range(300):
        out = state.step(keys[:, t], values[:, t], queries[:, t])
        torch.testing.assert_close(out, expected[:, t])
        sizes.append(state.nbytes())
    assert sizes[0] == sizes[-1] == 2 * (4 * 4 + 4 * 4) * 8
