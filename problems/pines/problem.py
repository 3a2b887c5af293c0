"""Radiata pines: compression strength on density or on resin-adjusted density, two non-nested models, exact answers.

Data (Williams 1959; file ``radiata_pine.dat``): for 42 specimens, y = maximum compression strength parallel to the
grain, x = density and z = density adjusted for resin content. Carlin & Chib (1995, "Bayesian model choice via Markov
chain Monte Carlo methods", JRSS B 57(3), their pines example) compare the two non-nested regressions

    M1: y_i = alpha + beta (x_i - xbar) + e_i,    M2: y_i = gamma + delta (z_i - zbar) + e_i,    e_i ~ N(0, 1/tau),

and Friel & Wyse (2012, "Estimating the evidence - a review", Statistica Neerlandica 66(3), their radiata-pine
example) make the evidences exact with the conjugate priors used here for both models (parameters alpha, beta, tau):

    (alpha, beta) | tau ~ N((3000, 185), (tau Q0)^{-1}), Q0 = diag(r0, s0), r0 = 0.06, s0 = 6;
    tau ~ Gamma(a0 = 3, rate b0 = 2 * 300^2).

These priors give log p(y | M1) = -310.12829 and log p(y | M2) = -301.70460 exactly, the values Friel & Wyse report
(quoted as -310.128 and -301.704), so log B21 = 8.42368 and B21 = 4553.6 for M2 (a Bayes factor of "about 4862" is
also quoted with these evidences, but it does not follow from them: exp(8.424) = 4554). The prior values are also
those of the harmonic package's radiata-pine example (McEwen et al. 2021), which reproduces these evidences. The
model prior is uniform (1/2 each), so p(M2 | y) = B21 / (1 + B21) = 0.99978.

theta = (alpha, beta, log tau) in both models (``CategoricalSpace``, every coordinate always active); the log joint
includes the Jacobian tau of the log transform. Everything is exact (:mod:`problems.pines.posterior`). The prior
is proper, so :meth:`Pines.log_prior_with` and :meth:`Pines.sample_prior` are given too.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from problems.pines.posterior import LOG_2PI, NormalGammaPrior, fit
from suite.core.model_space import CategoricalSpace
from suite.core.problem import Problem
from suite.core.registry import register_problem
from suite.core.tensor_ops import DeviceCache, host_generator
from suite.core.types import Draws, ModelProbs
from suite.data.locate import DataUnavailable, locate, unavailable_reason

DATA_FILE = "radiata_pine.dat"
NUM_TREES = 42
SUM_Y = 126_170.0  # checked on load
#: Model labels: M1 regresses on density x, M2 on resin-adjusted density z.
MODELS = ("density", "adjusted-density")
#: The Friel & Wyse (2012) priors of the radiata-pine example.
FRIEL_WYSE_PRIOR = NormalGammaPrior(mu0=(3000.0, 185.0), r0=0.06, s0=6.0, a0=3.0, b0=2.0 * 300.0**2)
#: Mixed into the seed of training draws so that they never share a stream with the scoring draws.
TRAINING_STREAM = 0x9145_7AD1


def load_pines() -> tuple[Tensor, Tensor, Tensor]:
    """y (strength), x (density) and z (resin-adjusted density), float64 [42] each; checks the shape and sum(y)."""
    path = locate(DATA_FILE)
    table = np.loadtxt(path, comments="#", dtype=np.float64)
    if table.shape != (NUM_TREES, 4) or not np.isfinite(table).all():
        raise DataUnavailable(f"{path}: expected {NUM_TREES} rows of id, y, x, z; got shape {table.shape}")
    if table[:, 1].sum() != SUM_Y:
        raise DataUnavailable(f"{path}: sum(y) = {table[:, 1].sum()}, expected {SUM_Y}")
    y, x, z = (torch.from_numpy(table[:, j].copy()) for j in (1, 2, 3))
    return y, x, z


@register_problem("pines")
class Pines(Problem):
    """Radiata pines (Carlin & Chib 1995; Friel & Wyse 2012): y on density vs y on resin-adjusted density."""

    main_metric: ClassVar[str] = "model_prob_tv"
    #: Not in the default quick run (five classics x eleven methods x three seeds would take it past its 15-minute
    #: budget): `--problems classics` runs them in any profile (docs/problems.md).
    planned_in: ClassVar[tuple[str, ...]] = ("paper",)
    groups: ClassVar[tuple[str, ...]] = ("classics",)
    time_budgets: ClassVar[dict[str, float]] = {"quick": 4.0}

    def __init__(self) -> None:
        self.prior = FRIEL_WYSE_PRIOR
        self.model_space = CategoricalSpace(list(MODELS))
        self.dim_max = 3
        self.num_observations = NUM_TREES
        self._log_model_prior = -math.log(len(MODELS))
        self._reason = unavailable_reason(DATA_FILE)
        masks = torch.ones(len(MODELS), 3, dtype=torch.bool)
        if self._reason is not None:
            self._device = DeviceCache(masks=masks)
            return
        self.y, self.x, self.z = load_pines()
        covariates = torch.stack([self.x - self.x.mean(), self.z - self.z.mean()])  # [2, n], centred per model
        self.fits = [fit(c, self.y, self.prior) for c in covariates]
        p = self.prior
        # log p(m) + the normalisers of N(alpha, beta; mu0, (tau Q0)^-1) and Gamma(tau; a0, b0) and of the likelihood.
        constant = (
            self._log_model_prior
            - LOG_2PI
            + 0.5 * math.log(p.r0 * p.s0)
            + p.a0 * math.log(p.b0)
            - math.lgamma(p.a0)
            - 0.5 * NUM_TREES * LOG_2PI
        )
        self._device = DeviceCache(
            masks=masks,
            covariates=covariates,
            y=self.y,
            mu0=torch.tensor(p.mu0, dtype=torch.float64),
            q0=torch.tensor([p.r0, p.s0], dtype=torch.float64),
            constant=torch.tensor([constant], dtype=torch.float64),
        )

    # ------------------------------------------------------------------ contract
    def config(self) -> dict[str, Any]:
        """Data source and the Friel & Wyse prior constants."""
        p = self.prior
        return {"data": DATA_FILE, "mu0": list(p.mu0), "r0": p.r0, "s0": p.s0, "a0": p.a0, "b0": p.b0}

    def unavailable_reason(self) -> str | None:
        """Why radiata_pine.dat cannot be used, or None."""
        return self._reason

    def mask(self, model_index: Tensor) -> Tensor:
        """Every coordinate (alpha, beta, log tau) is active in both models."""
        return self._device.get("masks", model_index.device).index_select(0, model_index)

    def log_model_prior(self, model_index: Tensor) -> Tensor:
        """Uniform: 1/2 each."""
        return torch.full(model_index.shape, self._log_model_prior, dtype=torch.float64, device=model_index.device)

    def log_joint_with(self, xp: Any, model_index: Any, theta: Any) -> Any:
        """log p(m) + log N(y; alpha + beta c_m, I / tau) + log N((alpha, beta); mu0, (tau Q0)^-1) + log Gamma + u."""
        covariate = xp.take(xp.constant(self._device, "covariates", theta), model_index)  # [B, n]
        coefficients, log_tau = theta[:, :2], theta[:, 2]
        tau = xp.exp(log_tau)
        residual = xp.constant(self._device, "y", theta) - coefficients[:, :1] - coefficients[:, 1:2] * covariate
        offset = coefficients - xp.constant(self._device, "mu0", theta)
        prior_quad = xp.row_sum(offset * offset * xp.constant(self._device, "q0", theta))
        p = self.prior
        # tau^{n/2} (likelihood) tau^{2/2} (coefficient prior) tau^{a0 - 1} (Gamma) tau (Jacobian of u = log tau)
        power = 0.5 * NUM_TREES + 1.0 + p.a0
        quad = xp.row_sum(residual * residual) + prior_quad
        log_joint = xp.constant(self._device, "constant", theta)[0] + power * log_tau - tau * (0.5 * quad + p.b0)
        return xp.nan_to_neg_inf(log_joint)

    # ------------------------------------------------------------- prior structure
    def log_prior_with(self, xp: Any, model_index: Any, theta: Any) -> Any:
        """log N((alpha, beta); mu0, (tau Q0)^-1) + log Gamma(tau; a0, b0) + log tau (the same in both models)."""
        p = self.prior
        log_tau = theta[:, 2]
        offset = theta[:, :2] - xp.constant(self._device, "mu0", theta)
        quad = xp.row_sum(offset * offset * xp.constant(self._device, "q0", theta))
        constant = -LOG_2PI + 0.5 * math.log(p.r0 * p.s0) + p.a0 * math.log(p.b0) - math.lgamma(p.a0)
        return xp.nan_to_neg_inf(constant + (1.0 + p.a0) * log_tau - xp.exp(log_tau) * (0.5 * quad + p.b0))

    def sample_prior(self, model_index: Tensor, generator: torch.Generator) -> Tensor:
        """(alpha, beta, log tau) from the prior: tau ~ Gamma(a0, b0), then (alpha, beta) | tau (float64)."""
        p, device = self.prior, generator.device
        shape = torch.full((len(model_index),), p.a0, dtype=torch.float64, device=device)
        tau = torch._standard_gamma(shape, generator=generator) / p.b0
        z = torch.randn(len(model_index), 2, generator=generator, dtype=torch.float64, device=device)
        scale = torch.tensor([p.r0, p.s0], dtype=torch.float64, device=device).rsqrt() * tau.rsqrt()[:, None]
        mean = torch.tensor(p.mu0, dtype=torch.float64, device=device)
        return torch.cat([mean + scale * z, tau.log()[:, None]], dim=1)

    # --------------------------------------------------------------- exact answers
    def log_evidence(self) -> Tensor:
        """log p(y | M1), log p(y | M2), float64 [2]."""
        return torch.tensor([f.log_evidence for f in self.fits], dtype=torch.float64)

    def _log_posterior(self) -> Tensor:
        log_joint_models = self.log_evidence() + self._log_model_prior
        return log_joint_models - torch.logsumexp(log_joint_models, 0)

    def log_bayes_factor(self) -> float:
        """log B21 = log p(y | M2) - log p(y | M1) (resin-adjusted density against density)."""
        log_evidence = self.log_evidence()
        return float(log_evidence[1] - log_evidence[0])

    def reference_model_probs(self) -> ModelProbs:
        """Exact p(m | y) (standard errors zero)."""
        prob = self._log_posterior().exp()
        return ModelProbs.from_dense(prob, torch.zeros_like(prob))

    def exact_log_evidence(self) -> float:
        """log Z = log (p(y | M1) + p(y | M2)) / 2."""
        return float(torch.logsumexp(self.log_evidence() + self._log_model_prior, 0))

    def exact_entropy(self) -> float:
        """H(m, theta) = H(m) + sum_m p(m | y) H(alpha, beta, log tau | m, y)."""
        prob = self._log_posterior().exp()
        conditional = torch.tensor([f.entropy() for f in self.fits], dtype=torch.float64)
        return -float(torch.xlogy(prob, prob).sum()) + float((prob * conditional).sum())

    def reference_draws(self, num_draws: int, generator: torch.Generator) -> Draws:
        """Exact draws: m ~ p(m | y), (alpha, beta, log tau) ~ p(. | m, y); float64 on the CPU."""
        gen = host_generator(generator)
        model_index = torch.multinomial(self._log_posterior().exp(), num_draws, replacement=True, generator=gen)
        theta = torch.zeros(num_draws, self.dim_max, dtype=torch.float64)
        for m, posterior in enumerate(self.fits):
            rows = torch.nonzero(model_index == m).flatten()
            theta[rows] = posterior.sample(len(rows), gen)
        return Draws(model_index, theta)

    def training_draws(self, num_draws: int, generator: torch.Generator) -> Draws:
        """Fresh exact draws from a stream derived from ``generator`` that the scoring draws never use."""
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device)) ^ TRAINING_STREAM
        return self.reference_draws(num_draws, torch.Generator().manual_seed(seed))
