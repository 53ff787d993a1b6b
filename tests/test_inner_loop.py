"""Correctness of the shared inner loop and of every gradient modulation."""

from __future__ import annotations

import higher
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mesabench_datasets.regression import SinusoidConfig
from mesabench_datasets.tasks import TaskBatch, seeded_generator
from methods.common.losses import per_task_loss
from methods.common.networks import MLP
from methods.gradient.inner_loop import InnerLoop
from methods.gradient.modulation import FixedRate, LearnedRates


def _net() -> nn.Module:
    torch.manual_seed(3)
    return MLP(1, (16, 16), 1).double()


def _batch(tasks: int = 4):
    source = SinusoidConfig(shots=5, queries=6).build()
    batch = source.sample(tasks, seeded_generator(7))
    return type(batch)(*(t.double() for t in batch))


def _our_meta_grad(net, modulation, batch, steps, first_order):
    params = dict(net.named_parameters())
    loop = InnerLoop(net, modulation, "mse", list(params), first_order)
    loss = loop.batched_query_loss(params, {}, batch, steps).mean()
    return torch.autograd.grad(loss, list(params.values()) + list(modulation.parameters()))


def test_second_order_meta_gradient_equals_higher():
    net, batch, lr, steps = _net(), _batch(), 0.05, 3
    ours = _our_meta_grad(net, FixedRate(lr), batch, steps, first_order=False)

    # Independent check: a per-task loop through `higher`'s differentiable SGD.
    inner_opt = torch.optim.SGD(net.parameters(), lr=lr)
    total = 0.0
    for sx, sy, qx, qy in zip(*batch, strict=True):
        with higher.innerloop_ctx(net, inner_opt, copy_initial_weights=False) as (fnet, diffopt):
            for _ in range(steps):
                diffopt.step(F.mse_loss(fnet(sx), sy))
            total = total + F.mse_loss(fnet(qx), qy)
    reference = torch.autograd.grad(total / batch.num_tasks, list(net.parameters()))
    for a, b in zip(ours, reference, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def _higher_meta_grad(net, batch, loss_fn, steps, adapted, wrt, lr=None, rates=None):
    """The meta-gradient by `higher`: a per-task loop of its differentiable SGD over the
    ``adapted`` tensors only (one parameter group each, so that Meta-SGD's per-element
    ``rates`` can override each group's rate)."""
    params = dict(net.named_parameters())
    inner_opt = torch.optim.SGD([{"params": [params[n]]} for n in adapted], lr=lr or 1.0)
    override = None if rates is None else {"lr": [rates[n] for n in adapted]}
    total = 0.0
    for sx, sy, qx, qy in zip(*batch, strict=True):
        with higher.innerloop_ctx(net, inner_opt, copy_initial_weights=False) as (fnet, diffopt):
            for _ in range(steps):
                diffopt.step(loss_fn(fnet(sx), sy), override=override)
            total = total + loss_fn(fnet(qx), qy)
    return torch.autograd.grad(total / len(batch.support_x), wrt)


def test_meta_sgd_learned_rate_gradients_equal_higher():
    """Meta-SGD (a learned rate per weight element, random signs) in float64: gradients to
    the weights and to the rates against higher's SGD with the rates as its step sizes."""
    net, batch, steps = _net(), _batch(), 2
    params = dict(net.named_parameters())
    torch.manual_seed(5)
    modulation = LearnedRates({n: p.shape for n, p in params.items()}, gate="identity",
                              scale=1.0, init="centred", init_value=0.05).double()  # fmt: skip
    ours = _our_meta_grad(net, modulation, batch, steps, first_order=False)
    rates = {n: modulation.raw(n) for n in params}
    wrt = list(params.values()) + [rates[n] for n in params]
    reference = _higher_meta_grad(net, batch, F.mse_loss, steps, list(params), wrt, rates=rates)
    assert all(g.abs().max() > 0 for g in reference[len(params) :])  # the rates learn
    for a, b in zip(ours, reference, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)


def test_anil_adapts_the_head_only_and_its_meta_gradient_equals_higher():
    """ANIL: only the head moves in the inner loop; the body still gets a second-order
    meta-gradient (through the head's adaptation), equal to higher's in float64."""
    net, batch, lr, steps = _net(), _batch(), 0.1, 3
    params = dict(net.named_parameters())
    head = [n for n in params if n.startswith("4.")]
    loop = InnerLoop(net, FixedRate(lr), "mse", head, first_order=False, vectorize=False)
    adapted = loop.batched_adapt(params, {}, batch.support_x, batch.support_y, steps)
    for name, weight in params.items():
        moved = (adapted[name] - weight).abs().max().item()
        assert (moved > 0) == (name in head), name
    loss = loop.batched_query_loss(params, {}, batch, steps).mean()
    ours = torch.autograd.grad(loss, list(params.values()))
    reference = _higher_meta_grad(net, batch, F.mse_loss, steps, head, list(params.values()),
                                  lr=lr)  # fmt: skip
    assert all(g.abs().max() > 0 for g in reference)  # the body is meta-learned too
    for a, b in zip(ours, reference, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)


def _image_network(name: str) -> nn.Module:
    from methods.common.networks import Conv4, ResNet12

    torch.manual_seed(11)
    if name == "conv4":
        return Conv4(1, 16, 4, 3).double()
    return ResNet12(1, 4, 3).double()  # widths 4-10-20-40


@pytest.mark.parametrize("name", ["conv4", "resnet12"])
def test_image_network_second_order_meta_gradient_equals_higher(name):
    """Conv-4 and ResNet-12 (residual blocks, global pooling) with batch-statistics
    BatchNorm, cross-entropy, 2 inner steps, float64: our vmapped torch.func loop against
    higher's per-task loop; the first-order gradient differs from both."""
    net = _image_network(name)
    g = torch.Generator().manual_seed(2)
    tasks, shots, queries = 3, 2, 4
    batch = TaskBatch(
        torch.rand(tasks, 3 * shots, 1, 16, 16, generator=g, dtype=torch.float64),
        torch.arange(3).repeat(shots).expand(tasks, -1).clone(),
        torch.rand(tasks, 3 * queries, 1, 16, 16, generator=g, dtype=torch.float64),
        torch.arange(3).repeat(queries).expand(tasks, -1).clone(),
    )
    params = dict(net.named_parameters())
    loop = InnerLoop(net, FixedRate(0.3), "cross_entropy", list(params), first_order=False,
                     vectorize=True)  # the vmapped path (the CPU's default loops)  # fmt: skip
    ours = torch.autograd.grad(loop.batched_query_loss(params, {}, batch, 2).mean(),
                               list(params.values()))  # fmt: skip
    reference = _higher_meta_grad(net, batch, F.cross_entropy, 2, list(params),
                                  list(params.values()), lr=0.3)  # fmt: skip
    assert all(g.abs().max() > 0 for g in reference)
    first_order = InnerLoop(net, FixedRate(0.3), "cross_entropy", list(params), first_order=True,
                            vectorize=True)  # fmt: skip
    fo = torch.autograd.grad(first_order.batched_query_loss(params, {}, batch, 2).mean(),
                             list(params.values()))  # fmt: skip
    assert any((a - b).abs().max() > 1e-6 for a, b in zip(fo, reference, strict=True))
    for a, b in zip(ours, reference, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)


def test_first_order_equals_analytic_first_order_gradient():
    net, batch, lr, steps = _net(), _batch(), 0.05, 2
    ours = _our_meta_grad(net, FixedRate(lr), batch, steps, first_order=True)

    # Analytic first-order MAML: plain SGD on detached copies, then the query gradient at
    # the adapted weights, averaged over tasks.
    expected = [torch.zeros_like(p) for p in net.parameters()]
    for sx, sy, qx, qy in zip(*batch, strict=True):
        fast = [p.detach().clone().requires_grad_() for p in net.parameters()]
        for _ in range(steps):
            loss = F.mse_loss(
                torch.func.functional_call(
                    net, dict(zip([n for n, _ in net.named_parameters()], fast, strict=True)), (sx,)
                ),
                sy,
            )
            grads = torch.autograd.grad(loss, fast)
            fast = [
                (f - lr * g).detach().requires_grad_() for f, g in zip(fast, grads, strict=True)
            ]
        names = [n for n, _ in net.named_parameters()]
        qloss = F.mse_loss(
            torch.func.functional_call(net, dict(zip(names, fast, strict=True)), (qx,)), qy
        )
        for acc, g in zip(expected, torch.autograd.grad(qloss, fast), strict=True):
            acc += g / batch.num_tasks
    for a, b in zip(ours, expected, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)


def test_vmapped_meta_gradient_equals_per_task_loop():
    net, batch = _net(), _batch(5)
    modulation = LearnedRates(
        {n: p.shape for n, p in net.named_parameters()},
        gate="identity",
        scale=1.0,
        init="constant",
        init_value=0.03,
    ).double()
    params = dict(net.named_parameters())
    loop = InnerLoop(net, modulation, "mse", list(params), first_order=False)
    wrt = list(params.values()) + list(modulation.parameters())
    vmapped = torch.autograd.grad(loop.batched_query_loss(params, {}, batch, 2).mean(), wrt)
    looped_loss = (
        sum(
            loop.query_loss(params, {}, sx, sy, qx, qy, 2)
            for sx, sy, qx, qy in zip(*batch, strict=True)
        )
        / batch.num_tasks
    )
    looped = torch.autograd.grad(looped_loss, wrt)
    for a, b in zip(vmapped, looped, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize("first_order", [False, True])
@pytest.mark.parametrize("adapt", ["all", "head"])
def test_batched_autograd_path_equals_the_per_task_torch_func_loop(first_order, adapt):
    """The MLP's batched path (one autograd call per inner step over all tasks) against the
    per-task torch.func path: meta-gradients to every weight (a frozen body is still
    meta-learned) and to the learned rates, and predictions under no_grad."""
    net, batch = _net(), _batch(5)
    params = dict(net.named_parameters())
    adapted = list(params) if adapt == "all" else [n for n in params if n.startswith("4.")]
    modulation = LearnedRates({n: params[n].shape for n in adapted}, gate="relu", scale=0.05,
                              init="centred", init_value=2.0).double()  # fmt: skip
    wrt = list(params.values()) + list(modulation.parameters())
    results = []
    for vectorize in (True, False):
        loop = InnerLoop(net, modulation, "mse", adapted, first_order, vectorize=vectorize)
        assert loop._batches_by_hand({}) == vectorize
        grads = torch.autograd.grad(loop.batched_query_loss(params, {}, batch, 3).mean(), wrt)
        detached = {n: w.detach() for n, w in params.items()}
        with torch.no_grad():
            predictions = loop.batched_predict(detached, {}, *tuple(batch)[:3], 4)
        adapted_weights = loop.batched_adapt(params, {}, batch.support_x, batch.support_y, 2)
        results.append((grads, predictions, adapted_weights))
    (fast_grads, fast_pred, fast_w), (loop_grads, loop_pred, loop_w) = results
    assert all(g.abs().max() > 0 for g in fast_grads[: len(params)])  # the body too
    for a, b in zip(fast_grads, loop_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(fast_pred, loop_pred, atol=1e-12, rtol=1e-10)
    assert fast_pred.grad_fn is None
    for name in params:
        torch.testing.assert_close(fast_w[name], loop_w[name], atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("loss", ["mse", "half_mse", "half_sse", "cross_entropy"])
def test_the_mlps_written_out_gradients_are_autograds_and_carry_the_second_order(loss):
    """MLP.batched_gradients (the batched path's inner gradient) against autograd.grad of the
    summed task losses, and the second-order meta-gradient through it against the per-task
    torch.func path, for every loss kind (two outputs, so that the sums over outputs count)."""
    torch.manual_seed(5)
    net = MLP(3, (8, 8), 4 if loss == "cross_entropy" else 2).double()
    tasks, points = 3, 5
    x = torch.randn(tasks, 2 * points, 3, dtype=torch.float64)
    if loss == "cross_entropy":
        y = torch.randint(0, 4, (tasks, 2 * points))
    else:
        y = torch.randn(tasks, 2 * points, 2, dtype=torch.float64)
    params = dict(net.named_parameters())
    per_task = {n: w.expand(tasks, *w.shape) for n, w in params.items()}
    written = net.batched_gradients(per_task, x[:, :points], y[:, :points], loss)
    total = per_task_loss(net.batched_forward(per_task, x[:, :points]), y[:, :points], loss)
    expected = torch.autograd.grad(total.sum(), list(params.values()), create_graph=True)
    for name, want in zip(params, expected, strict=True):
        # Each task's gradient; the weights are shared here, so they sum to autograd's.
        torch.testing.assert_close(written[name].sum(0), want, atol=1e-12, rtol=1e-10)
    batch = TaskBatch(x[:, :points], y[:, :points], x[:, points:], y[:, points:])
    grads = []
    for vectorize in (True, False):
        loop = InnerLoop(net, FixedRate(0.3), loss, list(params), vectorize=vectorize)
        meta_loss = loop.batched_query_loss(params, {}, batch, 2).mean()
        grads.append(torch.autograd.grad(meta_loss, list(params.values())))
    first_order = InnerLoop(net, FixedRate(0.3), loss, list(params), first_order=True)
    first = torch.autograd.grad(
        first_order.batched_query_loss(params, {}, batch, 2).mean(), list(params.values())
    )
    for fast, looped in zip(*grads, strict=True):
        torch.testing.assert_close(fast, looped, atol=1e-12, rtol=1e-10)
    # The second-order terms are not negligible here, so the check above could fail.
    assert max((a - b).abs().max() for a, b in zip(grads[0], first, strict=True)) > 1e-4


def test_with_nothing_adapted_the_batched_path_is_the_plain_network():
    net, batch = _net(), _batch(3)
    params = dict(net.named_parameters())
    loop = InnerLoop(net, FixedRate(0.1), "mse", [], first_order=False)
    assert loop._batches_by_hand({})
    predictions = loop.batched_predict(params, {}, *tuple(batch)[:3], 5)
    torch.testing.assert_close(predictions, net(batch.query_x), atol=1e-12, rtol=1e-10)
    loss = loop.batched_query_loss(params, {}, batch, 5).mean()
    grads = torch.autograd.grad(loss, list(params.values()))
    expected = torch.autograd.grad(
        F.mse_loss(net(batch.query_x), batch.query_y), list(params.values())
    )
    for a, b in zip(grads, expected, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)


def _sparse_setup():
    net, batch = _net(), _batch(3)
    shapes = {n: p.shape for n, p in net.named_parameters()}
    torch.manual_seed(11)
    mask = LearnedRates(shapes, gate="binary", scale=0.1, init="centred", init_value=1.0).double()
    return net, batch, mask


def test_sparse_maml_mask_gradient_is_thesis_eq_4_4():
    net, batch, mask = _sparse_setup()
    lr, steps = 0.1, 3
    names = [n for n, _ in net.named_parameters()]
    grads = _our_meta_grad(net, mask, batch, steps, first_order=True)
    mask_grads = dict(zip(names, grads[len(names) :], strict=True))

    # Eq. 4.4 computed independently: m <- m + alpha * lr_m * E_tasks[g_out * sum_k g_in_k],
    # i.e. dL/dm = -alpha * E[g_out * sum_k g_in_k] with binary masks applied in the loop.
    binary = {n: (mask.raw(n) >= 0).double().detach() for n in names}
    expected = {n: torch.zeros_like(p) for n, p in net.named_parameters()}
    for sx, sy, qx, qy in zip(*batch, strict=True):
        fast = {n: p.detach().clone() for n, p in net.named_parameters()}
        sum_inner = {n: torch.zeros_like(p) for n, p in fast.items()}
        for _ in range(steps):
            leaf = {n: p.requires_grad_() for n, p in fast.items()}
            loss = F.mse_loss(torch.func.functional_call(net, leaf, (sx,)), sy)
            g = dict(zip(names, torch.autograd.grad(loss, list(leaf.values())), strict=True))
            for n in names:
                sum_inner[n] += g[n]
            fast = {n: (leaf[n] - lr * binary[n] * g[n]).detach() for n in names}
        leaf = {n: p.requires_grad_() for n, p in fast.items()}
        qloss = F.mse_loss(torch.func.functional_call(net, leaf, (qx,)), qy)
        g_out = dict(zip(names, torch.autograd.grad(qloss, list(leaf.values())), strict=True))
        for n in names:
            expected[n] += -lr * g_out[n] * sum_inner[n] / batch.num_tasks
    for n in names:
        torch.testing.assert_close(mask_grads[n], expected[n], atol=1e-10, rtol=1e-8)


def test_masked_coordinates_never_move_in_the_inner_loop():
    net, batch, mask = _sparse_setup()
    params = {n: p.detach() for n, p in net.named_parameters()}
    loop = InnerLoop(net, mask, "mse", list(params), first_order=True)
    sx, sy = batch.support_x[0], batch.support_y[0]
    adapted = loop.adapt(params, {}, sx, sy, steps=5)
    gated_off = gated_on = moved = 0
    for n, p in params.items():
        off = mask.raw(n) < 0
        assert torch.equal(adapted[n][off], p[off]), f"{n}: a masked coordinate moved"
        gated_off, gated_on = gated_off + int(off.sum()), gated_on + int((~off).sum())
        moved += int((adapted[n][~off] != p[~off]).sum())
    assert gated_off > 0 and gated_on > 0, "fixture should gate some entries on and some off"
    assert moved > 0, "unmasked coordinates should move"


@pytest.mark.parametrize("gate", ["binary", "relu"])
def test_gates_are_straight_through(gate):
    mod = LearnedRates(
        {"w": torch.Size([4])}, gate=gate, scale=1.0, init="constant", init_value=-0.5
    )
    rate = mod.rate("w")
    assert torch.equal(rate.detach(), torch.zeros(4))
    rate.sum().backward()
    assert torch.equal(mod.raw("w").grad, torch.ones(4))  # identity backward revives it
    assert mod.sparsity() == {"w": 1.0}


@pytest.mark.parametrize("granularity", ["element", "tensor"])
@pytest.mark.parametrize(
    "gate, straight", [("binary", True), ("relu", True), ("relu", False), ("identity", True)]
)
def test_written_out_rate_gradient_equals_autograd(gate, straight, granularity):
    torch.manual_seed(0)
    mod = LearnedRates(
        {"w": torch.Size([3, 4])}, gate=gate, scale=0.3, init="centred", init_value=1.0,
        granularity=granularity, straight_through=straight,
    )  # fmt: skip
    upstream = torch.randn(3, 4)
    (mod.rate("w") * upstream).sum().backward()
    torch.testing.assert_close(mod.raw_gradient("w", upstream), mod.raw("w").grad)


def test_the_batched_path_runs_on_one_thread_and_restores_the_count():
    net = _net()
    loop = InnerLoop(net, FixedRate(0.1), "mse", [n for n, _ in net.named_parameters()])
    torch.set_num_threads(2)
    try:
        with loop.threads({}):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        looped = InnerLoop(net, FixedRate(0.1), "mse", [], vectorize=False)
        with looped.threads({}):  # the per-task torch.func path keeps its threads
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(2)



@pytest.mark.parametrize("vectorize", [True, False])
def test_mixed_order_is_second_order_for_weights_and_first_order_for_masks(vectorize):
    """Thesis eq. 4.4 (sparse-MAML's binary masks, first order for the mask "following
    FOMAML") with the weights at the second order, float64, 2 steps: the weights' gradient
    equals higher's second-order one with the gated rates as constants, the masks' gradient
    equals FOMAML's written out: -lr * sum_k g_k * dL_query/dphi_K, per task, averaged."""
    net, batch, lr, steps = _net(), _batch(), 0.05, 2
    params = dict(net.named_parameters())
    torch.manual_seed(6)
    masks = LearnedRates({n: p.shape for n, p in params.items()}, gate="binary", scale=lr,
                         init="centred", init_value=0.5).double()  # fmt: skip
    loop = InnerLoop(net, masks, "mse", list(params), first_order=False, vectorize=vectorize,
                     modulation_first_order=True)  # fmt: skip
    loss = loop.batched_query_loss(params, {}, batch, steps).mean()
    raw = [masks.raw(n) for n in params]
    ours = torch.autograd.grad(loss, list(params.values()) + raw)

    rates = {n: masks.rate(n).detach() for n in params}
    weights = _higher_meta_grad(net, batch, F.mse_loss, steps, list(params),
                                list(params.values()), rates=rates)  # fmt: skip
    names = list(params)
    expected = [torch.zeros_like(p) for p in params.values()]
    for sx, sy, qx, qy in zip(*batch, strict=True):
        fast = [p.detach().clone().requires_grad_() for p in params.values()]
        summed = [torch.zeros_like(p) for p in params.values()]
        for _ in range(steps):
            out = torch.func.functional_call(net, dict(zip(names, fast, strict=True)), (sx,))
            grads = torch.autograd.grad(F.mse_loss(out, sy), fast)
            summed = [s + g for s, g in zip(summed, grads, strict=True)]
            fast = [(f - rates[n] * g).detach().requires_grad_()
                    for n, f, g in zip(names, fast, grads, strict=True)]  # fmt: skip
        out = torch.func.functional_call(net, dict(zip(names, fast, strict=True)), (qx,))
        query = torch.autograd.grad(F.mse_loss(out, qy), fast)
        for acc, s, q in zip(expected, summed, query, strict=True):
            acc -= lr * s * q / batch.num_tasks
    second_order_masks = _our_meta_grad(net, masks, batch, steps, first_order=False)
    assert any((a - b).abs().max() > 1e-8 for a, b in
               zip(second_order_masks[len(params):], expected, strict=True))  # fmt: skip
    for a, b in zip(ours, list(weights) + expected, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)


def test_task_batching_defaults_to_the_measured_faster_form():
    """vmap for MLPs and for convolutions on a GPU, a per-task loop for convolutions on a
    CPU (docs/RESULTS.md: 0.39x the loop there): the documented default is the fast one."""
    from methods.common.networks import Conv4
    from methods.gradient.inner_loop import vectorizes

    assert vectorizes(False, "cpu") and vectorizes(True, "cuda") and not vectorizes(True, "cpu")
    assert InnerLoop(_net(), FixedRate(0.1), "mse", []).vectorize
    assert not InnerLoop(Conv4(1, 16, 4, 3), FixedRate(0.1), "cross_entropy", []).vectorize
    assert InnerLoop(Conv4(1, 16, 4, 3), FixedRate(0.1), "cross_entropy", [], vectorize=True
                     ).vectorize  # asked for: kept  # fmt: skip


def test_the_task_batching_a_run_uses_is_recorded_in_its_plan(data_root, store):
    """``task_batching=auto`` resolves by network and device, and the run records which
    form ran (its ``mesabench.execution`` tag: the run's own, as it follows the device),
    beside the setting as given."""
    import json

    from mlflow.tracking import MlflowClient

    from benchmarks.planning.plan import plan_run
    from benchmarks.store.reader import EXECUTION_TAG
    from benchmarks.store.tracking import MlflowTracker
    from methods.gradient.maml import GradientMetaLearner
    from tests.image_fixtures import write_omniglot

    sinusoid = plan_run("maml", "sinusoid-5shot", 0, {}, device="cpu")
    assert sinusoid.flat_params()["method.task_batching"] == "auto"
    # An MLP's run takes one intra-op thread on the CPU (its operations are too small to
    # split); a convolutional one keeps the process's threads.
    assert sinusoid.execution_choices() == {"task_batching": "vmap", "threads": "1"}
    write_omniglot(data_root)
    omniglot = plan_run("maml", "omniglot-5w1s", 0, {"channels": "4"}, device="cpu")
    assert omniglot.execution_choices() == {"task_batching": "loop"}
    problem = omniglot.source.problem
    assert GradientMetaLearner.execution_choices(omniglot.method, problem, "cuda:0") == {
        "task_batching": "vmap"}  # fmt: skip
    asked = plan_run("maml", "omniglot-5w1s", 0, {"channels": "4", "task_batching": "vmap"},
                     device="cpu")  # fmt: skip
    assert asked.execution_choices() == {"task_batching": "vmap"}
    # The method builds what the plan says: the per-task loop's network is not vmapped.
    learner = GradientMetaLearner(omniglot.method, problem, torch.device("cpu"))
    assert not learner.inner.vectorize
    # Recorded with the run as a tag; not a param (the store reads params once per
    # configuration), nor part of the configuration's identity.
    tracker = MlflowTracker(store)
    run_id = tracker.start(omniglot, "built-in")
    tracker.finish("FINISHED")
    run = MlflowClient(store).get_run(run_id)
    assert json.loads(run.data.tags[EXECUTION_TAG]) == {"task_batching": "loop"}
    assert not any(k.startswith("execution") for k in run.data.params)
    assert omniglot.config_hash() == plan_run("maml", "omniglot-5w1s", 0, {"channels": "4"},
                                              device="cpu").config_hash()  # fmt: skip
    # Methods that leave nothing to choose record nothing.
    assert plan_run("gd", "linreg-icl", 0, {}, device="cpu").execution_choices() == {}


class _ThreadsSeen:
    """A recorder that notes torch's intra-op threads at every record the run writes."""

    def __init__(self):
        from benchmarks.protocols.recording import MemoryRecorder

        self.inner, self.threads = MemoryRecorder(), set()

    def log_metrics(self, metrics, step):
        self.threads.add(torch.get_num_threads())
        self.inner.log_metrics(metrics, step)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_an_mlp_run_trains_on_one_thread_and_gives_the_threads_back():
    """The ``threads`` choice is applied for the whole run (its records are written on one
    thread) and the process's own count is restored after; never raised above it."""
    from benchmarks.planning.plan import plan_run
    from benchmarks.running.execute import execute
    from methods.common.threads import intra_op_threads

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        plan = plan_run("fomaml", "sinusoid-5shot", 0, {"iterations": "4", "val_every": "2",
                        "log_every": "2", "test_tasks": "20", "val_tasks": "10"},
                        device="cpu")  # fmt: skip
        seen = _ThreadsSeen()
        execute(plan, seen)
        assert seen.threads == {1} and torch.get_num_threads() == 2
        with intra_op_threads(8):
            assert torch.get_num_threads() == 2
        with intra_op_threads(None):
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
