"""The device guard finds what fails only on a GPU, on the CPU: a tensor made without its
device, a move off the run's device, a synchronisation that stalls a training step.

Every registered method runs under it in tests/test_every_method.py; here leaks are planted
in a real method driven by the real episodic protocol, and each must be found where it is.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from benchmarks.planning.plan import plan_run
from benchmarks.plugin_api import DeviceGuard, host_read
from benchmarks.protocols import PROTOCOLS
from benchmarks.protocols.recording import MemoryRecorder
from methods.common.device_guard import DeviceLeak
from methods.gradient.maml import GradientMetaLearner as MAML

TINY = {"iterations": "3", "val_every": "3", "val_tasks": "4", "test_tasks": "4",
        "log_every": "1", "checkpoint_every": "3"}  # fmt: skip


def _line(method, marker: str) -> int:
    lines, first = inspect.getsourcelines(method)
    return first + next(i for i, line in enumerate(lines) if marker in line)


class MadeOnTheHost(MAML):
    def meta_train_step(self, batch):
        noise = torch.randn(batch.support_x.shape)  # planted: unplaced
        batch = type(batch)(batch.support_x + 0 * noise.to(self.device), *list(batch)[1:])
        return super().meta_train_step(batch)


class StallsTheStep(MAML):
    def meta_train_step(self, batch):
        if batch.support_y.abs().sum() > 0:  # planted: stall
            pass
        return super().meta_train_step(batch)


class ScoresOnTheHost(MAML):
    def predict(self, support_x, support_y, query_x, steps=None):
        return super().predict(support_x, support_y, query_x, steps).cpu()  # planted: moved


class ReadsWhatItNeeds(MAML):
    """Clean: a read the algorithm branches on says so (host_read), and explicit host
    tensors name their device."""

    def meta_train_step(self, batch):
        if host_read(batch.support_y.abs().sum()) < 0:
            raise AssertionError("never")
        order = torch.randperm(batch.num_tasks, device="cpu").to(self.device)
        return super().meta_train_step(type(batch)(*(t[order] for t in batch)))


def _run(cls) -> DeviceGuard:
    plan = plan_run("maml", "sinusoid-5shot", overrides=TINY, device="cpu")
    protocol = PROTOCOLS["episodic"](plan.protocol, plan.source, 0, MemoryRecorder(),
                                       torch.device("cpu"))
    method = cls(plan.method, plan.source.problem, torch.device("cpu"))
    with DeviceGuard("cpu", packages=("tests",)) as guard:
        protocol.run(method)
    return guard


@pytest.mark.parametrize(
    "cls, kind, hook, marker",
    [
        (MadeOnTheHost, "unplaced", "meta_train_step", "planted: unplaced"),
        (StallsTheStep, "stall", "meta_train_step", "planted: stall"),
        (ScoresOnTheHost, "moved", "predict", "planted: moved"),
    ],
)
def test_a_planted_leak_is_found_where_it_is(cls, kind, hook, marker):
    guard = _run(cls)
    line = _line(getattr(cls, hook), marker)
    assert [(leak.kind, leak.where.endswith(f"test_device_guard.py:{line}")) for leak in
            guard.leaks] == [(kind, True)], guard.leaks  # fmt: skip
    assert guard.leaks[0].hook == f"{cls.__name__}.{hook}"
    with pytest.raises(DeviceLeak, match=kind):
        guard.check()


def test_the_same_method_clean_passes_and_the_needed_read_is_not_judged():
    guard = _run(ReadsWhatItNeeds)
    assert guard.leaks == []
    guard.check()
    assert _run(MAML).leaks == []


def test_a_read_after_the_steps_work_passes_and_one_before_it_stalls():
    guard = DeviceGuard("cpu", packages=("tests",))

    class Learner:
        def observe(self, x, early):
            if early and x.sum().item() > 0:
                x = x * 2
            y = (x * 3).sum()
            return {"loss": y.item(), "scale": float(y.detach())}

    with guard:
        Learner().observe(torch.ones(3), early=False)
    assert guard.leaks == [] and guard.syncs == 2
    with guard:
        Learner().observe(torch.ones(3), early=True)
    assert [leak.kind for leak in guard.leaks] == ["stall"]
    assert "then mul()" in guard.leaks[0].call


def test_moves_to_the_runs_device_pass_and_named_devices_do_not():
    class Learner:
        def predict(self, x):
            a = x.to(x.device) + x.to(torch.float64).float()
            return a + torch.zeros(3, device=x.device)

    class Named:
        def predict(self, x):
            return x.to("cpu") + x.cuda() if x.is_cuda else x.to("cpu")

    with DeviceGuard("cpu", packages=("tests",)) as clean:
        Learner().predict(torch.ones(3))
    with DeviceGuard("cpu", packages=("tests",)) as named:
        Named().predict(torch.ones(3))
    assert clean.leaks == [] and [leak.kind for leak in named.leaks] == ["moved"]
