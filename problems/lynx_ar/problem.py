"""Autoregressive order selection for the Canadian lynx series, with exact evidences, draws and entropy.

Data (:mod:`problems.lynx_ar.data`): y_t = log10(lynx_t) - mean, t = 1821..1934 (114 values). A model is an order
p in 0..P (``CountSpace(0, P, "p")``, uniform prior 1 / (P + 1)); every order explains the same n = 114 - P
responses y_t, t > P, given the first P values (the conditional likelihood),

    y_t = phi_1 y_{t-1} + ... + phi_p y_{t-p} + e_t,    e_t ~ N(0, sigma^2).

No intercept: the series is centred by its sample mean. No stationarity constraint is imposed on phi (the conjugate
prior has full support); the evidences are then those of regressions on the lags. Priors (conjugate
normal-inverse-gamma): ``prior="g"`` (default), Zellner's g-prior phi_{1:p} | sigma^2 ~ N(0, g sigma^2
(X_p^T X_p)^{-1}) on the first p lag columns X_p, g = n by default; ``prior="independent"``, phi_j | sigma^2 ~
N(0, sigma^2 tau^2) (tau = prior_scale); sigma^2 ~ IG(a0, b0) with a0 = 2, b0 = 0.1 by default.

theta = (phi_1..phi_P, log sigma^2); the mask keeps phi_1..phi_p and log sigma^2 active, and the log joint includes
the Jacobian sigma^2 of the log transform. The evidence p(y | p) is in closed form, so p(p | y), log Z, exact posterior
draws and the entropy H(p, theta) are exact (the batched Cholesky machinery of :mod:`problems.conjugate_vs.posterior`,
which treats the lag matrix as a design without intercept).
Details: docs/problems.md, "lynx-ar: autoregressive order of the Canadian lynx series".
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from problems.conjugate_vs import posterior
from problems.conjugate_vs.posterior import PRIORS, ConjugatePrior, Sufficient
from problems.enumerated import exact_answers, exact_joint_entropy, exact_model_probs
from problems.lynx_ar.data import DATA_FILE, NUM_YEARS, lagged, load_lynx
from suite.core.model_space import CountSpace
from suite.core.problem import Problem
from suite.core.registry import register_problem
from suite.core.tensor_ops import DeviceCache, host_generator
from suite.core.types import Draws, ModelProbs
from suite.data.locate import unavailable_reason

#: Mixed into the seed of training draws so that they never share a stream with the scoring draws.
TRAINING_STREAM = 0x1A7C_0A12
LOG_2PI = math.log(2.0 * math.pi)
#: Draws per sampling chunk (each gathers its rows' P x P Cholesky factors: 8192 x 20 x 20 float64 is 26 MB).
DRAW_CHUNK = 8192


@register_problem("lynx-ar")
class LynxAR(Problem):
    """AR order p in 0..P of the centred log10 lynx series; conjugate NIG prior, exact p(p | y)."""

    main_metric: ClassVar[str] = "model_prob_tv"
    #: Not in the default quick run (five classics x eleven methods x three seeds would take it past its 15-minute
    #: budget): `--problems classics` runs them in any profile (docs/problems.md).
    planned_in: ClassVar[tuple[str, ...]] = ("paper",)
    groups: ClassVar[tuple[str, ...]] = ("classics",)
    time_budgets: ClassVar[dict[str, float]] = {"quick": 6.0}

    def __init__(
        self,
        max_order: int = 20,
        prior: str = "g",
        g: float | None = None,
        prior_scale: float = 1.0,
        a0: float = 2.0,
        b0: float = 0.1,
    ) -> None:
        if not isinstance(max_order, int) or isinstance(max_order, bool) or not 1 <= max_order <= 40:
            raise ValueError(f"max_order must be an int in [1, 40]; got {max_order!r}")
        if prior not in PRIORS:
            raise ValueError(f"prior must be one of {', '.join(PRIORS)}; got {prior!r}")
        n = NUM_YEARS - max_order
        g = float(n) if g is None else g
        for label, value in (("g", g), ("prior_scale", prior_scale), ("a0", a0), ("b0", b0)):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{label} must be positive and finite; got {value!r}")
        self._config = {
            "max_order": max_order,
            "prior": prior,
            "g": float(g),
            "prior_scale": float(prior_scale),
            "a0": float(a0),
            "b0": float(b0),
        }
        self.hyper = ConjugatePrior("inverse-gamma", prior, float(prior_scale), float(g), 1.0, float(a0), float(b0))
        self.max_order = max_order
        self.model_space = CountSpace(0, max_order, "p")
        self.dim_max = max_order + 1
        self.num_observations = n
        self._log_model_prior = -math.log(max_order + 1)
        self._reason = unavailable_reason(DATA_FILE)
        self._exact: dict[str, Any] | None = None
        if self._reason is not None:
            self.x = self.y = None
            self._device = DeviceCache(masks=self._masks())
            return
        data = lagged(load_lynx(), max_order)
        self.x, self.y, self.series = data.x, data.y, data.series
        self.stats = Sufficient.of(self.x, self.y)
        self._device = DeviceCache(masks=self._masks(), xt=self.x.T.contiguous(), y=self.y, table=self._model_table())

    # ------------------------------------------------------------------ set-up
    def _masks(self) -> Tensor:
        """[P + 1, P + 1]: row p keeps phi_1..phi_p and the last coordinate (log sigma^2)."""
        order = torch.arange(self.max_order + 1)
        coefficients = order[None, : self.max_order] < order[:, None]
        return torch.cat([coefficients, torch.ones(self.max_order + 1, 1, dtype=torch.bool)], dim=1)

    def _model_table(self) -> Tensor:
        """Per order p: [constant of log p(p) + log p(phi | p, s2) without its s2 and phi terms, p] ([P + 1, 2]).

        g-prior: -p/2 log(2 pi g) + 1/2 log|X_p^T X_p|; independent: -p/2 log(2 pi tau^2).
        """
        hyper, masks = self.hyper, self._masks()[:, : self.max_order]
        dims = masks.sum(-1).to(torch.float64)
        if hyper.prior == "g":
            chol = torch.linalg.cholesky(posterior.saturate(self.stats.gram, masks))
            half_log_det = torch.diagonal(chol, dim1=-2, dim2=-1).log().sum(-1)
            constant = -0.5 * dims * (LOG_2PI + math.log(hyper.g)) + half_log_det
        else:
            constant = -0.5 * dims * (LOG_2PI + 2.0 * math.log(hyper.prior_scale))
        return torch.stack([constant + self._log_model_prior, dims], dim=1)

    # ------------------------------------------------------------------ contract
    def config(self) -> dict[str, Any]:
        """Constructor arguments (g resolved to n = 114 - max_order when not given)."""
        return dict(self._config)

    def unavailable_reason(self) -> str | None:
        """Why lynx.csv cannot be used, or None."""
        return self._reason

    def mask(self, model_index: Tensor) -> Tensor:
        """phi_1..phi_p and log sigma^2."""
        return self._device.get("masks", model_index.device).index_select(0, model_index)

    def log_model_prior(self, model_index: Tensor) -> Tensor:
        """Uniform over the orders 0..P."""
        return torch.full(model_index.shape, self._log_model_prior, dtype=torch.float64, device=model_index.device)

    def log_joint_with(self, xp: Any, model_index: Any, theta: Any) -> Any:
        """log p(p) + log N(y; X phi, s2 I) + log p(phi | p, s2) + log IG(s2; a0, b0) + log s2 (u = log s2)."""
        hyper, n, k = self.hyper, self.num_observations, self.max_order
        active = xp.take(xp.constant(self._device, "masks", theta, exact_dtype=False), model_index)
        table = xp.take(xp.constant(self._device, "table", theta), model_index)
        theta = xp.where(active, theta, 0.0)
        phi, log_s2 = theta[:, :k], theta[:, k]
        inv_s2 = xp.exp(-log_s2)
        fitted = phi @ xp.constant(self._device, "xt", theta)
        residual = fitted - xp.constant(self._device, "y", theta)
        log_lik = -0.5 * n * (LOG_2PI + log_s2) - 0.5 * xp.row_sum(residual * residual) * inv_s2
        if hyper.prior == "g":
            quad = xp.row_sum(fitted * fitted) / hyper.g  # phi^T X^T X phi / g
        else:
            quad = xp.row_sum(phi * phi) / hyper.prior_scale**2
        log_prior = table[:, 0] - 0.5 * table[:, 1] * log_s2 - 0.5 * quad * inv_s2
        log_ig = (hyper.a0 * math.log(hyper.b0) - math.lgamma(hyper.a0)) - hyper.a0 * log_s2 - hyper.b0 * inv_s2
        return xp.nan_to_neg_inf(log_lik + log_prior + log_ig)

    # --------------------------------------------------------------- exact answers
    def _enumerate(self) -> dict[str, Any]:
        """Posterior factors, log evidence and H(theta | p) of every order (once per instance)."""
        if self._exact is None:
            masks = self._masks()[:, : self.max_order]
            fac = posterior.factors(self.stats, self.hyper, masks)
            entropy = posterior.conditional_entropy(self.hyper, self.stats.n, masks, fac)
            self._exact = {"factors": fac, **exact_answers(fac.log_evidence, self._log_model_prior, entropy)}
        return self._exact

    def log_evidence(self) -> Tensor:
        """log p(y | p) of every order 0..P, float64 [P + 1]."""
        return self._enumerate()["factors"].log_evidence

    def reference_model_probs(self) -> ModelProbs:
        """Exact p(p | y) (standard errors zero)."""
        return exact_model_probs(self._enumerate())

    def exact_log_evidence(self) -> float:
        """log Z = log sum_p p(y | p) / (P + 1)."""
        return float(self._enumerate()["log_z"])

    def exact_entropy(self) -> float:
        """H(p, theta) = H(p) + sum_p p(p | y) H(phi_{1:p}, log s2 | p, y)."""
        return exact_joint_entropy(self._enumerate())

    def reference_draws(self, num_draws: int, generator: torch.Generator) -> Draws:
        """Exact draws p ~ p(p | y), (phi, log s2) ~ p(. | p, y); float64 on the CPU, inactive entries zero."""
        gen = host_generator(generator)
        exact = self._enumerate()
        model_index = torch.multinomial(exact["log_posterior"].exp(), num_draws, replacement=True, generator=gen)
        theta = torch.zeros(num_draws, self.dim_max, dtype=torch.float64)
        for part in torch.arange(num_draws).split(DRAW_CHUNK):
            rows = model_index[part]
            masks = self._masks()[:, : self.max_order].index_select(0, rows)
            phi, log_s2 = posterior.sample(self.hyper, self.stats.n, masks, exact["factors"].take(rows), gen)
            theta[part] = torch.cat([phi, log_s2[:, None]], dim=1)
        return Draws(model_index, theta)

    def training_draws(self, num_draws: int, generator: torch.Generator) -> Draws:
        """Fresh exact draws from a stream derived from ``generator`` that the scoring draws never use."""
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device)) ^ TRAINING_STREAM
        return self.reference_draws(num_draws, torch.Generator().manual_seed(seed))
