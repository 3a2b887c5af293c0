"""Per-model posterior draws by NumPyro NUTS, with split R-hat and effective sample sizes.

Each model is sampled on the saturated space (inactive coordinates follow
N(0, 1), see :mod:`suite.reference.jax_target`), so one compiled kernel
serves every model: the model index is a traced argument
(``jit_model_args``). Chains start from dispersed points (e.g. SMC
particles) so that R-hat can reveal multimodality.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from suite.core.backend import jax_backend
from suite.reference.jax_target import JaxTarget


@dataclass(frozen=True)
class NUTSSettings:
    """Settings of the NUTS runs per model."""

    num_chains: int = 4
    num_warmup: int = 500
    num_samples: int = 1000
    target_accept: float = 0.8
    max_tree_depth: int = 10

    def as_dict(self) -> dict[str, Any]:
        """Settings as a JSON-able dict."""
        return dict(self.__dict__)


@dataclass
class NUTSOutput:
    """Draws ``[chains, samples, D]`` of one model and their diagnostics over the active coordinates."""

    draws: np.ndarray
    max_rhat: float
    min_ess: float
    divergences: int


class NUTSSampler:
    """NUTS for every model of a problem, compiled once."""

    def __init__(self, target: JaxTarget, settings: NUTSSettings) -> None:
        import numpyro
        import numpyro.distributions as dist
        from numpyro.infer import MCMC, NUTS

        jnp = jax_backend().jnp
        self.target, self.settings = target, settings

        def model(m: Any) -> None:
            theta = numpyro.sample("theta", dist.ImproperUniform(dist.constraints.real, (), (target.dim,)))
            numpyro.factor("log_joint", target.log_joint(m, theta))

        kernel = NUTS(model, target_accept_prob=settings.target_accept, max_tree_depth=settings.max_tree_depth)
        self._mcmc = MCMC(
            kernel,
            num_warmup=settings.num_warmup,
            num_samples=settings.num_samples,
            num_chains=settings.num_chains,
            chain_method="vectorized",
            progress_bar=False,
            jit_model_args=True,
        )
        self._jnp = jnp

    def sample(self, model_index: int, init: np.ndarray, seed: int) -> NUTSOutput:
        """Run the chains for one model from ``init`` ``[chains, D]``."""
        import jax
        from numpyro.diagnostics import effective_sample_size, split_gelman_rubin

        jnp = self._jnp
        self._mcmc.run(
            jax.random.key(seed),
            jnp.asarray(model_index, dtype=jnp.int64),
            init_params={"theta": jnp.asarray(init)},
            extra_fields=("diverging",),
        )
        draws = np.asarray(self._mcmc.get_samples(group_by_chain=True)["theta"])
        active = np.asarray(self.target.masks[model_index])
        divergences = int(np.asarray(self._mcmc.get_extra_fields()["diverging"]).sum())
        if active.any():
            rhat = float(np.max(split_gelman_rubin(draws[..., active])))
            ess = float(np.min(effective_sample_size(draws[..., active])))
        else:
            rhat, ess = 1.0, float(draws.shape[0] * draws.shape[1])
        return NUTSOutput(draws, rhat, ess, divergences)
