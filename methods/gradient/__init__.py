"""The gradient-based family: one differentiable inner loop, its modulations, MAML learners."""
