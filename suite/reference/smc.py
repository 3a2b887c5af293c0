"""Per-model log evidence by BlackJAX adaptive tempered SMC, vectorised over models and independent runs.

Each run tempers from a normalised initial density q_m (the prior, or a
Student-t fitted to NUTS draws when the problem has no prior) to the
saturated target pi_m(theta) = p(D, theta_m, m) N(theta_inactive; 0, I):
pi_lambda ∝ q_m^(1 - lambda) pi_m^lambda, with lambda chosen adaptively so
that the effective sample size of each step's weights is ``target_ess``.
Particles move by random-walk Metropolis with covariance (2.38^2 / D) times
the particles' weighted covariance. The product of the mean incremental
weights is an unbiased estimate of Z_m = p(D, m); independent runs give its
Monte Carlo error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from suite.core.backend import jax_backend
from suite.reference.jax_target import JaxTarget

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@dataclass(frozen=True)
class SMCSettings:
    """Settings of the adaptive tempered SMC runs."""

    num_particles: int = 2000
    num_runs: int = 5
    target_ess: float = 0.5
    num_mcmc_steps: int = 10
    max_steps: int = 1000
    #: Model-run pairs per compiled batch (bounds memory).
    chunk: int = 64

    def as_dict(self) -> dict[str, Any]:
        """Settings as a JSON-able dict."""
        return dict(self.__dict__)


@dataclass
class StudentTInitial:
    """Multivariate Student-t per model: loc ``[K, D]``, lower scale factor ``[K, D, D]``, ``df`` degrees of freedom."""

    loc: np.ndarray
    scale_tril: np.ndarray
    df: float = 5.0

    @classmethod
    def fit(cls, draws: np.ndarray, inflate: float = 1.5, df: float = 5.0) -> StudentTInitial:
        """Fit to draws ``[K, N, D]``: the draws' mean and covariance, scale inflated by ``inflate``."""
        if draws.shape[1] <= draws.shape[2]:
            raise ValueError(f"need more draws than dimensions to fit a t; got {draws.shape[1]} <= {draws.shape[2]}")
        loc = draws.mean(1)
        centred = draws - loc[:, None]
        cov = np.einsum("knd,kne->kde", centred, centred) / (draws.shape[1] - 1)
        cov += 1e-9 * np.eye(draws.shape[2])
        # A t with scale S has covariance S df / (df - 2): match the draws' covariance, then inflate.
        scale = cov * (df - 2) / df * inflate**2
        return cls(loc, np.linalg.cholesky(scale), df)

    def log_prob(self, m: Any, theta: Any) -> Any:
        """log density at one vector ``theta`` for model ``m`` (JAX)."""
        jnp = jax_backend().jnp
        import jax.scipy.linalg
        import jax.scipy.special

        loc, tril = jnp.asarray(self.loc)[m], jnp.asarray(self.scale_tril)[m]
        d, nu = theta.shape[-1], self.df
        z = jax.scipy.linalg.solve_triangular(tril, theta - loc, lower=True)
        log_det = jnp.sum(jnp.log(jnp.diagonal(tril)))
        return (
            jax.scipy.special.gammaln((nu + d) / 2)
            - jax.scipy.special.gammaln(nu / 2)
            - 0.5 * d * math.log(nu * math.pi)
            - log_det
            - 0.5 * (nu + d) * jnp.log1p(jnp.sum(z * z) / nu)
        )

    def sample(self, model_index: np.ndarray, num: int, generator: torch.Generator) -> np.ndarray:
        """``num`` draws per model, ``[len(model_index), num, D]``."""
        k, d = len(model_index), self.loc.shape[1]
        z = torch.randn(k, num, d, generator=generator, dtype=torch.float64).numpy()
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        with torch.random.fork_rng(devices=[]):  # torch's Gamma sampler takes no generator
            torch.manual_seed(seed)
            chi2 = 2.0 * torch._standard_gamma(torch.full((k, num), self.df / 2, dtype=torch.float64)).numpy()
        scale = np.sqrt(self.df / chi2)[..., None]
        tril = self.scale_tril[model_index]
        return self.loc[model_index][:, None] + scale * np.einsum("kde,kne->knd", tril, z)


@dataclass
class SMCOutput:
    """Results of ``num_runs`` independent SMC runs per model (arrays have leading axes ``[K, R]``)."""

    log_z: np.ndarray  # [K, R] log p(D, m) estimates
    particles: np.ndarray  # [K, R, N, D]
    weights: np.ndarray  # [K, R, N], normalised
    num_steps: np.ndarray  # [K, R] tempering steps taken
    acceptance: np.ndarray  # [K, R] mean random-walk acceptance rate
    finished: np.ndarray  # [K, R] whether lambda reached 1

    def resampled(self, generator: torch.Generator) -> np.ndarray:
        """Equally weighted draws per model pooled over runs, ``[K, R * N, D]`` (multinomial resampling)."""
        k, r, n, d = self.particles.shape
        weights = torch.as_tensor(self.weights.reshape(k * r, n))
        picks = torch.multinomial(weights, n, replacement=True, generator=generator).numpy()
        flat = self.particles.reshape(k * r, n, d)
        return np.take_along_axis(flat, picks[..., None], axis=1).reshape(k, r * n, d)


def _kernels(target: JaxTarget, log_initial: Any, settings: SMCSettings) -> tuple[Any, Any]:
    """The pilot (adaptive) and the final (fixed-schedule) SMC runs of one model, as jitted vmaps."""
    import blackjax
    import jax
    from blackjax.smc import adaptive_tempered, resampling, tempered

    jnp = jax_backend().jnp
    dim, max_steps = target.dim, settings.max_steps
    additive = blackjax.mcmc.random_walk.build_additive_step()

    def rw_step(rng_key: Any, state: Any, logdensity_fn: Any, chol: Any) -> Any:
        return additive(rng_key, state, logdensity_fn, blackjax.mcmc.random_walk.normal(chol))

    def densities(m: Any, row: Any) -> tuple[Any, Any]:
        def log_likelihood(theta: Any) -> Any:
            return target.log_joint(m, theta) - log_initial(m, row, theta)

        return (lambda theta: log_initial(m, row, theta)), log_likelihood

    def proposal_chol(state: Any) -> Any:
        mean = state.weights @ state.particles
        centred = state.particles - mean
        cov = (centred * state.weights[:, None]).T @ centred + 1e-10 * jnp.eye(dim)
        return jnp.linalg.cholesky(cov * (2.38**2 / dim))

    def pilot(m: Any, row: Any, particles: Any, key: Any) -> Any:
        log_prior, log_likelihood = densities(m, row)
        kernel = adaptive_tempered.build_kernel(
            log_prior,
            log_likelihood,
            rw_step,
            blackjax.mcmc.random_walk.init,
            resampling.systematic,
            settings.target_ess,
        )

        def cond(carry: Any) -> Any:
            return (carry[0].tempering_param < 1.0) & (carry[2] < max_steps)

        def body(carry: Any) -> Any:
            state, key, steps, schedule, chols = carry
            key, sub = jax.random.split(key)
            chol = proposal_chol(state)
            state, _ = kernel(sub, state, settings.num_mcmc_steps, {"chol": chol[None]})
            return state, key, steps + 1, schedule.at[steps].set(state.tempering_param), chols.at[steps].set(chol)

        carry = (
            tempered.init(particles),
            key,
            jnp.zeros((), dtype=jnp.int64),
            jnp.ones(max_steps),
            jnp.zeros((max_steps, dim, dim)),
        )
        state, _, steps, schedule, chols = jax.lax.while_loop(cond, body, carry)
        return schedule, chols, steps, state.tempering_param

    def final(m: Any, row: Any, particles: Any, key: Any, schedule: Any, chols: Any) -> Any:
        log_prior, log_likelihood = densities(m, row)
        kernel = tempered.build_kernel(
            log_prior, log_likelihood, rw_step, blackjax.mcmc.random_walk.init, resampling.systematic
        )

        def body(carry: Any, step: Any) -> Any:
            state, log_z, key, accepted = carry
            lam, chol = step
            key, sub = jax.random.split(key)
            # Steps past the end of this model's schedule repeat lambda = 1: weights 1, log Z unchanged.
            state, info = kernel(sub, state, settings.num_mcmc_steps, lam, {"chol": chol[None]})
            rate = jnp.mean(info.update_info.is_accepted)
            return (state, log_z + info.log_likelihood_increment, key, accepted + rate), None

        carry = (tempered.init(particles), jnp.zeros(()), key, jnp.zeros(()))
        (state, log_z, _, accepted), _ = jax.lax.scan(body, carry, (schedule, chols))
        return log_z, state.particles, state.weights, accepted / schedule.shape[0]

    return jax.jit(jax.vmap(pilot)), jax.jit(jax.vmap(final))


def run_smc(
    target: JaxTarget,
    model_index: np.ndarray,
    initial: StudentTInitial | None,
    settings: SMCSettings,
    seed: int,
) -> SMCOutput:
    """``settings.num_runs`` independent tempered SMC runs for each model in ``model_index``.

    A pilot run per model chooses the temperatures adaptively (each step's
    weights keep an effective sample size of ``target_ess``) and records
    them with its random-walk covariances; the final runs reuse that fixed
    schedule and those covariances. With nothing adapted to their own
    particles the final runs' evidence estimates are unbiased, whereas fully
    adaptive runs carry an O(1/N) bias, measured at +0.05 nats with 1000
    particles on linear-dag-d4. ``initial`` is the tempering start (one t per
    entry of ``model_index``); None means the problem's prior.
    """
    import jax

    jnp = jax_backend().jnp
    k, r, n = len(model_index), settings.num_runs, settings.num_particles
    generator = torch.Generator().manual_seed(seed)
    models = np.asarray(model_index, dtype=np.int64)

    if initial is None:

        def log_initial(m: Any, row: Any, theta: Any) -> Any:
            return target.log_prior(m, theta)

        def draw(rows: np.ndarray) -> np.ndarray:
            return target.sample_prior(models[rows], n, generator)
    else:

        def log_initial(m: Any, row: Any, theta: Any) -> Any:
            return initial.log_prob(row, theta)

        def draw(rows: np.ndarray) -> np.ndarray:
            return initial.sample(rows, n, generator)

    pilot, final = _kernels(target, log_initial, settings)
    key_pilot, key_final = jax.random.split(jax.random.key(seed))
    rows = np.arange(k)
    schedules, chols, steps, reached = [], [], [], []
    pilot_keys = jax.random.split(key_pilot, k)
    for start in range(0, k, settings.chunk):
        part = rows[start : start + settings.chunk]
        out = pilot(jnp.asarray(models[part]), jnp.asarray(part), jnp.asarray(draw(part)), pilot_keys[part])
        for store, value in zip((schedules, chols, steps, reached), out, strict=True):
            store.append(np.asarray(value))
    steps_arr, reached_arr = np.concatenate(steps), np.concatenate(reached) >= 1.0
    length = int(steps_arr.max())
    schedule_arr = np.concatenate(schedules)[:, :length]
    chol_arr = np.concatenate(chols)[:, :length]

    run_rows = np.repeat(rows, r)
    final_keys = jax.random.split(key_final, k * r)
    outputs = []
    for start in range(0, k * r, settings.chunk):
        part = run_rows[start : start + settings.chunk]
        out = final(
            jnp.asarray(models[part]),
            jnp.asarray(part),
            jnp.asarray(draw(part)),
            final_keys[start : start + len(part)],
            jnp.asarray(schedule_arr[part]),
            jnp.asarray(chol_arr[part]),
        )
        outputs.append([np.asarray(x) for x in out])
    log_z, parts, weights, acceptance = (np.concatenate(xs) for xs in zip(*outputs, strict=True))
    return SMCOutput(
        log_z.reshape(k, r),
        parts.reshape(k, r, n, -1),
        weights.reshape(k, r, n),
        np.repeat(steps_arr[:, None], r, axis=1),
        acceptance.reshape(k, r),
        np.repeat(reached_arr[:, None], r, axis=1),
    )


def combine_runs(log_z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pool independent estimates ``[K, R]`` of log Z: log of the mean of Z, and its standard error.

    The mean of the runs' Z is unbiased; its standard error on the log scale
    is sd(Z_r) / (sqrt(R) mean(Z_r)) by the delta method.
    """
    r = log_z.shape[1]
    top = log_z.max(1, keepdims=True)
    ratio = np.exp(log_z - top)
    mean = ratio.mean(1)
    se = ratio.std(1, ddof=1) / math.sqrt(r) / mean if r > 1 else np.full(len(mean), np.inf)
    return np.log(mean) + top[:, 0], se
