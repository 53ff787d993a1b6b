"""Shared parts of every family: per-task losses and the networks gradient-based learners adapt."""
