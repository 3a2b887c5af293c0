"""Planning a grid: every (problem, method, seed) run of a :class:`GridSpec` with its key, and what is left out."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import torch

from suite.core.method import Method
from suite.core.problem import Problem
from suite.core.registry import code_origin, make_method, make_problem, problem_class
from suite.results import records as rec
from suite.results.records import NOT_APPLICABLE
from suite.run.guards import support_reason
from suite.run.runner import jsonable
from suite.run.spec import DEFAULT_SEEDS, GridSpec, UsageError
from suite.store import references


@dataclass
class PlannedRun:
    """One run of the plan."""

    key: rec.RunKey
    problem: Problem
    #: The method with its options resolved for this problem and profile (:meth:`Method.resolve`).
    method: Method
    #: Compute seconds the run may use (None: the profile's iteration counts).
    time_budget_s: float | None = None
    #: Counts of the timed run this one replays (``--replay-counts``), or None.
    replay: dict[str, Any] | None = None
    #: The problem's constructor options (``--problem-option`` values and, for several data sets, ``data_seed``).
    problem_options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Skipped:
    """A problem that cannot run here (``method`` None) or a method that does not apply to a problem, and why."""

    problem: str
    method: str | None
    reason: str

    def __str__(self) -> str:
        if self.method is None:
            return f"problem {self.problem} is unavailable: {self.reason}"
        return f"{self.method} does not apply to {self.problem}: {self.reason}"

    def as_record(self) -> dict[str, Any]:
        """A leaderboard row saying "not applicable" with the reason (never written as a run record)."""
        return rec.make_record(self.problem, self.method, None, NOT_APPLICABLE, self.reason, metrics={})


def problem_instances(
    problems: list[str], problem_options: dict[str, dict[str, Any]], profile: str, data_sets: int | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """(name, constructor options) of every problem instance to plan: one per data set for problems with several.

    A problem whose class lists ``data_sets`` for the profile is planned once per ``data_seed`` in
    ``first_data_seed + range(count)``, count being ``data_sets`` (``--data-sets``) or else the class's
    ``data_sets[profile]``, unless the user fixed ``data_seed`` with ``--problem-option``.
    """
    instances = []
    for name in problems:
        options = problem_options.get(name, {})
        cls = problem_class(name)
        count = cls.data_sets.get(profile, 0)
        if count and data_sets is not None:
            count = data_sets
        if count and "data_seed" not in options:
            seeds = range(cls.first_data_seed, cls.first_data_seed + count)
            instances.extend((name, {**options, "data_seed": seed}) for seed in seeds)
        else:
            instances.append((name, options))
    return instances


def plan(spec: GridSpec, device: torch.device) -> tuple[list[PlannedRun], list[Skipped]]:
    """Every (problem, method, seed) to run, and the combinations left out with the reason.

    ``problems="all"`` takes the problems planned for the profile (a problem's ``planned_in``; e.g. the 100-component
    mixture only in ``paper``); a problem named explicitly runs in any profile. ``methods="all"`` likewise leaves
    out methods whose ``planned_profiles`` do not list the profile (the optional-library comparators).

    >>> from suite.run import GridSpec, plan
    >>> runs, skipped = plan(GridSpec(problems="sas", methods="rjmcmc-baseline", profile="smoke"), torch.device("cpu"))
    >>> [(run.key.problem, run.key.method, run.key.seed) for run in runs]
    [('sas', 'rjmcmc-baseline', 0), ('sas', 'rjmcmc-baseline', 1)]
    """
    runs: list[PlannedRun] = []
    notes: list[Skipped] = []
    methods = spec.method_names()
    for problem_name, options in problem_instances(
        spec.problem_names(), dict(spec.problem_options), spec.profile, spec.data_sets
    ):
        try:
            problem = make_problem(problem_name, **options)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{problem_name}: {exc}") from None
        problem.use_reference_profile(spec.profile)
        reason = problem.unavailable_reason() or references.reference_problem(problem)  # a bad reference too
        if reason:
            notes.append(Skipped(problem_name, None, reason))
            continue
        budget_s = time_budget_for(problem, spec)
        for method_name in methods:
            method = make_method(method_name, **spec.method_options.get(method_name, {}))
            why_not = support_reason(method, problem)  # one that raises does not apply, because of it
            if why_not:
                notes.append(Skipped(problem_name, method_name, why_not))
                continue
            try:
                resolved = method.resolve(problem, spec.profile)
            except (TypeError, ValueError) as exc:
                raise UsageError(f"{method_name} on {problem_name}: {exc}") from None
            config = {
                "problem_config": problem.config(),
                "method_options": method.options(),
                "profile": spec.profile,
                # The preset fills the options left at None, so a changed preset must not reuse old records.
                "profile_preset": method.profiles.get(spec.profile, {}),
                "num_draws": spec.draws,
                "eval_draws": spec.eval_draws,
                # Methods are scored on the "test" half of stored references (the "train" half is for learning).
                "gold_split": "test",
                "device": device.type,
                "dtype": spec.dtype,
                "time_budget_s": budget_s,
                **plugin_versions(problem, method),
            }
            for seed in range(seeds_for(method, spec)):
                replay = replay_for(spec, problem, method_name, seed)
                if spec.replay is not None and replay is None:
                    notes.append(Skipped(problem_name, method_name, f"no timed record of seed {seed} to replay"))
                    continue
                key_config = config if replay is None else {**config, "replayed": replay["file"]}
                if replay is not None:
                    key_config["time_budget_s"] = replay["time_budget_s"]
                runs.append(
                    PlannedRun(
                        rec.RunKey(problem_name, method_name, seed, key_config),
                        problem,
                        resolved,
                        key_config["time_budget_s"],
                        None if replay is None else replay["counts"],
                        options,
                    )
                )
    return runs, list(dict.fromkeys(notes))  # one note per problem, not per data set


def plugin_versions(problem: Problem, method: Method) -> dict[str, Any]:
    """``{"plugin_code": {...}}`` naming the distribution and version of a plug-in method's or problem's code.

    Part of a run's key, so that a plug-in released under a new version is run again rather than keeping the
    records of its old code; empty for tdbench's own classes (their records stand across tdbench versions).
    """
    origins = {"method": code_origin(type(method)), "problem": code_origin(type(problem))}
    plugins = {k: v for k, v in origins.items() if v is not None and v.get("distribution") != "tdbench"}
    return {"plugin_code": plugins} if plugins else {}


def time_budget_for(problem: Problem, spec: GridSpec) -> float | None:
    """The compute seconds every method gets on ``problem``: the spec's budget, else the problem's for the profile."""
    if spec.no_time_budget:
        return None
    if spec.time_budget_s is not None:
        return spec.time_budget_s  # a TimeBudget, checked when the spec was built
    return problem.time_budgets.get(spec.profile)


def replay_for(spec: GridSpec, problem: Problem, method: str, seed: int) -> dict[str, Any] | None:
    """The recorded counts (with budget and file) of the timed run the spec replays for this run, if any."""
    if spec.replay is None:
        return None
    config = json.dumps(jsonable(problem.config()), sort_keys=True, default=str)
    return spec.replay.get((problem.name, method, seed, config))


def seeds_for(method: Method, spec: GridSpec) -> int:
    """Seeds of one method: the spec's when given, else the method's own default for the profile, else the suite's."""
    if spec.seeds is not None:
        return spec.seeds
    return int(method.default_seeds.get(spec.profile, DEFAULT_SEEDS[spec.profile]))
