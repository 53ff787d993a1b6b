"""The single causal linear layer read as an algorithm (thesis ch. 3): its weights against
one mesa-GD step's construction (Eq. 3.5, Fig. 3.10), and RevAlg-1 read off its block
diagonals (Eqs. 3.55-3.56, table 3.1: L, L_reduced, L_ablation)."""

from __future__ import annotations

import pytest
import torch

from benchmarks.planning.plan import plan_run


def test_a_layer_built_as_one_mesa_gd_step_reads_so_and_its_tensor_is_its_function():
    """The trilinear tensor read off a causal linear layer computes what the layer adds to
    the readout's residual term, for random weights; a layer built as one mesa-GD step
    (thesis Eq. 3.5) predicts the reference's step and reads |cosine| 1, random weights
    near 0, and the metric is logged for one linear layer only."""
    from methods.analyses.mesa_structure import layer_tensor, mesa_gd_cosine
    from methods.in_context.sequence import CausalLinearAttention, constructed_tokens
    from methods.reference.algorithms import autoregressive_gradient

    torch.manual_seed(0)
    dim, heads = 3, 2
    sequence = torch.randn(2, 7, dim)
    tokens = constructed_tokens(sequence)
    layer = CausalLinearAttention(2 * dim, heads, init_std=0.5)
    readout = torch.randn(dim, 2 * dim)
    weights = (readout, layer.projection, layer.value, layer.key, layer.query)
    with torch.no_grad():
        added = (layer(tokens) - tokens) @ readout.T
        tensor = layer_tensor(*weights)
        causal = torch.ones(7, 7).tril()  # t' <= t
        by_tensor = torch.einsum("oabc,nsa,nsb,ntc,ts->nto", tensor, tokens, tokens, tokens,
                                 causal)  # fmt: skip
        assert by_tensor == pytest.approx(added, abs=1e-4)
        assert mesa_gd_cosine(*weights) < 0.2
        built = CausalLinearAttention(2 * dim, 1)
        built.value.zero_()[0, :dim, :dim] = torch.eye(dim)  # writes s_t' ...
        built.projection.zero_()[0] = torch.eye(2 * dim)
        built.key.zero_()[0, :dim, dim:] = torch.eye(dim)  # ... weighted by s_t'-1 . s_t
        built.query.zero_()[0, :dim, :dim] = torch.eye(dim)
        reads = torch.cat([torch.eye(dim), torch.zeros(dim, dim)], dim=1)
        step = (built(tokens) - tokens) @ reads.T
        assert step == pytest.approx(autoregressive_gradient(sequence), abs=1e-5)
        assert mesa_gd_cosine(reads, built.projection, built.value, built.key,
                              built.query) == pytest.approx(1.0)  # fmt: skip
    from benchmarks.running.execute import build_method

    def held(method: str, **settings: str) -> bool:
        plan = plan_run(method, "lindyn", 0, settings, device="cpu")
        return build_method(plan).reads_as_one_mesa_step()

    assert held("causal_lsa", heads="2")
    assert not any((held("causal_lsa", layers="2"), held("causal_lsa", layernorm="true"),
                    held("causal_lsa", tokens="raw"), held("mesa")))  # fmt: skip


def test_revalg_is_the_layers_function_on_its_block_means():
    """The algorithm's predictor computes the layer's own function from its products (R, R
    P V, K^T Q); on a layer built as one mesa-GD step plus an identity-scaled initial
    prediction, every block is already a multiple of the identity, so RevAlg-1 (Eq. 3.55,
    and Eq. 3.56's reduced terms) is that layer exactly; on random weights, or with a term
    Eq. 3.56 drops, it is not."""
    from methods.analyses.mesa_structure import algorithm_predict, block_means, revalg_weights
    from methods.in_context.sequence import CausalLinearAttention, constructed_tokens

    torch.manual_seed(1)
    dim, heads = 3, 2
    tokens = constructed_tokens(torch.randn(2, 6, dim))
    layer = CausalLinearAttention(2 * dim, heads, init_std=0.5)
    readout, bias = torch.randn(dim, 2 * dim), torch.randn(dim)
    with torch.no_grad():
        own = layer(tokens) @ readout.T + bias
        writes = torch.einsum("oe,hef,hfa->hoa", readout, layer.projection, layer.value)
        forms = torch.einsum("hkb,hkc->hbc", layer.key, layer.query)
        assert algorithm_predict(readout, bias, writes, forms, tokens) == pytest.approx(
            own, abs=1e-4)
        block = torch.arange(36.0).reshape(6, 6)
        assert block_means(block, 3)[:3, :3] == pytest.approx(torch.eye(3) * 7.0)  # (0+7+14)/3
        assert block_means(block, 3)[3:, :3] == pytest.approx(torch.eye(3) * 25.0)
        assert block_means(block, 3)[0, 1] == 0.0
        revalg = revalg_weights(readout, layer.projection, layer.value, layer.key,
                                layer.query, dim)  # fmt: skip
        assert (algorithm_predict(revalg[0], bias, *revalg[1:], tokens) - own).abs().max() > 0.1
        built = CausalLinearAttention(2 * dim, 1)
        built.value.zero_()[0, :dim, :dim] = torch.eye(dim)
        built.projection.zero_()[0] = torch.eye(2 * dim)
        built.key.zero_()[0, :dim, dim:] = 0.3 * torch.eye(dim)
        built.query.zero_()[0, :dim, :dim] = torch.eye(dim)
        reads = torch.cat([0.9 * torch.eye(dim), torch.zeros(dim, dim)], dim=1)
        exact = built(tokens) @ reads.T + bias
        for reduced in (False, True):  # Eq. 3.55, and Eq. 3.56's GD terms: all it has
            revalg = revalg_weights(reads, built.projection, built.value, built.key,
                                    built.query, dim, reduced)  # fmt: skip
            assert algorithm_predict(revalg[0], bias, *revalg[1:], tokens) == pytest.approx(
                exact, abs=1e-5)
        # Table 3.1's ablation (lambda_A,3/4 = 0) leaves this layer its initial prediction
        # alone: R e_t + b, the GD step gone.
        revalg = revalg_weights(reads, built.projection, built.value, built.key, built.query,
                                dim, ablated=True)  # fmt: skip
        assert algorithm_predict(revalg[0], bias, *revalg[1:], tokens) == pytest.approx(
            tokens @ reads.T + bias, abs=1e-6)
        built.key[0, :dim, :dim] = 0.2 * torch.eye(dim)  # a key on s_t' too: not a GD term
        revalg = revalg_weights(reads, built.projection, built.value, built.key, built.query,
                                dim, reduced=True)  # fmt: skip
        assert (algorithm_predict(revalg[0], bias, *revalg[1:], tokens)
                - (built(tokens) @ reads.T + bias)).abs().max() > 0.01
        # Ablated, that layer keeps its other term: it is the layer without its GD block.
        revalg = revalg_weights(reads, built.projection, built.value, built.key, built.query,
                                dim, ablated=True)  # fmt: skip
        without = CausalLinearAttention(2 * dim, 1)
        without.load_state_dict(built.state_dict())
        without.key[0, :dim, dim:] = 0.0
        ablated = algorithm_predict(revalg[0], bias, *revalg[1:], tokens)
        assert ablated == pytest.approx(without(tokens) @ reads.T + bias, abs=1e-5)
        assert (ablated - (tokens @ reads.T + bias)).abs().max() > 0.01
        with pytest.raises(ValueError, match="not both"):
            revalg_weights(reads, built.projection, built.value, built.key, built.query, dim,
                           reduced=True, ablated=True)  # fmt: skip
