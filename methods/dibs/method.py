"""``dibs``: DiBS (Lorch et al. 2021), BayesDAG's main comparator, through its authors' library ``dibs-lib``.

Marginal DiBS: Stein variational gradient descent (SVGD) on latent particles Z = (U, V), each of which stands for
a graph through edge probabilities sigmoid(alpha u_i . v_j); alpha and the acyclicity penalty's weight beta grow
linearly with the step (``alpha_linear``, ``beta_linear``). The likelihood's gradient is the score-function
estimate over hard graphs sampled from the particles (``n_grad_mc_samples``), so the target is only ever
evaluated on hard graphs. The final graphs are the particles' alpha -> infinity limits (an edge where
u_i . v_j > 0); cyclic ones are dropped and counted (``diagnostics["cyclic_particles"]``), and a run whose
particles are all cyclic fails.

``target="problem"`` (default): the problem's own posterior from its per-node score table
(:class:`suite.graphs.dag.DecomposableScore`), so DiBS samples exactly the posterior it is scored against;
``target="library"``: the library's ``dibs.models.BGe`` and soft graph prior out of the box (not the scored one).
q(G) (``weighting``): ``"empirical"`` (default, DiBS) counts the acyclic particles' graphs; ``"mixture"`` (DiBS+)
weights each distinct graph by its unnormalised posterior. Settings: BayesDAG App. D (Table 4, linear d = 5).

JAX runs on the CPU here whatever ``--device`` says; the record's device field says what torch used. dibs-lib is an
optional dependency; without it the method reports itself unsupported.
Details: docs/methods.md, "dibs and bges: BayesDAG's comparators (`methods/dibs/`, `methods/bges/`)".
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from suite.core.context import RunContext
from suite.core.method import Method, Result
from suite.core.problem import Problem
from suite.core.registry import register_method
from suite.core.types import ModelProbs
from suite.graphs.dag import NOT_DAG_REASON, DAGProblem, DecomposableScore, graph_type, is_acyclic

INSTALL_HINT = 'dibs-lib is not installed: pip install -e ".[dibs]" && pip install --no-deps dibs-lib==1.3.3'
TARGETS = ("problem", "library")
WEIGHTINGS = ("empirical", "mixture")
#: BayesDAG Table 4, linear d = 5: the kernel bandwidth h by graph family.
KERNEL_H = {"er": 5.0, "sf": 15.0}


def library_version() -> str | None:
    """The installed dibs-lib version, or None when it cannot be imported."""
    try:
        import dibs.inference  # noqa: F401
    except ImportError:
        return None
    return importlib.metadata.version("dibs-lib")


class _BudgetSpent(Exception):
    """Raised from the library's callback to end SVGD when the run's time budget is spent."""


@register_method("dibs")
@dataclass(frozen=True)
class DiBS(Method):
    """Marginal DiBS (SVGD over latent graph embeddings) via dibs-lib; q(G) from its acyclic particles."""

    num_particles: int | None = None
    #: SVGD steps when the run has no time budget.
    num_steps: int | None = None
    #: Steps per compiled chunk: the granularity of the time budget, progress and snapshots.
    chunk_steps: int | None = None
    #: Slope of alpha (alpha = alpha_linear * step); None: the profile's, so that every planned run ends at alpha
    #: 200 as the paper's 0.02 x 10,000 steps does (smoke 1.0 x 200, quick 0.1 x 2,000).
    alpha_linear: float | None = None
    beta_linear: float = 1.0
    tau: float = 0.1
    learning_rate: float = 0.01
    #: Kernel bandwidth h (None: 15 on SF problems, 5 otherwise).
    kernel_h: float | None = None
    n_grad_mc_samples: int = 128
    n_acyclicity_mc_samples: int = 32
    target: str = "problem"
    weighting: str = "empirical"

    profiles: ClassVar[dict[str, dict[str, Any]]] = {
        "smoke": {"num_particles": 8, "num_steps": 200, "chunk_steps": 20, "alpha_linear": 1.0},
        "quick": {"num_particles": 20, "num_steps": 2_000, "chunk_steps": 100, "alpha_linear": 0.1},
        "paper": {"num_particles": 20, "num_steps": 10_000, "chunk_steps": 500, "alpha_linear": 0.02},
    }
    #: A comparator of BayesDAG's study: ``--methods all`` plans it only in the paper profile.
    planned_profiles: ClassVar[tuple[str, ...] | None] = ("paper",)

    def finalise(self, problem: Problem) -> Method:
        """Positive counts and rates, known target and weighting; the kernel bandwidth by graph family."""
        counts = {}
        for key in ("num_particles", "num_steps", "chunk_steps", "n_grad_mc_samples", "n_acyclicity_mc_samples"):
            value = getattr(self, key)
            if value is None or isinstance(value, bool) or int(value) != value or int(value) <= 0:
                raise ValueError(f"{self.name}: {key} must be a positive integer, got {value}")
            counts[key] = int(value)
        if counts["num_particles"] < 2:
            raise ValueError(f"{self.name}: num_particles must be at least 2 (SVGD's kernel), got {self.num_particles}")
        for key in ("alpha_linear", "beta_linear", "tau", "learning_rate"):
            value = getattr(self, key)
            if not (isinstance(value, int | float) and value > 0):
                raise ValueError(f"{self.name}: {key} must be a positive number, got {value}")
        alpha_linear = float(self.alpha_linear)
        if self.target not in TARGETS:
            raise ValueError(f"{self.name}: unknown target {self.target!r}; valid: {', '.join(TARGETS)}")
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"{self.name}: unknown weighting {self.weighting!r}; valid: {', '.join(WEIGHTINGS)}")
        kernel_h = self.kernel_h
        if kernel_h is None:
            kernel_h = KERNEL_H["sf" if graph_type(problem) == "sf" else "er"]
        elif not kernel_h > 0:
            raise ValueError(f"{self.name}: kernel_h must be positive, got {kernel_h}")
        return dataclasses.replace(self, **counts, alpha_linear=alpha_linear, kernel_h=float(kernel_h))

    def supports(self, problem: Problem) -> str | None:
        """Enumerated DAG problems with per-node scores (for the default target), when dibs-lib is installed."""
        if not isinstance(problem, DAGProblem):
            return NOT_DAG_REASON
        if self.target == "problem" and not isinstance(problem, DecomposableScore):
            return (
                "the problem has no closed-form per-node scores (suite.graphs.dag.DecomposableScore) "
                "for target 'problem'"
            )
        if problem.num_models is None:
            return "q(G) is scored over an enumerated DAG space"
        if library_version() is None:
            return INSTALL_HINT
        return None

    def run(self, problem: Problem, context: RunContext) -> Result:
        """SVGD in chunks of ``chunk_steps`` until ``num_steps`` or the time budget; q(G) from the final particles."""
        self.require_support(problem)
        assert isinstance(problem, DAGProblem)
        import jax
        import jax.numpy as jnp
        from dibs.inference import MarginalDiBS

        with context.timer.phase("setup"):
            # JAX's default float: float32, or float64 where another part of the process enabled x64 (the
            # library's internals follow that default, and mixing the two breaks its lax.cond branches).
            data = jnp.asarray(problem.observations().to("cpu", torch.float64).numpy(), dtype=float)
            graph_model, likelihood, log_joint = self._model(problem, data)
            sampler = MarginalDiBS(
                x=data,
                graph_model=graph_model,
                likelihood_model=likelihood,
                kernel_param={"h": float(self.kernel_h)},
                optimizer_param={"stepsize": float(self.learning_rate)},
                alpha_linear=float(self.alpha_linear),
                beta_linear=float(self.beta_linear),
                tau=float(self.tau),
                n_grad_mc_samples=int(self.n_grad_mc_samples),
                n_acyclicity_mc_samples=int(self.n_acyclicity_mc_samples),
            )
            key = jax.random.PRNGKey(context.seed)

        chunk = int(self.chunk_steps)
        latest: dict[str, Any] = {"steps": 0, "particles": None}

        def estimate() -> ModelProbs:
            graphs = _graphs(sampler, latest["particles"])
            return self._model_probs(problem, graphs, log_joint, sampler)[0]

        # The package runs its own SVGD loop: the run's loop is advanced from its callback after every chunk.
        loop = context.loop(f"dibs {problem.name}", planned=int(self.num_steps))

        def after_chunk(*, dibs: Any, t: int, zs: Any) -> None:
            zs.block_until_ready()  # JAX dispatches asynchronously: the clock must see the finished chunk
            latest["steps"], latest["particles"] = int(t), zs
            scorable = bool(np.isfinite(np.asarray(zs)).all()) and bool(is_acyclic(_adjacency(sampler, zs)).any())
            loop.advance(int(t) - loop.iteration, estimate if scorable else None)
            if loop.budgeted and loop.finished():
                raise _BudgetSpent

        started = time.perf_counter()
        with loop, context.timer.phase("sample"):
            try:
                sampler.sample(
                    key=key,
                    n_particles=int(self.num_particles),
                    steps=10**12 if loop.budgeted else int(self.num_steps),
                    callback=after_chunk,
                    callback_every=chunk,
                )
            except _BudgetSpent:
                pass
        particles = latest["particles"]
        diagnostics: dict[str, Any] = {
            "steps": latest["steps"],
            "particles": int(self.num_particles),
            "seconds": time.perf_counter() - started,
            "dibs_lib_version": library_version(),
            "jax_version": jax.__version__,
            "jax_device": str(jax.devices()[0]),
        }
        if particles is None:
            return Result.failed("the time budget ended before the first chunk of SVGD steps", diagnostics=diagnostics)
        if not bool(np.isfinite(np.asarray(particles)).all()):
            return Result.failed("SVGD diverged: the latent particles are not finite", diagnostics=diagnostics)
        graphs = _graphs(sampler, particles)
        model_probs, cyclic = self._model_probs(problem, graphs, log_joint, sampler)
        diagnostics["cyclic_particles"] = cyclic
        diagnostics["distinct_graphs"] = int(model_probs.index.shape[0]) if model_probs is not None else 0
        if model_probs is None:
            return Result.failed(f"all {cyclic} particles are cyclic graphs", diagnostics=diagnostics)
        context.snapshot(latest["steps"], lambda: model_probs)
        return Result(model_probs=model_probs, diagnostics=diagnostics)

    def _model(self, problem: Problem, data: Any) -> tuple[Any, Any, Any]:
        """(graph model, likelihood model, log joint of a hard graph or None) for the ``target``."""
        import jax.numpy as jnp
        from dibs.models import BGe, ErdosReniDAGDistribution, ScaleFreeDAGDistribution

        d = problem.num_nodes
        if self.target == "library":
            family = ScaleFreeDAGDistribution if graph_type(problem) == "sf" else ErdosReniDAGDistribution
            return family(n_vars=d, n_edges_per_node=1), BGe(n_vars=d), None
        assert isinstance(problem, DecomposableScore)
        scores = problem.local_log_scores().to("cpu", torch.float64)
        # A per-node shift changes no posterior ratio and keeps float32 sums exact to ~1e-4 nats; the sets that
        # hold the node itself (-inf) are never indexed, because the hard graphs' diagonals are masked below.
        finite = torch.where(torch.isfinite(scores), scores, torch.nan)
        shifted = scores - torch.nan_to_num(finite, nan=-torch.inf).amax(-1, keepdim=True)
        table = jnp.asarray(torch.nan_to_num(shifted, neginf=0.0).numpy(), dtype=float)
        bits = jnp.asarray((1 << np.arange(d)).astype(np.int32))
        nodes = jnp.arange(d)
        off_diagonal = 1 - jnp.eye(d, dtype=jnp.int32)

        def log_joint(g: Any, theta: Any, x: Any, interv_targets: Any, rng: Any) -> Any:
            parents = (jnp.round(g).astype(jnp.int32) * off_diagonal * bits[:, None]).sum(0)
            return table[nodes, parents].sum()

        return _FlatGraphPrior(), _ScoreTable(log_joint), log_joint

    def _model_probs(
        self, problem: Problem, graphs: np.ndarray, log_joint: Any, sampler: Any
    ) -> tuple[ModelProbs | None, int]:
        """q(G) over the acyclic graphs among ``graphs`` ``[P, d, d]`` (None if none), and the cyclic count."""
        assert isinstance(problem, DAGProblem)
        adjacency = torch.as_tensor(np.array(graphs)).to(torch.bool)  # [P, d, d]
        acyclic = is_acyclic(adjacency)
        cyclic = int((~acyclic).sum())
        if not bool(acyclic.any()):
            return None, cyclic
        kept = adjacency[acyclic]
        if self.weighting == "empirical":
            return ModelProbs.from_indices(problem.model_index_of(kept).cpu()), cyclic
        unique = torch.unique(kept, dim=0)
        if log_joint is not None:
            import jax
            import jax.numpy as jnp

            values = jax.vmap(lambda g: log_joint(g, None, None, None, None))(jnp.asarray(unique.numpy(), jnp.int32))
            log_weights = torch.as_tensor(np.array(values), dtype=torch.float64)
        else:
            mixture = sampler.get_mixture(np.asarray(unique.numpy(), dtype=np.int32))
            log_weights = torch.as_tensor(np.array(mixture.logp), dtype=torch.float64)
        probs = torch.softmax(log_weights, 0)
        return ModelProbs(problem.model_index_of(unique).cpu(), probs), cyclic


class _FlatGraphPrior:
    """A soft-graph prior of zero: under ``target="problem"`` the score table carries the graph prior."""

    def unnormalized_log_prob_soft(self, *, soft_g: Any) -> Any:
        """0 for every soft graph."""
        return 0.0 * soft_g.sum()


class _ScoreTable:
    """The problem's per-node score table in the library's likelihood interface (hard graphs only)."""

    def __init__(self, log_joint: Any) -> None:
        self.log_joint = log_joint

    def interventional_log_marginal_prob(self, g: Any, theta: Any, x: Any, interv_targets: Any, rng: Any) -> Any:
        """log p(G) + log p(D | G) up to a constant, for a hard graph ``g``."""
        return self.log_joint(g, theta, x, interv_targets, rng)


def _graphs(sampler: Any, particles: Any) -> np.ndarray:
    """The particles' alpha -> infinity graphs, int ``[P, d, d]``."""
    return np.asarray(sampler.particle_to_g_lim(particles))


def _adjacency(sampler: Any, particles: Any) -> torch.Tensor:
    """The particles' alpha -> infinity graphs as a bool tensor ``[P, d, d]``."""
    return torch.as_tensor(np.array(_graphs(sampler, particles))).to(torch.bool)
