"""Networks for gradient-based learners. Each names its head so ANIL can adapt only it."""

from __future__ import annotations

from torch import nn

from datasets.tasks import Problem


class MLP(nn.Sequential):
    """Fully connected ReLU network; the last Linear is the head."""

    def __init__(self, in_features: int, hidden: tuple[int, ...], out_features: int):
        layers: list[nn.Module] = []
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, out_features))
        super().__init__(*layers)
        self.head_prefix = f"{len(layers) - 1}."


class LinearModel(nn.Module):
    """y = W x with no bias, zero-initialised: one inner step from it is plain GD from w = 0,
    the model of the in-context regression literature."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.head = nn.Linear(in_features, out_features, bias=False)
        nn.init.zeros_(self.head.weight)
        self.head_prefix = "head."

    def forward(self, x):
        return self.head(x)


NETWORKS = ("mlp", "linear")


def build_network(name: str, problem: Problem, hidden: tuple[int, ...]) -> nn.Module:
    """Build the named network for ``problem``'s input and output sizes."""
    if len(problem.input_shape) != 1 and name in ("mlp", "linear"):
        raise ValueError(f"network {name!r} needs flat inputs, got shape {problem.input_shape}")
    if name == "mlp":
        return MLP(problem.input_shape[0], hidden, problem.output_dim)
    if name == "linear":
        return LinearModel(problem.input_shape[0], problem.output_dim)
    raise ValueError(f"unknown network {name!r}; allowed: {', '.join(NETWORKS)}")


def head_names(network: nn.Module) -> list[str]:
    prefix = getattr(network, "head_prefix", None)
    if prefix is None:
        raise ValueError(f"{type(network).__name__} does not declare a head (head_prefix)")
    return [n for n, _ in network.named_parameters() if n.startswith(prefix)]
