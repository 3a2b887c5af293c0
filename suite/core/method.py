"""The ``Method`` contract and the ``Result`` a method returns (the run itself is described by a ``RunContext``)."""

from __future__ import annotations

import dataclasses
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
from torch import Tensor

from suite.core.problem import Problem
from suite.core.types import Draws, ModelProbs

if TYPE_CHECKING:
    from suite.core.context import RunContext

PROFILES = ("smoke", "quick", "paper")
DTYPES = {"float64": torch.float64, "float32": torch.float32}

#: log q(m, theta_m) on saturated vectors: (model_index [N], theta [N, dim_max]) -> [N].
LogDensityFn = Callable[[Tensor, Tensor], Tensor]
#: Fresh independent draws from the method's own density q: (num, generator) -> Draws.
SamplerFn = Callable[[int, torch.Generator], Draws]


@dataclass
class Result:
    """What a method returns for one run.

    ``model_probs`` is dense over enumerable spaces, otherwise the top models.
    ``log_density`` is log q(m, theta_m) (needed for cross-entropy); None when
    the method has no density. ``sample_q`` draws afresh from that same
    density (variational methods); with it the suite measures the negative
    ELBO. ``conditional_log_density`` is log q(theta_m | m) where the method
    has it in closed form (flows conditioned on the model); with it the record
    gets each model's conditional cross-entropy -E_pi[log q(theta_m | m) | m]
    (VTI Fig. 2, bottom row). ``timings`` maps phase names (setup, train, sample) to seconds; the
    run context's timer (``context.timer.timings``) is merged in by the suite.
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
    conditional_log_density: LogDensityFn | None = None
    diagnostics: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    metrics_scope: Literal["all", "task"] = "all"

    @classmethod
    def failed(cls, reason: str, **kwargs: Any) -> Result:
        """A failed run with its reason."""
        return cls(status="failed", reason=reason, **kwargs)


#: Parameters of ``Method.run`` since the run context replaced (budget, seed, device).
RUN_PARAMETERS = ("self", "problem", "context")
OLD_RUN_MESSAGE = (
    "{cls} defines run{signature}; methods now define run(self, problem, context): the budget's profile and "
    "number of draws, the seed, device, dtype, progress display, checkpoint slot and time budget all arrive in "
    "one suite.core.context.RunContext, and the options are the method's own fields, already resolved from the "
    "profile by Method.resolve (see the README, 'Adding a method')"
)


class Method(ABC):
    """A transdimensional inference algorithm that sees only the ``Problem`` interface.

    Subclasses are frozen dataclasses whose fields are their options; a field left at None takes its value
    from the profile's preset. The planner calls :meth:`resolve` once per (problem, profile), which fills the
    presets in and checks the values (:meth:`finalise`), and runs the resolved copy: ``run`` reads typed
    attributes, never a dict of settings. Everything else about the run (seed, device, dtype, time budget,
    trace) comes in the :class:`suite.core.context.RunContext`.
    """

    #: Registry name.
    name: ClassVar[str]
    #: Preset option values per profile; keys are field names.
    profiles: ClassVar[dict[str, dict[str, Any]]] = {}
    #: Profiles in which ``--methods all`` plans this method (None: all); named, it runs in any profile.
    planned_profiles: ClassVar[tuple[str, ...] | None] = None
    #: Seeds ``run_all.py`` runs per profile when ``--seeds`` is not given (missing: the suite's default).
    default_seeds: ClassVar[dict[str, int]] = {}

    def options(self) -> dict[str, Any]:
        """The options this method was constructed with (None = from profile)."""
        if dataclasses.is_dataclass(self):
            return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {}

    def resolve(self, problem: Problem, profile: str) -> Method:
        """A copy with every option left at None filled from ``profile``'s preset, checked by :meth:`finalise`."""
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; valid: {', '.join(PROFILES)}")
        preset = self.profiles.get(profile, {})
        options = self.options()
        unknown = sorted(set(preset) - set(options))
        if unknown:
            raise ValueError(f"{self.name}: profile {profile!r} presets unknown options {', '.join(unknown)}")
        filled = {key: preset[key] for key, value in options.items() if value is None and key in preset}
        resolved = dataclasses.replace(self, **filled) if filled else self
        return resolved.finalise(problem)

    def finalise(self, problem: Problem) -> Method:
        """Check resolved options for sense (ValueError naming the valid choices); may return a changed copy."""
        return self

    def named_preset(self, presets: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
        """A copy of ``presets[name]``; ValueError naming the valid presets for an unknown ``name``."""
        if name not in presets:
            raise ValueError(f"{self.name}: unknown preset {name!r}; valid: {', '.join(presets)}")
        return dict(presets[name])

    def with_preset(self, values: dict[str, Any]) -> Method:
        """A copy where ``values`` (a named preset) replace the options still at their defaults (given ones win)."""
        defaults = {option.name: option.default for option in dataclasses.fields(self)}
        chosen = {key: value for key, value in values.items() if getattr(self, key) == defaults[key]}
        return dataclasses.replace(self, **chosen) if chosen else self

    def supports(self, problem: Problem) -> str | None:
        """Why this method cannot run on ``problem``, or None if it can."""
        return None

    def require_support(self, problem: Problem) -> None:
        """ValueError saying why, where :meth:`supports` refuses ``problem``: the first step of a guarded ``run``."""
        reason = self.supports(problem)
        if reason:
            raise ValueError(f"{self.name} cannot run on {problem.name}: {reason}")

    @abstractmethod
    def run(self, problem: Problem, context: RunContext) -> Result:
        """Run inference on ``problem`` (this instance already resolved) and return a ``Result``."""


def check_run_signature(cls: type) -> None:
    """Refuse a method class whose ``run`` has the old (problem, budget, seed, device) signature."""
    parameters = tuple(inspect.signature(cls.run).parameters)
    if parameters != RUN_PARAMETERS:
        signature = "(" + ", ".join(parameters) + ")"
        raise TypeError(OLD_RUN_MESSAGE.format(cls=cls.__qualname__, signature=signature))
