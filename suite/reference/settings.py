"""The reference engine's settings for a problem: the engine's defaults, then the problem's own
``reference_settings``, then what the caller overrides (``tdbench reference``'s flags, a study's sizes)."""

from __future__ import annotations

import dataclasses

from suite.core.problem import Problem
from suite.reference.bridge import BridgeSettings
from suite.reference.engine import EngineSettings
from suite.reference.nuts import NUTSSettings
from suite.reference.smc import SMCSettings


def settings_for(
    problem: Problem, *, particles: int | None = None, runs: int | None = None, gold_draws: int = 10_000, seed: int = 0
) -> EngineSettings:
    """Engine settings: defaults, then the problem's ``reference_settings``, then ``particles``/``runs`` when given."""
    own = getattr(problem, "reference_settings", {})
    smc = dataclasses.replace(SMCSettings(), **own.get("smc", {}))
    nuts = dataclasses.replace(NUTSSettings(), **own.get("nuts", {}))
    if particles:
        smc = dataclasses.replace(smc, num_particles=particles)
    if runs:
        smc = dataclasses.replace(smc, num_runs=runs)
    extra = {k: v for k, v in own.items() if k in ("max_nuts_models", "evidence")}
    if "bridge" in own:
        extra["bridge"] = dataclasses.replace(BridgeSettings(), **own["bridge"])
    return EngineSettings(smc=smc, nuts=nuts, num_gold_draws=gold_draws, seed=seed, **extra)
