"""Shared parts of every family: losses, the networks learners adapt, the device guard."""
