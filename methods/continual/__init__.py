"""Continual and online learners: baselines, La-MAML, OSAKA's C-MAML family, the replay buffer."""
