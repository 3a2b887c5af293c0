"""US crime: variable selection over the 2^15 subsets of Ehrlich's covariates, exact under Zellner's g-prior.

Data (:mod:`problems.us_crime.data`): 47 states, log crime rate on 15 covariates (all logged except So, as in
Raftery, Madigan & Hoeting 1997), centred. A model is a subset gamma in {0, 1}^15 (``BinarySpace(15)``, bit j is
covariate ``COVARIATES[j]``); the intercept is in every model. Prior (:mod:`problems.us_crime.posterior`; Liang et al.
2008, sec. 2.1): p(alpha, s2) propto 1 / s2, beta_gamma | s2 ~ N(0, g s2 (X_gamma^T X_gamma)^{-1}), g = n = 47 by
default (the unit-information prior, Kass & Wasserman 1995). Model priors:

- ``model_prior="uniform"`` (default): 2^-15 each, the choice of Raftery, Madigan & Hoeting (1997);
- ``model_prior="beta-binomial"``: gamma_j | w ~ Bernoulli(w), w ~ Beta(1, 1), so
  p(gamma) = B(1 + k, 1 + p - k) / B(1, 1) = 1 / ((p + 1) C(p, k)) (Scott & Berger 2010, sec. 3.2).

``g_prior="hyper-g"`` puts Liang et al.'s (2008, sec. 3.2) hyper-g prior pi(g) = (a - 2)/2 (1 + g)^(-a/2) on g
(a = ``hyper_a`` = 3 by default) and adds w = log g as an always-active last coordinate (with its Jacobian g);
the evidences are then one-dimensional integrals over w (:mod:`problems.us_crime.hyper_g`, error below 1e-10).

theta = (alpha, beta_1..beta_15, log s2) (and log g under the hyper-g prior); the mask keeps alpha, beta_gamma,
log s2 (and log g) active. The reference prior is flat in (alpha, log s2), so the log joint carries no density for
them (and no Jacobian: d s2 / s2 = d log s2). The evidences of all 32,768 models are closed-form with g fixed (R^2
of each subset, by batched Cholesky factorisations), so p(gamma | y), the posterior inclusion probabilities
(:meth:`USCrime.inclusion_probabilities`), log Z, exact draws and the entropy H(gamma, theta) are exact.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from problems.enumerated import exact_answers, exact_joint_entropy, exact_model_probs
from problems.us_crime import hyper_g, posterior
from problems.us_crime.data import COVARIATES, DATA_FILE, NUM_STATES, load_uscrime
from problems.us_crime.posterior import LOG_2PI, Design
from suite.core.model_space import BinarySpace
from suite.core.problem import Problem
from suite.core.registry import register_problem
from suite.core.tensor_ops import DeviceCache, host_generator
from suite.core.types import Draws, Estimate, ModelProbs
from suite.data.locate import unavailable_reason

MODEL_PRIORS = ("uniform", "beta-binomial")
G_PRIORS = ("fixed", "hyper-g")
NUM_COVARIATES = len(COVARIATES)
#: Subsets per batched Cholesky chunk (8192 saturated 15 x 15 float64 matrices: 15 MB).
CHUNK = 8192
#: Subsets or draws per chunk under the hyper-g prior (each holds a [chunk, 1001] grid of w = log g: 8 MB).
GRID_CHUNK = 1024
#: Mixed into the seed of training draws so that they never share a stream with the scoring draws.
TRAINING_STREAM = 0xC41E_5EED
#: Exact per-model answers by configuration, shared by instances.
_EXACT_CACHE: dict[tuple, dict[str, Any]] = {}


def log_model_prior_table(model_prior: str, num_covariates: int = NUM_COVARIATES) -> Tensor:
    """log p(gamma) by model size k = 0..p, float64 [p + 1]."""
    k = torch.arange(num_covariates + 1, dtype=torch.float64)
    if model_prior == "uniform":
        return torch.full_like(k, -num_covariates * math.log(2.0))
    # 1 / ((p + 1) C(p, k)) = Gamma(k + 1) Gamma(p - k + 1) / Gamma(p + 2)
    return torch.lgamma(k + 1) + torch.lgamma(num_covariates - k + 1) - math.lgamma(num_covariates + 2)


@register_problem("us-crime")
class USCrime(Problem):
    """US crime (Raftery, Madigan & Hoeting 1997): 2^15 regressions, g-prior, exact p(gamma | y)."""

    main_metric: ClassVar[str] = "model_prob_tv"
    #: Not in the default quick run (five classics x eleven methods x three seeds would take it past its 15-minute
    #: budget): `--problems classics` runs them in any profile (docs/problems.md).
    planned_in: ClassVar[tuple[str, ...]] = ("paper",)
    groups: ClassVar[tuple[str, ...]] = ("classics",)
    time_budgets: ClassVar[dict[str, float]] = {"quick": 8.0}

    def __init__(
        self, g: float | None = None, model_prior: str = "uniform", g_prior: str = "fixed", hyper_a: float = 3.0
    ) -> None:
        if model_prior not in MODEL_PRIORS:
            raise ValueError(f"model_prior must be one of {', '.join(MODEL_PRIORS)}; got {model_prior!r}")
        if g_prior not in G_PRIORS:
            raise ValueError(f"g_prior must be one of {', '.join(G_PRIORS)}; got {g_prior!r}")
        if g_prior == "hyper-g" and g is not None:
            raise ValueError(f"g is random under g_prior='hyper-g' (give hyper_a instead); got g={g!r}")
        g = float(NUM_STATES) if g is None else g
        if not (isinstance(g, int | float) and math.isfinite(g) and g > 0):
            raise ValueError(f"g must be positive and finite; got {g!r}")
        if not (isinstance(hyper_a, int | float) and 2.0 < hyper_a <= 4.0):
            raise ValueError(f"hyper_a must lie in (2, 4] (Liang et al. 2008, sec. 3.2); got {hyper_a!r}")
        self.g = float(g)
        self.model_prior = model_prior
        self.g_prior = g_prior
        self.hyper_a = float(hyper_a)
        self.hyper = g_prior == "hyper-g"
        self.model_space = BinarySpace(NUM_COVARIATES)
        self.dim_max = NUM_COVARIATES + 2 + self.hyper
        self.num_observations = NUM_STATES
        self._size_prior = log_model_prior_table(model_prior)
        # Bits of (2 m + always): bit 0 alpha, bits 1..15 gamma, bit 16 log s2, bit 17 log g (hyper-g only).
        self._always = 1 + (1 << (NUM_COVARIATES + 1)) + (self.hyper << (NUM_COVARIATES + 2))
        shifts = torch.arange(self.dim_max, dtype=torch.int64)
        self._reason = unavailable_reason(DATA_FILE)
        self._exact: dict[str, Any] | None = None
        if self._reason is not None:
            self._device = DeviceCache(shifts=shifts)
            return
        data = load_uscrime()
        self.x, self.y = data.x, data.y
        self.design = Design.of(self.x, self.y)
        self._device = DeviceCache(
            shifts=shifts, xt=self.x.T.contiguous(), y=self.y, table=self._model_table(), size_prior=self._size_prior
        )

    def _model_table(self) -> Tensor:
        """Per model: log p(gamma) - k/2 log(2 pi g) + 1/2 log|X_gamma^T X_gamma| and k, float64 [2^15, 2].

        Under the hyper-g prior the table leaves out -k/2 log g, which then depends on theta.
        """
        log_g = 0.0 if self.hyper else math.log(self.g)
        constants, dims = [], []
        for start in range(0, self.model_space.num_models, CHUNK):
            index = torch.arange(start, min(start + CHUNK, self.model_space.num_models))
            fac = posterior.subset_factors(self.design, self.model_space.bits(index))
            size = fac.dims.long()
            constants.append(self._size_prior[size] - 0.5 * fac.dims * (LOG_2PI + log_g) + fac.half_log_det)
            dims.append(fac.dims)
        return torch.stack([torch.cat(constants), torch.cat(dims)], dim=1)

    # ------------------------------------------------------------------ contract
    def config(self) -> dict[str, Any]:
        """Constructor arguments (g resolved to n = 47 when not given; None under the hyper-g prior)."""
        config: dict[str, Any] = {"g": None if self.hyper else self.g, "model_prior": self.model_prior}
        if self.hyper:
            config |= {"g_prior": self.g_prior, "hyper_a": self.hyper_a}
        return config

    def unavailable_reason(self) -> str | None:
        """Why UScrime.csv cannot be used, or None."""
        return self._reason

    def mask(self, model_index: Tensor) -> Tensor:
        """[1, gamma_1..gamma_15, 1]: the intercept, the chosen slopes and log s2."""
        return self._mask(torch, model_index, self._device.get("shifts", model_index.device))

    def _mask(self, xp: Any, model_index: Any, shifts: Any) -> Any:
        return ((2 * model_index + self._always)[:, None] >> shifts) & 1 == 1

    def log_model_prior(self, model_index: Tensor) -> Tensor:
        """Uniform (2^-15) or beta-binomial (1 / (16 C(15, k)))."""
        k = self.model_space.bits(model_index).sum(-1)
        return self._device.get("size_prior", model_index.device).index_select(0, k)

    def log_joint_with(self, xp: Any, model_index: Any, theta: Any) -> Any:
        """log p(gamma) + log N(y; alpha + X beta, s2 I) + log N(beta_gamma; 0, g s2 (X_gamma^T X_gamma)^-1).

        Under the hyper-g prior g = exp(w), w = theta[:, 17], and the log joint adds log pi(g) + w.
        """
        n, k = self.num_observations, NUM_COVARIATES
        active = self._mask(xp, model_index, xp.constant(self._device, "shifts", model_index, exact_dtype=False))
        table = xp.take(xp.constant(self._device, "table", theta), model_index)
        theta = xp.where(active, theta, 0.0)
        alpha, beta, log_s2 = theta[:, 0], theta[:, 1 : k + 1], theta[:, k + 1]
        inv_s2 = xp.exp(-log_s2)
        fitted = beta @ xp.constant(self._device, "xt", theta)  # X beta [B, n], X centred
        residual = xp.constant(self._device, "y", theta) - alpha[:, None] - fitted
        log_lik = -0.5 * n * (LOG_2PI + log_s2) - 0.5 * xp.row_sum(residual * residual) * inv_s2
        # beta^T X^T X beta = ||X beta||^2
        quad = xp.row_sum(fitted * fitted) * inv_s2
        if self.hyper:
            log_g = theta[:, k + 2]
            # log((a - 2) / 2) - a/2 log(1 + g) + w, with log(1 + e^w) = max(w, 0) + log1p(e^-|w|)
            softplus = xp.maximum(log_g, 0.0 * log_g) + xp.log1p(xp.exp(-xp.abs(log_g)))
            log_hyper = math.log(0.5 * (self.hyper_a - 2.0)) - 0.5 * self.hyper_a * softplus + log_g
            log_prior = table[:, 0] - 0.5 * table[:, 1] * (log_s2 + log_g) - 0.5 * quad * xp.exp(-log_g) + log_hyper
        else:
            log_prior = table[:, 0] - 0.5 * table[:, 1] * log_s2 - 0.5 * quad / self.g
        return xp.nan_to_neg_inf(log_lik + log_prior)

    # --------------------------------------------------------------- exact answers
    def _enumerate(self) -> dict[str, Any]:
        """Subset factors, log evidence and H(theta | gamma) of all 2^15 models (once per configuration)."""
        key = (self.g, self.model_prior, self.g_prior, self.hyper_a)
        if self._exact is None:
            self._exact = _EXACT_CACHE.get(key)
        if self._exact is None:
            parts: dict[str, list[Tensor]] = {"log_evidence": [], "entropy": [], "log_prior": []}
            factors = []
            chunk = GRID_CHUNK if self.hyper else CHUNK
            for start in range(0, self.model_space.num_models, chunk):
                index = torch.arange(start, min(start + chunk, self.model_space.num_models))
                fac = posterior.subset_factors(self.design, self.model_space.bits(index))
                factors.append(fac)
                if self.hyper:
                    log_evidence = hyper_g.log_evidence(self.design, fac, self.hyper_a)
                    entropy = hyper_g.entropy(self.design, fac, self.hyper_a, log_evidence)
                else:
                    log_evidence = posterior.log_evidence_given_g(self.design, fac, math.log(self.g))
                    entropy = posterior.conditional_entropy(self.design, fac, self.g)
                parts["log_evidence"].append(log_evidence)
                parts["entropy"].append(entropy)
                parts["log_prior"].append(self.log_model_prior(index))
            exact = exact_answers(
                torch.cat(parts["log_evidence"]), torch.cat(parts["log_prior"]), torch.cat(parts["entropy"])
            )
            self._exact = {
                "factors": posterior.SubsetFactors(
                    *(
                        torch.cat([getattr(f, name) for f in factors])
                        for name in ("chol", "half_log_det", "r2", "ols", "dims")
                    )
                ),
                **exact,
            }
            _EXACT_CACHE[key] = self._exact
        return self._exact

    def log_evidence(self) -> Tensor:
        """log p(y | gamma) of every model, float64 [2^15] (common improper-prior constant included)."""
        return self._enumerate()["log_evidence"]

    def posterior_model_probs(self) -> Tensor:
        """Exact p(gamma | y) of every model, float64 [2^15]."""
        return self._enumerate()["log_posterior"].exp()

    def inclusion_probabilities(self) -> Tensor:
        """Exact posterior inclusion probabilities P(gamma_j = 1 | y), float64 [15] in ``COVARIATES`` order."""
        prob = self.posterior_model_probs()
        bits = self.model_space.bits(torch.arange(self.model_space.num_models)).to(torch.float64)
        return prob @ bits

    def task_metrics(self, model_probs: ModelProbs | None, draws: Draws | None) -> dict[str, Estimate]:
        """``inclusion_max_abs``: the largest error of any covariate's inclusion probability under q(gamma).

        Raftery, Madigan & Hoeting (1997) report inclusion probabilities, so this is the figure a user of this data
        reads; q is normalised by its total (1 for a complete estimate).
        """
        if model_probs is None:
            return {}
        bits = self.model_space.bits(model_probs.index.to(torch.int64)).to(torch.float64)
        weights = model_probs.prob.to(torch.float64) / model_probs.total()
        error = (weights @ bits - self.inclusion_probabilities()).abs()
        return {"inclusion_max_abs": Estimate(float(error.max()))}

    def model_label(self, model_index: int) -> str:
        """The covariates of a model joined by '+' ('1' for the intercept-only model)."""
        names = [name for j, name in enumerate(COVARIATES) if (int(model_index) >> j) & 1]
        return "+".join(names) or "1"

    def reference_model_probs(self) -> ModelProbs:
        """Exact p(gamma | y) (standard errors zero)."""
        return exact_model_probs(self._enumerate())

    def exact_log_evidence(self) -> float:
        """log Z = log sum_gamma p(y | gamma) p(gamma) (with the flat prior's constant 1 on alpha and log s2)."""
        return float(self._enumerate()["log_z"])

    def exact_entropy(self) -> float:
        """H(gamma, theta) = H(gamma) + sum_gamma p(gamma | y) H(alpha, beta_gamma, log s2 | gamma, y)."""
        return exact_joint_entropy(self._enumerate())

    def reference_draws(self, num_draws: int, generator: torch.Generator) -> Draws:
        """Exact draws gamma ~ p(gamma | y), theta ~ p(theta | gamma, y); float64 on the CPU, inactive entries zero."""
        gen = host_generator(generator)
        exact = self._enumerate()
        model_index = torch.multinomial(exact["log_posterior"].exp(), num_draws, replacement=True, generator=gen)
        theta = torch.zeros(num_draws, self.dim_max, dtype=torch.float64)
        for part in torch.arange(num_draws).split(GRID_CHUNK if self.hyper else CHUNK):
            rows = model_index[part]
            masks = self.model_space.bits(rows)
            if self.hyper:  # w = log g | gamma, y exactly (rejection on the grid), then the rest given g
                models, inverse = torch.unique(rows, return_inverse=True)
                log_g = hyper_g.sample_log_g(self.design, exact["factors"].take(models), self.hyper_a, inverse, gen)
                theta[part, NUM_COVARIATES + 2] = log_g
                g = log_g.exp()
            else:
                g = torch.full((len(rows),), self.g, dtype=torch.float64)
            alpha, beta, log_s2 = posterior.sample_given_g(self.design, exact["factors"].take(rows), masks, g, gen)
            theta[part, : NUM_COVARIATES + 2] = torch.cat([alpha[:, None], beta, log_s2[:, None]], dim=1)
        return Draws(model_index, theta)

    def training_draws(self, num_draws: int, generator: torch.Generator) -> Draws:
        """Fresh exact draws from a stream derived from ``generator`` that the scoring draws never use."""
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device)) ^ TRAINING_STREAM
        return self.reference_draws(num_draws, torch.Generator().manual_seed(seed))
