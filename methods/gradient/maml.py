"""The MAML family: one learner, one inner loop, different gradient modulations.

``maml``, ``fomaml``, ``anil``, ``metasgd``, ``sparse_maml``, ``sparse_relu_maml`` and
MAML++'s ``mamlpp`` (with its ablations ``mamlpp_msl`` and ``mamlpp_lslr``) are the same
:class:`GradientMetaLearner` with different config defaults; so are the two
no-meta-learning baselines (joint training with or without fine-tuning at test time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from mesabench_core import ConfigError, IncompatibleSetting, param
from mesabench_datasets.tasks import Problem, TaskBatch
from methods.api import SHARED_SETTINGS, EpisodicMethod, FloatRange, Space
from methods.common.networks import (
    IMAGE_NETWORKS,
    build_network,
    check_network_setting,
    head_names,
    network_for,
)
from methods.gradient.inner_loop import InnerLoop, vectorizes
from methods.gradient.modulation import (
    ModulationSettings,
    build_modulation,
    check_modulation,
)
from methods.registry import register_method


@dataclass(frozen=True)
class MAMLConfig:
    """Settings shared by every gradient-based meta-learner."""

    network: Literal["default", "mlp", "linear", "conv4", "resnet12"] = param(
        "default", help="the learner's network: default (the benchmark's), mlp, linear, conv4 "
        "or resnet12")  # fmt: skip
    hidden: tuple[int, ...] = param((40, 40), min=1, help="hidden widths of the MLP")
    channels: int = param(
        64, min=1, help="channels of each Conv-4 block; ResNet-12's first block (then x2.5, "
        "x5, x10: 64, 160, 320, 640 at 64)")
    inner_lr: float = param(
        0.01,
        min=0.0,
        help="step size of an inner step at initialisation: the fixed rate; where rates are "
        "learned (Meta-SGD) their start; where masks gate them, the rate let through",
    )
    inner_steps: int = param(1, min=0, help="inner steps during meta-training")
    test_inner_steps: int = param(
        10, min=0, help="inner steps when predict() is not told (the Python API, continual "
        "protocols); an episodic run scores at its protocol's eval_steps instead")
    first_order: bool = param(False, help="first-order meta-gradient: no gradient through the "
                              "inner steps (FOMAML)")  # fmt: skip
    modulation_first_order: bool = param(
        False, added="0.2",
        help="masks / rates get the first-order meta-gradient while the weights keep "
        "the second order (thesis eq. 4.4); needs first_order false and a learned modulation")
    adapt: Literal["all", "head", "none"] = param(
        "all", help="what the inner loop adapts: every weight, the output layer only (ANIL), "
        "or nothing (no adaptation)")  # fmt: skip
    modulation: str = param(
        "fixed",
        help="a registered gradient modulation: fixed, learned_rates (Meta-SGD), binary_mask "
        "(sparse-MAML), relu_rates (sparse-ReLU-MAML), or a plugin's",
    )
    rate_granularity: Literal["element", "tensor", "scalar"] = param(
        "element", help="a learned modulation's rates: one per weight, per tensor, or one for "
        "all")  # fmt: skip
    mask_init: float = param(
        0.5, min=0.0, help="half-width of the mean-centred uniform mask initialisation"
    )
    outer_lr: float = param(1e-3, min=0.0, help="Adam lr of the outer (meta) update")
    modulation_lr: float | None = param(None, min=0.0, help="lr of masks/rates (None: outer_lr)")
    grad_clip: float = param(0.0, min=0.0, help="global-norm clip of outer gradients (0: off)")
    task_batching: Literal["auto", "vmap", "loop"] = param(
        "auto", help="vmap over tasks, or loop; auto: loop for Conv-4 on a CPU, else vmap"
    )
    msl_iterations: int = param(
        0, min=0, added="0.4",
        help="MAML++'s multi-step loss: the outer loss weighs the query loss after every inner "
        "step, the weights annealed over this many iterations towards the last step's alone "
        "(0: off, the last step's loss only, as MAML)")

    def check(self) -> None:
        check_modulation(self.modulation)
        if self.modulation != "fixed" and self.adapt == "none":
            raise ConfigError("modulation needs adapted parameters (adapt must be all or head)")
        if self.modulation_first_order and (self.first_order or self.modulation == "fixed"):
            raise ConfigError(
                "modulation_first_order needs first_order false (a first-order loop is first "
                "order for the masks too) and a learned modulation (not fixed)")
        if self.msl_iterations and self.inner_steps < 2:
            raise ConfigError(
                "msl_iterations weighs the losses of several inner steps: it needs "
                f"inner_steps >= 2 (got {self.inner_steps}), or msl_iterations 0")


def refuse_unread_widths(config: Any, problem: Problem, chosen: frozenset[str]) -> None:
    """``hidden`` sizes an MLP and ``channels`` a convolutional network: a user's value for
    the one the run's network does not have would change only the configuration's hash."""
    network = network_for(config.network, problem)
    read, unread = ("channels", "hidden") if network in IMAGE_NETWORKS else ("hidden", "channels")
    if unread in chosen:
        raise IncompatibleSetting(f"method.{unread} has no effect with the {network} network "
                                  f"of this run: {read} sizes it")


def refuse_msl_past(config: Any, chosen: frozenset[str], protocol: Any, length: str) -> None:
    """A multi-step loss the user scheduled past the run's training (the protocol's field
    ``length``) never reaches the last step's loss alone: refused. A variant's default over
    a shortened (test) run is let be."""
    iterations = getattr(protocol, length, None)
    if "msl_iterations" in chosen and iterations and config.msl_iterations > iterations:
        raise IncompatibleSetting(
            f"method.msl_iterations ({config.msl_iterations}) is longer than the run's "
            f"{length} ({iterations}): the multi-step loss would never anneal to the last "
            f"step's; set it to at most {iterations}")


def refuse_unused_test_steps(protocol: Any, chosen: frozenset[str]) -> None:
    """An episodic protocol scores meta-test at its own ``eval_steps`` (the same for every
    method on the board), so a user's ``test_inner_steps`` would change nothing but the
    configuration's hash there: refused in one line, naming the setting that does it."""
    if "test_inner_steps" in chosen and hasattr(protocol, "eval_steps"):
        raise IncompatibleSetting(
            "method.test_inner_steps has no effect in an episodic run: meta-test scores the "
            f"protocol's eval_steps {tuple(protocol.eval_steps)}; set eval_steps instead "
            "(e.g. --set eval_steps=1,5)")


def msl_weights(steps: int, iteration: int, anneal_iterations: int) -> list[float]:
    """MAML++'s per-step loss weights (public code, ``get_per_step_loss_importance_vector``):
    uniform ``1/N`` at the start; each non-final weight falls linearly to ``0.03/N`` over
    ``anneal_iterations`` while the last one takes up the rest; from then on the last
    step's loss alone (the code's switch at ``multi_step_loss_num_epochs``). The code anneals
    once per epoch of 500 iterations; here every iteration (a smooth form of the same line)."""
    if steps < 1:
        return []
    if anneal_iterations <= 0 or iteration >= anneal_iterations or steps == 1:
        return [0.0] * (steps - 1) + [1.0]
    progress = iteration / anneal_iterations  # the code's current_epoch / num_epochs
    floor = 0.03 / steps
    early = [max(1.0 / steps - progress / steps, floor) for _ in range(steps - 1)]
    last = min(1.0 / steps + progress * (steps - 1) / steps, 1.0 - (steps - 1) * floor)
    return [*early, last]


def modulation_settings(config: MAMLConfig, shapes: dict[str, torch.Size]) -> ModulationSettings:
    """The MAML family's settings as every registered modulation reads them."""
    return ModulationSettings(shapes, lr=config.inner_lr, rate_init=config.inner_lr,
                              mask_init=config.mask_init, mask_init_mode="centred",
                              granularity=config.rate_granularity, rectified="scaled",
                              steps=config.inner_steps)  # fmt: skip


class GradientMetaLearner(EpisodicMethod):
    """MAML and every variant that differs from it only by its gradient modulation."""

    shared_settings = frozenset(SHARED_SETTINGS)
    compilable = True  # the step traces (tests/test_execution.py compiles it)

    Config = MAMLConfig
    protocols = frozenset({"episodic"})
    uses_inner_steps = True

    @classmethod
    def check_problem(cls, problem: Problem) -> None:
        if problem.causal:
            raise ConfigError(
                "gradient learners adapt on a support set, which a causal sequence benchmark "
                "does not separate from its queries"
            )

    @classmethod
    def check_config(cls, config: MAMLConfig, problem: Problem) -> None:
        check_network_setting(config.network, problem)

    @classmethod
    def check_run(cls, config: MAMLConfig, problem: Problem, protocol: Any,
                  chosen: frozenset[str]) -> None:  # fmt: skip
        refuse_unused_test_steps(protocol, chosen)
        refuse_unread_widths(config, problem, chosen)
        refuse_msl_past(config, chosen, protocol, "iterations")

    @classmethod
    def search_space(cls, config: MAMLConfig) -> dict[str, Space]:
        # Ranges around the published settings (inner 0.01-0.4, outer 1e-3): a decade and
        # more either side, log-uniform; the modulation's own rate where it learns one.
        space: dict[str, Space] = {"inner_lr": FloatRange(1e-3, 1.0, log=True),
                                   "outer_lr": FloatRange(1e-4, 1e-2, log=True)}  # fmt: skip
        if config.modulation != "fixed":
            space["modulation_lr"] = FloatRange(1e-4, 1e-1, log=True)
        return space

    @classmethod
    def execution_choices(cls, config: MAMLConfig, problem: Problem,
                          device: str) -> dict[str, str]:  # fmt: skip
        convolutional = network_for(config.network, problem) in IMAGE_NETWORKS
        batching = config.task_batching
        if batching == "auto":
            batching = "vmap" if vectorizes(convolutional, device) else "loop"
        choices = {"task_batching": batching}
        if not convolutional and str(device).startswith("cpu"):
            # An MLP's every operation is too small to split across cores, and a split one
            # waits for a second thread whenever another process holds that core (the
            # sinusoid's sin went through MKL's threader at ~3 ms a call on a busy 2-core
            # box): the whole run on one thread, 2.2x faster there, the same numbers.
            choices["threads"] = "1"
        return choices

    def __init__(self, config: MAMLConfig, problem: Problem, device: torch.device):
        super().__init__(config, problem, device)
        name = network_for(config.network, problem)
        batching = self.execution_choices(config, problem, str(device))["task_batching"]
        vectorize = batching == "vmap"
        self.network = build_network(
            name, problem, config.hidden, config.channels, vmapped=vectorize
        ).to(device)
        self.params = dict(self.network.named_parameters())
        self.buffers = dict(self.network.named_buffers())
        if config.adapt == "all":
            adapted = list(self.params)
        elif config.adapt == "head":
            adapted = head_names(self.network)
        else:
            adapted = []
        shapes = {n: self.params[n].shape for n in adapted}
        settings = modulation_settings(config, shapes)
        self.modulation = build_modulation(config.modulation, settings).to(device)
        self.inner = InnerLoop(
            self.network, self.modulation, problem.loss, adapted, config.first_order, vectorize,
            modulation_first_order=config.modulation_first_order,
        )
        #: What a training step calls: the inner loop's query losses, or their compiled form.
        self.query_losses = self.inner.batched_query_loss
        #: Meta-training steps taken (the multi-step loss anneals over them).
        self.iterations_done = 0
        self.optimizer = torch.optim.Adam(self.network.parameters(), lr=config.outer_lr)
        modulation_params = list(self.modulation.parameters())
        self.modulation_optimizer = (
            torch.optim.Adam(
                modulation_params,
                lr=config.outer_lr if config.modulation_lr is None else config.modulation_lr,
            )
            if modulation_params
            else None
        )

    def compile(self, backend: str) -> None:
        # The whole adaptation and query loss, vmapped over tasks: the network alone would
        # run inside functorch's transforms, where a compiled module runs as written.
        self.query_losses = torch.compile(self.inner.batched_query_loss, backend=backend)

    def meta_train_step(self, batch: TaskBatch) -> dict[str, float]:
        with self.inner.threads(self.buffers):
            return self._meta_train_step(batch)

    def _meta_train_step(self, batch: TaskBatch) -> dict[str, float]:
        c = self.config
        if c.msl_iterations and self.iterations_done < c.msl_iterations:
            # MAML++'s multi-step loss: every step's query loss, from one pass, weighted.
            weights = msl_weights(c.inner_steps, self.iterations_done, c.msl_iterations)
            each = self.query_losses(self.params, self.buffers, batch, c.inner_steps, True)
            loss = (each.mean(0) * each.new_tensor(weights)).sum()
        else:
            loss = self.query_losses(self.params, self.buffers, batch, c.inner_steps).mean()
        self.iterations_done += 1
        self.optimizer.zero_grad(set_to_none=True)
        if self.modulation_optimizer is not None:
            self.modulation_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.network.parameters(), self.config.grad_clip)
        self.optimizer.step()
        if self.modulation_optimizer is not None:
            self.modulation_optimizer.step()
        return {"loss": loss.item()}

    def predict(
        self, support_x: Tensor, support_y: Tensor, query_x: Tensor, steps: int | None = None
    ) -> Tensor:
        steps = self.config.test_inner_steps if steps is None else steps
        params = {n: p.detach() for n, p in self.params.items()}
        with torch.no_grad(), self.inner.threads(self.buffers):
            return self.inner.batched_predict(
                params, self.buffers, support_x, support_y, query_x, steps
            )

    def sparsity(self) -> dict[str, float]:
        return self.modulation.sparsity()

    def tensor_sizes(self) -> dict[str, int]:
        return {n: p.numel() for n, p in self.params.items()}

    def state_tensors(self) -> list[Tensor]:
        return list(self.network.parameters())

    def state_dict(self) -> dict[str, Any]:
        return {
            "network": self.network.state_dict(),
            "modulation": self.modulation.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "modulation_optimizer": (
                self.modulation_optimizer.state_dict() if self.modulation_optimizer else None
            ),
            "iterations_done": self.iterations_done,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.network.load_state_dict(state["network"])
        self.modulation.load_state_dict(state["modulation"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.modulation_optimizer is not None:
            self.modulation_optimizer.load_state_dict(state["modulation_optimizer"])
        # Checkpoints from before MAML++ joined do not count; nothing they ran anneals.
        self.iterations_done = state.get("iterations_done", 0)


register_method("maml", GradientMetaLearner, "MAML, second order (Finn et al. 2017)")
register_method("fomaml", GradientMetaLearner, "first-order MAML", first_order=True)
register_method(
    "anil", GradientMetaLearner, "ANIL: adapt the head only (Raghu et al. 2020)", adapt="head"
)
register_method(
    "metasgd",
    GradientMetaLearner,
    "Meta-SGD: learned per-parameter rates (Li et al. 2017)",
    modulation="learned_rates",
)
register_method(
    "sparse_maml",
    GradientMetaLearner,
    "sparse-MAML: learned binary gradient masks, straight-through, first order",
    modulation="binary_mask",
    first_order=True,
    modulation_lr=0.0075,
)
register_method(
    "sparse_relu_maml",
    GradientMetaLearner,
    "sparse-ReLU-MAML: rectified learned rates, straight-through, first order",
    modulation="relu_rates",
    first_order=True,
    modulation_lr=0.0075,
)
#: MAML++ (Antoniou et al. 2019, "How to train your MAML"): its two best-known ingredients
#: on MAML's loop, 5 inner steps as in the paper's Omniglot and miniImageNet runs. The
#: multi-step loss anneals over 400 iterations, 8% of the default 5,000: the public code's
#: Omniglot configs anneal over 20 of 250 epochs (derived by us, not a published setting).
#: Not ported: per-step BatchNorm statistics, derivative-order and cosine annealing.
MAMLPP = {"inner_steps": 5, "msl_iterations": 400}
register_method(
    "mamlpp", GradientMetaLearner,
    "MAML++: multi-step loss and per-layer per-step learned inner rates (Antoniou et al. 2019)",
    modulation="per_step_rates", **MAMLPP,
)  # fmt: skip
register_method(
    "mamlpp_msl", GradientMetaLearner,
    "MAML++ ablation: the multi-step loss alone (one fixed inner rate)", **MAMLPP,
)  # fmt: skip
register_method(
    "mamlpp_lslr", GradientMetaLearner,
    "MAML++ ablation: per-layer per-step learned inner rates alone (last step's loss)",
    modulation="per_step_rates", inner_steps=MAMLPP["inner_steps"],
)  # fmt: skip
register_method(
    "finetune",
    GradientMetaLearner,
    "baseline: joint training on all tasks, then fine-tuning on the support set",
    inner_steps=0,
)
register_method(
    "no_adaptation",
    GradientMetaLearner,
    "baseline: joint training on all tasks, no adaptation at test time",
    adapt="none",
)
