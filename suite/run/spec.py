"""What a grid runs (:class:`GridSpec`) and where and how it runs (:class:`Execution`): typed, validated when built.

The command line turns its flags into these two objects; studies and scripts build them directly. Bad values raise
:class:`UsageError` naming the valid choices (the command line prints it and exits 2) before any work starts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from suite.core import checkpoint as ckpt
from suite.core.budget import check_time_budget
from suite.core.device import DEVICE_CHOICES, resolve_device
from suite.core.method import DTYPES, PROFILES
from suite.core.options import OptionError, check_option, method_annotations, problem_annotations
from suite.core.registry import available_methods, available_problems, method_class, problem_class, refusal
from suite.results import records as rec
from suite.run import parallel as par
from suite.run.cluster_config import load_cluster_config, require_jobqueue
from suite.run.dask_executor import require_distributed
from suite.run.shards import parse_shard

#: Gold-standard draws per problem used for cross-entropy, by profile.
EVAL_DRAWS = {"smoke": 2_000, "quick": 10_000, "paper": 100_000}
DEFAULT_SEEDS = {"smoke": 2, "quick": 3, "paper": 10}
#: The checkout the suite lives in: never a results folder.
REPO_ROOT = Path(__file__).resolve().parents[2]
#: Largest seeds, and largest draws / eval draws: beyond them planning or memory would never end.
MAX_SEEDS = 10_000
MAX_DRAWS = 10_000_000
#: Where runs execute: worker processes on this machine, or tasks on a Dask cluster (suite/run/dask_executor.py).
EXECUTORS = ("local", "dask")
CLUSTERS = ("local", "slurm")


class UsageError(ValueError):
    """Bad input to a grid (a flag, a spec field), reported before any work starts."""


def problem_groups() -> dict[str, list[str]]:
    """Each group name of the registered problems (``Problem.groups``) with its members, in registration order."""
    groups: dict[str, list[str]] = {}
    for name in available_problems():
        for group in problem_class(name).groups:
            groups.setdefault(group, []).append(name)
    return groups


def parse_names(
    text: str | Sequence[str], valid: Mapping[str, str], kind: str, groups: Mapping[str, list[str]] | None = None
) -> list[str]:
    """Names from ``"all"``, ``"a,b"`` or a sequence, checked against ``valid``; duplicates dropped, order kept.

    A name in ``groups`` stands for its members (``--problems classics``).
    """
    groups = groups or {}
    if isinstance(text, str):
        names = list(valid) if text.strip() == "all" else [n.strip() for n in text.split(",") if n.strip()]
    else:
        names = [str(name).strip() for name in text if str(name).strip()]
    names = [member for name in names for member in (groups[name] if name in groups and name not in valid else [name])]
    choices = ", ".join(valid) + (f"; groups: {', '.join(groups)}" if groups else "")
    if not names:
        raise UsageError(f"no {kind}s given; valid {kind}s: {choices}")
    unknown = [n for n in names if n not in valid]
    if unknown:  # a plug-in that failed to load or was refused is named with the reason
        refused = [reason for n in unknown if (reason := refusal(kind, n))]
        unknown = [n for n in unknown if not refusal(kind, n)]
        if unknown:
            refused.append(f"unknown {kind}(s) {', '.join(map(repr, unknown))}; valid {kind}s: {choices}")
        raise UsageError("; ".join(refused))
    return list(dict.fromkeys(names))


def _check_options(
    options: Mapping[str, Mapping[str, Any]], flag: str, kind: str, fields_of: Any, valid: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """``{name: {key: value}}`` checked as the flags are (names, keys, and values against the type hints)."""
    checked: dict[str, dict[str, Any]] = {}
    for name, values in options.items():
        if name not in valid:
            unknown = refusal(kind, name) or f"unknown {kind} {name!r}; valid {kind}s: {', '.join(valid)}"
            raise UsageError(f"{flag}: {unknown}")
        fields = fields_of(name)
        for key, value in values.items():
            if key not in fields:
                raise UsageError(f"{flag}: {name} has no option {key!r}; valid: {', '.join(fields) or 'none'}")
            try:
                checked.setdefault(name, {})[key] = check_option(name, key, value, fields[key])
            except OptionError as exc:
                raise UsageError(f"{flag} {name}.{key}: {exc}") from None
    return checked


def method_fields(name: str) -> dict[str, Any]:
    """A method's settable options and their type hints (``progress`` belongs to the suite)."""
    return {key: hint for key, hint in method_annotations(method_class(name)).items() if key != "progress"}


def problem_fields(name: str) -> dict[str, Any]:
    """A problem's constructor arguments and their type hints."""
    return problem_annotations(problem_class(name))


@dataclass(frozen=True, kw_only=True)
class GridSpec:
    """What to run: problems x methods x seeds (x data sets) at one profile, with options, draws and budgets.

    Defaults that depend on the profile are filled in when built (``eval_draws``); ``seeds`` None leaves each
    method its own default for the profile, else the suite's (:data:`DEFAULT_SEEDS`).
    """

    #: ``"all"`` (those planned for the profile), ``"a,b"`` or a sequence of registered names.
    problems: str | tuple[str, ...] = "all"
    methods: str | tuple[str, ...] = "all"
    #: ``{method: {option: value}}`` (``--option``); checked against the methods' type hints.
    method_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: ``{problem: {argument: value}}`` (``--problem-option``); checked against the constructors.
    problem_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    profile: str = "quick"
    seeds: int | None = None
    #: Problems with several data sets run the first N (None: the problem's count for the profile).
    data_sets: int | None = None
    draws: int = 4096
    eval_draws: int | None = None
    #: Compute seconds every run may use (None: the problem's budget for the profile).
    time_budget_s: float | None = None
    #: Run the profile's iteration counts even where the profile has budgets.
    no_time_budget: bool = False
    #: A record file or results folder whose timed runs are replayed with their iteration counts.
    replay_counts: Path | None = None
    device: str = "auto"
    dtype: str = "float64"
    #: ``replay_counts`` loaded: {(problem, method, seed, config): counts}; filled when built.
    replay: dict[Any, Any] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise UsageError(f"unknown profile {self.profile!r}; valid: {', '.join(PROFILES)}")
        if self.device not in DEVICE_CHOICES:
            raise UsageError(f"unknown device {self.device!r}; valid: {', '.join(DEVICE_CHOICES)}")
        if self.dtype not in DTYPES:
            raise UsageError(f"unknown dtype {self.dtype!r}; valid: {', '.join(DTYPES)}")
        for attribute, kind in (("problems", "problem"), ("methods", "method")):
            value = getattr(self, attribute)
            everything = isinstance(value, str) and value.strip() == "all"
            object.__setattr__(self, attribute, "all" if everything else tuple(self._names(value, kind)))
        method_options = _check_options(self.method_options, "--option", "method", method_fields, available_methods())
        problem_options = _check_options(
            self.problem_options, "--problem-option", "problem", problem_fields, available_problems()
        )
        object.__setattr__(self, "method_options", method_options)
        object.__setattr__(self, "problem_options", problem_options)
        eval_draws = EVAL_DRAWS[self.profile] if self.eval_draws is None else self.eval_draws
        object.__setattr__(self, "eval_draws", eval_draws)
        checks = [("--seeds", self.seeds), ("--draws", self.draws), ("--eval-draws", eval_draws)]
        checks.append(("--data-sets", self.data_sets))
        for flag, value in checks:
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise UsageError(f"{flag} must be a positive integer, got {value}")
        limits = [("--seeds", self.seeds, MAX_SEEDS), ("--draws", self.draws, MAX_DRAWS)]
        for flag, value, limit in [*limits, ("--eval-draws", eval_draws, MAX_DRAWS)]:
            if value is not None and value > limit:
                raise UsageError(f"{flag} {value} is more than this suite allows ({limit:,})")
        if self.time_budget_s is not None:
            try:  # checked here, once: the plan, run specs and run contexts carry the TimeBudget on
                object.__setattr__(self, "time_budget_s", check_time_budget(self.time_budget_s))
            except ValueError as error:
                raise UsageError(f"--time-budget {error}") from None
            if self.no_time_budget:
                raise UsageError("--time-budget and --no-time-budget contradict each other; give one")
        if self.replay_counts is not None:
            if self.time_budget_s is not None or self.no_time_budget:
                raise UsageError("--replay-counts takes the budget from the records it replays; drop --time-budget")
            try:
                object.__setattr__(self, "replay", rec.load_replay_counts(Path(self.replay_counts)))
            except ValueError as exc:
                raise UsageError(f"--replay-counts: {exc}") from None
        unplanned = sorted(set(problem_options) - set(self.problem_names()))
        if unplanned:
            raise UsageError(f"--problem-option for {', '.join(unplanned)}, which this run does not plan")
        unplanned = sorted(set(method_options) - set(self.method_names()))
        if unplanned:
            raise UsageError(f"--option for {', '.join(unplanned)}, which this run does not plan")

    @staticmethod
    def _names(value: str | Sequence[str], kind: str) -> list[str]:
        if kind == "problem":
            return parse_names(value, available_problems(), kind, problem_groups())
        return parse_names(value, available_methods(), kind)

    def problem_names(self) -> list[str]:
        """The problems to plan: those named, or with ``"all"`` those whose class plans them in the profile."""
        if self.problems != "all":
            return list(self.problems)
        return [name for name in available_problems() if self.profile in problem_class(name).planned_in]

    def method_names(self) -> list[str]:
        """The methods to plan: those named, or with ``"all"`` those planned in the profile (``planned_profiles``)."""
        if self.methods != "all":
            return list(self.methods)
        return [
            name
            for name in available_methods()
            if method_class(name).planned_profiles in (None, ()) or self.profile in method_class(name).planned_profiles
        ]

    def narrowed(self, problems: Sequence[str], methods: Sequence[str]) -> GridSpec:
        """The same settings for the named ``problems`` and ``methods``, without method options."""
        return dataclasses.replace(self, problems=tuple(problems), methods=tuple(methods), method_options={})


@dataclass(frozen=True, kw_only=True)
class Execution:
    """Where and how a grid runs: results folder, reruns, workers or a Dask cluster, checkpoints, shard, progress."""

    out: Path
    #: Re-run runs that already have a record (and drop their checkpoints).
    force: bool = False
    #: Runs side by side in worker processes (None: one per CPU core, at most 8; 1 on a GPU).
    jobs: int | None = None
    executor: str = "local"
    scheduler: str | None = None
    cluster: str = "local"
    cluster_config: Path | None = None
    #: With the Dask executor: retries of a run whose task failed or whose worker died (None: 1).
    retries: int | None = None
    checkpoint_dir: Path | None = None
    #: Seconds between saves of a long run's state (0: never save).
    checkpoint_every_s: float = ckpt.DEFAULT_EVERY_S
    #: ``"I/N"``: run only the I-th of N disjoint slices of the grid.
    shard: str | None = None
    progress: bool = True
    #: Print the full leaderboards (lines over 120 columns).
    wide: bool = False
    #: (I, N) of ``shard``; filled when built.
    shard_slice: tuple[int, int] | None = field(default=None, init=False, compare=False)

    def __post_init__(self) -> None:
        if not str(self.out).strip():
            raise UsageError("the results folder must be named (an empty name means the current folder)")
        object.__setattr__(self, "out", Path(self.out))
        if self.jobs is not None and (isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs <= 0):
            raise UsageError(f"--jobs must be a positive integer, got {self.jobs}")
        if self.executor not in EXECUTORS:
            raise UsageError(f"unknown executor {self.executor!r}; valid: {', '.join(EXECUTORS)}")
        if self.cluster not in CLUSTERS:
            raise UsageError(f"unknown cluster {self.cluster!r}; valid: {', '.join(CLUSTERS)}")
        if not self.checkpoint_every_s >= 0:
            raise UsageError(
                f"--checkpoint-every must be 0 (never save) or a positive number, got {self.checkpoint_every_s}"
            )
        self._check_distribution()

    def _check_distribution(self) -> None:
        """Check the executor, cluster, shard and checkpoint settings (no connection is made here)."""
        dask_only = [
            ("--scheduler", self.scheduler is not None),
            ("--cluster slurm", self.cluster != "local"),
            ("--cluster-config", self.cluster_config is not None),
            ("--retries", self.retries is not None),
        ]
        if self.executor != "dask":
            given = [flag for flag, present in dask_only if present]
            if given:
                verb = "applies" if len(given) == 1 else "apply"
                raise UsageError(
                    f"{', '.join(given)} {verb} only with --executor dask (executors: {', '.join(EXECUTORS)})"
                )
        object.__setattr__(self, "retries", 1 if self.retries is None else self.retries)
        if self.retries < 0:
            raise UsageError(f"--retries must be 0 or a positive integer, got {self.retries}")
        if self.shard is not None:
            try:
                object.__setattr__(self, "shard_slice", parse_shard(self.shard))
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        if self.executor != "dask":
            return
        try:
            require_distributed()
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if self.scheduler is not None and (self.cluster != "local" or self.cluster_config is not None):
            raise UsageError("--scheduler names a running cluster; --cluster and --cluster-config start one: give one")
        if self.scheduler is not None and not self.scheduler.strip():
            raise UsageError("--scheduler needs an address, e.g. tcp://HOST:8786")
        if self.cluster == "slurm":
            if self.cluster_config is None:
                raise UsageError(
                    "--cluster slurm needs --cluster-config FILE (queue, cores, memory, walltime, jobs, ...)"
                )
            try:
                require_jobqueue()
                load_cluster_config(self.cluster_config)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        elif self.cluster_config is not None:
            raise UsageError("--cluster-config describes a Slurm cluster: add --cluster slurm")

    @property
    def remote(self) -> bool:
        """Whether the runs happen on a cluster's workers rather than on this machine."""
        return self.executor == "dask" and (self.scheduler is not None or self.cluster != "local")


def check_out(out: Path, profile: str) -> None:
    """Refuse a results folder that is the repository itself or that holds records of another profile."""
    if out.resolve() == REPO_ROOT:
        raise UsageError(f"--out {str(out)!r} is the repository root; give a results folder, e.g. results/{profile}")
    others = sorted(profiles_in(out) - {profile})
    if others:
        raise UsageError(
            f"--out {out} holds records of profile {', '.join(others)}; leaderboards mix no profiles: "
            f"use another folder, e.g. --out results/{profile}"
        )


def profiles_in(out: Path) -> set[str]:
    """The profiles of the records in ``out`` (unreadable records are ignored)."""
    found = set()
    for path in rec.regular_files(rec.records_dir(out)):  # never a FIFO or a link named *.json
        try:
            profile = (rec.read_json(path).get("budget") or {}).get("profile")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(profile, str):
            found.add(profile)
    return found


@dataclass(frozen=True)
class Placement:
    """A grid checked against its execution: the device runs use and the runs side by side (after the core cap)."""

    device: torch.device
    jobs: int
    #: Notes for the user (e.g. more jobs than cores); printed by the caller.
    notes: tuple[str, ...] = ()


def place(spec: GridSpec, execution: Execution, dry_run: bool = False) -> Placement:
    """Check ``spec`` against ``execution`` (results folder, device, writable folders) and lay out the jobs.

    The folders are probed by writing a file in them, except in a ``dry_run``, which writes nothing.
    """
    check_out(execution.out, spec.profile)
    linked = rec.linked_own_folder(execution.out)
    if linked is not None:
        raise UsageError(
            f"{linked} is a symbolic link; tdbench writes only into real folders inside --out: remove the link, "
            "or give another --out"
        )
    probe = rec.writable_without_writing if dry_run else rec.check_folder_writable
    try:
        # The runs happen on the cluster's workers: this machine needs no GPU of its own for --device cuda.
        device = torch.device("cuda") if execution.remote and spec.device == "cuda" else resolve_device(spec.device)
        probe(rec.records_dir(execution.out), f"output folder {str(execution.out)!r}")
        if execution.checkpoint_dir is not None:
            probe(execution.checkpoint_dir, f"--checkpoint-dir {str(execution.checkpoint_dir)!r}")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    jobs = par.default_jobs(device) if execution.jobs is None else execution.jobs
    notes = []
    cores = par.usable_cores()
    if jobs > cores:
        notes.append(f"note: --jobs {jobs} is more than the {cores} usable CPU core(s); running {cores} at a time")
        jobs = cores
    if device.type == "cuda" and jobs > 1 and execution.executor == "local":
        notes.append(
            f"note: {jobs} jobs share one GPU; a run with a time budget then gets fewer iterations than alone "
            "(measured in docs/gpu.md); use --jobs 1 for leaderboards"
        )
    return Placement(device, jobs, tuple(notes))
