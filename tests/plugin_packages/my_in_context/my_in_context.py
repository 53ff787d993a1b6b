"""my_in_context.py: an in-context learner that writes its context into fast weights by the
delta rule (Schlag et al. 2021), W <- W + beta (y_i - W k_i) k_i^T, then reads W k_q."""

from dataclasses import dataclass

import torch

from benchmarks.plugin_api import ConfigError, EpisodicMethod, param, per_task_loss


@dataclass(frozen=True)
class DeltaRuleConfig:
    keys: int = param(16, min=1, help="width of the learned keys k = A x")
    lr: float = param(1e-2, min=0.0, help="Adam step size of A and beta")


class DeltaRule(EpisodicMethod):
    """Meta-learns the key map A and the write strength beta over fresh task batches."""

    api_version = 1
    Config = DeltaRuleConfig
    uses_inner_steps = False  # predict() adapts by its forward pass alone

    @classmethod
    def check_problem(cls, problem):
        if problem.loss == "cross_entropy" or len(problem.input_shape) != 1 or problem.causal:
            raise ConfigError("delta_rule needs flat regression tasks (e.g. linreg-icl)")

    def __init__(self, config, problem, device):
        super().__init__(config, problem, device)
        dim = problem.input_shape[0]
        self.keys = torch.nn.Parameter(torch.randn(config.keys, dim, device=device) / dim**0.5)
        self.beta = torch.nn.Parameter(torch.tensor(0.1, device=device))
        self.optimizer = torch.optim.Adam([self.keys, self.beta], lr=config.lr)

    def forward(self, support_x, support_y, query_x):
        # support_x [T, N, d], support_y [T, N, out], query_x [T, Q, d] -> [T, Q, out]
        tasks, points, out = support_y.shape
        weights = support_x.new_zeros(tasks, out, self.config.keys)
        for i in range(points):  # one write per context point, in order
            k = support_x[:, i] @ self.keys.T  # [T, keys]
            error = support_y[:, i] - torch.einsum("tok,tk->to", weights, k)
            weights = weights + self.beta * torch.einsum("to,tk->tok", error, k)
        return torch.einsum("tok,tqk->tqo", weights, query_x @ self.keys.T)

    def meta_train_step(self, batch):
        prediction = self.forward(batch.support_x, batch.support_y, batch.query_x)
        loss = per_task_loss(prediction, batch.query_y, self.problem.loss).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.item(), "beta": self.beta.item()}

    def predict(self, support_x, support_y, query_x, steps=None):
        with torch.no_grad():
            return self.forward(support_x, support_y, query_x)

    def state_dict(self):
        return {"keys": self.keys.detach().clone(), "beta": self.beta.detach().clone(),
                "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state):
        with torch.no_grad():
            self.keys.copy_(state["keys"])
            self.beta.copy_(state["beta"])
        self.optimizer.load_state_dict(state["optimizer"])
