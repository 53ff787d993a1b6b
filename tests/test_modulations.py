"""Gradient modulations come from one open registry, used by the MAML family, La-MAML and
continual-MAML alike; a plugin's modulation serves every family through configuration."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from mlflow.tracking import MlflowClient
from torch import nn

from benchmarks.plugin_api import GradientModulation, ModulationSettings
from mesabench_core import BadInput
from mesabench_datasets.tasks import Problem
from methods.continual.lamaml import LaMAMLConfig, LookAheadMetaLearner
from methods.continual.online import OnlineMetaConfig, OnlineMetaLearner
from methods.gradient.maml import GradientMetaLearner, MAMLConfig
from methods.gradient.modulation import MODULATIONS, FixedRate, LearnedRates, register_modulation
from tests.helpers import (
    CONTINUAL_TINY,
    PLUGIN_PACKAGES,
    ROOT,
    TINY,
    install_plugin_package,
    mlp_forward,
)

CPU = torch.device("cpu")
REGRESSION = Problem(input_shape=(1,), output_dim=1, loss="half_mse", network="mlp")
CLASSES = Problem(input_shape=(4,), output_dim=3, loss="cross_entropy", network="mlp")


class HalfSigmoid(GradientModulation):
    """rate = lr * sigmoid(m), m per element: a modulation none of the families knows."""

    def __init__(self, settings: ModulationSettings):
        super().__init__()
        self.lr = settings.lr
        self.m = nn.ParameterDict({n.replace(".", "__"): nn.Parameter(torch.randn(s))
                                   for n, s in settings.shapes.items()})  # fmt: skip

    def rate(self, name: str) -> torch.Tensor:
        return self.lr * torch.sigmoid(self.m[name.replace(".", "__")])


if "test_half_sigmoid" not in MODULATIONS:
    register_modulation("test_half_sigmoid", HalfSigmoid, "a test's own modulation",
                        source="tests/test_modulations.py")  # fmt: skip


@pytest.mark.parametrize(
    ("name", "kind"),
    [("fixed", FixedRate), ("learned_rates", LearnedRates), ("binary_mask", LearnedRates),
     ("relu_rates", LearnedRates), ("test_half_sigmoid", HalfSigmoid)],
)  # fmt: skip
def test_every_family_builds_its_modulation_from_the_one_registry(name, kind):
    maml = GradientMetaLearner(MAMLConfig(modulation=name, hidden=(4,)), REGRESSION, CPU)
    lamaml = LookAheadMetaLearner(LaMAMLConfig(modulation=name, hidden=(3,)), CLASSES, CPU)
    online = OnlineMetaLearner(OnlineMetaConfig(modulation=name, hidden=(4,)), CLASSES, CPU)
    for learner in (maml, lamaml, online):
        assert type(learner.modulation) is kind


def test_an_unregistered_modulation_is_refused_naming_the_registered_ones():
    from benchmarks.planning.plan import plan_run

    with pytest.raises(BadInput, match=r"method\.modulation must be one of .*'binary_mask'.*"
                       r"'relu_rates'.* \(got 'soft_gat'\)"):  # fmt: skip
        plan_run("maml", "sinusoid-5shot", 0, {"modulation": "soft_gat"}, "cpu")


def test_a_new_modulation_steps_the_maml_inner_loop_by_its_own_rate():
    torch.manual_seed(0)
    learner = GradientMetaLearner(MAMLConfig(modulation="test_half_sigmoid", hidden=(4,),
                                             inner_lr=0.3), REGRESSION, CPU)  # fmt: skip
    sx, sy = torch.randn(5, 1), torch.randn(5, 1)
    adapted = learner.inner.batched_adapt(learner.params, learner.buffers, sx[None], sy[None], 1)
    leaves = {n: p.detach().requires_grad_() for n, p in learner.params.items()}
    prediction = torch.func.functional_call(learner.network, leaves, (sx,))
    loss = 0.5 * ((prediction - sy) ** 2).sum(-1).mean()
    grads = dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values())), strict=True))
    for name, p in learner.params.items():
        rate = 0.3 * torch.sigmoid(learner.modulation.m[name.replace(".", "__")])
        torch.testing.assert_close(adapted[name][0], p - rate * grads[name])


def test_a_new_modulation_in_lamaml_gets_the_exact_look_ahead_gradient():
    """La-MAML hands dL/drate to the modulation; a modulation without a closed form gets it
    through its own rate() by autograd: checked against the unrolled trajectory."""
    torch.manual_seed(0)
    config = LaMAMLConfig(modulation="test_half_sigmoid", hidden=(3,), glances=1,
                          replay_batch=0, buffer_size=0, fixed_rate=0.2, modulation_lr=0.5,
                          grad_clip=0.0)  # fmt: skip
    learner = LookAheadMetaLearner(config, CLASSES, CPU)
    x, y = torch.randn(2, 4), torch.tensor([0, 2])
    theta = {n: p.detach().clone().requires_grad_() for n, p in learner.params.items()}
    m = {n: learner.modulation.m[n.replace(".", "__")].detach().clone().requires_grad_()
         for n in theta}  # fmt: skip

    order = torch.randperm(2, generator=learner.generator.clone_state())
    xs, ys = x[order], y[order]
    fast, losses = theta, []
    for i in range(2):
        leaves = {n: w.detach().requires_grad_() for n, w in fast.items()}
        g = torch.autograd.grad(F.cross_entropy(mlp_forward(leaves, xs[i : i + 1]), ys[i : i + 1]),
                                list(leaves.values()))  # fmt: skip
        fast = {n: fast[n] - 0.2 * torch.sigmoid(m[n]) * gi
                for n, gi in zip(fast, g, strict=True)}  # fmt: skip
        losses.append(F.cross_entropy(mlp_forward(fast, xs), ys))
    meta = torch.stack(losses).mean()
    g_theta = torch.autograd.grad(meta, list(theta.values()), retain_graph=True)
    g_m = torch.autograd.grad(meta, list(m.values()))
    expected_m = {n: m[n] - 0.5 * gm for n, gm in zip(m, g_m, strict=True)}

    learner.observe(x, y)
    for (n, p), gt in zip(learner.params.items(), g_theta, strict=True):
        torch.testing.assert_close(learner.modulation.m[n.replace(".", "__")],
                                   expected_m[n].detach())  # fmt: skip
        step = 0.2 * torch.sigmoid(expected_m[n]) * gt
        torch.testing.assert_close(p.detach(), (theta[n] - step).detach())


def test_the_guide_shows_the_installed_modulation_exactly():
    doc = (ROOT / "docs" / "writing-a-method.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    package = PLUGIN_PACKAGES / "my_modulations"
    assert (package / "my_modulations.py").read_text() in blocks
    toml = re.findall(r"```toml\n(.*?)```", doc, flags=re.S)
    assert any(t.strip() in (package / "pyproject.toml").read_text() and "modulations" in t
               for t in toml)  # fmt: skip


@pytest.mark.slow  # pip installs or real processes: with the long checks
def test_a_plugin_modulation_joins_through_its_entry_point_and_serves_two_families(
    tmp_path, store, run_cli
):
    from tests.image_fixtures import write_mnist

    env = {"PYTHONPATH": str(install_plugin_package("my_modulations", tmp_path))}
    listed = run_cli("list", "modulations", **env)
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if "soft_gate" in line)
    assert "my-modulations 0.1" in row

    maml = run_cli("run", "--method", "maml", "--set", "modulation=soft_gate", *TINY,
                   "--tracking-uri", store, **env)  # fmt: skip
    assert maml.returncode == 0, maml.stdout + maml.stderr
    data = write_mnist(tmp_path / "data").parent
    lamaml = run_cli("run", "--method", "lamaml", "--benchmark", "mnist-rotations",
                     "--set", "modulation=soft_gate", *CONTINUAL_TINY, "--data-root", str(data),
                     "--tracking-uri", store, **env)  # fmt: skip
    assert lamaml.returncode == 0, lamaml.stdout + lamaml.stderr
    # The guide's MAML++-style learner: the plugin's per-step rates and the family's
    # multi-step loss, on a benchmark of its own (one run per experiment below).
    steps = run_cli("run", "--method", "maml", "--benchmark", "linreg-icl",
                    "--set", "modulation=step_rates", "--set", "inner_steps=3",
                    "--set", "msl_iterations=4", *TINY, "--tracking-uri", store, **env)  # fmt: skip
    assert steps.returncode == 0, steps.stdout + steps.stderr

    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("linreg-icl").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["method.msl_iterations"] == "4"
    assert run.data.params["method.modulation"] == "step_rates"
    for benchmark in ("sinusoid-5shot", "mnist-rotations"):
        (run,) = client.search_runs([client.get_experiment_by_name(benchmark).experiment_id])
        assert run.info.status == "FINISHED"
        assert run.data.params["method.modulation"] == "soft_gate"
        # The plugin's own sparsity (rates under 5% of lr): none at m = mask_init.
        assert run.data.metrics["final/sparsity/overall"] == 0.0

    # Without the plugin the name is refused in one line, before anything is recorded.
    refused = run_cli("run", "--method", "maml", "--set", "modulation=soft_gate",
                      "--tracking-uri", store)  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr.strip().startswith("error: method.modulation must be one of")
