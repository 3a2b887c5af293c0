"""Bridge-sampling evidence against known normalisers: a correlated Gaussian and conjugate linear-DAG models."""

import hashlib
import json
import math

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from problems.linear_dag.problem import LinearDAG
from suite.reference.bridge import (
    BridgeSettings,
    GaussianMixture,
    batched_log_joint,
    bridge_log_evidence,
    fit_gaussian_mixture,
    model_log_density,
    optimal_bridge,
)
from suite.reference.engine import EngineSettings
from suite.reference.jax_target import JaxTarget
from suite.store.references import _key

SMALL = BridgeSettings(num_components=2, num_proposal=3000, em_iters=50, em_tol=1e-4)


def correlated_gaussian(d: int = 4, seed: int = 0) -> tuple[np.ndarray, float, object]:
    """Cholesky factor of a random covariance, log of the normaliser of exp(3.7 - x' P x / 2), the log density."""
    a = np.random.default_rng(seed).standard_normal((d, d))
    cov = a @ a.T / d + 0.1 * np.eye(d)
    chol, prec = np.linalg.cholesky(cov), np.linalg.inv(cov)

    def log_density(x: np.ndarray) -> np.ndarray:
        return 3.7 - 0.5 * np.einsum("ni,ij,nj->n", x, prec, x)

    log_z = 3.7 + 0.5 * d * math.log(2 * math.pi) + np.log(np.diag(chol)).sum()
    return chol, float(log_z), log_density


def ar1_chains(chol: np.ndarray, chains: int, steps: int, rho: float, seed: int) -> np.ndarray:
    """Autocorrelated draws ``[chains, steps, d]`` with stationary law N(0, chol chol')."""
    rng = np.random.default_rng(seed)
    z = np.empty((chains, steps, chol.shape[0]))
    z[:, 0] = rng.standard_normal(z[:, 0].shape)
    for t in range(1, steps):
        z[:, t] = rho * z[:, t - 1] + math.sqrt(1 - rho**2) * rng.standard_normal(z[:, t].shape)
    return z @ chol.T


def test_mixture_density_matches_scipy() -> None:
    rng = np.random.default_rng(0)
    means, chols = rng.standard_normal((2, 3)), np.stack([np.eye(3), np.diag([0.5, 2.0, 1.0])])
    chols[1, 2, 0] = 0.3
    mix = GaussianMixture(np.array([0.3, 0.7]), means, chols)
    x = rng.standard_normal((5, 3))
    parts = zip(mix.weights, means, chols, strict=True)
    expected = np.log(sum(w * multivariate_normal(m, c @ c.T).pdf(x) for w, m, c in parts))
    np.testing.assert_allclose(mix.log_prob(x), expected, rtol=1e-10)


def test_em_recovers_two_separated_clusters() -> None:
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal((600, 2)) * 0.5 - 4, rng.standard_normal((1400, 2)) + 4])
    mix, info = fit_gaussian_mixture(x, 2, rng)
    order = np.argsort(mix.means[:, 0])
    np.testing.assert_allclose(mix.weights[order], [0.3, 0.7], atol=0.02)
    np.testing.assert_allclose(mix.means[order], [[-4, -4], [4, 4]], atol=0.15)
    assert info["components"] == 2


def test_bridge_is_exact_when_the_proposal_is_the_posterior() -> None:
    log_z, rel_se, _, converged = optimal_bridge(np.full(100, 2.5), np.full(300, 2.5), 100.0)
    assert converged and abs(log_z - 2.5) < 1e-9 and rel_se < 1e-9


def test_bridge_recovers_a_correlated_gaussian_normaliser() -> None:
    chol, exact, log_density = correlated_gaussian()
    draws = ar1_chains(chol, chains=4, steps=600, rho=0.8, seed=0)
    result = bridge_log_evidence(log_density, draws, SMALL, seed=0)
    assert result.diagnostics["converged"] and result.ok(0.1)
    assert abs(result.log_z - exact) <= 4 * result.log_z_se, (result.log_z - exact, result.log_z_se)
    # The effective number of posterior draws reflects the chains' autocorrelation.
    assert result.diagnostics["ess_posterior"] < 0.8 * result.diagnostics["num_posterior"]


def test_bridge_standard_error_is_honest() -> None:
    """Over independent repetitions (autocorrelated chains) the estimates' spread is close to the reported SE."""
    chol, exact, log_density = correlated_gaussian(d=3, seed=2)
    results = [
        bridge_log_evidence(log_density, ar1_chains(chol, 4, 300, rho=0.9, seed=10 + s), SMALL, seed=s)
        for s in range(12)
    ]
    errors = np.array([r.log_z - exact for r in results])
    ses = np.array([r.log_z_se for r in results])
    ratio = errors.std(ddof=1) / ses.mean()
    assert 0.5 < ratio < 2.0, (errors, ses)
    assert abs(errors.mean()) < 4 * ses.mean() / math.sqrt(len(errors))


@pytest.fixture(scope="module")
def dag() -> LinearDAG:
    return LinearDAG(num_nodes=3, num_samples=50, data_seed=3)


@pytest.fixture(scope="module")
def dag_target(dag: LinearDAG) -> tuple[JaxTarget, object]:
    target = JaxTarget.of(dag)
    return target, batched_log_joint(target)


@pytest.mark.parametrize("model", [11, 24])
@pytest.mark.slow
def test_bridge_agrees_with_exact_linear_dag_evidence(dag: LinearDAG, dag_target: tuple, model: int) -> None:
    """Exact posterior draws of one model, its saturated JAX log joint restricted to the active coordinates."""
    target, batched = dag_target
    draws = dag.reference_draws(12_000, torch.Generator().manual_seed(model))
    mask = dag.mask(torch.tensor([model]))[0].numpy()
    theta = draws.theta[draws.model_index == model].numpy()[:, mask][:4000]
    assert len(theta) >= 1000
    result = bridge_log_evidence(model_log_density(target, model, batched), theta[None], SMALL, seed=model)
    exact = float(dag.log_evidence()[model] + dag.log_model_prior(torch.tensor([model]))[0])
    assert abs(result.log_z - exact) <= 4 * result.log_z_se + 1e-3, (result.log_z - exact, result.log_z_se)


def test_engine_settings_and_store_key_record_the_evidence_method() -> None:
    with pytest.raises(ValueError):
        EngineSettings(evidence="laplace")
    assert "evidence" not in EngineSettings().as_dict()
    assert EngineSettings(evidence="bridge").as_dict()["evidence"] == "bridge"
    config = {"factors": [2, 3]}
    old = hashlib.sha256(json.dumps({"name": "p", "config": config}, sort_keys=True).encode()).hexdigest()[:16]
    assert _key("p", config, "smc") == old  # SMC references keep their keys
    assert _key("p", config, "bridge") != old
