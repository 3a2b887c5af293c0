"""Exactly solvable variable selection: conjugate Gaussian linear regression over all covariate subsets.

Data (:mod:`problems.conjugate_vs.data`): n rows of p covariates x_i ~ N(0, Sigma), Sigma_jk = rho^|j-k|,
an intercept column, and y = X beta* + N(0, noise_variance) with a sparse beta* of moderate signal.
A model is a subset gamma in {0, 1}^p of covariates (``BinarySpace(p)``, uniform model prior); the
intercept is always included, so the coefficients' mask is [1, gamma]. Noise and priors
(:mod:`problems.conjugate_vs.posterior`):

- ``noise="known"``: sigma^2 = noise_variance is fixed; theta = beta (dim_max = p + 1);
- ``noise="inverse-gamma"``: sigma^2 ~ IG(a0, b0), and theta = (beta, log sigma^2) with the last
  coordinate always active (dim_max = p + 2; the log joint includes the Jacobian sigma^2);
- ``prior="independent"``: beta_j ~ N(0, tau^2) on active coefficients (N(0, sigma^2 tau^2) with IG noise);
- ``prior="g"``: Zellner's g-prior beta_A ~ N(0, g sigma^2 (X_A^T X_A)^{-1}) on all active
  coefficients, intercept included (g = n by default: the unit-information prior).

Everything is exact in float64: the evidence p(y | gamma) of all 2^p models (batched Cholesky
factorisations in chunks, computed once per instance), p(gamma | y), log Z = log p(y), exact
posterior draws, and the joint entropy H(gamma, theta) in the unconstrained coordinates.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from problems.conjugate_vs import posterior
from problems.conjugate_vs.data import generate
from problems.conjugate_vs.posterior import NOISES, PRIORS, ConjugatePrior, Sufficient
from problems.enumerated import exact_answers, exact_joint_entropy, exact_model_probs
from suite.core.backend import TORCH
from suite.core.model_space import BinarySpace
from suite.core.problem import Problem
from suite.core.registry import register_problem, register_problem_variant
from suite.core.tensor_ops import DeviceCache
from suite.core.types import Draws, ModelProbs

#: Subsets per batched Cholesky chunk: 2^14 saturated 21 x 21 float64 matrices are about 58 MB each copy.
CHUNK = 2**14
#: Draws per sampling chunk (each gathers its models' factors).
DRAW_CHUNK = 8192
#: Mixed into the seed of training draws so that they never share a stream with the scoring draws.
TRAINING_STREAM = 0x5EED_7A1E
SWEEP_NAME = "conjugate-vs cardinality (exact reference)"
LOG_2PI = math.log(2.0 * math.pi)
#: Exact per-model answers by configuration, shared by instances (2^20 models take seconds to enumerate).
_EXACT_CACHE: dict[tuple, dict[str, Tensor]] = {}


@register_problem("conjugate-vs")
class ConjugateVS(Problem):
    """Conjugate Gaussian linear-regression variable selection with exact evidence, draws and entropy."""

    main_metric: ClassVar[str] = "model_prob_tv"
    #: The general form (any num_covariates) runs only when named; the sweep instances below are planned.
    planned_in: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        num_covariates: int = 8,
        noise: str = "inverse-gamma",
        prior: str = "g",
        correlation: float = 0.6,
        num_observations: int = 100,
        data_seed: int = 1,
        prior_scale: float = 1.0,
        g: float | None = None,
        noise_variance: float = 1.0,
        a0: float = 1.0,
        b0: float = 1.0,
    ) -> None:
        if not isinstance(num_covariates, int) or isinstance(num_covariates, bool) or not 1 <= num_covariates <= 24:
            raise ValueError(
                f"num_covariates must be an int in [1, 24] (all 2^p models are enumerated); got {num_covariates!r}"
            )
        if noise not in NOISES:
            raise ValueError(f"noise must be one of {', '.join(NOISES)}; got {noise!r}")
        if prior not in PRIORS:
            raise ValueError(f"prior must be one of {', '.join(PRIORS)}; got {prior!r}")
        if not (isinstance(correlation, int | float) and -1.0 < correlation < 1.0):
            raise ValueError(f"correlation must lie in (-1, 1); got {correlation!r}")
        if not isinstance(num_observations, int) or num_observations < num_covariates + 2:
            raise ValueError(
                f"num_observations must be an int >= num_covariates + 2 (a full-rank design); got {num_observations!r}"
            )
        if not isinstance(data_seed, int):
            raise ValueError(f"data_seed must be an int; got {data_seed!r}")
        g = float(num_observations) if g is None else g
        for label, value in (
            ("prior_scale", prior_scale),
            ("g", g),
            ("noise_variance", noise_variance),
            ("a0", a0),
            ("b0", b0),
        ):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{label} must be positive and finite; got {value!r}")
        self._config = {
            "num_covariates": num_covariates,
            "noise": noise,
            "prior": prior,
            "correlation": float(correlation),
            "num_observations": num_observations,
            "data_seed": data_seed,
            "prior_scale": float(prior_scale),
            "g": float(g),
            "noise_variance": float(noise_variance),
            "a0": float(a0),
            "b0": float(b0),
        }
        self.hyper = ConjugatePrior(
            noise, prior, float(prior_scale), float(g), float(noise_variance), float(a0), float(b0)
        )
        self.model_space = BinarySpace(num_covariates)
        self.num_coefficients = num_covariates + 1
        self.dim_max = self.num_coefficients + (noise == "inverse-gamma")
        data = generate(num_covariates, num_observations, float(correlation), float(noise_variance), data_seed)
        self.x, self.y, self.true_beta = data.x, data.y, data.beta
        #: Index of the data-generating model (its nonzero covariates).
        self.true_model_index = sum(1 << (j - 1) for j in data.relevant if j > 0)
        self.stats = Sufficient.of(self.x, self.y)
        self._log_model_prior = -num_covariates * math.log(2.0)
        # Bits of (2 m + always): bit 0 the intercept, bits 1..p gamma, bit p + 1 log s2 (IG noise only).
        self._always = 1 + ((1 << self.num_coefficients) if noise == "inverse-gamma" else 0)
        self._device = DeviceCache(
            xt=self.x.T.contiguous(),
            y=self.y,
            gram=self.stats.gram,
            eye=torch.eye(self.num_coefficients, dtype=torch.float64),
            shifts=torch.arange(self.dim_max, dtype=torch.int64),
        )
        self._exact: dict[str, Tensor] | None = None

    # ------------------------------------------------------------------ contract
    def config(self) -> dict[str, Any]:
        """Constructor arguments (g resolved)."""
        return dict(self._config)

    def mask(self, model_index: Tensor) -> Tensor:
        """[1, gamma_1..gamma_p] (and a final 1 for log sigma^2 with inverse-gamma noise)."""
        return self._mask(TORCH, model_index)

    def _mask(self, xp: Any, model_index: Any) -> Any:
        shifts = xp.constant(self._device, "shifts", model_index, exact_dtype=False)
        return ((2 * model_index + self._always)[:, None] >> shifts) & 1 == 1

    def log_model_prior(self, model_index: Tensor) -> Tensor:
        """Uniform over the 2^p subsets."""
        return torch.full(model_index.shape, self._log_model_prior, dtype=torch.float64, device=model_index.device)

    def log_joint_with(self, xp: Any, model_index: Any, theta: Any) -> Any:
        """log p(gamma) + log N(y; X beta, s2 I) + log p(beta_A | s2) (+ log IG(s2) + log s2 for IG noise)."""
        hyper, stats, k = self.hyper, self.stats, self.num_coefficients
        active = self._mask(xp, model_index)
        theta = xp.where(active, theta, 0.0)
        coef_active = active[:, :k]
        beta = theta[:, :k]
        d = xp.row_sum(xp.cast(coef_active, theta))
        fitted = beta @ xp.constant(self._device, "xt", theta)
        residual = fitted - xp.constant(self._device, "y", theta)
        sse = xp.row_sum(residual * residual)
        if hyper.noise == "known":
            log_s2, inv_s2 = math.log(hyper.noise_variance), 1.0 / hyper.noise_variance
            extra = 0.0
        else:
            log_s2 = theta[:, k]
            inv_s2 = xp.exp(-log_s2)
            # log IG(s2; a0, b0) + log s2 (the Jacobian of s2 = exp(u)).
            extra = (hyper.a0 * math.log(hyper.b0) - math.lgamma(hyper.a0)) - hyper.a0 * log_s2 - hyper.b0 * inv_s2
        log_lik = -0.5 * stats.n * (LOG_2PI + log_s2) - 0.5 * sse * inv_s2
        if hyper.prior == "independent":
            # beta_j ~ N(0, tau^2) (known noise) or N(0, tau^2 s2) (IG noise)
            tau2 = hyper.prior_scale**2
            log_var = math.log(tau2) + (0.0 if hyper.noise == "known" else log_s2)
            inv_var = 1.0 / tau2 if hyper.noise == "known" else inv_s2 / tau2
            log_prior = -0.5 * d * (LOG_2PI + log_var) - 0.5 * xp.row_sum(beta * beta) * inv_var
        else:
            gram = xp.where(
                coef_active[:, :, None] & coef_active[:, None, :],
                xp.constant(self._device, "gram", theta),
                xp.constant(self._device, "eye", theta),
            )
            half_log_det = xp.row_sum(xp.log(xp.diagonal(xp.cholesky(gram))))
            log_prior = (
                -0.5 * d * (LOG_2PI + math.log(hyper.g) + log_s2)
                + half_log_det
                - 0.5 * xp.row_sum(fitted * fitted) * inv_s2 / hyper.g
            )
        return xp.nan_to_neg_inf(log_lik + log_prior + extra + self._log_model_prior)

    # --------------------------------------------------------------- exact answers
    def _enumerate(self) -> dict[str, Tensor]:
        """Log evidence and H(theta | m) of every model (computed once per configuration, in chunks of CHUNK)."""
        key = tuple(sorted(self._config.items()))
        if self._exact is None and key in _EXACT_CACHE:
            self._exact = _EXACT_CACHE[key]
        if self._exact is None:
            precision = posterior.precision_matrix(self.stats, self.hyper)
            log_evidence, entropy = [], []
            for start in range(0, self.model_space.num_models, CHUNK):
                index = torch.arange(start, min(start + CHUNK, self.model_space.num_models))
                masks = self.mask(index)[:, : self.num_coefficients]
                fac = posterior.factors(self.stats, self.hyper, masks, precision)
                log_evidence.append(fac.log_evidence)
                entropy.append(posterior.conditional_entropy(self.hyper, self.stats.n, masks, fac))
            self._exact = exact_answers(torch.cat(log_evidence), self._log_model_prior, torch.cat(entropy))
            _EXACT_CACHE[key] = self._exact
        return self._exact

    def log_evidence(self) -> Tensor:
        """log p(y | m) of every model, float64 [2^p]."""
        return self._enumerate()["log_evidence"]

    def reference_model_probs(self) -> ModelProbs:
        """Exact p(m | y) of all 2^p models (standard errors zero)."""
        return exact_model_probs(self._enumerate())

    def exact_log_evidence(self) -> float:
        """log Z = log p(y) = logsumexp_m (log p(y | m) + log p(m))."""
        return float(self._enumerate()["log_z"])

    def exact_entropy(self) -> float:
        """H(m, theta) = H(m) + sum_m p(m) H(theta | m), theta in the unconstrained active coordinates."""
        return exact_joint_entropy(self._enumerate())

    def model_factors(self, model_index: Tensor) -> posterior.Factors:
        """Exact posterior factors of the given models (any number; evaluated once per row)."""
        return posterior.factors(self.stats, self.hyper, self.mask(model_index.cpu())[:, : self.num_coefficients])

    def reference_draws(self, num_draws: int, generator: torch.Generator) -> Draws:
        """Exact draws: m ~ p(m | y), theta ~ p(theta | m, y); float64 on the CPU, inactive entries zero."""
        gen = _cpu_generator(generator)
        prob = self._enumerate()["log_posterior"].exp()
        model_index = torch.multinomial(prob, num_draws, replacement=True, generator=gen)
        models, inverse = torch.unique(model_index, return_inverse=True)
        theta = torch.zeros(num_draws, self.dim_max, dtype=torch.float64)
        for start in range(0, len(models), DRAW_CHUNK):
            fac = self.model_factors(models[start : start + DRAW_CHUNK])
            rows = torch.nonzero((inverse >= start) & (inverse < start + DRAW_CHUNK)).flatten()
            for part in rows.split(DRAW_CHUNK):
                masks = self.mask(model_index[part])[:, : self.num_coefficients]
                picked = fac.take(inverse[part] - start)
                beta, log_s2 = posterior.sample(self.hyper, self.stats.n, masks, picked, gen)
                theta[part, : self.num_coefficients] = beta
                if self.dim_max > self.num_coefficients:
                    theta[part, self.num_coefficients] = log_s2
        return Draws(model_index, theta)

    def training_draws(self, num_draws: int, generator: torch.Generator) -> Draws:
        """Fresh exact draws from a stream derived from ``generator`` that the scoring draws never use."""
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device)) ^ TRAINING_STREAM
        return self.reference_draws(num_draws, torch.Generator().manual_seed(seed))


def _cpu_generator(generator: torch.Generator) -> torch.Generator:
    """``generator`` itself on the CPU, else a CPU generator seeded from it."""
    if generator.device.type == "cpu":
        return generator
    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
    return torch.Generator().manual_seed(seed)


class _ConjugateVSSweep(ConjugateVS):
    """conjugate-vs with a fixed number of candidate covariates (one point of the cardinality sweep)."""

    num_covariates: ClassVar[int]
    planned_in: ClassVar[tuple[str, ...]] = ("paper",)
    #: Named in the quick profile (none is planned there), every method gets a minute: issue 32's budget for
    #: VTI's model distribution on 256 exact models.
    time_budgets: ClassVar[dict[str, float]] = {"quick": 60.0}


def _register_sweep(num_covariates: int, profiles: tuple[str, ...] = ("paper",)) -> type[ConjugateVS]:
    """Register ``conjugate-vs-p<num_covariates>`` (2^num_covariates models, exact reference)."""
    doc = (
        f"Conjugate Gaussian variable selection with {num_covariates} candidate covariates "
        f"(2^{num_covariates} = {2**num_covariates:,} models), exact evidence, draws and entropy."
    )
    return register_problem_variant(
        f"conjugate-vs-p{num_covariates}",
        _ConjugateVSSweep,
        {"num_covariates": num_covariates},
        doc,
        num_covariates=num_covariates,
        planned_in=profiles,
        sweep=(SWEEP_NAME, num_covariates),
    )


#: p = 8 in every profile; p = 12, 16, 20 in the paper profile only (each runs in any profile when named).
SWEEP = {p: _register_sweep(p, ("smoke", "paper") if p == 8 else ("paper",)) for p in (8, 12, 16, 20)}


class _ConjugateVSFig4(_ConjugateVSSweep):
    """conjugate-vs at one cardinality over several data sets (data seeds 1, 2, ...): VTI Fig. 4 on exact truth.

    Named explicitly only (``tdbench study vti-cardinality`` runs them): every method gets the same minute per data
    set in the quick profile, so the study compares methods at equal walltime as |M| grows.
    """

    planned_in: ClassVar[tuple[str, ...]] = ()
    data_sets: ClassVar[dict[str, int]] = {"smoke": 1, "quick": 3, "paper": 10}
    first_data_seed: ClassVar[int] = 1


#: VTI Fig. 4's cardinalities on exact truth (the paper's robust-vs points have no exact answer).
FIG4 = {
    p: register_problem_variant(
        f"conjugate-vs-fig4-p{p}",
        _ConjugateVSFig4,
        {"num_covariates": p},
        f"conjugate-vs with {p} covariates (2^{p} models) over 3 data sets (quick), exact answers: VTI Fig. 4.",
        num_covariates=p,
        sweep=("conjugate-vs Fig. 4 (exact reference)", p),
    )
    for p in (8, 12, 16, 20)
}
