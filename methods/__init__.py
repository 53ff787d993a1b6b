"""Learners, in rooms by what they are (lowest first; each room's ``__init__`` says what
lives there): ``common``, ``gradient``, ``continual``, ``reference``, ``layers``,
``analyses``, ``in_context``, ``peers``. ``api`` (the Method API) and ``registry`` are the
contract every room builds on. Importing this package registers the built-in methods."""

from methods.api import ContinualMethod, EpisodicMethod, Method, MethodConfig, OnlineMethod

# Importing a room's learners registers them (one ``register_method`` per learner, beside
# its class).
from methods.continual import baselines, lamaml, online  # noqa: F401
from methods.gradient import maml  # noqa: F401
from methods.in_context import references, regression, sequence, ssm  # noqa: F401
from methods.peers import avalanche, l2l  # noqa: F401
from methods.registry import METHODS, register_method

__all__ = [
    "METHODS",
    "ContinualMethod",
    "EpisodicMethod",
    "Method",
    "MethodConfig",
    "OnlineMethod",
    "register_method",
]
