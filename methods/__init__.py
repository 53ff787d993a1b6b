"""Learners. Importing this package registers the built-in methods."""

from methods import maml  # noqa: F401  (registers the MAML family)
from methods.api import Method, MethodConfig
from methods.registry import METHODS, register_method

__all__ = ["METHODS", "Method", "MethodConfig", "register_method"]
