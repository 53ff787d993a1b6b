"""Continual learning: accuracy-matrix metrics, MNIST streams, the La-MAML update, masks."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from benchmarks.protocols import ContinualConfig, ContinualProtocol
from benchmarks.protocols.recording import MemoryRecorder
from benchmarks.protocols.summary import continual_metrics
from mesabench_datasets.streams import StreamConfig, TaskStream
from methods.continual.lamaml import LaMAMLConfig, LookAheadMetaLearner
from methods.continual.replay import ReservoirBuffer
from tests.helpers import mlp_forward


def small_arrays(n_train: int = 200, n_test: int = 50) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "x_train": torch.randint(0, 256, (n_train, 28, 28), generator=g, dtype=torch.uint8),
        "y_train": torch.arange(n_train) % 10,
        "x_test": torch.randint(0, 256, (n_test, 28, 28), generator=g, dtype=torch.uint8),
        "y_test": torch.arange(n_test) % 10,
    }


def learnable_arrays(n_train: int = 300, n_test: int = 50) -> dict[str, torch.Tensor]:
    """Noisy copies of one sparse random template per digit (about as many lit pixels as
    an MNIST digit): a stream a learner can learn."""
    g = torch.Generator().manual_seed(1)
    templates = (torch.rand(10, 28, 28, generator=g) < 0.15).float() * 255

    def draw(n):
        y = torch.arange(n) % 10
        noise = torch.randn(n, 28, 28, generator=g) * 40
        return (templates[y] + noise).clamp(0, 255).to(torch.uint8), y

    (x_train, y_train), (x_test, y_test) = draw(n_train), draw(n_test)
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}


# -- metrics on hand-made accuracy matrices ----------------------------------------------
def test_metrics_of_a_hand_made_matrix():
    r = torch.tensor([[0.9, 0.2, 0.1], [0.7, 0.8, 0.3], [0.6, 0.5, 0.9]])
    initial = torch.tensor([0.1, 0.1, 0.2])
    m = continual_metrics(r, initial)
    assert m["ra"] == pytest.approx((0.6 + 0.5 + 0.9) / 3)
    # La-MAML's BTI averages over all three tasks (the last contributes 0) ...
    assert m["bti"] == pytest.approx(((0.6 - 0.9) + (0.5 - 0.8) + 0.0) / 3)
    # ... GEM's BWT over the first two only.
    assert m["bwt"] == pytest.approx(((0.6 - 0.9) + (0.5 - 0.8)) / 2)
    assert m["la"] == pytest.approx((0.9 + 0.8 + 0.9) / 3)
    assert m["fwt"] == pytest.approx(((0.2 - 0.1) + (0.3 - 0.2)) / 2)


def test_no_forgetting_and_one_task_edge_cases():
    perfect = torch.eye(4) * 0 + 1.0
    m = continual_metrics(perfect)
    assert (m["ra"], m["bti"], m["bwt"], m["la"]) == (1.0, 0.0, 0.0, 1.0)
    assert "fwt" not in m  # no initial accuracies given
    single = continual_metrics(torch.tensor([[0.7]]), torch.tensor([0.1]))
    assert single["bwt"] == 0.0 and single["ra"] == pytest.approx(0.7)
    with pytest.raises(ValueError, match="square"):
        continual_metrics(torch.ones(2, 3))


# -- streams ----------------------------------------------------------------------------
def test_rotation_angles_lie_in_their_task_intervals_and_follow_the_spec_seed():
    config = StreamConfig(transform="rotations", tasks=20, angle_width=9.0)
    angles = config.angles()
    assert len(angles) == 20
    for t, angle in enumerate(angles):
        assert 9 * t <= angle < 9 * t + 9
    assert StreamConfig(transform_seed=0).angles() == angles
    assert StreamConfig(transform_seed=1).angles() != angles
    assert config.derived()["angles_deg"][3] == pytest.approx(angles[3], abs=1e-3)


def test_permutations_are_fixed_per_task_and_the_first_task_is_permuted_too():
    config = StreamConfig(transform="permutations", tasks=5, train_per_task=20)
    perms = config.permutations()
    assert perms.shape == (5, 784)
    for p in perms:
        assert torch.equal(p.sort().values, torch.arange(784))
    assert not torch.equal(perms[0], torch.arange(784))
    assert len({tuple(p.tolist()) for p in perms}) == 5
    stream = TaskStream(config, small_arrays())
    x_a, _ = stream.test_task(2)
    x_b, _ = TaskStream(config, small_arrays()).test_task(2)
    assert torch.equal(x_a, x_b)  # the same permutation in every run
    raw = small_arrays()["x_test"].reshape(-1, 784).float() / 255
    assert torch.equal(x_a, raw[:, perms[2]])
    # The test sets come from a cached, scaled copy: each task's equals the training path's
    # transform of the same images, and a caller that writes into one leaves the next intact.
    images = small_arrays()["x_test"][: config.test_per_task]
    for transform in ("permutations", "rotations"):
        other = TaskStream(StreamConfig(transform=transform, tasks=5, train_per_task=20),
                           small_arrays())
        for task in (0, 3, 3):
            shown, _ = other.test_task(task)
            assert torch.equal(shown, other.transform(task, images))
            shown.fill_(7.0)


def test_stream_sample_counts_ranges_and_seeds():
    config = StreamConfig(transform="rotations", tasks=3, train_per_task=40, test_per_task=30)
    stream = TaskStream(config, small_arrays())
    x, y = stream.train_task(1, seed=0)
    assert x.shape == (40, 784) and y.shape == (40,)
    assert x.dtype == torch.float32 and x.min() >= 0.0 and x.max() <= 1.0
    assert y.dtype == torch.long and set(y.tolist()) <= set(range(10))
    again, _ = stream.train_task(1, seed=0)
    other, _ = stream.train_task(1, seed=1)
    assert torch.equal(x, again) and not torch.equal(x, other)
    xt, yt = stream.test_task(0)
    assert xt.shape == (30, 784) and yt.shape == (30,)
    # A 0-degree stream leaves images untouched; rotated ones differ.
    flat = TaskStream(StreamConfig(tasks=1, train_per_task=20, angle_width=0.0), small_arrays())
    assert torch.equal(flat.test_task(0)[0], small_arrays()["x_test"][:50].reshape(-1, 784) / 255)
    assert not torch.equal(stream.test_task(2)[0], flat.test_task(0)[0][:30])


def test_angles_beyond_a_full_turn_are_refused():
    from benchmarks.planning.config import ConfigError, validate

    with pytest.raises(ConfigError):
        validate(StreamConfig(tasks=50, angle_width=9.0))


# -- reservoir buffer -------------------------------------------------------------------
def test_reservoir_keeps_a_uniform_sample_of_the_stream():
    counts = np.zeros(100)
    for seed in range(300):
        buffer = ReservoirBuffer(10, (1,), torch.device("cpu"), seed)
        for start in range(0, 100, 10):
            values = torch.arange(start, start + 10, dtype=torch.float32)
            buffer.add(values[:, None], values.long())
        assert len(buffer) == 10 and buffer.seen == 100
        counts[buffer.y.numpy()] += 1
    # Each item is kept with probability 10/100: 30 expected in 300 trials.
    early, late = counts[:50].mean(), counts[50:].mean()
    assert abs(early - 30) < 5 and abs(late - 30) < 5


# -- the La-MAML update -----------------------------------------------------------------
def _tiny_lamaml(**overrides) -> LookAheadMetaLearner:
    from mesabench_datasets.tasks import Problem

    torch.manual_seed(0)
    config = LaMAMLConfig(
        hidden=(3,), glances=1, replay_batch=0, buffer_size=0, rate_init=0.2, **overrides
    )
    problem = Problem(input_shape=(4,), output_dim=3, loss="cross_entropy", network="mlp")
    return LookAheadMetaLearner(config, problem, torch.device("cpu"))


def test_lamaml_step_equals_a_hand_computed_step():
    learner = _tiny_lamaml(modulation_lr=0.5, grad_clip=0.0)
    x, y = torch.randn(2, 4), torch.tensor([0, 2])
    theta = {n: p.detach().clone().requires_grad_() for n, p in learner.params.items()}
    alpha = {n: torch.full_like(p, 0.2, requires_grad=True) for n, p in theta.items()}

    # The learner shuffles the batch with its own generator: replay that order.
    order = torch.randperm(2, generator=learner.generator.clone_state())
    xs, ys = x[order], y[order]
    fast, losses = theta, []
    for i in range(2):  # single-sample first-order steps, meta-loss after each
        leaves = {n: w.detach().requires_grad_() for n, w in fast.items()}
        g = torch.autograd.grad(
            F.cross_entropy(mlp_forward(leaves, xs[i : i + 1]), ys[i : i + 1]),
            list(leaves.values()),
        )
        fast = {n: fast[n] - F.relu(alpha[n]) * gi for (n, gi) in zip(fast, g, strict=True)}
        losses.append(F.cross_entropy(mlp_forward(fast, xs), ys))
    meta = torch.stack(losses).mean()
    g_theta = torch.autograd.grad(meta, list(theta.values()), retain_graph=True)
    g_alpha = torch.autograd.grad(meta, list(alpha.values()))
    expected_alpha = {n: alpha[n] - 0.5 * ga for n, ga in zip(alpha, g_alpha, strict=True)}
    expected_theta = {
        n: theta[n] - F.relu(expected_alpha[n]) * gt for n, gt in zip(theta, g_theta, strict=True)
    }

    learner.observe(x, y)
    for n, p in learner.params.items():
        torch.testing.assert_close(learner.modulation.raw(n), expected_alpha[n].detach())
        torch.testing.assert_close(p.detach(), expected_theta[n].detach())


def test_lamaml_rates_that_reach_zero_stay_zero_and_stop_their_weights():
    learner = _tiny_lamaml(modulation_lr=0.5)
    with torch.no_grad():
        learner.modulation.raw("0.weight")[0].fill_(-0.1)  # row 0 of the first layer: off
    before = {n: p.detach().clone() for n, p in learner.params.items()}
    for _ in range(5):
        learner.observe(torch.randn(4, 4), torch.randint(0, 3, (4,)))
    torch.testing.assert_close(learner.params["0.weight"][0], before["0.weight"][0])
    assert (learner.modulation.raw("0.weight")[0] == -0.1).all()  # exact relu: no gradient
    assert not torch.equal(learner.params["0.weight"][1], before["0.weight"][1])
    assert learner.sparsity()["0.weight"] >= 4 / 12  # others may collapse too


def test_sparse_lamaml_masks_freeze_exactly_the_masked_coordinates():
    learner = _tiny_lamaml(modulation="binary_mask", fixed_rate=0.1, modulation_lr=0.0)
    mask = torch.rand(3, 4) < 0.5
    with torch.no_grad():
        learner.modulation.raw("0.weight").copy_(torch.where(mask, -1.0, 1.0))
    before = learner.params["0.weight"].detach().clone()
    for _ in range(3):
        learner.observe(torch.randn(4, 4), torch.randint(0, 3, (4,)))
    after = learner.params["0.weight"].detach()
    assert torch.equal(after[mask], before[mask])
    assert (after[~mask] != before[~mask]).all()
    assert learner.sparsity()["0.weight"] == pytest.approx(mask.float().mean().item())


def test_sparse_lamaml_learns_its_masks_straight_through():
    learner = _tiny_lamaml(modulation="binary_mask", fixed_rate=0.1, modulation_lr=1.0)
    m_before = learner.modulation.raw("0.weight").detach().clone()
    learner.observe(torch.randn(4, 4), torch.randint(0, 3, (4,)))
    assert not torch.equal(learner.modulation.raw("0.weight").detach(), m_before)


def test_sparse_lamaml_mask_options_centred_init_and_adam():
    torch.manual_seed(3)
    learner = _tiny_lamaml(
        modulation="binary_mask", mask_init=0.5, mask_init_mode="centred",
        modulation_optimizer="adam", modulation_lr=0.01, grad_clip=0.0,
    )  # fmt: skip
    m = torch.cat([learner.modulation.raw(n).detach().flatten() for n in learner.params])
    assert (m.abs() < 0.5).all() and 0.2 < (m < 0).float().mean() < 0.8  # about half off
    assert isinstance(learner.modulation_optimizer, torch.optim.Adam)
    m_before = learner.modulation.raw("2.weight").detach().clone()
    learner.observe(torch.randn(4, 4), torch.randint(0, 3, (4,)))
    moved = (learner.modulation.raw("2.weight").detach() - m_before).abs()
    # Adam's first step moves every entry with a gradient by about its rate, whatever the
    # gradient's size (SGD would move it in proportion to the gradient).
    # (A tiny gradient moves a little less: Adam's epsilon.)
    assert moved.max() <= 0.01 * (1 + 1e-5)
    assert (moved > 0.0099).float().mean() > 0.5


# -- the protocol -----------------------------------------------------------------------
class _Oracle:
    """A fake learner that is right on tasks it has trained on: R[t, j] = 1[j <= t]."""

    def __init__(self, stream):
        self.stream, self.trained, self.seen_labels = stream, set(), 0

    def begin_task(self, task):
        self.current = task

    def observe(self, x, y):
        self.seen_labels += len(y)
        return {"loss": 1.0}

    def end_task(self, task):
        self.trained.add(task)

    def predict(self, x):
        # Find which task's test set x comes from by matching against each one.
        for task in self.trained:
            tx, ty = self.stream.test_task(task)
            if torch.equal(x, tx[: len(x)]):
                return F.one_hot(ty[: len(x)], 10).float()
        return torch.zeros(len(x), 10)

    def sparsity(self):
        return {}

    def num_parameters(self):
        return 0

    def state_dict(self):
        return {}


def test_protocol_builds_the_accuracy_matrix_after_every_task():
    stream = TaskStream(StreamConfig(tasks=3, train_per_task=20, test_per_task=30), small_arrays())
    oracle = _Oracle(stream)
    recorder = MemoryRecorder()
    protocol = ContinualProtocol(
        ContinualConfig(batch_size=10, eval_batch=100), stream, 0, recorder, torch.device("cpu")
    )
    final = protocol.run(oracle)
    assert oracle.seen_labels == 60
    assert final["final/ra"] == 1.0 and final["final/bti"] == 0.0
    # Before training on a task the oracle answers class 0 there, as the untrained learner
    # does: R[j-1, j] equals the initial accuracy, so forward transfer is exactly 0.
    assert final["final/la"] == 1.0 and final["final/fwt"] == 0.0
    zero_share = [float((stream.test_task(j)[1] == 0).float().mean()) for j in range(3)]
    csv = recorder.artifacts["accuracy_matrix.csv"].splitlines()
    assert csv[2] == f"0,1.000000,{zero_share[1]:.6f},{zero_share[2]:.6f}"
    assert csv[4] == "2,1.000000,1.000000,1.000000"
    assert "accuracy_matrix.png" in recorder.artifacts
    assert recorder.checkpoint["progress"]["task"] == 3 and recorder.checkpoint["iteration"] == 6
    steps = [s for s, _ in recorder.metrics["continual/accuracy_seen_tasks"]]
    assert steps == [1, 2, 3]


def test_metrics_only_evaluation_scores_what_the_metrics_read_and_nothing_else():
    stream = TaskStream(StreamConfig(tasks=4, train_per_task=20, test_per_task=30), small_arrays())
    finals, recorders, calls = {}, {}, {}
    for evaluate in ("all", "metrics"):
        oracle, recorder = _Oracle(stream), MemoryRecorder()
        protocol = ContinualProtocol(ContinualConfig(batch_size=10, evaluate=evaluate), stream,
                                     0, recorder, torch.device("cpu"))  # fmt: skip
        scored = []
        score = protocol.accuracy
        protocol.accuracy = lambda method, task, score=score, scored=scored: (
            scored.append(task) or score(method, task))  # fmt: skip
        finals[evaluate], recorders[evaluate] = protocol.run(oracle), recorder
        calls[evaluate] = scored
    metrics = ["final/ra", "final/bti", "final/bwt", "final/la", "final/fwt"]
    assert {k: finals["metrics"][k] for k in metrics} == {k: finals["all"][k] for k in metrics}
    # The untrained learner on all 4, tasks t and t+1 after tasks 0-2, all 4 after the last.
    assert calls["all"] == [0, 1, 2, 3] * 5
    assert calls["metrics"] == [0, 1, 2, 3, 0, 1, 1, 2, 2, 3, 0, 1, 2, 3]
    csv = recorders["metrics"].artifacts["accuracy_matrix.csv"].splitlines()
    assert csv[2].startswith("0,1.000000,") and csv[2].endswith(",,")  # tasks 2, 3 not scored
    assert csv[5] == "3,1.000000,1.000000,1.000000,1.000000"
    seen = recorders["metrics"].metrics["continual/accuracy_seen_tasks"]
    assert [s for s, _ in seen] == [4]  # a partial row has no mean
    assert len(recorders["metrics"].metrics["continual/accuracy_current_task"]) == 4


def _continual_methods() -> list[str]:
    import methods  # noqa: F401  (registers the built-ins)
    from methods.registry import METHODS

    return sorted(e.name for e in METHODS
                  if e.source == "built-in" and "continual" in e.value.cls.protocols)  # fmt: skip


@pytest.mark.parametrize("method", _continual_methods())
def test_every_continual_method_scores_the_same_when_only_the_metrics_entries_are_scored(
    method,
):
    """Scoring is free of side effects for every registered learner: leaving out the
    entries no metric reads changes no metric."""
    from methods.registry import METHODS

    entry = METHODS.get(method).value
    stream = TaskStream(StreamConfig(tasks=3, train_per_task=30, test_per_task=40),
                        learnable_arrays())  # fmt: skip
    finals = []
    for evaluate in ("all", "metrics"):
        torch.manual_seed(0)
        learner = entry.cls(entry.cls.Config(**entry.defaults), stream.problem,
                            torch.device("cpu"))  # fmt: skip
        protocol = ContinualProtocol(ContinualConfig(evaluate=evaluate), stream, 0,
                                     MemoryRecorder(), torch.device("cpu"))  # fmt: skip
        final = protocol.run(learner)
        finals.append({k: final[k] for k in ("final/ra", "final/bti", "final/la", "final/fwt")})
    assert finals[0] == finals[1]
    assert finals[0]["final/la"] > 0.3  # it learned something: the scores are not chance


def test_metrics_read_no_entry_that_was_not_scored():
    r = torch.full((3, 3), math.nan)
    r[0, :2], r[1, 1:], r[2] = 0.5, 0.5, 0.5
    assert continual_metrics(r, torch.zeros(3))["ra"] == 0.5
    r[1, 2] = math.nan
    with pytest.raises(ValueError, match="lacks an entry"):
        continual_metrics(r, torch.zeros(3))


def test_a_diverging_learner_stops_with_a_clear_message():
    from benchmarks.protocols import DivergenceError

    stream = TaskStream(StreamConfig(tasks=2, train_per_task=20, test_per_task=10), small_arrays())
    oracle = _Oracle(stream)
    oracle.observe = lambda x, y: {"loss": math.nan}
    protocol = ContinualProtocol(
        ContinualConfig(), stream, 0, MemoryRecorder(), torch.device("cpu")
    )
    with pytest.raises(DivergenceError, match="diverged at task 0"):
        protocol.run(oracle)


def test_the_mlp_fast_path_equals_the_generic_lookahead():
    """The MLP's one-pass grouped gradients give what two autograd passes give."""
    from methods.common.networks import MLP
    from methods.continual.lamaml import LookAhead
    from methods.gradient.inner_loop import InnerLoop
    from methods.gradient.modulation import LearnedRates

    torch.manual_seed(0)
    mlp = MLP(6, (5, 4), 3)
    plain = torch.nn.Sequential(*mlp)  # the same layers, without the fast path
    shapes = {n: p.shape for n, p in mlp.named_parameters()}
    rates = LearnedRates(shapes, gate="relu", scale=1.0, init="centred", init_value=0.3)
    params = dict(mlp.named_parameters())
    x, y = torch.randn(4, 6), torch.randint(0, 3, (4,))
    meta_x, meta_y = torch.randn(7, 6), torch.randint(0, 3, (7,))
    results = [
        LookAhead(InnerLoop(net, rates, "cross_entropy", list(params), first_order=True))(
            params, {}, x, y, meta_x, meta_y
        )
        for net in (mlp, plain)
    ]
    (loss_a, grads_a, rates_a), (loss_b, grads_b, rates_b) = results
    torch.testing.assert_close(loss_a, loss_b)
    for n in params:
        torch.testing.assert_close(grads_a[n], grads_b[n])
        torch.testing.assert_close(rates_a[n], rates_b[n])


def _lamaml_run(stream, checkpoint=None, stop_at_task=None, epochs=1):
    from mesabench_datasets.tasks import Problem

    torch.manual_seed(3)
    problem = Problem(input_shape=(784,), output_dim=10, loss="cross_entropy", network="mlp")
    learner = LookAheadMetaLearner(
        LaMAMLConfig(hidden=(20,), glances=2), problem, torch.device("cpu")
    )
    if stop_at_task is not None:
        begin = learner.begin_task

        def interrupting_begin(task):
            if task == stop_at_task:
                raise KeyboardInterrupt
            begin(task)

        learner.begin_task = interrupting_begin
    recorder = MemoryRecorder()
    protocol = ContinualProtocol(ContinualConfig(epochs=epochs), stream, 0, recorder,
                                 torch.device("cpu"))  # fmt: skip
    try:
        return protocol.run(learner, checkpoint=checkpoint), recorder
    except KeyboardInterrupt:
        return None, recorder


def test_a_resumed_stream_gives_the_uninterrupted_numbers():
    config = StreamConfig(tasks=3, train_per_task=40, test_per_task=50)
    stream = TaskStream(config, learnable_arrays())
    whole, _ = _lamaml_run(stream)
    _, interrupted = _lamaml_run(stream, stop_at_task=2)
    assert interrupted.checkpoint["progress"]["task"] == 2
    resumed, _ = _lamaml_run(stream, checkpoint=interrupted.checkpoint)
    for key in ("final/ra", "final/bti", "final/la", "final/fwt", "final/sparsity/overall",
                "final/sparsity_rise/least"):  # the rise reads the history the checkpoint kept
        assert resumed[key] == whole[key], key
    assert whole["final/ra"] > 0.3  # and it learned something (chance is 0.1)


def test_a_multi_pass_run_keeps_its_sparsity_after_every_pass_across_a_resume():
    """thesis figure 4.4's setting: with 3 passes per task the run keeps the sparsity before
    training and after each of the 9 passes (checkpointed: a resumed run settles alike)."""
    config = StreamConfig(tasks=3, train_per_task=40, test_per_task=50)
    stream = TaskStream(config, learnable_arrays())
    whole, recorder = _lamaml_run(stream, epochs=3)
    _, interrupted = _lamaml_run(stream, stop_at_task=2, epochs=3)
    assert len(interrupted.checkpoint["progress"]["passes"]) == 1 + 2 * 3
    resumed, _ = _lamaml_run(stream, checkpoint=interrupted.checkpoint, epochs=3)
    assert "final/sparsity_settle/overall" in whole
    settle = {k: v for k, v in whole.items() if k.startswith("final/sparsity_settle/")}
    assert settle == {k: resumed[k] for k in settle}
    logged = recorder.metrics["sparsity_by_pass/overall"]
    assert [step for step, _ in logged] == list(range(1, 10))


def test_sparsity_settling_reads_the_last_pass_against_the_first_of_each_task():
    from benchmarks.protocols.summary import sparsity_settling

    staircase = [{"w": 0.0}] + [{"w": v} for v in (0.3, 0.38, 0.4, 0.6, 0.68, 0.7)]
    assert sparsity_settling(staircase, 3)["w"] == pytest.approx(0.04 / 0.5)
    steady = [{"w": k / 10, "flat": 0.2} for k in range(7)]
    assert sparsity_settling(steady, 3) == {"w": pytest.approx(1.0)}  # flat: nothing to settle
    assert sparsity_settling(steady, 1) == {} and sparsity_settling(steady[:5], 3) == {}


def test_a_sparsity_rise_counts_the_points_it_did_not_fall_at_and_flat_as_none():
    """thesis figure 4.3's 'monotonically increases with the number of tasks', per tensor:
    a saturated tensor (every gate off from the first task) has not fallen; one that ends
    where it began has not risen; fewer than three points tell nothing."""
    from benchmarks.protocols.summary import sparsity_rises

    history = [(0, {"w": 0.0, "b": 0.0, "flat": 0.3}), (1, {"w": 0.1, "b": 1.0, "flat": 0.5}),
               (2, {"w": 0.05, "b": 1.0, "flat": 0.1}), (3, {"w": 0.2, "b": 1.0, "flat": 0.3}),
               (4, {"w": 0.3, "b": 1.0, "flat": 0.3})]  # fmt: skip
    rises = sparsity_rises(history)
    assert rises["w"] == 0.75 and rises["b"] == 1.0 and rises["flat"] == 0.0
    assert rises["least"] == 0.0
    assert sparsity_rises(history[:2]) == {}
    steady = sparsity_rises([(t, {"w": t / 10}) for t in range(21)])
    assert steady == {"w": 1.0, "least": 1.0}


def test_cli_runs_a_continual_benchmark_into_mlflow(store, tmp_path):
    from mlflow.tracking import MlflowClient

    from benchmarks.cli.main import main
    from tests.helpers import CONTINUAL_TINY
    from tests.image_fixtures import write_mnist

    data = write_mnist(tmp_path / "data").parent
    args = ["run", "--method", "sparse_lamaml", "--benchmark", "mnist-permutations"]
    assert main([*args, *CONTINUAL_TINY, "--data-root", str(data), "--tracking-uri", store]) == 0
    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("mnist-permutations").experiment_id])
    assert run.info.status == "FINISHED"
    for key in ("final/ra", "final/bti", "final/bwt", "final/la", "final/fwt"):
        assert math.isfinite(run.data.metrics[key])
    assert run.data.params["method.modulation"] == "binary_mask"
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"accuracy_matrix.csv", "accuracy_matrix.png", "sparsity_over_tasks.csv"} <= artifacts
    history = client.get_metric_history(run.info.run_id, "sparsity/overall")
    assert [m.step for m in history] == [1, 2, 3]


def test_an_episodic_method_on_a_stream_is_refused_with_the_protocols(capsys):
    from benchmarks.cli.main import main

    assert main(["run", "--method", "maml", "--benchmark", "mnist-rotations"]) == 2
    err = capsys.readouterr().err
    assert "supports protocols ['episodic']" in err and "'continual'" in err


@pytest.mark.slow  # a fault drill: a run stopped mid-stream, resumed through a real store
def test_an_interrupted_cli_run_resumes_through_the_store_to_the_same_numbers(
    tmp_path, store, monkeypatch, capsys
):
    """La-MAML on a rotated-MNIST fixture stream, interrupted in its second task (the
    checkpoint written after the first is in the store), resumed by id from the store:
    every final number equals an uninterrupted run's, and the KILLED run is the one that
    FINISHED."""
    from mlflow.tracking import MlflowClient

    from benchmarks.cli.main import main
    from benchmarks.running.console import TrainingProgress
    from tests.helpers import CONTINUAL_TINY
    from tests.image_fixtures import write_mnist

    write_mnist(tmp_path / "data")
    monkeypatch.setenv("MESABENCH_DATA", str(tmp_path / "data"))
    args = ["run", "--method", "lamaml", "--benchmark", "mnist-rotations", *CONTINUAL_TINY,
            "--set", "glances=2", "--seed", "3", "--tracking-uri", store]  # fmt: skip
    original = TrainingProgress.__call__

    def interrupt(self, done, metrics):
        if done == 3:  # the first batch of task 2 (two batches per task)
            raise KeyboardInterrupt
        original(self, done, metrics)

    monkeypatch.setattr(TrainingProgress, "__call__", interrupt)
    assert main(args) == 130
    monkeypatch.setattr(TrainingProgress, "__call__", original)
    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("mnist-rotations").experiment_id
    (killed,) = client.search_runs([experiment])
    assert killed.info.status == "KILLED"
    assert main(["run", "--resume", killed.info.run_id, "--tracking-uri", store]) == 0
    assert "from iteration 2" in capsys.readouterr().out.replace("\n", " ")
    assert main(args) == 0
    runs = {r.info.run_id: r for r in client.search_runs([experiment])}
    resumed = runs.pop(killed.info.run_id)
    (whole,) = runs.values()
    assert resumed.info.status == "FINISHED"
    from benchmarks.metrics.catalog import measures_the_machine

    finals = {k: v for k, v in whole.data.metrics.items()
              if k.startswith("final/") and not measures_the_machine(k)}  # fmt: skip
    assert {"final/ra", "final/bti", "final/la", "final/fwt"} <= set(finals)
    for key, value in finals.items():
        assert resumed.data.metrics[key] == value, key


def test_a_run_records_one_steps_flops_counted_by_torch_and_its_peak_memory(store, tmp_path):
    """online_sgd's first step on a batch of 10 through the 784-100-100-10 MLP, counted by
    hand: forward 2 * 10 * (784*100 + 100*100 + 100*10) multiply-adds x 2; backward the
    weight gradients of all three layers and the input gradients of the upper two (the
    images need none); the rotation of the data is not part of the step. Peak memory in
    MiB: at least what the process holds now."""
    import psutil

    from benchmarks.cli.main import main
    from tests.helpers import CONTINUAL_TINY, only_run
    from tests.image_fixtures import write_mnist

    data = write_mnist(tmp_path / "data").parent
    before_mib = psutil.Process().memory_info().rss / 2**20
    assert main(["run", "--method", "online_sgd", "--benchmark", "mnist-rotations",
                 *CONTINUAL_TINY, "--data-root", str(data), "--tracking-uri", store]) == 0
    run = only_run(store, "mnist-rotations")
    metrics = run.data.metrics
    # The one file it read, by content: the tag the board's linter compares within a row.
    import hashlib

    file_digest = hashlib.sha256((data / "mnist.npz").read_bytes()).hexdigest()
    expected = hashlib.sha256(file_digest.encode()).hexdigest()[:16]
    assert run.data.tags["mesabench.data_digest"] == expected
    layers = [(784, 100), (100, 100), (100, 10)]
    forward = sum(2 * 10 * a * b for a, b in layers)
    backward = 2 * 10 * 784 * 100 + sum(2 * 2 * 10 * a * b for a, b in layers[1:])
    assert metrics["final/step_flops"] == forward + backward == 3_796_000
    # The kernel's own high-water mark (VmHWM, kB) bounds it from above, the resident set
    # before the run from below: MiB, not KiB or bytes.
    status = Path("/proc/self/status").read_text()
    high_water_mib = int(status.split("VmHWM:")[1].split()[0]) / 1024
    assert before_mib - 1 <= metrics["final/peak_rss_mib"] <= high_water_mib + 1


def test_a_run_started_by_a_big_process_reports_its_own_peak_memory_not_its_parents():
    """Linux's getrusage carries the largest resident set across exec: a run launched by a
    1.5 GiB process (pytest, a sweep's driver) must not report the parent's 1.5 GiB."""
    import subprocess
    import sys

    child = ("import torch; from benchmarks.protocols.base import peak_memory; "
             "print(peak_memory(torch.device('cpu'))['final/peak_rss_mib'])")
    parent = ("import subprocess, sys; held = b'\\x01' * (1536 * 2**20); "
              f"print(subprocess.run([sys.executable, '-c', {child!r}], check=True, "
              "capture_output=True, text=True).stdout.strip())")
    done = subprocess.run([sys.executable, "-c", parent], check=True, capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[1])
    child_peak_mib = float(done.stdout.strip())
    # torch's import alone is some hundreds of MiB; the parent held 1,536 MiB more.
    assert 50 < child_peak_mib < 1024
