"""Conformance checks of a problem: shapes and dtypes, inactive coordinates, batches, float32, model space, truth.

Each check takes a problem instance and raises :class:`suite.run.conformance.CheckFailed` on a fault
(:mod:`suite.run.conformance`); :func:`check_problem` runs them all (``tdbench check PROBLEM``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np
import torch

from suite.core.backend import jax_backend
from suite.core.method import Method
from suite.core.problem import Problem
from suite.core.registry import available_methods, make_method
from suite.run.conformance import CheckFailed, CheckResult, CheckRunner, CheckSkipped, require, require_close
from suite.run.guards import one_line
from suite.run.runner import gold_draws

#: Gold draws the ground-truth check compares with the reference model probabilities.
TRUTH_DRAWS = 40_000


def require_available(problem: Problem) -> None:
    """:class:`CheckSkipped` when the problem cannot run here (its data is missing, say)."""
    reason = problem.unavailable_reason()
    if reason:
        raise CheckSkipped(reason)


def _some_models(problem: Problem, n: int, generator: torch.Generator) -> torch.Tensor:
    return problem.model_space.sample_uniform(n, generator)


def shapes_and_dtypes(problem: Problem) -> None:
    """mask, log_joint (float64 and float32), log_model_prior and context have the contract's shapes and dtypes."""
    gen = torch.Generator().manual_seed(0)
    m = _some_models(problem, 64, gen)
    theta = torch.randn(64, problem.dim_max, dtype=torch.float64, generator=gen)
    mask = problem.mask(m)
    require(mask.dtype == torch.bool, f"mask has dtype {mask.dtype}, not torch.bool")
    require(mask.shape == (64, problem.dim_max), f"mask has shape {tuple(mask.shape)}, not (64, {problem.dim_max})")
    log_joint = problem.log_joint(m, theta)
    require(log_joint.shape == (64,), f"log_joint of 64 rows has shape {tuple(log_joint.shape)}")
    require(log_joint.dtype == torch.float64, f"log_joint of float64 theta is {log_joint.dtype}")
    single = problem.log_joint(m, theta.float()).dtype
    require(single == torch.float32, f"log_joint of float32 theta is {single}")
    prior = problem.log_model_prior(m)
    require(prior.shape == (64,), f"log_model_prior of 64 rows has shape {tuple(prior.shape)}")
    context = problem.context(m)
    shape = (64, problem.context_dim)
    require(context.shape == shape, f"context has shape {tuple(context.shape)}, not {shape}")


def ignores_inactive_coordinates(problem: Problem) -> None:
    """log_joint is the same with NaN in every inactive coordinate."""
    gen = torch.Generator().manual_seed(1)
    m = _some_models(problem, 128, gen)
    theta = torch.randn(128, problem.dim_max, dtype=torch.float64, generator=gen)
    garbage = torch.where(problem.mask(m), theta, torch.full_like(theta, math.nan))
    expected = problem.log_joint(m, theta)
    require_close(problem.log_joint(m, garbage), expected, "NaN in inactive coordinates", 1e-7, 1e-7)


def batch_rows_are_independent(problem: Problem) -> None:
    """log_joint of a batch equals log_joint row by row."""
    gen = torch.Generator().manual_seed(2)
    m = _some_models(problem, 16, gen)
    theta = torch.randn(16, problem.dim_max, dtype=torch.float64, generator=gen)
    batched = problem.log_joint(m, theta)
    single = torch.cat([problem.log_joint(m[i : i + 1], theta[i : i + 1]) for i in range(16)])
    require_close(batched, single, "a batch of 16 against one row at a time", 1e-12, 1e-12)


def float32_agrees_with_float64(problem: Problem) -> None:
    """log_joint in float32 agrees with float64 on reference draws (to float32's rounding: 1e-4 rel., 1e-3 abs.)."""
    draws = problem.reference_draws(256, torch.Generator().manual_seed(3))
    if draws is None:
        raise CheckSkipped("no reference draws")
    note = getattr(problem, "float32_note", None)
    if note:
        raise CheckSkipped(note)
    lp64 = problem.log_joint(draws.model_index, draws.theta)
    lp32 = problem.log_joint(draws.model_index, draws.theta.float())
    # float32 carries ~6e-8 relative error per operation; log joints of magnitude up to ~1e3 summed over tens of
    # terms lose ~1e-4 absolute, so this bound catches dtype bugs, not rounding.
    require_close(lp32.double(), lp64, "float32 against float64", 1e-4, 1e-3)


def model_space_is_consistent(problem: Problem) -> None:
    """index(identifier(i)) == i, and the model prior sums to 1 over spaces of at most 2^16 models."""
    space = problem.model_space
    if space.num_models is None:
        raise CheckSkipped("not enumerable")
    sample = range(min(space.num_models, 64))
    round_trip = [space.index(space.identifier(i)) for i in sample]
    require(round_trip == list(sample), f"index(identifier(i)) gives {round_trip[:8]}... for i = 0, 1, ...")
    if space.num_models <= 2**16:
        total = torch.logsumexp(problem.log_model_prior(space.all_indices()), 0).item()
        require(abs(total) <= 1e-10, f"the model prior's log total is {total:.3g}, not 0")


def ground_truth_is_consistent(problem: Problem, num_draws: int = TRUTH_DRAWS) -> None:
    """Reference q(m) sums to 1; gold draws are float64, 0 where inactive, of finite density, at q(m)'s frequencies.

    Frequencies are compared cell by cell within 4.5 binomial standard errors (rare models pooled).
    """
    truth = problem.reference_model_probs()
    if truth is not None and problem.num_models is not None:
        require(abs(truth.total() - 1.0) <= 1e-9, f"reference model probabilities sum to {truth.total():.12g}")
    draws = gold_draws(problem, num_draws)
    if draws is None:
        raise CheckSkipped("no reference draws")
    require(draws.theta.dtype == torch.float64, f"reference draws are {draws.theta.dtype}, not float64")
    require(
        bool((draws.theta[~problem.mask(draws.model_index)] == 0).all()), "reference draws are not 0 where inactive"
    )
    finite = torch.isfinite(problem.log_joint(draws.model_index, draws.theta))
    require(bool(finite.all()), f"log_joint is not finite at {int((~finite).sum())} reference draws")
    if truth is None:
        return
    # Binomial checks need expected counts well above 1: models expecting >= 20 draws are checked one by one, all
    # rarer models pooled into one cell (4.5 standard errors each).
    n = len(draws)
    freq = torch.bincount(draws.model_index, minlength=problem.num_models).double() / n
    p = truth.dense(problem.num_models)
    common = p * n >= 20
    cells_p = torch.cat([p[common], p[~common].sum(0, keepdim=True)])
    cells_f = torch.cat([freq[common], freq[~common].sum(0, keepdim=True)])
    se = (cells_p * (1 - cells_p) / n).sqrt()
    worst = int(((cells_f - cells_p).abs() / (se + 1e-300)).argmax())
    require(
        bool(((cells_f - cells_p).abs() <= 4.5 * se + 1e-12).all()),
        f"reference draws' model frequencies disagree with the reference q(m): a cell has frequency "
        f"{cells_f[worst]:.4g} against {cells_p[worst]:.4g} (standard error {se[worst]:.2g})",
    )


def torch_and_jax_agree(problem: Problem) -> None:
    """log_joint_with in JAX, jitted, agrees with torch to 1e-10 (+ 1e-12 relative) in float64 on reference and
    random draws."""
    import jax  # the JAX backend is the reference engine's: imported when this check runs
    import jax.numpy as jnp

    xp = jax_backend()  # enables float64 before any JAX array is made
    gen = torch.Generator().manual_seed(4)
    if type(problem).log_joint_with is Problem.log_joint_with:
        raise CheckSkipped("a torch-only log joint (no log_joint_with): no reference engine, so nothing to compare")
    inputs = []
    draws = problem.reference_draws(1000, gen)
    if draws is not None:
        inputs.append((draws.model_index, draws.theta))
    m = _some_models(problem, 1000, gen)
    inputs.append((m, torch.randn(1000, problem.dim_max, dtype=torch.float64, generator=gen)))
    # Compiled once, as the reference engine evaluates it (op-by-op dispatch took five times as long).
    log_joint = jax.jit(lambda model_index, theta: problem.log_joint_with(xp, model_index, theta))
    for model_index, theta in inputs:
        expected = problem.log_joint(model_index, theta).numpy()
        got = np.asarray(log_joint(jnp.asarray(model_index.numpy()), jnp.asarray(theta.numpy())))
        require(got.dtype == np.float64, f"log_joint_with in JAX returns {got.dtype}, not float64")
        try:
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-10)
        except AssertionError as exc:
            summary = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
            raise CheckFailed(f"JAX against torch: {summary}") from None


def supports_answers(method: Method, problem: Problem) -> str | None:
    """The method's ``supports(problem)``: None, or a non-empty reason (never a crash or another value)."""
    reason = method.supports(problem)
    require(reason is None or (isinstance(reason, str) and bool(reason.strip())), f"supports() gave {reason!r}")
    return reason


def every_method_answers(problem: Problem) -> str:
    """Every registered method's ``supports`` answers on the problem: None or a reason."""
    names = available_methods()
    failures, applies = [], 0
    for name in names:
        try:
            applies += supports_answers(make_method(name), problem) is None
        except Exception as exc:
            failures.append(f"{name}: {one_line(exc)}")
    require(not failures, "; ".join(failures))
    return f"{applies} of {len(names)} methods apply"


#: (line, check) of every problem check, in the order ``tdbench check`` prints them.
PROBLEM_CHECKS: list[tuple[str, Callable[[Problem], str | None]]] = [
    ("shapes and dtypes", shapes_and_dtypes),
    ("inactive coordinates ignored", ignores_inactive_coordinates),
    ("batch rows independent", batch_rows_are_independent),
    ("float32 agrees with float64", float32_agrees_with_float64),
    ("model space", model_space_is_consistent),
    ("ground truth consistent", ground_truth_is_consistent),
    ("torch and JAX log joints agree", torch_and_jax_agree),
    ("every method's supports() answers", every_method_answers),
]


def check_problem(problem: Problem, deadline_s: float | None = None) -> Iterator[CheckResult]:
    """Every problem check on ``problem``, one result at a time (all skipped when it cannot run here).

    Each check runs under ``deadline_s`` seconds (:class:`suite.run.conformance.CheckRunner`; None: no deadline).
    """
    reason = problem.unavailable_reason()
    runner = CheckRunner(deadline_s)
    for label, check in PROBLEM_CHECKS:
        if reason:
            yield CheckResult(label, "SKIP", f"unavailable: {reason}")
        else:
            yield runner.run(label, lambda check=check: check(problem))
