"""Conformance: every registered problem and method must pass these (new ones get them for free).

The checks are library code (:mod:`suite.run.problem_checks`, :mod:`suite.run.method_checks`), so that a plug-in
author runs the same ones on an installed package with ``tdbench check NAME``; here they run on every registered
problem and method, a skipped check (:class:`CheckSkipped`) skipping its test.
"""

from collections.abc import Callable
from typing import Any

import pytest

from suite.core.problem import Problem
from suite.core.registry import available_methods, available_problems, make_method, make_problem
from suite.run import method_checks as mc
from suite.run import problem_checks as pc
from suite.run.conformance import CheckSkipped

PROBLEMS = list(available_problems())
METHODS = list(available_methods())
#: Problems every method is run on here: those of the smoke profile (the large sweep instances are left out).
SMOKE_PROBLEMS = mc.smoke_problems()
#: The inner loop (``pytest -m "not slow"``) runs every method on these small problems; the larger ones, and the
#: methods that take seconds on any problem, are marked slow (docs/testing.md).
INNER_LOOP_PROBLEMS = ("sas", "eight-schools", "funnel", "seeds", "linear-dag-d4", "block-vs", "robust-vs")
SLOW_METHODS = ("dibs", "dagma")
#: Pairs of the inner loop's problems that take more than 2 s here (each method also runs on sas in the inner loop).
SLOW_PAIRS = {
    ("linear-dag-d4", "vti-mcg"),
    ("linear-dag-d4", "vti-surrogate"),
    ("linear-dag-d4", "rjmcmc-baseline"),
    ("linear-dag-d4", "rjmcmc-naive"),
    ("robust-vs", "ctrj"),
    ("robust-vs", "vti-mcg"),
    ("robust-vs", "vti-surrogate"),
    ("robust-vs", "mif"),
}
#: Methods whose two seeded repeats take more than 3 s: checked in the full run, not in the inner loop.
SLOW_TO_REPEAT = ("ctrj", "vti-mcg", "vti-surrogate")


def _method_params(methods: list[str], slow_too: tuple[str, ...] = ()) -> list:
    slow = SLOW_METHODS + slow_too
    return [pytest.param(m, marks=pytest.mark.slow) if m in slow else m for m in methods]


def _slow_pair(method_name: str, problem_name: str) -> bool:
    return (
        problem_name not in INNER_LOOP_PROBLEMS
        or method_name in SLOW_METHODS
        or (problem_name, method_name) in SLOW_PAIRS
    )


def _pair_params(methods: list[str], problems: list[str]) -> list:
    """(method, problem) pairs, slow where the problem is outside the inner loop's, the method is slow or the
    pair is in ``SLOW_PAIRS``."""
    slow = (pytest.mark.slow,)
    return [
        pytest.param(m, p, id=f"{p}-{m}", marks=slow if _slow_pair(m, p) else ()) for p in problems for m in methods
    ]


def _problem(name: str) -> Problem:
    problem = make_problem(name)
    if problem.unavailable_reason():
        pytest.skip(problem.unavailable_reason())
    return problem


def _check(check: Callable[..., Any], *args: Any) -> Any:
    """Run a library check; a fault fails the test (CheckFailed is an AssertionError), a skip skips it."""
    try:
        return check(*args)
    except CheckSkipped as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("name", PROBLEMS)
def test_problem_shapes_and_dtypes(name: str) -> None:
    _check(pc.shapes_and_dtypes, _problem(name))


@pytest.mark.parametrize("name", PROBLEMS)
def test_problem_ignores_inactive_coordinates(name: str) -> None:
    _check(pc.ignores_inactive_coordinates, _problem(name))


@pytest.mark.parametrize("name", PROBLEMS)
def test_problem_batch_rows_are_independent(name: str) -> None:
    _check(pc.batch_rows_are_independent, _problem(name))


#: The 2^20-model instances take seconds in the checks that go over every model: slow (docs/testing.md).
PROBLEMS_P20_SLOW = [pytest.param(n, marks=pytest.mark.slow) if n.endswith("-p20") else n for n in PROBLEMS]


@pytest.mark.parametrize("name", PROBLEMS_P20_SLOW)
def test_problem_float32_agrees_with_float64(name: str) -> None:
    _check(pc.float32_agrees_with_float64, _problem(name))


@pytest.mark.parametrize("name", PROBLEMS)
def test_problem_model_space(name: str) -> None:
    _check(pc.model_space_is_consistent, _problem(name))


@pytest.mark.parametrize("name", PROBLEMS_P20_SLOW)
def test_problem_ground_truth_is_consistent(name: str) -> None:
    _check(pc.ground_truth_is_consistent, _problem(name))


@pytest.mark.parametrize("method_name", METHODS)
@pytest.mark.parametrize("name", PROBLEMS)
def test_methods_say_why_they_do_not_apply(method_name: str, name: str) -> None:
    """Every (method, problem) pair either applies or gives a reason, before any work (never a crash)."""
    _check(pc.supports_answers, make_method(method_name), make_problem(name))


def test_per_model_methods_are_not_applicable_to_spaces_too_large_to_enumerate() -> None:
    """A 2^24-model space: per-model fits and per-model-flow TRJ say why they cannot run; VTI with MADE can."""
    problem = make_problem("robust-vs-p24")
    for name in ("mif", "iaf", "fr-vip", "fr", "mf"):
        assert make_method(name).supports(problem)
    assert make_method("vti-mcg").supports(problem) is None


@pytest.mark.parametrize(("method_name", "name"), _pair_params(METHODS, SMOKE_PROBLEMS))
def test_method_returns_a_valid_result(method_name: str, name: str) -> None:
    problem, method = _problem(name), make_method(method_name)
    if method.supports(problem):
        pytest.skip(method.supports(problem))
    _check(mc.valid_result, method, problem)


def _first_supported_problem(method_name: str) -> Problem:
    """``sas`` when the method runs on it, else the first small problem it supports (e.g. a DAG for dagma).

    A method whose optional extra is not installed (dibs, bges) supports nothing: its tests skip, naming the extra.
    """
    method = make_method(method_name)
    problem = mc.first_supported_problem(method)
    if problem is None:
        reasons = [method.supports(make_problem(name)) or "" for name in mc.PREFERRED_PROBLEMS]
        missing = next((reason for reason in reasons if "is not installed" in reason), None)
        if missing:
            pytest.skip(f"{method_name}: {missing}")
    assert problem is not None, f"{method_name} supports none of {mc.PREFERRED_PROBLEMS}"
    return problem


@pytest.mark.parametrize("method_name", _method_params(METHODS, SLOW_TO_REPEAT))
def test_method_is_reproducible_by_seed(method_name: str) -> None:
    _check(mc.reproducible_by_seed, make_method(method_name), _first_supported_problem(method_name))


@pytest.mark.parametrize("method_name", _method_params(METHODS))
def test_method_runs_through_the_harness(method_name: str) -> None:
    _check(mc.runs_through_the_harness, make_method(method_name), _first_supported_problem(method_name))


@pytest.mark.parametrize("method_name", _method_params(METHODS))
def test_method_traces_its_running_estimate_and_leaves_its_problem_unchanged(method_name: str) -> None:
    """At least 5 snapshots at increasing times and iterations, the last one equal to the result (issue 19); no
    public attribute of the problem instance reassigned, added or removed by the run (issue 35). Both checks read
    one smoke run, as ``tdbench check`` makes them."""
    method, problem = make_method(method_name), _first_supported_problem(method_name)
    run = mc.smoke_run(method, problem)
    _check(mc.traces_its_running_estimate, method, problem, run)
    _check(mc.leaves_its_problem_unchanged, method, problem, run)


@pytest.mark.parametrize("name", PROBLEMS_P20_SLOW)
def test_problem_log_joint_agrees_between_torch_and_jax(name: str) -> None:
    """One definition, two backends: float64 results agree to 1e-10 (plus 1e-12 relative for large values)."""
    _check(pc.torch_and_jax_agree, _problem(name))
