"""Learners. Importing this package registers the built-in methods."""

from methods import icl, maml, sequence, ssm  # noqa: F401  (register the built-ins)
from methods.api import Method, MethodConfig
from methods.registry import METHODS, register_method

__all__ = ["METHODS", "Method", "MethodConfig", "register_method"]
