"""Non-linear DAGMA: a frequentist point estimate of a DAG, the structure-learning baseline of VTI sec. 5.2.

DAGMA (Bello, Aragam and Ravikumar 2022, NeurIPS) fits one MLP per node under an L1 penalty ``lambda1`` and the
log-det acyclicity constraint, and thresholds the induced edge strengths into a graph. This method calls the
reference implementation, the ``dagma`` package (``dagma.nonlinear.DagmaMLP`` / ``DagmaNonlinear``), once per
``lambda1`` of a sweep and keeps one graph; the ``Result`` is that single graph as a point mass
(``metrics_scope="task"``: it is scored only on the problem's DAG metrics). Settings follow VTI App. F.3/F.5 (hidden
width 10, ``w_threshold`` 0.1, ``lambda1`` over 10 log-spaced values in [1e-3, 1]; ``bias=False``, the paper's).

**Running estimate.** The graph the selection rule picks among the lambdas finished so far (a point mass); none
before the first lambda finishes. A snapshot is taken after every lambda, and at the context's geometric points in
between (the iteration is the count of Adam steps over the whole sweep).

**Time budget.** The lambdas share the budget equally, and the central-path stages of one lambda split its share in
the profile's proportions, each ending at its milestone or earlier when the package's optimiser converges (the
package's own stage loop, ``DagmaNonlinear.fit``, step for step). When the whole budget is spent the sweep stops and
the graph is chosen among the lambdas finished; if none finished, :class:`suite.core.context.BudgetTooSmall` is
raised.
Details: docs/methods.md, "DAGMA (`methods/dagma/method.py`)".
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from suite.core.context import BudgetTooSmall, RunContext
from suite.core.loop import RunLoop
from suite.core.method import Method, Result
from suite.core.problem import Problem
from suite.core.registry import register_method
from suite.core.types import Draws, ModelProbs
from suite.graphs.dag import NOT_DAG_REASON, DAGProblem, is_acyclic, transitive_closure
from suite.graphs.metrics import edge_f1

SELECTIONS = ("oracle-f1", "bic")
INSTALL_HINT = "the dagma package is not installed: pip install dagma"
#: ``minimize``'s iteration cap in a budgeted stage (the stage ends at its milestone long before).
BUDGETED_STAGE_CAP = 10**12
#: The package's defaults for what :meth:`DAGMA.run` does not set (``DagmaNonlinear.fit``'s ``s`` and
#: ``checkpoint``: the objective is checked for convergence every ``checkpoint`` steps).
PACKAGE_S, PACKAGE_CHECKPOINT = 1.0, 1000

_PROFILES: dict[str, dict[str, Any]] = {
    # Seconds: a short sweep with a few hundred large Adam steps per fit.
    "smoke": {"num_lambdas": 4, "num_stages": 2, "warm_iter": 150, "max_iter": 300, "lr": 1e-2},
    # The paper's 10-value sweep with ~1/100 of the package's iterations at a 5x larger learning rate.
    "quick": {"num_lambdas": 10, "num_stages": 3, "warm_iter": 600, "max_iter": 1200, "lr": 1e-3},
    # dagma.nonlinear.DagmaNonlinear.fit defaults (T=4, warm_iter=5e4, max_iter=8e4, lr=2e-4); VTI App. F.3 sweep.
    "paper": {"num_lambdas": 10, "num_stages": 4, "warm_iter": 50_000, "max_iter": 80_000, "lr": 2e-4},
}


@register_method("dagma")
@dataclass(frozen=True)
class DAGMA(Method):
    """Non-linear DAGMA (Bello et al. 2022; the ``dagma`` PyPI package), one graph chosen from a ``lambda1`` sweep.

    The frequentist comparison point of VTI sec. 5.2 (Fig. 3, Table 1). For each
    ``lambda1`` in ``num_lambdas`` log-spaced values over [``lambda_min``,
    ``lambda_max``], ``DagmaNonlinear(DagmaMLP([d, hidden, 1])).fit(X, lambda1,
    w_threshold=...)`` is run from the same seed on ``problem.observations()``;
    its thresholded graph is made acyclic if needed (see below). One graph is
    then kept according to ``selection``:

    * ``"oracle-f1"`` (default, as the VTI authors' code): the graph with the
      best F1 against the problem's TRUE graph (ties: the smallest lambda).
      This uses the answer to pick the answer, so its scores are optimistic,
      an upper bound on what DAGMA achieves without the truth; it reproduces
      the paper's DAGMA numbers.
    * ``"bic"``: honest, without the truth. Each graph is scored by
      ``n sum_j log(mse_j) + log(n) |E|``: ``mse_j`` are node j's mean squared
      residuals under DAGMA's own fitted MLPs with the first-layer weights of
      the removed (sub-threshold) edges set to zero, i.e. a Gaussian with one
      variance per node, and one degree of freedom per edge (counting all
      ``hidden`` first-layer weights of an edge would favour the empty graph
      at small n). No refit: the fit's L1 shrinkage also raises the residuals
      of large lambdas. The lowest score wins (ties: the smallest lambda).

    DAGMA's threshold can leave a directed cycle (rarely); the weakest edge
    lying on a cycle is then removed, repeatedly, until the graph is acyclic
    (the removed edges are listed in the diagnostics).

    ``bias``: the paper (App. F.5) says no bias, the authors' code uses
    ``bias=True``; the default is the paper's. (``DagmaMLP(bias=False)`` fails
    in dagma 1.1.1 at its zero-initialisation of the missing bias, so the model
    is built with biases that are then removed before fitting: the same model.)
    The package's own progress bar is shown per fit when the context's ``progress`` is set.
    With a time budget the lambdas share it equally (see the module docstring).
    """

    #: Size of the lambda1 sweep (None: from the profile; 10 in VTI App. F.3).
    num_lambdas: int | None = None
    lambda_min: float = 1e-3
    lambda_max: float = 1.0
    #: Hidden units of each node's MLP (DagmaMLP dims [d, hidden, 1]).
    hidden: int = 10
    bias: bool = False
    #: Edges whose strength (L2 norm of the first-layer weights of i in j's MLP) is below this are dropped.
    w_threshold: float = 0.1
    selection: str = "oracle-f1"
    #: DagmaNonlinear.fit's T: number of central-path stages (mu shrinks by mu_factor after each).
    num_stages: int | None = None
    #: Adam steps of each stage but the last (fit's warm_iter) and of the last (fit's max_iter); with a time
    #: budget only their proportion counts (the stages' shares of a lambda's time).
    warm_iter: int | None = None
    max_iter: int | None = None
    lr: float | None = None
    #: L2 penalty on all MLP parameters (fit's lambda2; the package default).
    lambda2: float = 0.005
    mu_init: float = 0.1
    mu_factor: float = 0.1

    profiles: ClassVar[dict[str, dict[str, Any]]] = _PROFILES

    def finalise(self, problem: Problem) -> Method:
        """Check the resolved options for sense; integers and floats are normalised to their types."""
        if self.selection not in SELECTIONS:
            raise ValueError(f"{self.name}: unknown selection {self.selection!r}; valid: {', '.join(SELECTIONS)}")
        counts = {}
        for key in ("num_lambdas", "hidden", "num_stages", "warm_iter", "max_iter"):
            value = getattr(self, key)
            if value is None or int(value) != value or int(value) <= 0:
                raise ValueError(f"{self.name}: {key} must be a positive integer, got {value}")
            counts[key] = int(value)
        if not 0 < self.lambda_min <= self.lambda_max < math.inf:
            raise ValueError(
                f"{self.name}: 0 < lambda_min <= lambda_max required, got {self.lambda_min}, {self.lambda_max}"
            )
        for key in ("lr", "mu_init"):
            value = getattr(self, key)
            if value is None or not 0 < float(value) < math.inf:
                raise ValueError(f"{self.name}: {key} must be positive, got {value}")
        if not 0 < self.mu_factor <= 1:
            raise ValueError(f"{self.name}: mu_factor must lie in (0, 1], got {self.mu_factor}")
        if self.w_threshold < 0 or self.lambda2 < 0:
            raise ValueError(f"{self.name}: w_threshold and lambda2 must be >= 0")
        floats = {
            key: float(getattr(self, key))
            for key in ("lambda_min", "lambda_max", "w_threshold", "lr", "lambda2", "mu_init", "mu_factor")
        }
        return dataclasses.replace(self, **counts, **floats)

    @property
    def lambdas(self) -> list[float]:
        """The ``lambda1`` values swept, smallest first."""
        assert self.num_lambdas is not None, "resolve the method first"
        return np.logspace(math.log10(self.lambda_min), math.log10(self.lambda_max), self.num_lambdas).tolist()

    @property
    def stage_steps(self) -> list[int]:
        """Adam steps of each central-path stage of one fit (the last is ``max_iter``)."""
        assert self.num_stages is not None and self.warm_iter is not None and self.max_iter is not None
        return [self.warm_iter] * (self.num_stages - 1) + [self.max_iter]

    def supports(self, problem: Problem) -> str | None:
        """DAG problems (``suite.graphs.dag.DAGProblem``) with a true graph (oracle selection); needs ``dagma``."""
        if not isinstance(problem, DAGProblem):
            return NOT_DAG_REASON
        if self.selection == "oracle-f1" and problem.true_adjacency is None:
            return "selection='oracle-f1' picks lambda by F1 against the true graph, which is unknown: use 'bic'"
        try:
            import dagma.nonlinear  # noqa: F401
        except ImportError:
            return INSTALL_HINT
        return None

    def run(self, problem: Problem, context: RunContext) -> Result:
        """Fit DAGMA for every lambda of the sweep, keep one graph and return it as a point mass."""
        self.require_support(problem)
        assert isinstance(problem, DAGProblem)
        dtype, device = context.dtype, context.device
        with context.timer.phase("setup"):
            x = problem.observations().to(device, dtype)
            truth = problem.true_adjacency
        lambdas = self.lambdas
        fits: list[dict[str, Any]] = []
        estimate = _Estimate(problem, fits, truth, self.selection)
        # The package runs its own Adam loop: the run's loop is advanced from its progress bar's updates.
        loop = context.loop(f"dagma {problem.name}", planned=len(lambdas) * sum(self.stage_steps))
        sweep = _Sweep(loop, estimate)
        with loop, context.timer.phase("train"), _isolated_global_state(device):
            for position, lambda1 in enumerate(lambdas):
                plan = self._stage_plan(position) if loop.budgeted else None
                try:
                    fits.append(_fit(x, lambda1, self, context, sweep, plan))
                except _BudgetSpent:
                    break
                loop.snapshot(estimate)
                if plan is not None and position < len(lambdas) - 1 and loop.finished():
                    break
        if not fits:
            raise BudgetTooSmall(
                f"no lambda of the sweep finished (the first of {len(lambdas)} had 1/{len(lambdas)} of the budget)"
            )

        chosen = _select(fits, truth, self.selection)
        graph = fits[chosen]["graph"]
        scores = [fit["bic"] for fit in fits]
        diagnostics: dict[str, Any] = {
            "selection": self.selection,
            "oracle": self.selection == "oracle-f1",
            "chosen_lambda": lambdas[chosen],
            "chosen_position": chosen,
            "lambdas": lambdas,
            "lambdas_finished": len(fits),
            "adam_steps": loop.iteration if loop.budgeted else None,
            "edge_counts": [int(fit["graph"].sum()) for fit in fits],
            "bic": scores,
            "graphs": [fit["graph"].to(torch.int64).tolist() for fit in fits],
            "graph": graph.to(torch.int64).tolist(),
            "weights": fits[chosen]["weights"].tolist(),
            "removed_cycle_edges": [fit["removed"] for fit in fits],
            "bias": self.bias,
            "dagma_version": _dagma_version(),
        }
        if self.selection == "oracle-f1":
            assert truth is not None
            diagnostics["f1"] = [edge_f1(fit["graph"][None], truth.cpu()) for fit in fits]
        try:
            model = problem.model_index_of(graph[None]).cpu()
        except ValueError as error:
            return Result.failed(f"DAGMA's graph is not a model of {problem.name}: {error}", diagnostics=diagnostics)
        model_probs = ModelProbs(index=model, prob=torch.ones(1, dtype=torch.float64))
        loop.snapshot(lambda: model_probs)
        return Result(
            model_probs=model_probs,
            draws=Draws(model_index=model, theta=torch.zeros(1, problem.dim_max, dtype=torch.float64)),
            metrics_scope="task",
            diagnostics=diagnostics,
        )

    def _stage_plan(self, position: int) -> list[tuple[str, float]]:
        """Milestones (name, fraction of the budget) ending each stage of lambda ``position`` (equal shares)."""
        steps = self.stage_steps
        n = len(self.lambdas)
        plan = []
        for stage in range(len(steps)):
            share = sum(steps[: stage + 1]) / sum(steps)
            name = f"lambda_{position}" if stage == len(steps) - 1 else f"lambda_{position}_stage_{stage}"
            plan.append((name, min(1.0, (position + share) / n)))
        return plan


# ------------------------------------------------------------------ pieces
class _StageEnd(Exception):
    """A budgeted stage reached its milestone: it ends here."""


class _BudgetSpent(Exception):
    """The time budget was spent before the lambda being fitted finished."""


def _select(fits: list[dict[str, Any]], truth: Tensor | None, selection: str) -> int:
    """Position of the graph ``selection`` keeps among ``fits`` (first best: ties go to the smallest lambda)."""
    if selection == "oracle-f1":
        assert truth is not None
        return int(np.argmax([edge_f1(fit["graph"][None], truth.cpu()) for fit in fits]))
    return int(np.argmin([fit["bic"] for fit in fits]))


@dataclass
class _Estimate:
    """The running estimate: the graph ``selection`` picks among the fits finished so far, as a point mass."""

    problem: DAGProblem
    fits: list[dict[str, Any]]
    truth: Tensor | None
    selection: str
    _cache: tuple[int, ModelProbs | None] | None = None

    def __call__(self) -> ModelProbs | None:
        if not self.fits:
            return None
        if self._cache is None or self._cache[0] != len(self.fits):
            graph = self.fits[_select(self.fits, self.truth, self.selection)]["graph"]
            try:
                model = self.problem.model_index_of(graph[None]).cpu()
                probs = ModelProbs(index=model, prob=torch.ones(1, dtype=torch.float64))
            except ValueError:
                probs = None  # not a model of the problem: the run fails at the end
            self._cache = (len(self.fits), probs)
        return self._cache[1]


@dataclass
class _Sweep:
    """Advances the run's loop by the Adam steps of the whole sweep (snapshots included) and ends budgeted stages.

    ``update(n)`` is called by the package's progress bar after every step. Without a budget the bar's own
    count is followed (a fit converged early jumps to its planned end); with one, every call is one step.
    """

    loop: RunLoop
    estimate: Callable[[], ModelProbs | None]
    #: The milestone ending the budgeted stage in progress (None without a budget).
    stage_end: tuple[str, float] | None = None

    def update(self, n: int) -> None:
        self.loop.advance(1 if self.loop.budgeted else int(n), self.estimate)
        if self.stage_end is not None:
            name, fraction = self.stage_end
            if self.loop.reached(name, 0, fraction):
                raise _StageEnd


def _fit(
    x: Tensor,
    lambda1: float,
    method: DAGMA,
    context: RunContext,
    sweep: _Sweep,
    plan: list[tuple[str, float]] | None,
) -> dict[str, Any]:
    """One DAGMA fit: thresholded weights, acyclic graph, removed edges and the graph's BIC-like score.

    Without ``plan`` the package's ``fit`` runs the profile's iteration counts; with one (budgeted) its stage
    loop is followed with each stage ending at its milestone (:class:`_BudgetSpent` if the budget is spent).
    """
    from dagma import nonlinear

    n, d = x.shape
    dtype, device = context.dtype, context.device
    torch.manual_seed(context.seed)  # the same initial MLPs for every lambda
    np.random.seed(context.seed % 2**32)
    model = nonlinear.DagmaMLP(dims=[d, method.hidden, 1], bias=True, dtype=dtype)
    if not method.bias:
        _remove_biases(model)
    model.to(device)
    model.I = model.I.to(device)  # the package keeps its identity matrix outside the module's buffers
    label = f"dagma lambda1={lambda1:.3g}"
    with _package_progress(nonlinear, label, False, sweep.update):  # the run's loop shows the steps
        fitter = nonlinear.DagmaNonlinear(model, dtype=dtype)
        if plan is None:
            weights = fitter.fit(
                x,
                lambda1=lambda1,
                lambda2=method.lambda2,
                T=method.num_stages,
                mu_init=method.mu_init,
                mu_factor=method.mu_factor,
                warm_iter=method.warm_iter,
                max_iter=method.max_iter,
                lr=method.lr,
                w_threshold=method.w_threshold,
            )
        else:
            weights = _budgeted_fit(nonlinear, fitter, x, lambda1, method, context, sweep, plan)
    weights = torch.as_tensor(weights, dtype=torch.float64)
    graph, removed = break_cycles(weights)
    with torch.no_grad():
        # Score the kept graph with the fitted MLPs: first-layer weights (rows j * hidden + h, columns i) of dropped
        # edges i -> j are zeroed, so each node's prediction uses only its parents in ``graph``.
        keep = graph.T.to(device=device, dtype=dtype)[:, None, :]
        model.fc1.weight.view(d, -1, d).mul_(keep)
        mse = ((x - model(x)) ** 2).mean(0).clamp_min(torch.finfo(dtype).tiny)
        bic = n * float(torch.log(mse).sum()) + math.log(n) * int(graph.sum())
    return {"weights": weights.where(graph, 0.0), "graph": graph, "removed": removed, "bic": bic}


def _budgeted_fit(
    nonlinear: Any,
    fitter: Any,
    x: Tensor,
    lambda1: float,
    method: DAGMA,
    context: RunContext,
    sweep: _Sweep,
    plan: list[tuple[str, float]],
) -> np.ndarray:
    """``DagmaNonlinear.fit``'s stage loop (dagma 1.1.1) with each stage ending at its milestone in ``plan``.

    As in the package: mu shrinks by ``mu_factor`` after each stage; a stage whose iterate leaves the M-matrix
    domain restarts from the stage's start with half the learning rate (kept for later stages) and decay, and
    is given up below lr 1e-10. After every stage but the sweep's very last, a spent budget stops the sweep.
    """
    torch.set_default_dtype(context.dtype)
    fitter.X = x.type(context.dtype)
    fitter.checkpoint = PACKAGE_CHECKPOINT
    mu, lr = method.mu_init, method.lr
    with nonlinear.tqdm(total=None) as pbar:
        for stage, stage_end in enumerate(plan):
            if context.replay is not None and stage_end[0] not in context.replay:
                # A timed run records every stage end it reached before its stop: these counts are not such a run's.
                raise ValueError(f"replayed counts have no {stage_end[0]!r}: not the counts of a timed dagma run")
            success, s_cur = False, PACKAGE_S
            model_copy = copy.deepcopy(fitter.model)
            lr_decay = False
            sweep.stage_end = stage_end
            try:
                while success is False:
                    success = fitter.minimize(
                        BUDGETED_STAGE_CAP, lr, lambda1, method.lambda2, mu, s_cur, lr_decay, pbar=pbar
                    )
                    if success is False:
                        fitter.model.load_state_dict(model_copy.state_dict().copy())
                        lr *= 0.5
                        lr_decay = True
                        if lr < 1e-10:
                            break
                        s_cur = 1
            except _StageEnd:
                pass
            finally:
                sweep.stage_end = None
            mu *= method.mu_factor
            if stage < len(plan) - 1 and sweep.loop.finished():
                raise _BudgetSpent
    weights = fitter.model.fc1_to_adj()
    weights[np.abs(weights) < method.w_threshold] = 0
    return weights


def break_cycles(weights: Tensor) -> tuple[Tensor, list[list[int]]]:
    """The graph of the nonzero ``weights`` [d, d] made acyclic by dropping the weakest edge on a cycle, repeatedly.

    Returns the bool adjacency and the removed edges ``[i, j]`` in removal order.
    """
    graph = weights != 0
    removed: list[list[int]] = []
    while not bool(is_acyclic(graph[None])[0]):
        reach = transitive_closure(graph[None])[0]
        on_cycle = graph & reach.T  # edge i -> j with a path back from j to i (self-loops included)
        strength = torch.where(on_cycle, weights.abs(), torch.full_like(weights, math.inf))
        i, j = divmod(int(strength.argmin()), graph.shape[-1])
        graph[i, j] = False
        removed.append([i, j])
    return graph, removed


def _remove_biases(model: torch.nn.Module) -> None:
    """Drop the bias parameters of a DagmaMLP (its layers then compute without them)."""
    model.fc1.bias = None
    for layer in model.fc2:
        layer.bias = None


@contextlib.contextmanager
def _package_progress(module: Any, label: str, enabled: bool, on_update: Callable[[int], None]) -> Iterator[None]:
    """Label the package's per-fit progress bar, or silence it, and call ``on_update(n)`` after each update.

    ``module.tqdm`` is restored afterwards.
    """
    original = module.tqdm

    class Bar(original):  # type: ignore[misc, valid-type]
        def update(self, n: float | None = 1) -> bool | None:
            shown = super().update(n)
            on_update(1 if n is None else int(n))
            return shown

    module.tqdm = functools.partial(Bar, desc=label, leave=False, disable=not enabled or None)
    try:
        yield
    finally:
        module.tqdm = original


@contextlib.contextmanager
def _isolated_global_state(device: torch.device) -> Iterator[None]:
    """Run with torch's and numpy's global RNGs forked and torch's default dtype restored afterwards.

    The package draws its initial weights from the global torch RNG and sets
    ``torch.set_default_dtype`` globally; neither may leak into the caller.
    """
    default_dtype = torch.get_default_dtype()
    numpy_state = np.random.get_state()
    devices = [device] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        torch.set_default_dtype(default_dtype)
        np.random.set_state(numpy_state)


def _dagma_version() -> str | None:
    """Installed dagma version, or None."""
    try:
        return version("dagma")
    except PackageNotFoundError:
        return None
