"""Univariate normal mixtures with an unknown number of components: Richardson & Green (1997) [RG].

Model k in {1, ..., k_max} (``model_index = k - 1``), uniform prior; given k the observations are iid from
sum_j w_j N(mu_j, sigma_j^2) with allocations integrated out, under RG's hierarchical prior (Dirichlet weights,
normal means ordered mu_1 < ... < mu_k, Gamma precisions with a Gamma hyperprior on their rate). The ordering
removes label switching and leaves each model's evidence that of the unordered mixture. k_max = 15 by default (k > 15
holds about 0.1% of RG's k <= 30 posterior); ``k_max=30`` is accepted but has no shipped reference.

Unconstrained coordinates, ``dim_max = 3 k_max``: log beta, then the first mean and the log gaps between means,
the log precisions, and the additive log-ratios of the weights; model k has 3k active ones, Jacobians included.
``log_joint_with`` is written once for torch and JAX, with ``log_prior_with`` and ``sample_prior`` for SMC.

The reference is tempered SMC (shipped; about 0.05 in TV is its own error). Data: ``data="rg"`` (default, mixAK's
``Galaxy.R`` as RG used it), ``"mass"``, ``"enzyme"``, ``"acidity"``. Sources, hyperparameters, the reference's
settings and checks, and RG's Table 1 beside it: docs/problems.md, "galaxy".
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from problems.galaxy.data import DATA_SETS, load
from suite.core.model_space import CountSpace
from suite.core.problem import LOG_SQRT_2PI, Problem
from suite.core.registry import register_problem
from suite.core.tensor_ops import DeviceCache, rows
from suite.data.locate import DataUnavailable, unavailable_reason

#: RG's prior constants (Sec. 2.2 and 4): Dirichlet delta, precision shape alpha, hyperprior shape g; the rate
#: h and kappa scale with the data range R (h = H_TIMES_R2 / R^2, kappa = 1 / R^2).
DELTA, ALPHA, G_SHAPE, H_TIMES_R2 = 1.0, 2.0, 0.2, 10.0
#: RG's maximum number of components (Sec. 4: k uniform on 1..30).
RG_K_MAX = 30


def prior_constants(y: Tensor) -> dict[str, float]:
    """xi (midpoint of the data range), kappa = 1/R^2 and h = 10/R^2 of RG's default prior (Sec. 2.2)."""
    lo, hi = float(y.min()), float(y.max())
    r = hi - lo
    return {"xi": 0.5 * (lo + hi), "kappa": 1.0 / r**2, "h": H_TIMES_R2 / r**2}


@register_problem("galaxy")
class Galaxy(Problem):
    """Richardson & Green's normal mixture with unknown k on the 82 galaxy velocities (k uniform on 1..k_max)."""

    main_metric: ClassVar[str] = "model_prob_tv"
    #: Not in smoke: every method runs on every smoke problem under the tests' time budget.
    #: Not in the default quick run (five classics x eleven methods x three seeds would take it past its 15-minute
    #: budget): `--problems classics` runs them in any profile (docs/problems.md).
    planned_in: ClassVar[tuple[str, ...]] = ("paper",)
    groups: ClassVar[tuple[str, ...]] = ("classics",)
    time_budgets: ClassVar[dict[str, float]] = {"quick": 10.0}
    #: SMC tempers from RG's prior; the posteriors of a mixture stay multimodal even with ordered means (which
    #: components are split or merged), so the gold draws are SMC particles (NUTS R-hat would reject them) and
    #: each temperature gets many random-walk moves: with 10-100 moves the evidences of k >= 4 came out 0.5-2
    #: nats off (mostly low) and spread over nats between runs. The shipped reference was made with
    #: ``--seed 1`` on a GPU (200 s; see the module docstring).
    reference_settings: ClassVar[dict] = {
        "smc": {"num_particles": 2500, "num_runs": 16, "num_mcmc_steps": 800, "target_ess": 0.9},
        "max_nuts_models": 0,
    }

    def __init__(self, k_max: int = 15, data: str = "rg") -> None:
        if data not in DATA_SETS:
            raise ValueError(f"data must be one of {sorted(DATA_SETS)}, got {data!r}")
        if not isinstance(k_max, int) or not 1 <= k_max <= RG_K_MAX:
            raise ValueError(f"k_max must be an integer in 1..{RG_K_MAX} (RG use {RG_K_MAX}), got {k_max!r}")
        self.k_max, self.data_name = k_max, data
        self._reason = unavailable_reason(DATA_SETS[data][0])
        y = None
        if self._reason is None:
            try:
                y = load(data)
            except DataUnavailable as exc:
                self._reason = str(exc)
        self.y = y
        self.num_observations = None if y is None else len(y)
        self.constants = prior_constants(y) if y is not None else {"xi": 0.0, "kappa": 1.0, "h": 1.0}
        self.model_space = CountSpace(1, k_max)
        self.dim_max = 3 * k_max
        self._device = DeviceCache(**self._tables())

    def _tables(self) -> dict[str, Tensor]:
        """Per-model masks and constants, the prefix-sum matrix of the means and the data."""
        k_max, c = self.k_max, self.constants
        counts = torch.arange(1, k_max + 1)
        slot = torch.arange(k_max)
        component = slot[None, :] < counts[:, None]  # [K, k_max]
        gap = component & (slot[None, :] > 0)  # active log gaps (slot 0 of the block is mu_1 itself)
        ratio = slot[None, : k_max - 1] < counts[:, None] - 1  # active log-ratios a_1 .. a_{k-1}
        masks = torch.cat([torch.ones(k_max, 1, dtype=torch.bool), component, component, ratio], -1)
        kf = counts.to(torch.float64)
        log_model_prior = torch.full((k_max,), -math.log(k_max), dtype=torch.float64)
        lgamma = torch.lgamma
        prior_const = (
            (G_SHAPE * math.log(c["h"]) - math.lgamma(G_SHAPE))  # beta ~ Gamma(g, h), with log beta's Jacobian below
            + lgamma(kf + 1.0)  # k! of the ordered means
            + kf * (0.5 * math.log(c["kappa"]) - LOG_SQRT_2PI)  # N(xi, 1/kappa) normalisers
            - kf * math.lgamma(ALPHA)  # Gamma(alpha, beta) normalisers (the beta^alpha is linear in log beta)
            + lgamma(kf * DELTA)
            - kf * math.lgamma(DELTA)  # Dirichlet(delta) normaliser
        )
        tables: dict[str, Tensor] = {
            "masks": masks,
            "component": component,
            "gap": gap,
            # log w_j of inactive components is -inf: add this to the log-ratios (0 for the reference component).
            "logit_fill": torch.where(component, 0.0, -math.inf).to(torch.float64),
            "pad_ratios": torch.eye(k_max - 1, k_max, dtype=torch.float64),
            "prefix_sum": torch.triu(torch.ones(k_max, k_max, dtype=torch.float64)),
            "beta_coefficient": G_SHAPE + ALPHA * kf,  # power of beta: g from its prior, alpha per component
            "log_model_prior": log_model_prior,
            "prior_const": prior_const,
            "joint_const": prior_const + log_model_prior,
        }
        if self.y is not None:
            tables["y"] = self.y[None, :, None]
        return tables

    # ------------------------------------------------------------------ contract
    def config(self) -> dict[str, Any]:
        """Maximum number of components and the data set."""
        return {"k_max": self.k_max, "data": self.data_name}

    def unavailable_reason(self) -> str | None:
        """Why the data file cannot be used, or None."""
        return self._reason

    def mask(self, model_index: Tensor) -> Tensor:
        """log beta, then the first k slots of the mean and precision blocks and k - 1 log-ratios."""
        return rows(self._device.get("masks", model_index.device), model_index)

    def log_model_prior(self, model_index: Tensor) -> Tensor:
        """Uniform over k = 1..k_max (RG Sec. 2.2)."""
        return rows(self._device.get("log_model_prior", model_index.device), model_index)

    def log_joint_with(self, xp: Any, model_index: Any, theta: Any) -> Any:
        """log p(k) + log p(theta_k | k) (Jacobians included) + sum_i log sum_j w_j N(y_i; mu_j, 1/tau_j)."""
        if self._reason is not None:
            raise DataUnavailable(self._reason)
        return xp.nan_to_neg_inf(self._log_density(xp, model_index, theta, likelihood=True))

    def log_prior_with(self, xp: Any, model_index: Any, theta: Any) -> Any:
        """log p(theta_k | k) of the unconstrained coordinates, Jacobians included."""
        return xp.nan_to_neg_inf(self._log_density(xp, model_index, theta, likelihood=False))

    def _log_density(self, xp: Any, model_index: Any, theta: Any, likelihood: bool) -> Any:
        """The log prior, plus log p(k) and the log likelihood when ``likelihood``, ``[B]``."""
        k_max, c = self.k_max, self.constants
        masks = xp.take(xp.constant(self._device, "masks", theta, exact_dtype=False), model_index)
        component = xp.take(xp.constant(self._device, "component", theta, exact_dtype=False), model_index)
        gap = xp.take(xp.constant(self._device, "gap", theta, exact_dtype=False), model_index)
        t = xp.where(masks, theta, 0.0)  # inactive slots may hold anything, NaN included
        log_beta, means, log_tau = t[:, 0], t[:, 1 : 1 + k_max], t[:, 1 + k_max : 1 + 2 * k_max]
        ratios = t[:, 1 + 2 * k_max :]
        increments = xp.where(gap, xp.exp(xp.where(gap, means, 0.0)), means)  # mu_1, then the gaps; 0 inactive
        mu = increments @ xp.constant(self._device, "prefix_sum", theta)  # inactive: copies of mu_k
        logits = ratios @ xp.constant(self._device, "pad_ratios", theta) + xp.take(
            xp.constant(self._device, "logit_fill", theta), model_index
        )
        log_w = logits - xp.logsumexp(logits, -1)[:, None]
        tau = xp.exp(log_tau)
        beta = xp.exp(log_beta)
        centred = mu - c["xi"]
        const = xp.take(xp.constant(self._device, "joint_const" if likelihood else "prior_const", theta), model_index)
        log_density = (
            const
            + xp.take(xp.constant(self._device, "beta_coefficient", theta), model_index) * log_beta
            - c["h"] * beta
            - 0.5 * c["kappa"] * xp.row_sum(xp.where(component, centred * centred, 0.0))
            + xp.row_sum(xp.where(gap, means, 0.0))  # Jacobian of the log gaps
            + ALPHA * xp.row_sum(log_tau)  # tau^(alpha - 1) times the Jacobian tau; inactive slots are 0
            - beta * xp.row_sum(xp.where(component, tau, 0.0))
            + DELTA * xp.row_sum(xp.where(component, log_w, 0.0))  # Dirichlet with the log-ratio Jacobian
        )
        if not likelihood:
            return log_density
        # log w_j N(y_i; mu_j, 1/tau_j) = bias_j - (tau_j / 2) (y_i - mu_j)^2, [B, N, k_max]: one fused multiply-add.
        bias = (log_w + 0.5 * log_tau - LOG_SQRT_2PI)[:, None, :]
        resid = xp.constant(self._device, "y", theta) - mu[:, None, :]
        log_lik = xp.row_sum(xp.logsumexp(xp.fma(bias, (0.5 * tau)[:, None, :], resid * resid, scale=-1.0), -1))
        return log_density + log_lik

    def sample_prior(self, model_index: Tensor, generator: torch.Generator) -> Tensor:
        """theta of draws from RG's prior: log beta, the sorted means as first mean and log gaps, log precisions,
        log-ratios of Dirichlet weights (float64, inactive slots zero)."""
        device, num, k_max, c = generator.device, len(model_index), self.k_max, self.constants
        model_index = model_index.to(device)
        component = rows(self._device.get("component", device), model_index)
        normal = torch.randn(num, k_max, generator=generator, dtype=torch.float64, device=device)
        # torch's Gamma sampler accepts no generator: draw under a seed taken from ``generator``.
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=device))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            gamma_beta = torch._standard_gamma(torch.full((num,), G_SHAPE, dtype=torch.float64))
            gamma_tau = torch._standard_gamma(torch.full((num, k_max), ALPHA, dtype=torch.float64))
            gamma_w = torch._standard_gamma(torch.full((num, k_max), DELTA, dtype=torch.float64))
        log_beta = (gamma_beta.log() - math.log(c["h"])).to(device)
        log_tau = gamma_tau.to(device).log() - log_beta[:, None]
        mu = torch.where(component, c["xi"] + normal / math.sqrt(c["kappa"]), math.inf).sort(-1).values
        gaps = (mu[:, 1:] - mu[:, :-1]).log()
        means = torch.cat([mu[:, :1], torch.where(component[:, 1:], gaps, 0.0)], -1)
        log_g = gamma_w.to(device).log()
        reference = log_g.gather(1, model_index[:, None])  # component k is the log-ratios' reference
        ratio_active = torch.arange(k_max - 1, device=device) < model_index[:, None]  # a_1 .. a_{k-1}
        ratios = torch.where(ratio_active, log_g[:, :-1] - reference, 0.0)
        theta = torch.cat([log_beta[:, None], means, log_tau, ratios], -1)
        return torch.where(self.mask(model_index), theta, 0.0)
