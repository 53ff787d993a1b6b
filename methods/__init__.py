"""Learners. Importing this package registers the built-in methods."""

from methods import (  # noqa: F401  (importing registers the built-ins)
    avalanche_baselines,
    continual,
    icl,
    l2l_peer,
    lamaml,
    maml,
    online,
    sequence,
    ssm,
)
from methods.api import ContinualMethod, EpisodicMethod, Method, MethodConfig, OnlineMethod
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
