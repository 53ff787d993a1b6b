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


def layer_tensor(readout: Tensor, projections: Tensor, values: Tensor,
                 keys: Tensor, queries: Tensor) -> Tensor:  # fmt: skip
    """T[o, a, b, c] of one layer (see the module's text): ``readout`` [O, E], per head
    ``projections``, ``values`` [H, E, E], ``keys``, ``queries`` [H, k, E]."""
    writes = torch.einsum("oe,hef,hfa->hoa", readout, projections, values)
    forms = torch.einsum("hkb,hkc->hbc", keys, queries)
    return torch.einsum("hoa,hbc->oabc", writes, forms)


def mesa_gd_tensor(dim: int) -> Tensor:
    """T of one mesa-GD step from W = 0 at rate 1 on tokens (s_t, s_{t-1}) of ``dim``
    states each: T[o, o, dim + j, j] = 1."""
    built = torch.zeros(dim, 2 * dim, 2 * dim, 2 * dim)
    for o in range(dim):
        for j in range(dim):
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

