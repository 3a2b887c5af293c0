"""The record format of suite/results/record_model.py in msgspec, for the comparison of docs/measurements/records.md."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from suite.core.budget import MAX_TIME_BUDGET_S
from suite.core.names import name_problem
from suite.results.schema import LOWER_IS_BETTER, MAX_COUNT, TOLERANCE, in_bounds

Count = Annotated[int, Meta(ge=0, le=MAX_COUNT)]
Word = Annotated[int, Meta(ge=0, le=2**63 - 1)]
Seconds = Annotated[float, Meta(ge=-TOLERANCE)]
Sha = Annotated[str, Meta(pattern=r"^[0-9a-f]{64}$")]


class Part(Struct, forbid_unknown_fields=False, frozen=True):
    pass


class Estimate(Part):
    value: float | None = None
    se: float | None = None

    def __post_init__(self):
        if self.se is not None and not (math.isnan(self.se) or self.se >= 0):
            raise ValueError(f"se is {self.se!r}, not a number >= 0")


class Budget(Part):
    profile: str | None = None
    time_budget_s: Annotated[float, Meta(gt=0, le=MAX_TIME_BUDGET_S)] | None = None
    num_draws: Count | None = None
    replayed: bool | None = None
    over_budget: bool | None = None
    clock_s: Seconds | None = None
    allowance_s: Seconds | None = None


class Trace(Part):
    seconds: list[Seconds] | None = None
    iterations: list[Count] | None = None
    elbo: list[float | None] | None = None
    metrics: dict[str, list[float | None] | None] | None = None

    def __post_init__(self):
        n = len(self.seconds or [])
        for name, values in (self.metrics or {}).items():
            for i, v in enumerate(values or []):
                why = in_bounds(name, v)
                if why:
                    raise ValueError(f"metrics[{name!r}][{i}] {why}")
            if values is not None and len(values) != n:
                raise ValueError(f"metrics[{name!r}] has {len(values)} values for {n} snapshot times")
        for name in ("iterations", "elbo"):
            v = getattr(self, name)
            if v is not None and len(v) != n:
                raise ValueError(f"{name} has {len(v)} values for {n} snapshot times")


class ModelProbsPart(Part):
    id: list[str] | None = None
    index: list[Any] | None = None
    estimate: list[float] | None = None
    truth: list[float] | None = None
    se: list[float | None] | None = None
    estimate_total: float | None = None

    def __post_init__(self):
        for name in ("estimate", "truth"):
            for i, v in enumerate(getattr(self, name) or []):
                why = in_bounds("model_prob_tv", v)
                if why:
                    raise ValueError(f"{name}[{i}] {why}")
        lengths = {
            k: len(getattr(self, k)) for k in ("id", "index", "estimate", "truth", "se") if getattr(self, k) is not None
        }
        if len(set(lengths.values())) > 1:
            raise ValueError("lists of different lengths")


class DrawsPart(Part):
    path: str | None = None
    num: Count | None = None
    sha256: Sha | None = None
    log_q: bool | None = None


class ReferencePart(Part):
    kind: str | None = None
    size: str | None = None
    size_wanted: str | None = None
    size_mismatch: bool | None = None
    file: str | None = None
    search_folder: str | None = None
    search_folder_entry: Count | None = None
    search_folder_path: str | None = None
    path: str | None = None
    sha256: Sha | None = None
    json_sha256: Sha | None = None
    arrays_sha256: Sha | None = None


class ProblemFacts(Part):
    version: Count | None = None
    description: str | None = None
    main_metric: str | None = None
    higher_is_better: list[str] | None = None
    sweep: list[Any] | None = None
    num_models: Count | None = None
    reported_neg_elbo: dict[str, float] | None = None
    reported_source: str | None = None
    reported_dag_table: dict[str, dict[str, float]] | None = None

    def __post_init__(self):
        wrong = sorted(set(self.higher_is_better or []) & LOWER_IS_BETTER)
        if wrong:
            raise ValueError(f"higher_is_better names {', '.join(wrong)}, where lower is better")


Obj = dict[str, Any] | None


class RunRecord(Part):
    problem: str
    method: str
    seed: Word
    status: Literal["ok", "failed", "not_applicable"]
    metrics: dict[str, Estimate]
    reason: str | None = None
    config_hash: Annotated[str, Meta(pattern=r"^[0-9A-Za-z]{1,64}$")] | None = None
    budget: Budget | None = None
    counts: dict[str, Count | list[Count]] | None = None
    trace: Trace | None = None
    timings_s: dict[str, Seconds] | None = None
    model_probs: ModelProbsPart | None = None
    draws: DrawsPart | None = None
    reference: ReferencePart | None = None
    code: Obj = None
    problem_facts: ProblemFacts | None = None
    problem_config: Obj = None
    run_config: Obj = None
    method_options: Obj = None
    method_settings: Obj = None
    environment: Obj = None
    parallel: Obj = None
    diagnostics: Obj = None
    metrics_scope: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    plot: str | None = None
    traceback: str | None = None
    num_gold_draws: Count | None = None
    peak_memory_bytes: Word | None = None
    schema: Count | None = None

    def __post_init__(self):
        for n in (self.problem, self.method):
            why = name_problem(n)
            if why:
                raise ValueError(why)
        for name, est in self.metrics.items():
            why = in_bounds(name, est.value)
            if why:
                raise ValueError(f"metrics[{name!r}] value {why}")


def problem(record):
    try:
        msgspec.convert(record, RunRecord, strict=True)
    except msgspec.ValidationError as e:
        return str(e)
    return None
