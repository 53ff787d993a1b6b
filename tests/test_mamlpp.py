"""MAML++'s multi-step loss (MSL) and per-layer per-step inner rates (LSLR) on the shared
inner loop: the weights' schedule, the meta-gradient against a loop written out by hand in
float64 (the MLP's batched path, the per-task loop and the vmapped Conv-4), equality with
MAML where the two are switched off, and the registered methods end to end."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mesabench_core import ConfigError
from mesabench_datasets.regression import SinusoidConfig
from mesabench_datasets.tasks import TaskBatch, seeded_generator
from methods.common.networks import MLP, Conv4
from methods.gradient.inner_loop import InnerLoop
from methods.gradient.maml import MAMLConfig, msl_weights
from methods.gradient.modulation import FixedRate, PerStepRates


def test_the_msl_weights_follow_the_public_codes_schedule():
    # Uniform at the start; halfway, each early weight 1/N - 0.5/N, the last 1/N + 0.5(N-1)/N.
    assert msl_weights(5, 0, 100) == pytest.approx([0.2] * 5)
    assert msl_weights(5, 50, 100) == pytest.approx([0.1] * 4 + [0.6])
    # Near the end the early weights stop at 0.03/N and the last at 1 - (N-1) 0.03/N.
    assert msl_weights(5, 99, 100) == pytest.approx([0.006] * 4 + [0.976])
    for iteration in range(0, 100, 7):
        assert sum(msl_weights(5, iteration, 100)) == pytest.approx(1.0)
    # From the annealing's end on, and when it is off, the last step's loss alone (MAML).
    assert msl_weights(5, 100, 100) == [0.0] * 4 + [1.0]
    assert msl_weights(3, 0, 0) == [0.0, 0.0, 1.0]


def test_a_multi_step_loss_needs_several_inner_steps():
    with pytest.raises(ConfigError, match="msl_iterations .* needs inner_steps >= 2"):
        MAMLConfig(inner_steps=1, msl_iterations=10).check()


def _sinusoid_batch(tasks: int = 3) -> TaskBatch:
    batch = SinusoidConfig(shots=5, queries=6).build().sample(tasks, seeded_generator(5))
    return TaskBatch(*(t.double() for t in batch))


def _image_batch(tasks: int = 2, ways: int = 3, shots: int = 2, queries: int = 3) -> TaskBatch:
    g = torch.Generator().manual_seed(4)
    labels = torch.arange(ways)
    return TaskBatch(
        torch.rand(tasks, ways * shots, 1, 16, 16, generator=g, dtype=torch.float64),
        labels.repeat(shots).expand(tasks, -1).clone(),
        torch.rand(tasks, ways * queries, 1, 16, 16, generator=g, dtype=torch.float64),
        labels.repeat(queries).expand(tasks, -1).clone(),
    )


def _rates(net: nn.Module, steps: int) -> PerStepRates:
    shapes = {n: p.shape for n, p in net.named_parameters()}
    rates = PerStepRates(shapes, 0.1, steps).double()
    with torch.no_grad():  # a different rate per tensor and step, so the index must matter
        for k, (_, value) in enumerate(rates.values.items()):
            value.copy_(torch.linspace(0.05, 0.15, steps, dtype=torch.float64) + 0.01 * k)
    return rates


def _by_hand(net, rates, batch, steps, weights, loss_fn):
    """The MSL meta-objective written out: per task, ``steps`` second-order steps with the
    rate of each tensor at each step, the query loss after every step weighted."""
    names = [n for n, _ in net.named_parameters()]
    total = 0.0
    for sx, sy, qx, qy in zip(*batch, strict=True):
        fast = dict(net.named_parameters())
        for index in range(steps):
            support = loss_fn(torch.func.functional_call(net, fast, (sx,)), sy)
            grads = torch.autograd.grad(support, [fast[n] for n in names], create_graph=True)
            fast = {n: fast[n] - rates.rate(n, index) * g for n, g in zip(names, grads,
                                                                          strict=True)}  # fmt: skip
            query = loss_fn(torch.func.functional_call(net, fast, (qx,)), qy)
            total = total + weights[index] * query
    return total / batch.num_tasks


def _ours(net, rates, batch, steps, weights, loss, vectorize):
    params = dict(net.named_parameters())
    loop = InnerLoop(net, rates, loss, list(params), first_order=False, vectorize=vectorize)
    each = loop.batched_query_loss(params, {}, batch, steps, every_step=True)
    assert each.shape == (batch.num_tasks, steps)
    return (each.mean(0) * each.new_tensor(weights)).sum()


@pytest.mark.parametrize(
    "network, vectorize",
    [("mlp", True), ("mlp", False), ("conv4", True), ("conv4", False)],
    ids=["mlp-batched", "mlp-loop", "conv4-vmap", "conv4-loop"],
)
def test_msl_and_lslr_meta_gradient_equals_a_loop_written_by_hand(network, vectorize):
    torch.manual_seed(2)
    if network == "mlp":
        net, batch, loss, loss_fn = MLP(1, (8, 8), 1).double(), _sinusoid_batch(), "mse", F.mse_loss
    else:
        net, batch, loss, loss_fn = Conv4(1, 16, 4, 3).double(), _image_batch(), \
            "cross_entropy", F.cross_entropy  # fmt: skip
    steps = 3
    weights = msl_weights(steps, 4, 10)  # mid-annealing: unequal weights
    assert len(set(weights)) == 2
    rates = _rates(net, steps)
    wrt = [*net.parameters(), *rates.parameters()]
    ours = _ours(net, rates, batch, steps, weights, loss, vectorize)
    reference = _by_hand(net, rates, batch, steps, weights, loss_fn)
    torch.testing.assert_close(ours, reference, rtol=1e-10, atol=1e-12)
    for a, b in zip(torch.autograd.grad(ours, wrt), torch.autograd.grad(reference, wrt),
                    strict=True):  # fmt: skip
        assert b.abs().max() > 0
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("network", ["mlp", "conv4"])
def test_switched_off_msl_and_lslr_are_maml(network):
    """Per-step rates all at MAML's rate and the last step's loss alone give MAML's loss and
    meta-gradient, on the regression MLP and on the Conv-4."""
    torch.manual_seed(3)
    if network == "mlp":
        net, batch, loss = MLP(1, (8, 8), 1).double(), _sinusoid_batch(), "mse"
    else:
        net, batch, loss = Conv4(1, 16, 4, 3).double(), _image_batch(), "cross_entropy"
    params = dict(net.named_parameters())
    steps, lr = 3, 0.1
    maml = InnerLoop(net, FixedRate(lr), loss, list(params)).batched_query_loss(
        params, {}, batch, steps).mean()  # fmt: skip
    shapes = {n: p.shape for n, p in params.items()}
    rates = PerStepRates(shapes, lr, steps).double()
    with torch.no_grad():  # built in float32: 0.1 exactly as float64 holds it, as MAML's rate
        for value in rates.values.values():
            value.fill_(lr)
    ours = _ours(net, rates, batch, steps, msl_weights(steps, 10, 10), loss, True)
    torch.testing.assert_close(ours, maml, rtol=1e-12, atol=1e-14)
    for a, b in zip(torch.autograd.grad(ours, list(params.values())),
                    torch.autograd.grad(maml, list(params.values())), strict=True):  # fmt: skip
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_steps_past_the_trained_ones_take_the_last_steps_rate():
    rates = PerStepRates({"w": torch.Size([2])}, 0.1, 3)
    with torch.no_grad():
        rates.values["w"].copy_(torch.tensor([0.1, 0.2, 0.3]))
    assert [rates.rate("w", i).item() for i in (0, 2, 9)] == pytest.approx([0.1, 0.3, 0.3])


def test_mamlpp_and_its_ablations_run_and_rank_beside_maml(cli, store):
    """Each registration end to end on sinusoid-5shot (a short budget), then one board."""
    base = ["--set", "iterations=6", "--set", "test_tasks=20", "--set", "val_every=3",
            "--set", "val_tasks=10", "--tracking-uri", store]  # fmt: skip
    for method in ("maml", "mamlpp", "mamlpp_msl", "mamlpp_lslr"):
        done = cli("run", "--method", method, *base)
        assert done.returncode == 0, done.stderr
    import json

    board = cli("leaderboard", "--tracking-uri", store, "--format", "json")
    (ranked,) = json.loads(board.stdout)
    rows = {row["method"]: row for row in ranked["rows"]}
    assert set(rows) == {"maml", "mamlpp", "mamlpp_msl", "mamlpp_lslr"}
    assert all(row["n"] == 1 and row["status"] == "ranked" for row in rows.values()), rows


def test_mamlpp_and_its_ablations_run_on_omniglot_and_rank_beside_maml(cli, store, data_root):
    """MAML++ on the Conv-4 (generated Omniglot): every tensor gets five learned rates, the
    multi-step loss trains through the image path, and the three rank beside maml."""
    import json

    from mlflow.tracking import MlflowClient

    from tests.image_fixtures import write_omniglot

    write_omniglot(data_root)
    for method in ("maml", "mamlpp", "mamlpp_msl", "mamlpp_lslr"):
        done = cli("run", "--method", method, "--benchmark", "omniglot-5w1s",
                   "--set", "iterations=2", "--set", "val_every=2", "--set", "val_tasks=2",
                   "--set", "test_tasks=4", "--set", "val_classes=6", "--set", "channels=8",
                   "--set", "meta_batch=2", "--tracking-uri", store)  # fmt: skip
        assert done.returncode == 0, done.stderr
    client = MlflowClient(store)
    runs = client.search_runs([client.get_experiment_by_name("omniglot-5w1s").experiment_id])
    by_method = {run.data.tags["mesabench.method"]: run for run in runs}
    assert all(run.info.status == "FINISHED" for run in runs) and len(runs) == 4
    assert by_method["mamlpp"].data.params["method.modulation"] == "per_step_rates"
    assert by_method["mamlpp_msl"].data.params["method.msl_iterations"] == "400"
    assert 0.0 <= by_method["mamlpp"].data.metrics["final/test_accuracy"] <= 1.0
    board = cli("leaderboard", "--benchmark", "omniglot-5w1s", "--tracking-uri", store,
                "--format", "json")  # fmt: skip
    (ranked,) = json.loads(board.stdout)
    # Our four rows, ranked (maml's published row stands apart: its settings differ).
    rows = {row["method"]: row for row in ranked["rows"]
            if not row["status"].startswith("reference")}  # fmt: skip
    assert set(rows) == {"maml", "mamlpp", "mamlpp_msl", "mamlpp_lslr"}
    assert all(row["status"] == "ranked" for row in rows.values()), rows


def test_a_multi_step_schedule_past_the_runs_end_is_refused_only_when_chosen():
    """check_run sees the protocol and who chose a setting: a user's msl_iterations beyond
    the run's iterations is refused in one line; mamlpp's own 400 over a short run is not."""
    from benchmarks.planning.plan import plan_run

    with pytest.raises(ConfigError, match=r"msl_iterations \(200\) is longer than the run's "
                                          r"iterations \(100\)"):  # fmt: skip
        plan_run("mamlpp", seed=0, overrides={"iterations": "100", "msl_iterations": "200"})
    plan = plan_run("mamlpp", seed=0, overrides={"iterations": "100"})
    assert plan.method.msl_iterations == 400 and plan.protocol.iterations == 100


def test_test_inner_steps_chosen_for_an_episodic_run_is_refused_with_what_does_it():
    """It would change the configuration's hash and nothing else (meta-test scores the
    protocol's eval_steps): a user's value is refused in one line; a benchmark's default
    (Omniglot sets it) and eval_steps itself are accepted."""
    from benchmarks.planning.plan import plan_run

    with pytest.raises(ConfigError, match=r"test_inner_steps has no effect in an episodic run: "
                                          r"meta-test scores the protocol's eval_steps \(1, 10\)"):
        plan_run("maml", seed=0, overrides={"test_inner_steps": "5"})
    assert plan_run("maml", seed=0, overrides={"eval_steps": "1,5"}).protocol.eval_steps == (1, 5)
    assert plan_run("maml", "omniglot-5w1s", seed=0).method.test_inner_steps == 3  # its own
