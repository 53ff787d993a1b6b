"""How much of a trained causal linear-attention layer is one mesa-gradient step (thesis sec.
3.3, Eq. 3.5; Fig. 3.10: "the dominant pattern ... corresponds to our mesa-gradient descent
construction").

On tokens e_t = (s_t, s_{t-1}) a layer with heads (K_h, Q_h, V_h, P_h) and the readout R
predicts R e_t + sum_h R P_h V_h sum_{t' <= t} e_t' (e_t'^T K_h^T Q_h e_t): a trilinear map
whose tensor is T[o, a, b, c] = sum_h (R P_h V_h)[o, a] (K_h^T Q_h)[b, c]. One mesa-GD step
from W = 0 at rate eta predicts eta sum_t' s_t' (s_t'-1^T s_t): the value reads s_t' (the
first block), the key s_t'-1 (the second), the query s_t (the first). Both tensors are read
symmetrised over (a, b), which index the same token e_t' (a tensor and its (a, b)
transpose compute the same function), and compared by |cosine|: blind to the rate and to
the sign the heads split between their products. The residual R e_t (the thesis' learned
initial weights W_0) is not part of the tensor.
"""

from __future__ import annotations

import torch
from torch import Tensor


def products(readout: Tensor, projections: Tensor, values: Tensor, keys: Tensor,
             queries: Tensor) -> tuple[Tensor, Tensor]:  # fmt: skip
    """Per head, what the layer writes into the prediction, W_h = R P_h V_h [H, O, E], and
    its bilinear form, M_h = K_h^T Q_h [H, E, E]: ``readout`` [O, E], ``projections``,
    ``values`` [H, E, E], ``keys``, ``queries`` [H, k, E]."""
    writes = torch.einsum("oe,hef,hfa->hoa", readout, projections, values)
    return writes, torch.einsum("hkb,hkc->hbc", keys, queries)


def layer_tensor(readout: Tensor, projections: Tensor, values: Tensor,
                 keys: Tensor, queries: Tensor) -> Tensor:  # fmt: skip
    """T[o, a, b, c] of one layer (see the module's text; arguments as :func:`products`)."""
    return torch.einsum("hoa,hbc->oabc", *products(readout, projections, values, keys, queries))


def mesa_gd_tensor(dim: int) -> Tensor:
    """T of one mesa-GD step from W = 0 at rate 1 on tokens (s_t, s_{t-1}) of ``dim``
    states each: T[o, o, dim + j, j] = 1."""
    built = torch.zeros(dim, 2 * dim, 2 * dim, 2 * dim)
    o, j = torch.arange(dim)[:, None], torch.arange(dim)[None, :]
    built[o, o, dim + j, j] = 1.0
    return built


def symmetrised(tensor: Tensor) -> Tensor:
    return (tensor + tensor.transpose(1, 2)) / 2


def mesa_gd_cosine(readout: Tensor, projections: Tensor, values: Tensor,
                   keys: Tensor, queries: Tensor) -> float:  # fmt: skip
    """|cosine| of the layer's tensor with one mesa-GD step's (both symmetrised)."""
    trained = symmetrised(layer_tensor(readout, projections, values, keys, queries))
    built = symmetrised(mesa_gd_tensor(readout.shape[0])).to(trained)
    return abs(torch.nn.functional.cosine_similarity(trained.flatten(), built.flatten(),
                                                     dim=0).item())  # fmt: skip


def block_means(matrix: Tensor, dim: int) -> Tensor:
    """``matrix`` [..., a dim, b dim] with each dim x dim block replaced by the mean of its
    diagonal times the identity: the constant block diagonals the thesis reads off trained
    weights (sec. 3.7.3.1, Eq. 3.55)."""
    rows, cols = matrix.shape[-2] // dim, matrix.shape[-1] // dim
    blocks = matrix.unflatten(-1, (cols, dim)).unflatten(-3, (rows, dim))  # [..., r, d, c, d]
    means = blocks.diagonal(dim1=-3, dim2=-1).mean(-1)  # [..., r, c]
    eye = torch.eye(dim, dtype=matrix.dtype, device=matrix.device)
    return torch.einsum("...rc,ij->...ricj", means, eye).flatten(-2).flatten(-3, -2)


def algorithm_predict(readout: Tensor, bias: Tensor, writes: Tensor, forms: Tensor,
                      tokens: Tensor) -> Tensor:  # fmt: skip
    """Predictions ``[B, T, O]`` of R e_t + b + sum_h W_h sum_{t' <= t} e_t' (e_t'^T M_h e_t)
    for tokens ``[B, T, E]``: the single layer's function (W_h = R P_h V_h, M_h = K_h^T
    Q_h), or, on their block means, RevAlg-1 (thesis Eq. 3.55)."""
    scores = torch.einsum("nsb,hbc,ntc->hnts", tokens, forms, tokens)  # e_t'^T M_h e_t
    causal = torch.ones(tokens.shape[1], tokens.shape[1], device=tokens.device).tril()
    mixed = torch.einsum("hnts,ts,hoa,nsa->nto", scores, causal, writes, tokens)
    return tokens @ readout.T + bias + mixed


def revalg_weights(readout: Tensor, projections: Tensor, values: Tensor, keys: Tensor,
                   queries: Tensor, dim: int, reduced: bool = False,
                   ablated: bool = False) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """RevAlg-1's (R, W_h, M_h): the layer's readout, writes and forms with each dim x dim
    block at its diagonal's mean (Eq. 3.55: every lambda; the readout's blocks are the
    thesis' initial prediction). ``reduced``: Eq. 3.56, one GD step on the mesa-objective
    from W_0 = lambda_1 I: only the terms whose key reads s_t'-1 and whose query reads s_t
    (lambda_A,3 and lambda_A,4), and the readout's s_t block (table 3.1's L_reduced).
    ``ablated``: every lambda but those GD terms (lambda_A,3/4 = 0: table 3.1's
    L_ablation)."""
    if reduced and ablated:
        raise ValueError("RevAlg is reduced to its GD terms or ablated of them, not both")
    writes, forms = products(readout, projections, values, keys, queries)
    readout, writes, forms = (block_means(w, dim) for w in (readout, writes, forms))
    gd_terms = torch.zeros_like(forms)
    gd_terms[:, dim:, :dim] = forms[:, dim:, :dim]  # key s_t'-1, query s_t
    if reduced:
        forms = gd_terms
        readout = torch.cat([readout[:, :dim], torch.zeros_like(readout[:, dim:])], dim=1)
    elif ablated:
        forms = forms - gd_terms
    return readout, writes, forms
