"""What one bridge-estimate study does: its settings and the names they take (no method code, so that the report
and the study definitions import it cheaply; the study itself is :mod:`suite.studies.bbe_replicates`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from suite.core.problem import Problem
from suite.core.types import ModelProbs

#: Across-model proposal types the study can fit and evaluate.
PROPOSALS = ("rq", "affine", "standard", "lopes-west", "ctrj", "exact")
#: How a chain chooses the model it proposes: any other uniformly, or by the training draws' frequencies.
STUDY_JUMPS = ("uniform", "estimate")


@dataclass(frozen=True)
class StudySettings:
    """What one study does (the CLI's options)."""

    proposals: tuple[str, ...] = PROPOSALS
    replicates: int = 10
    draws: int = 4000
    model: int | None = None
    seed: int = 0
    flow_iterations: int = 1000
    jumps: str = "uniform"
    aux_scale: float | None = None  # None: the prior sd of each coordinate (1 without a prior)
    repeats: int = 1  # BBE estimates per fitted proposal, each from fresh proposals (the paper's FA protocol: 100)
    fresh_draws: bool = False  # each replicate's draws from its own reference-engine run (see replicate_draws)
    draws_per_model: bool = False  # N draws of every model, from runs of their own (suite.studies.bbe_draws)
    #: Exact p(m | D) computed for the study (block-vs: quadrature), scored against instead of the problem's stored
    #: reference, which is printed beside it; None: the problem's reference.
    exact_truth: Callable[[Problem], ModelProbs] | None = None


__all__ = ["PROPOSALS", "STUDY_JUMPS", "StudySettings"]
