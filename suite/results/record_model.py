"""A run record as typed classes (pydantic): its checks, their messages and its JSON Schema from one definition.

:class:`RunRecord` is the record a run writes (:func:`suite.results.records.write_record`) and every reader loads:
each field the report, the runner's resumption and replay and :mod:`tdbench.results` read, with its type and
range. Every field but the five required ones may be missing (older records) or null; fields not listed (a
plug-in's run information) are kept and not checked. Types are strict: a seed of ``"0"`` or ``true`` is refused,
not converted. Metrics are ``{"value": v, "se": s, ...}`` with ``v`` a number (finite, +-inf or NaN: a computed
NaN is shown as ``nan``) or null and ``s`` null, NaN or >= 0; a metric with known bounds
(:data:`suite.results.schema.METRIC_BOUNDS`) must lie within them, at the end of the run and along its trace.

:func:`format_problem` is what readers call: the first problem found, as ``field.sub[key] why``, or None.
:func:`migrate` brings a record of an older format version to this one before it is checked.
``python -m suite.results.record_model`` prints the JSON Schema (kept in ``docs/record.schema.json``). Why
pydantic rather than msgspec or the hand-written checks of earlier versions: docs/measurements/records.md.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from suite.core.budget import MAX_TIME_BUDGET_S
from suite.core.names import name_problem
from suite.results.schema import LOWER_IS_BETTER, MAX_COUNT, TOLERANCE, in_bounds

#: The record format this version writes (the ``schema`` field). Version 1 is the only one so far; records without
#: the field were written before it existed and have the same format.
FORMAT_VERSION = 1
#: A run's outcome (suite.results.records names them OK, FAILED, NOT_APPLICABLE).
STATUSES = ("ok", "failed", "not_applicable")


def _ensure(why: str | None) -> None:
    if why is not None:
        raise ValueError(why)


def _name(value: str) -> str:
    _ensure(name_problem(value))  # parts of file names and labels: never a path or markup
    return value


def _probability(value: float) -> float:
    _ensure(in_bounds("model_prob_tv", value))
    return value


def _standard_error(value: float | None) -> float | None:
    if value is not None and not (math.isnan(value) or value >= 0):
        raise ValueError(f"is {value!r}, not a number >= 0")
    return value


def _draws_path(value: str) -> str:
    path = PurePosixPath(value.replace("\\", "/"))
    if not value or path.is_absolute() or ".." in path.parts or re.match(r"[A-Za-z]:", value):
        raise ValueError(f"is {value!r}, not a path inside the results folder")
    return value


def _directions(names: list[str]) -> list[str]:
    wrong = sorted(set(names) & LOWER_IS_BETTER)
    if wrong:
        raise ValueError(f"names {', '.join(wrong)}, where lower is better")
    return names


def _sweep(value: list[Any]) -> list[Any]:
    if len(value) != 2 or not isinstance(value[0], str):
        raise ValueError(f"is {value!r}, not [name, x]")
    return value


Name = Annotated[StrictStr, AfterValidator(_name)]
Count = Annotated[StrictInt, Field(ge=0, le=MAX_COUNT)]
Word = Annotated[StrictInt, Field(ge=0, le=2**63 - 1)]
#: Seconds of a phase or clock: finite and not negative beyond rounding.
Seconds = Annotated[float, Field(ge=-TOLERANCE, allow_inf_nan=False)]
Probability = Annotated[float, AfterValidator(_probability)]
StandardError = Annotated[float | None, AfterValidator(_standard_error)]
Sha256 = Annotated[StrictStr, Field(pattern=r"^[0-9a-f]{64}$")]
OptionalStr = StrictStr | None
OptionalBool = StrictBool | None
Object = dict[str, Any] | None


class Part(BaseModel):
    """A part of a record: strict types, unknown keys kept unchecked."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)


class Estimate(Part):
    """One metric: its value and standard error (more keys, such as ``n``, may follow)."""

    value: float | None = None
    se: StandardError = None


def _metric_bounds(metrics: dict[str, Estimate]) -> dict[str, Estimate]:
    for name, estimate in metrics.items():
        why = in_bounds(name, estimate.value)
        if why is not None:
            raise ValueError(f"[{name!r}] value {why}")
    return metrics


Metrics = Annotated[dict[str, Estimate], AfterValidator(_metric_bounds)]


class Budget(Part):
    """The run's time budget and its clock."""

    profile: OptionalStr = None
    time_budget_s: Annotated[float, Field(gt=0, le=MAX_TIME_BUDGET_S)] | None = None
    num_draws: Count | None = None
    replayed: OptionalBool = None
    over_budget: OptionalBool = None
    clock_s: Seconds | None = None
    allowance_s: Seconds | None = None


class Trace(Part):
    """The running estimates: their compute seconds, iterations, ELBOs and scored metrics, one entry each."""

    seconds: list[Seconds] | None = None
    iterations: list[Count] | None = None
    elbo: list[float | None] | None = None
    metrics: dict[str, list[float | None] | None] | None = None

    @model_validator(mode="after")
    def _same_lengths(self) -> Trace:
        length = len(self.seconds or [])
        for name, values in (self.metrics or {}).items():
            for position, value in enumerate(values or []):
                why = in_bounds(name, value)
                if why is not None:
                    raise ValueError(f"metrics[{name!r}][{position}] {why}")
            if values is not None and len(values) != length:
                raise ValueError(f"metrics[{name!r}] has {len(values)} values for {length} snapshot times")
        for name in ("iterations", "elbo"):
            values = getattr(self, name)
            if values is not None and len(values) != length:
                raise ValueError(f"{name} has {len(values)} values for {length} snapshot times")
        return self


class ModelProbsPart(Part):
    """The estimated model probabilities beside the reference's, model by model."""

    id: list[StrictStr] | None = None
    index: list[Any] | None = None
    estimate: list[Probability] | None = None
    truth: list[Probability] | None = None
    se: list[StandardError] | None = None
    estimate_total: float | None = None

    @model_validator(mode="after")
    def _same_lengths(self) -> ModelProbsPart:
        names = ("id", "index", "estimate", "truth", "se")
        lengths = {name: len(getattr(self, name)) for name in names if getattr(self, name) is not None}
        if len(set(lengths.values())) > 1:
            raise ValueError("lists of different lengths: " + ", ".join(f"{k} {n}" for k, n in lengths.items()))
        return self


class DrawsPart(Part):
    """Where the run's draws are stored, inside the results folder, and their checksum."""

    path: Annotated[StrictStr, AfterValidator(_draws_path)] | None = None
    num: Count | None = None
    sha256: Sha256 | None = None
    log_q: OptionalBool = None


class ReferencePart(Part):
    """Which ground truth the run was scored on, and its checksums."""

    kind: OptionalStr = None
    size: OptionalStr = None
    size_wanted: OptionalStr = None
    size_mismatch: OptionalBool = None
    file: OptionalStr = None
    search_folder: OptionalStr = None
    search_folder_entry: Count | None = None
    search_folder_path: OptionalStr = None
    path: OptionalStr = None
    sha256: Sha256 | None = None
    json_sha256: Sha256 | None = None
    arrays_sha256: Sha256 | None = None


class ProblemFacts(Part):
    """What the report needs to know of the problem without importing it."""

    version: Count | None = None
    description: OptionalStr = None
    main_metric: OptionalStr = None
    higher_is_better: Annotated[list[StrictStr], AfterValidator(_directions)] | None = None
    sweep: Annotated[list[Any], AfterValidator(_sweep)] | None = None
    num_models: Count | None = None
    reported_neg_elbo: dict[str, float] | None = None
    reported_source: OptionalStr = None
    reported_dag_table: dict[str, dict[str, float]] | None = None


class RunRecord(Part):
    """One run's record (``records/<problem>__<method>__seed<seed>__<hash>.json``)."""

    problem: Name
    method: Name
    seed: Word
    status: Literal[STATUSES]  # type: ignore[valid-type]
    metrics: Metrics
    reason: OptionalStr = None
    config_hash: Annotated[StrictStr, Field(pattern=r"^[0-9A-Za-z]{1,64}$")] | None = None
    budget: Budget | None = None
    counts: dict[str, Count | list[Count]] | None = None
    trace: Trace | None = None
    timings_s: dict[str, Seconds] | None = None
    model_probs: ModelProbsPart | None = None
    draws: DrawsPart | None = None
    reference: ReferencePart | None = None
    code: Object = None
    problem_facts: ProblemFacts | None = None
    problem_config: Object = None
    run_config: Object = None
    method_options: Object = None
    method_settings: Object = None
    environment: Object = None
    parallel: Object = None
    diagnostics: Object = None
    metrics_scope: OptionalStr = None
    started_at: OptionalStr = None
    finished_at: OptionalStr = None
    plot: OptionalStr = None
    traceback: OptionalStr = None
    num_gold_draws: Count | None = None
    peak_memory_bytes: Word | None = None
    schema_: Annotated[Count | None, Field(alias="schema")] = None

    @classmethod
    def from_json(cls, text: str | bytes) -> RunRecord:
        """Parse and check a record's JSON (NaN and +-Infinity allowed, as the suite writes them)."""
        return cls.model_validate(json.loads(text))

    def to_json(self) -> str:
        """The record as the suite writes it: keys sorted, NaN and +-Infinity as JSON's extensions."""
        return json.dumps(self.model_dump(by_alias=True, exclude_unset=True), indent=1, sort_keys=True)


def migrate(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` in this version's format: older versions brought up to date; ValueError for a newer one."""
    version = record.get("schema", FORMAT_VERSION)
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        raise ValueError(f"schema is {version}: written by a newer tdbench (this one reads up to {FORMAT_VERSION})")
    return record  # version 1 and records before the field existed share one format


def _where(location: tuple[int | str, ...]) -> str:
    """``budget.time_budget_s``, ``metrics['model_prob_tv']``, ``trace.seconds[3]``: where a check failed."""
    text = ""
    for part in location:
        if isinstance(part, int):
            text += f"[{part}]"
        elif text and not str(part).startswith("["):
            text += f".{part}" if part.isidentifier() else f"[{part!r}]"
        else:
            text += str(part)
    return text


def format_problem(record: dict[str, Any]) -> str | None:
    """Why ``record`` breaks the format (the first problem found: where, and how), or None when it keeps to it.

    Example:
        >>> format_problem({"problem": "sas", "method": "mf", "seed": 0, "status": "ok",
        ...                 "metrics": {"model_prob_tv": {"value": 1.5, "se": None}}})
        "metrics: ['model_prob_tv'] value is 1.5, outside [0, 1]"
    """
    try:
        RunRecord.model_validate(migrate(record))
    except ValueError as error:
        if not isinstance(error, ValidationError):
            return str(error)
        errors = error.errors(include_url=False)
        # The most specific of the first field's errors (a union reports one per branch it tried).
        same_field = [e for e in errors if e["loc"][:1] == errors[0]["loc"][:1]]
        first = max(same_field, key=lambda e: len(e["loc"]))
        where = _where(tuple(part for part in first["loc"] if not _is_branch(part)))
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] != "value_error":  # a type or range check: say what was found
            message += f" (got {_shown(first['input'])})"
        return f"{where}: {message}" if where else message
    return None


def _shown(value: Any) -> str:
    """A found value for a message: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


#: How pydantic names, in an error's location, the branch of a union it tried: not part of where the value is.
_BRANCH = re.compile(r"(int|float|str|bool|none|(list|dict|tuple)\[.*\]|constrained-.*|function-.*)")


def _is_branch(part: int | str) -> bool:
    return isinstance(part, str) and _BRANCH.fullmatch(part) is not None


if __name__ == "__main__":
    print(json.dumps(RunRecord.model_json_schema(by_alias=True), indent=1, sort_keys=True))
