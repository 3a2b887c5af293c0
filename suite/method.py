"""The ``Method`` contract, the ``Budget`` a method runs under and the ``Result`` it returns."""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from suite.problem import Problem
from suite.types import Draws, ModelProbs

PROFILES = ("smoke", "quick", "paper")
DTYPES = {"float64": torch.float64, "float32": torch.float32}

#: log q(m, theta_m) on saturated vectors: (model_index [N], theta [N, dim_max]) -> [N].
LogDensityFn = Callable[[Tensor, Tensor], Tensor]
#: Fresh independent draws from the method's own density q: (num, generator) -> Draws.
SamplerFn = Callable[[int, torch.Generator], Draws]


@dataclass(frozen=True)
class Budget:
    """How much work a run may do.

    ``profile`` picks a method's preset sizes: ``smoke`` (seconds, for tests
    and CI), ``quick`` (the default leaderboard) or ``paper`` (the source
    papers' settings). ``num_draws`` is the number of posterior draws the
    result should carry.
    """

    profile: str = "quick"
    num_draws: int = 4096

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"unknown profile {self.profile!r}; valid: {', '.join(PROFILES)}")
        if self.num_draws <= 0:
            raise ValueError("num_draws must be positive")


#: Timing key of the seconds earlier, interrupted attempts of a resumed run spent (added to its walltime).
RESUMED_TIMING = "resumed"


@dataclass
class Result:
    """What a method returns for one run.

    ``model_probs`` is dense over enumerable spaces, otherwise the top models.
    ``log_density`` is log q(m, theta_m) (needed for cross-entropy); None when
    the method has no density. ``sample_q`` draws afresh from that same
    density (variational methods); with it the suite measures the negative
    ELBO. ``timings`` maps phase names (setup, train, sample) to seconds; a
    method that resumed from a checkpoint (:mod:`suite.checkpoints`) puts the
    seconds its interrupted attempts spent under ``RESUMED_TIMING`` ("resumed"),
    which the suite adds to the run's walltime.
    ``metrics_scope="task"`` marks a point estimate (e.g. one graph from an
    optimiser): it is scored only on the problem's own task metrics, never
    on model-probability errors against a posterior.
    """

    status: Literal["ok", "failed"] = "ok"
    reason: str | None = None
    model_probs: ModelProbs | None = None
    draws: Draws | None = None
    log_density: LogDensityFn | None = None
    sample_q: SamplerFn | None = None
    diagnostics: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    device: str = "cpu"
    dtype: str = "float64"
    peak_memory_bytes: int | None = None
    metrics_scope: Literal["all", "task"] = "all"

    @classmethod
    def failed(cls, reason: str, **kwargs: Any) -> Result:
        """A failed run with its reason."""
        return cls(status="failed", reason=reason, **kwargs)


class Method(ABC):
    """A transdimensional inference algorithm that sees only the ``Problem`` interface.

    Subclasses are dataclasses whose fields are their options; a field left at
    None takes its value from the budget's profile (see :meth:`settings`).
    """

    #: Registry name.
    name: ClassVar[str]
    #: Preset option values per profile; keys are field names.
    profiles: ClassVar[dict[str, dict[str, Any]]] = {}
    #: Seeds ``run_all.py`` runs per profile when ``--seeds`` is not given (missing: the suite's default).
    default_seeds: ClassVar[dict[str, int]] = {}

    dtype: str = "float64"

    def options(self) -> dict[str, Any]:
        """The options this method was constructed with (None = from profile)."""
        if dataclasses.is_dataclass(self):
            return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {"dtype": self.dtype}

    def settings(self, problem: Problem, budget: Budget) -> dict[str, Any]:
        """Resolved options for this problem and budget: constructor values over profile presets."""
        preset = self.profiles.get(budget.profile, {})
        return {key: preset.get(key) if value is None else value for key, value in self.options().items()}

    def supports(self, problem: Problem) -> str | None:
        """Why this method cannot run on ``problem``, or None if it can."""
        return None

    @property
    def torch_dtype(self) -> torch.dtype:
        """The torch dtype named by ``dtype``."""
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; valid: {', '.join(DTYPES)}")
        return DTYPES[self.dtype]

    @abstractmethod
    def run(self, problem: Problem, budget: Budget, seed: int, device: torch.device) -> Result:
        """Run inference on ``problem`` and return a ``Result``."""
