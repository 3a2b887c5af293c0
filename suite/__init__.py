"""tdbench suite: contracts, registry, harness, metrics, results and leaderboards."""

from suite.context import RunContext, RunningEstimate
from suite.method import Method, Result
from suite.model_space import BinarySpace, CategoricalSpace, ModelSpace
from suite.problem import ExactTransport, Problem
from suite.registry import (
    available_methods,
    available_problems,
    make_method,
    make_problem,
    register_method,
    register_problem,
)
from suite.types import Draws, ModelProbs

__all__ = [
    "BinarySpace",
    "CategoricalSpace",
    "Draws",
    "ExactTransport",
    "Method",
    "ModelProbs",
    "ModelSpace",
    "Problem",
    "Result",
    "RunContext",
    "RunningEstimate",
    "available_methods",
    "available_problems",
    "make_method",
    "make_problem",
    "register_method",
    "register_problem",
]
