"""SMC evidence against exact conjugate evidence (linear-Gaussian DAG models)."""

import numpy as np
import pytest
import torch

from problems.linear_dag.problem import LinearDAG
from suite.reference.jax_target import JaxTarget
from suite.reference.smc import SMCSettings, StudentTInitial, combine_runs, run_smc


@pytest.fixture(scope="module")
def dag() -> LinearDAG:
    return LinearDAG(num_nodes=3, num_samples=50, data_seed=3)


def test_combine_runs_pools_on_the_natural_scale() -> None:
    log_z = np.log(np.array([[1.0, 3.0], [2.0, 2.0]]))
    pooled, se = combine_runs(log_z)
    np.testing.assert_allclose(pooled, np.log([2.0, 2.0]))
    # sd(Z) / (sqrt(R) mean Z): sd(1, 3) = sqrt(2), so sqrt(2) / (sqrt(2) * 2) = 0.5; equal runs have zero error.
    np.testing.assert_allclose(se, [0.5, 0.0])


@pytest.mark.slow
def test_smc_evidence_agrees_with_exact_evidence(dag: LinearDAG) -> None:
    """Several models, tempering from the prior: |error| within 4 reported standard errors (+ 0.02 for the SE's
    own uncertainty with 6 runs)."""
    models = np.array([0, 3, 10, 24])
    out = run_smc(JaxTarget.of(dag), models, None, SMCSettings(num_particles=1000, num_runs=6), seed=0)
    assert out.finished.all()
    log_z, se = combine_runs(out.log_z)
    exact = (dag.log_evidence() + dag.log_model_prior(torch.arange(dag.num_models)))[models].numpy()
    assert np.all(np.abs(log_z - exact) <= 4 * se + 0.02), (log_z - exact, se)
    assert np.all(se < 0.1)


@pytest.mark.slow
def test_student_t_start_gives_the_same_evidence(dag: LinearDAG) -> None:
    """Tempering from a t fitted to exact posterior draws (the path for problems without a prior)."""
    model = int(dag.reference_model_probs().top(1).index[0])
    draws = dag.reference_draws(40_000, torch.Generator().manual_seed(0))
    theta = draws.theta[draws.model_index == model][:2000].numpy()
    mask = dag.mask(torch.tensor([model]))[0].numpy()
    theta[:, ~mask] = np.random.default_rng(0).standard_normal((len(theta), (~mask).sum()))
    initial = StudentTInitial.fit(theta[None])
    out = run_smc(JaxTarget.of(dag), np.array([model]), initial, SMCSettings(num_particles=500, num_runs=6), seed=1)
    log_z, se = combine_runs(out.log_z)
    exact = float(dag.log_evidence()[model] + dag.log_model_prior(torch.tensor([model]))[0])
    assert abs(log_z[0] - exact) <= 4 * se[0] + 0.02


@pytest.mark.slow
def test_student_t_density_is_normalised() -> None:
    """Importance check: the mean of t-density / N(0, 4I)-density ratio over N(0, 4I) draws is 1."""
    from suite.core.backend import jax_backend

    jnp = jax_backend().jnp
    import jax

    initial = StudentTInitial(np.zeros((1, 2)), np.eye(2)[None] * 0.7, df=5.0)
    x = np.random.default_rng(1).standard_normal((200_000, 2)) * 2.0
    log_t = np.asarray(jax.vmap(lambda v: initial.log_prob(0, v))(jnp.asarray(x)))
    log_q = -0.5 * (x**2).sum(1) / 4.0 - np.log(2 * np.pi * 4.0)
    ratio = np.exp(log_t - log_q)
    assert abs(ratio.mean() - 1.0) < 4 * ratio.std() / np.sqrt(len(x))
