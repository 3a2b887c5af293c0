"""Model distributions q(m) for VTI: the UCB surrogate sampler and score-function (Monte Carlo gradient) samplers.

Every sampler is an ``nn.Module`` built from ``(num_models, log_model_prior, device, dtype)`` plus its options (a
function ``log_model_prior_fn`` may replace the dense prior table where the space is too large for one) and
learns from one batch per training iteration through ``update(model_index, ell, flow_optimizer)``, where
``ell_b = log p(D, theta_b | m_b) - log q(theta_b | m_b)`` is the flow's per-sample ELBO contribution (detached;
non-finite entries are ignored). References: [VTI] Secs. 3.1-3.4 and App. B, D; methods spec sections 3 and 4.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from methods.flows.made import IncrementalMADE, zeroed_made
from suite.core.model_space import BinarySpace
from suite.core.types import ModelProbs

#: log p(m) as a function of int64 model indices, for spaces too large for a dense [M] table.
LogPriorFn = Callable[[Tensor], Tensor]

VARIANCE_MIN = 1e-10
VARIANCE_MAX = 1e6
#: The information-gain search halves the step until it falls below this scale, then discards the update.
MIN_STEP_SCALE = 1e-20
#: Score-function learning-rate schedule: linear warm-up from 1e-10 x lr over WARMUP_STEPS steps, then a slow decay.
WARMUP_STEPS = 10
WARMUP_START_FACTOR = 1e-10
LR_DECAY = 1.0 / (1.0 + 5e-6)
#: The information-gain threshold decays by this factor per step.
IG_THRESHOLD_DECAY = 1.0 / (1.0 + 5e-5)
LOGIT_CLAMP = 500.0
#: Strings per MADE pass when enumerating the whole space.
ENUMERATION_CHUNK = 2**16
MAX_ENUMERATED_BITS = 20


class ModelSampler(nn.Module, ABC):
    """A learnable distribution q(m) over model indices 0..M-1."""

    def __init__(
        self,
        num_models: int,
        log_model_prior: Tensor | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float64,
        *,
        log_model_prior_fn: LogPriorFn | None = None,
    ) -> None:
        super().__init__()
        if num_models < 1:
            raise ValueError("num_models must be positive")
        if log_model_prior is None and log_model_prior_fn is None:
            raise ValueError("give log_model_prior (a dense [M] table) or log_model_prior_fn")
        self.num_models = int(num_models)
        self.device = torch.device(device)
        self.dtype = dtype
        self._prior_fn = log_model_prior_fn
        self.last_diagnostics: dict[str, float] = {}
        if log_model_prior is not None:
            if log_model_prior.shape != (self.num_models,):
                raise ValueError(
                    f"log_model_prior must have shape [{self.num_models}], got {tuple(log_model_prior.shape)}"
                )
            self.register_buffer("log_model_prior", log_model_prior.detach().to(self.device, torch.float64).clone())
        else:
            self.register_buffer("log_model_prior", None)

    #: Plain Python attributes that change during training; kept in ``state_dict`` (as extra state) for resuming.
    resumable_attributes: ClassVar[tuple[str, ...]] = ("last_diagnostics",)

    def get_extra_state(self) -> dict[str, Any]:
        """The training state that is not a tensor (counters, running means), for :meth:`state_dict`."""
        return {name: getattr(self, name) for name in self.resumable_attributes}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_extra_state` returned."""
        for name in self.resumable_attributes:
            setattr(self, name, state[name])

    def prior_log_prob(self, model_index: Tensor) -> Tensor:
        """log p(m) of each index, float64."""
        if self.log_model_prior is None:
            return self._prior_fn(model_index).to(torch.float64)
        return self.log_model_prior[model_index]

    def prior_log_probs(self) -> Tensor:
        """log p(m) for all M models, [M] float64."""
        if self.log_model_prior is not None:
            return self.log_model_prior
        return self.prior_log_prob(torch.arange(self.num_models, device=self.device))

    @abstractmethod
    def sample(self, num: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """m ~ q(m): int64 [num] and log q(m) [num] (detached)."""

    @abstractmethod
    def log_prob(self, model_index: Tensor) -> Tensor:
        """log q(m) under the distribution reported as the posterior (detached)."""

    @abstractmethod
    def posterior_log_probs(self) -> Tensor:
        """log q(m) for all M models, [M] float64 (for enumerable spaces)."""

    @abstractmethod
    def update(
        self, model_index: Tensor, ell: Tensor, flow_optimizer: torch.optim.Optimizer | None = None
    ) -> dict[str, float]:
        """Learn from one batch; returns a few scalar diagnostics."""

    def diagnostics(self) -> dict[str, float]:
        """Diagnostics of the latest update."""
        return dict(self.last_diagnostics)

    @property
    def can_enumerate(self) -> bool:
        """Whether :meth:`posterior_log_probs` can list q(m) for every model."""
        return True

    def model_probs(self) -> ModelProbs:
        """The posterior q(m) of every model, as ModelProbs."""
        return ModelProbs.from_dense(self.posterior_log_probs().exp())


def _finite_batch(model_index: Tensor, ell: Tensor) -> tuple[Tensor, Tensor]:
    """The entries of a batch whose ELBO sample is finite."""
    keep = torch.isfinite(ell)
    return model_index[keep], ell[keep]


def _rank_within_group(group: Tensor, num_groups: int) -> Tensor:
    """0-based position of each entry among the earlier entries of its group (batch order)."""
    order = torch.argsort(group, stable=True)
    counts = torch.bincount(group, minlength=num_groups)
    start = torch.cumsum(counts, 0) - counts
    sorted_group = group[order]
    rank = torch.empty_like(group)
    rank[order] = torch.arange(group.numel(), device=group.device) - start[sorted_group]
    return rank


def _joined(tensors: list[Tensor]) -> Tensor:
    """The tensors as one flat vector: a view of a single one (one flat parameter vector), else a copy."""
    return tensors[0].reshape(-1) if len(tensors) == 1 else torch.cat([t.reshape(-1) for t in tensors])


def adam_step_mean_square(optimizer: torch.optim.Optimizer) -> float:
    """Mean over all parameter entries of the squared Adam(W) step lr_t m_hat / (sqrt(v_hat) + eps).

    Parameters without Adam state (no 'exp_avg') are left out; 0.0 when none has state.
    """
    total = 0.0
    count = 0
    for group in optimizer.param_groups:
        states = [optimizer.state[p] for p in group["params"] if "exp_avg" in optimizer.state.get(p, {})]
        if not states:
            continue
        beta1, beta2 = group["betas"]
        lr = float(group["lr"])
        eps = float(group["eps"])
        steps = torch.stack([torch.as_tensor(s["step"]) for s in states]).tolist()  # one sync, not one per parameter
        by_step: dict[float, list[dict[str, Tensor]]] = {}
        for state, t in zip(states, steps, strict=True):
            by_step.setdefault(t, []).append(state)
        # step_p = (lr / bias1) m / (sqrt(v) / sqrt(bias2) + eps) over all entries of a step count at once (all of
        # them, in practice): on a CPU a loop over the parameter tensors (the foreach kernels there) cost more.
        for t, same in by_step.items():
            exp_avg, exp_avg_sq = (_joined([s[key] for s in same]) for key in ("exp_avg", "exp_avg_sq"))
            denom = exp_avg_sq.sqrt().mul_(1.0 / math.sqrt(1.0 - beta2**t)).add_(eps)
            step = torch.div(exp_avg, denom).to(torch.float64)
            total += (lr / (1.0 - beta1**t)) ** 2 * float(torch.dot(step, step))
            count += step.numel()
    return total / count if count else 0.0


class DiagonalGaussianSurrogate(nn.Module):
    """Independent Gaussian beliefs N(mu_c, v_c) over each model's (scaled) ELBO, with observation variance s2.

    Observations are ``ell / scale``. ``observe`` is the sequential per-observation conjugate update of the authors'
    code, computed in closed form for the whole batch; ``evolve`` adapts s2, diffuses and couples the variances to
    the flow optimiser's step size (methods spec section 3.3). After every update variances are clamped to
    [1e-10, 1e6] and non-finite entries reset to the prior.
    """

    def __init__(
        self,
        num_models: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float64,
        *,
        prior_mean: float = 0.0,
        prior_variance: float = 1e2,
        obs_variance: float = 1.0,
        f_coupling: float = 1e2,
        obs_beta: float = 0.99,
        diffuse_prior: float = 1.0,
        max_entropy_gain: float = 0.0,
        scale: float = 1.0,
    ) -> None:
        super().__init__()
        if prior_variance <= 0 or obs_variance <= 0 or scale <= 0:
            raise ValueError("prior_variance, obs_variance and scale must be positive")
        if not 0 < diffuse_prior <= 1 or not 0 <= obs_beta <= 1 or max_entropy_gain < 0 or f_coupling < 0:
            raise ValueError("need 0 < diffuse_prior <= 1, 0 <= obs_beta <= 1, max_entropy_gain >= 0, f_coupling >= 0")
        self.num_models = int(num_models)
        self.prior_mean = prior_mean
        self.prior_variance = prior_variance
        self.obs_variance0 = obs_variance
        self.f_coupling = f_coupling
        self.obs_beta = obs_beta
        self.diffuse_prior = diffuse_prior
        self.max_entropy_gain = max_entropy_gain
        self.scale = scale
        self.register_buffer("mean", torch.full((num_models,), prior_mean, device=device, dtype=dtype))
        self.register_buffer("var", torch.full((num_models,), prior_variance, device=device, dtype=dtype))
        self.register_buffer("obs_var", torch.tensor(obs_variance, device=device, dtype=dtype))

    def _observations(self, model_index: Tensor, ell: Tensor) -> tuple[Tensor, Tensor]:
        """Finite entries of the batch, with observations scaled to the surrogate's units."""
        c, ell = _finite_batch(model_index, ell)
        return c, ell.to(self.mean.dtype) / self.scale

    def _precision_after(self, prec0: Tensor, k: Tensor) -> Tensor:
        """Precision after k capped observations starting from prec0 (max_entropy_gain > 0).

        Each observation sets P <- min(a P, P + 1/s2) with a = exp(2 MEG): multiplicative while
        P < P* = 1 / ((a - 1) s2), additive afterwards. The map is continuous at P*, so rounding in the
        number of multiplicative steps changes the result only at round-off level.
        """
        log_a = 2.0 * self.max_entropy_gain
        inv_s2 = 1.0 / self.obs_var
        p_star = inv_s2 / math.expm1(log_a)
        num_mult = torch.ceil(torch.log(p_star / prec0) / log_a).clamp_min(0.0)
        k = k.to(prec0.dtype)
        k_mult = torch.minimum(k, num_mult)
        return prec0 * torch.exp(k_mult * log_a) + (k - k_mult) * inv_s2

    @torch.no_grad()
    def observe(self, model_index: Tensor, ell: Tensor) -> None:
        """Condition the beliefs on a batch of ELBO samples (same result as one-by-one updates in batch order)."""
        c, x = self._observations(model_index, ell)
        if c.numel() == 0:
            return
        counts = torch.bincount(c, minlength=self.num_models).to(x.dtype)
        prec0 = 1.0 / self.var
        if self.max_entropy_gain == 0:
            sum_x = torch.zeros_like(self.mean).index_add_(0, c, x)
            prec_n = prec0 + counts / self.obs_var
            weighted = sum_x / self.obs_var
        else:
            # Observation j of category c carries weight P_{j+1} - P_j, its precision gain.
            rank = _rank_within_group(c, self.num_models)
            p_c = prec0[c]
            weight = self._precision_after(p_c, rank + 1) - self._precision_after(p_c, rank)
            weighted = torch.zeros_like(self.mean).index_add_(0, c, weight * x)
            prec_n = self._precision_after(prec0, counts)
        self.mean.copy_((prec0 * self.mean + weighted) / prec_n)
        self.var.copy_(1.0 / prec_n)
        self._sanitise()

    @torch.no_grad()
    def evolve(
        self, model_index: Tensor, ell: Tensor, flow_optimizer: torch.optim.Optimizer | None = None
    ) -> dict[str, float]:
        """Adapt s2, diffuse and couple variances to the flow step, after ``observe`` on the same batch.

        Step 1 deliberately differs from the authors' code, which blends the precision 1 / Var_b(mu_{c_b} - x_b)
        into the variance s2 (a QUIRK); here s2 <- (1 - g) s2 + g Var_b(mu_{c_b} - x_b) with
        g = (1 - obs_beta) * #unique(c_b) / M, i.e. a variance is blended into a variance (unbiased sample variance
        over the finite entries, means after ``observe``). Diffusion uses the full batch size B, finite or not.
        """
        c, x = self._observations(model_index, ell)
        if self.obs_beta < 1 and c.numel() >= 2:
            unique = int((torch.bincount(c, minlength=self.num_models) > 0).sum())
            gain = (1.0 - self.obs_beta) * unique / self.num_models
            self.obs_var.mul_(1.0 - gain).add_(gain * torch.var(self.mean[c] - x))
        if self.diffuse_prior < 1:
            self.var.div_(self.diffuse_prior ** (model_index.numel() / self.num_models))
        qll = 0.0
        if self.f_coupling > 0 and flow_optimizer is not None:
            qll = self.f_coupling * adam_step_mean_square(flow_optimizer)
            self.var.add_(qll)
        self._sanitise()
        return {"obs_var": float(self.obs_var), "qll": qll, "mean_var": float(self.var.mean())}

    def _sanitise(self) -> None:
        """Reset non-finite beliefs to the prior and clamp the variances."""
        bad = ~(torch.isfinite(self.mean) & torch.isfinite(self.var))
        self.mean.masked_fill_(bad, self.prior_mean)
        self.var.masked_fill_(bad, self.prior_variance).clamp_(VARIANCE_MIN, VARIANCE_MAX)
        self.obs_var.copy_(torch.where(torch.isfinite(self.obs_var), self.obs_var, self.obs_variance0))
        self.obs_var.clamp_(VARIANCE_MIN, VARIANCE_MAX)


class SurrogateSampler(ModelSampler):
    """q(m) from a diagonal Gaussian ELBO surrogate with an upper-confidence-bound utility ([VTI] Sec. 3.1).

    Utility u = mu + beta_ucb sqrt(v). Sampling (action) distribution: q(m) ∝ p(m) exp(u) ([VTI] eq. 14;
    ``include_prior=False`` drops p(m) as the authors' code does), or with ``squish=True`` logits softmax(u)
    (+ log p(m)). The reported posterior is ``posterior="mean"``: q(m) ∝ p(m) exp(scale * mu), the optimal q* of
    [VTI] eq. 13 with the surrogate mean as the ELBO estimate; or ``"action"``: the action distribution itself
    (the authors' code). ``sample`` returns log-probabilities of the action distribution.
    """

    def __init__(
        self,
        num_models: int,
        log_model_prior: Tensor | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float64,
        *,
        log_model_prior_fn: LogPriorFn | None = None,
        beta_ucb: float = 2.0,
        squish: bool = False,
        include_prior: bool = True,
        posterior: str = "mean",
        prior_mean: float = 0.0,
        prior_variance: float = 1e2,
        obs_variance: float = 1.0,
        f_coupling: float = 1e2,
        obs_beta: float = 0.99,
        diffuse_prior: float = 1.0,
        max_entropy_gain: float = 0.0,
        scale: float = 1.0,
    ) -> None:
        super().__init__(num_models, log_model_prior, device, dtype, log_model_prior_fn=log_model_prior_fn)
        if posterior not in ("mean", "action"):
            raise ValueError(f"posterior must be 'mean' or 'action', got {posterior!r}")
        self.beta_ucb = beta_ucb
        self.squish = squish
        self.include_prior = include_prior
        self.posterior = posterior
        self.surrogate = DiagonalGaussianSurrogate(
            num_models,
            device,
            dtype,
            prior_mean=prior_mean,
            prior_variance=prior_variance,
            obs_variance=obs_variance,
            f_coupling=f_coupling,
            obs_beta=obs_beta,
            diffuse_prior=diffuse_prior,
            max_entropy_gain=max_entropy_gain,
            scale=scale,
        )

    def utility(self) -> Tensor:
        """UCB utility mu + beta_ucb sqrt(v) of every model, [M]."""
        return self.surrogate.mean + self.beta_ucb * self.surrogate.var.sqrt()

    def action_log_probs(self) -> Tensor:
        """log q(m) of the sampling (action) distribution, [M]."""
        logits = self.utility()
        if self.squish:
            logits = torch.softmax(logits, 0)
        if self.include_prior:
            logits = logits + self.prior_log_probs().to(logits.dtype)
        return torch.log_softmax(logits, 0)

    def posterior_log_probs(self) -> Tensor:
        """log q(m) of the reported posterior for all models, [M] float64."""
        if self.posterior == "action":
            return self.action_log_probs().to(torch.float64)
        logits = self.prior_log_probs() + self.surrogate.scale * self.surrogate.mean.to(torch.float64)
        return torch.log_softmax(logits, 0)

    def log_prob(self, model_index: Tensor) -> Tensor:
        """log q(m) of the reported posterior."""
        return self.posterior_log_probs().to(self.dtype)[model_index]

    @torch.no_grad()
    def sample(self, num: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """m from the action distribution, with its log-probability."""
        log_q = self.action_log_probs()
        m = torch.multinomial(log_q.exp(), num, replacement=True, generator=generator)
        return m, log_q[m]

    def update(
        self, model_index: Tensor, ell: Tensor, flow_optimizer: torch.optim.Optimizer | None = None
    ) -> dict[str, float]:
        """Observe the batch's ELBO samples, then evolve the surrogate."""
        self.surrogate.observe(model_index, ell)
        out = self.surrogate.evolve(model_index, ell, flow_optimizer)
        with torch.no_grad():
            log_q = self.action_log_probs()
            out["entropy"] = float(-(log_q.exp() * log_q).sum())
        self.last_diagnostics = out
        return out


def importance_entropy(log_q_new: Tensor, log_q: Tensor) -> Tensor:
    """H(q') ~ -mean_n w_n log q'(m_n), w = q'/q, from draws m_n ~ q ([VTI] eqs. 54-56), summed in log space.

    The terms are positive since log q' <= 0, so the logsumexp is exact.
    """
    log_terms = log_q_new - log_q + torch.log(-log_q_new)
    return torch.exp(torch.logsumexp(log_terms, 0) - math.log(log_q.shape[0]))


class ScoreFunctionSampler(ModelSampler):
    """q_psi(m) trained by score-function gradients with a running-mean baseline and information-gain step control.

    Per-sample loss L_b = -ell_b + log q_psi(m_b) - log p(m_b); gradient of mean_b[(L_b - baseline) log q_psi(m_b)];
    SGD on psi whose step is halved until the entropy change is at most the (slowly decaying) threshold
    ([VTI] App. D; methods spec sections 4.2-4.4). The baseline follows the authors' code: the first batch
    initialises the running mean (baseline 0), later ones use the bias-corrected running mean avg / (1 - decay^i).
    """

    def __init__(
        self,
        num_models: int,
        log_model_prior: Tensor | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float64,
        *,
        log_model_prior_fn: LogPriorFn | None = None,
        sfe_lr: float = 1e-1,
        ig_threshold: float = 5e-3,
        baseline_decay: float = 0.9,
    ) -> None:
        super().__init__(num_models, log_model_prior, device, dtype, log_model_prior_fn=log_model_prior_fn)
        if sfe_lr <= 0 or ig_threshold < 0 or not 0 <= baseline_decay < 1:
            raise ValueError("need sfe_lr > 0, ig_threshold >= 0 and 0 <= baseline_decay < 1")
        self.sfe_lr = sfe_lr
        self.ig_threshold = ig_threshold
        self.baseline_decay = baseline_decay
        self.num_steps = 0
        self._num_batches = 0
        self._running_loss = 0.0

    resumable_attributes: ClassVar[tuple[str, ...]] = (
        *ModelSampler.resumable_attributes,
        "num_steps",
        "_num_batches",
        "_running_loss",
    )

    def lr_multiplier(self) -> float:
        """Factor applied to sfe_lr for this parameterisation."""
        return 1.0

    @property
    def gradient_needs_graph(self) -> bool:
        """Whether :meth:`_gradient` differentiates log q (the score-function gradient does; a closed form not)."""
        return True

    def learning_rate(self, step: int) -> float:
        """SGD learning rate at step ``step``: linear warm-up, then a slow multiplicative decay."""
        lr = self.sfe_lr * self.lr_multiplier()
        if step < WARMUP_STEPS:
            return lr * (WARMUP_START_FACTOR + (1.0 - WARMUP_START_FACTOR) * step / WARMUP_STEPS)
        return lr * LR_DECAY ** (step - WARMUP_STEPS)

    def threshold(self, step: int) -> float:
        """Information-gain threshold at step ``step``."""
        return self.ig_threshold * IG_THRESHOLD_DECAY**step

    @abstractmethod
    def _log_q(self, model_index: Tensor, params: dict[str, Tensor] | None = None) -> Tensor:
        """log q(m) with the module's parameters, or with ``params`` (functional call); keeps the graph."""

    @abstractmethod
    def _entropy(self, params: dict[str, Tensor] | None, model_index: Tensor, log_q: Tensor) -> Tensor:
        """Entropy (estimate) of q at ``params`` (None: current), given a batch m ~ q_psi and its log q_psi."""

    def log_prob(self, model_index: Tensor) -> Tensor:
        """log q_psi(m)."""
        with torch.no_grad():
            return self._log_q(model_index)

    def _baseline(self, mean_loss: float) -> float:
        """Update the running mean of the batch losses and return the control variate."""
        decay = self.baseline_decay
        i = self._num_batches
        self._num_batches += 1
        if i == 0:
            self._running_loss = mean_loss
            return 0.0
        self._running_loss = decay * self._running_loss + (1.0 - decay) * mean_loss
        return self._running_loss / (1.0 - decay**i)

    def update(
        self, model_index: Tensor, ell: Tensor, flow_optimizer: torch.optim.Optimizer | None = None
    ) -> dict[str, float]:
        """One score-function SGD step on psi with information-gain step control (flow_optimizer is unused)."""
        keep = torch.isfinite(ell)
        if not bool(keep.any()):
            return {"skipped": 1.0}
        names, params = zip(*self.named_parameters(), strict=True)
        with torch.set_grad_enabled(self.gradient_needs_graph):
            log_q_all = self._log_q(model_index)
        log_q = log_q_all[keep]
        loss = -ell[keep].to(torch.float64) + log_q.detach().to(torch.float64) - self.prior_log_prob(model_index[keep])
        mean_loss = float(loss.mean())
        baseline = self._baseline(mean_loss)
        grads = self._gradient(params, model_index[keep], loss - baseline, log_q)
        lr, thr = self.learning_rate(self.num_steps), self.threshold(self.num_steps)
        with torch.no_grad():
            scale, h0, h1 = self._controlled_step(names, params, grads, lr, model_index, log_q_all.detach(), thr)
        self.num_steps += 1
        self.last_diagnostics = {
            "sfe_loss": mean_loss,
            "baseline": baseline,
            "lr": lr,
            "step_scale": scale,
            "entropy": h1,
            "entropy_change": h1 - h0,
        }
        return self.last_diagnostics

    def _gradient(
        self, params: tuple[Tensor, ...], model_index: Tensor, centred_loss: Tensor, log_q: Tensor
    ) -> tuple[Tensor, ...]:
        """Score-function gradient mean_b[(L_b - baseline) grad log q(m_b)] of every parameter."""
        surrogate = (centred_loss.to(log_q.dtype) * log_q).mean()
        return torch.autograd.grad(surrogate, params, allow_unused=True, materialize_grads=True)

    def _controlled_step(
        self,
        names: tuple[str, ...],
        params: tuple[Tensor, ...],
        grads: tuple[Tensor, ...],
        lr: float,
        model_index: Tensor,
        log_q: Tensor,
        thr: float,
    ) -> tuple[float, float, float]:
        """Halve the step psi - lr scale g until |H(psi) - H(psi')| <= thr; apply it. Returns (scale, H0, H1)."""
        detached = [p.detach() for p in params]
        h0 = float(self._entropy(None, model_index, log_q))
        scale = 1.0
        while scale >= MIN_STEP_SCALE:
            trial = torch._foreach_add(detached, list(grads), alpha=-lr * scale)
            h1 = float(self._entropy(dict(zip(names, trial, strict=True)), model_index, log_q))
            if math.isfinite(h1) and abs(h0 - h1) <= thr:
                torch._foreach_copy_(detached, trial)
                return scale, h0, h1
            scale *= 0.5
        return 0.0, h0, h0


class CategoricalSampler(ScoreFunctionSampler):
    """q(m) = softmax(psi) with free logits psi in R^M (initially uniform); exact entropy; lr x max(log2 M, 1).

    ``natural=True`` replaces the score-function gradient by a batch estimate of the natural gradient (the
    gradient preconditioned by the inverse Fisher information of the softmax): the step on logit k is the mean
    centred loss of the batch's samples of model k, and 0 for models the batch did not draw. Its expectation is
    P(k drawn) (L_k - baseline), where the plain gradient's is q_k (L_k - E_q L): a model's logit moves at a rate
    that does not shrink with q_k, and a step of size 1 moves every drawn logit to log p(m) + ELBO_m (plus a
    constant), the optimum of q. The learning rate is then not multiplied by log2 M.
    """

    def __init__(
        self,
        num_models: int,
        log_model_prior: Tensor | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float64,
        *,
        log_model_prior_fn: LogPriorFn | None = None,
        sfe_lr: float = 1e-1,
        ig_threshold: float = 5e-3,
        baseline_decay: float = 0.9,
        natural: bool = False,
    ) -> None:
        super().__init__(
            num_models,
            log_model_prior,
            device,
            dtype,
            log_model_prior_fn=log_model_prior_fn,
            sfe_lr=sfe_lr,
            ig_threshold=ig_threshold,
            baseline_decay=baseline_decay,
        )
        self.natural = natural
        self.logits = nn.Parameter(torch.zeros(num_models, device=self.device, dtype=dtype))

    def lr_multiplier(self) -> float:
        """max(log2 M, 1), as in the authors' code; 1 for the natural gradient."""
        return 1.0 if self.natural else max(math.log2(self.num_models), 1.0)

    @property
    def gradient_needs_graph(self) -> bool:
        """The natural gradient is the batch's mean centred loss per model: no graph of log q needed."""
        return not self.natural

    def _gradient(
        self, params: tuple[Tensor, ...], model_index: Tensor, centred_loss: Tensor, log_q: Tensor
    ) -> tuple[Tensor, ...]:
        """The score-function gradient, or with ``natural`` each drawn model's mean centred loss."""
        if not self.natural:
            return super()._gradient(params, model_index, centred_loss, log_q)
        logits = self.logits
        total = torch.zeros(self.num_models, dtype=torch.float64, device=logits.device)
        total.index_add_(0, model_index, centred_loss.to(torch.float64))
        count = torch.bincount(model_index, minlength=self.num_models).to(torch.float64)
        return (torch.where(count > 0, total / count.clamp(min=1.0), 0.0).to(logits.dtype),)

    def _log_q(self, model_index: Tensor, params: dict[str, Tensor] | None = None) -> Tensor:
        logits = self.logits if params is None else params["logits"]
        return torch.log_softmax(logits, 0)[model_index]

    def _entropy(self, params: dict[str, Tensor] | None, model_index: Tensor, log_q: Tensor) -> Tensor:
        log_p = torch.log_softmax(self.logits if params is None else params["logits"], 0)
        return -(log_p.exp() * log_p).sum()

    def posterior_log_probs(self) -> Tensor:
        """log softmax(psi), [M] float64."""
        with torch.no_grad():
            return torch.log_softmax(self.logits.to(torch.float64), 0)

    @torch.no_grad()
    def sample(self, num: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """m ~ softmax(psi), with log q(m)."""
        log_q = torch.log_softmax(self.logits, 0)
        m = torch.multinomial(log_q.exp(), num, replacement=True, generator=generator)
        return m, log_q[m]


def made_num_blocks(num_bits: int) -> int:
    """Residual blocks of the MADE over ``num_bits`` bits (authors' rule, extended with 5 above 32 bits)."""
    for limit, blocks in ((8, 2), (16, 3), (32, 4)):
        if num_bits <= limit:
            return blocks
    return 5


def _binary_num_models(num_models: int | None, num_bits: int | None) -> int:
    """2^L from either num_models or num_bits (checked for consistency)."""
    if num_bits is not None:
        if not 1 <= num_bits <= 62:
            raise ValueError(f"num_bits must lie in [1, 62], got {num_bits}")
        if num_models is not None and num_models != 2**num_bits:
            raise ValueError(f"num_models={num_models} is not 2^num_bits = {2**num_bits}")
        return 2**num_bits
    if num_models is None or num_models < 2 or num_models & (num_models - 1):
        raise ValueError(f"num_models must be a power of two >= 2 (or give num_bits), got {num_models}")
    return num_models


class AutoregressiveSampler(ScoreFunctionSampler):
    """A score-function sampler too large for an exact entropy: the step control uses the importance estimate."""

    def _entropy(self, params: dict[str, Tensor] | None, model_index: Tensor, log_q: Tensor) -> Tensor:
        if params is None:
            return -log_q.mean()
        return importance_entropy(self._log_q(model_index, params), log_q)


class MADEBinarySampler(AutoregressiveSampler):
    """Autoregressive Bernoulli q(m) over the L bits of the model index, given by an nflows MADE.

    Bit j of the index (index = sum_j bit_j 2^j, as in ``BinarySpace``) is variable j in the autoregressive order,
    so its logit depends on bits 0..j-1 only. The final layer starts at zero (uniform q). The entropy in the step
    control is the importance-sampling estimate of [VTI] eqs. 54-56 on the current batch with the full weight
    w = q_psi'(m) / q_psi(m), including the (1 - sigmoid) ratios of zero bits; the authors' code uses only the
    sigmoid ratios, which deviates from the paper.
    """

    def __init__(
        self,
        num_models: int | None = None,
        log_model_prior: Tensor | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float64,
        *,
        num_bits: int | None = None,
        log_model_prior_fn: LogPriorFn | None = None,
        sfe_lr: float = 1e-1,
        ig_threshold: float = 5e-3,
        baseline_decay: float = 0.9,
    ) -> None:
        num_models = _binary_num_models(num_models, num_bits)
        super().__init__(
            num_models,
            log_model_prior,
            device,
            dtype,
            log_model_prior_fn=log_model_prior_fn,
            sfe_lr=sfe_lr,
            ig_threshold=ig_threshold,
            baseline_decay=baseline_decay,
        )
        self.num_bits = num_models.bit_length() - 1
        self.space = BinarySpace(self.num_bits)
        blocks = made_num_blocks(self.num_bits)
        self.made = zeroed_made(self.num_bits, 2 * blocks * self.num_bits, None, blocks, 1, F.leaky_relu)
        self.made.to(self.device, dtype)

    def forward(self, bits: Tensor) -> Tensor:
        """Bernoulli logits of every bit given the bit string (autoregressive), clamped to ±500."""
        return self.made(bits).clamp(-LOGIT_CLAMP, LOGIT_CLAMP)

    def _logits(self, bits: Tensor, params: dict[str, Tensor] | None) -> Tensor:
        return self(bits) if params is None else functional_call(self, params, (bits,))

    def _log_q(self, model_index: Tensor, params: dict[str, Tensor] | None = None) -> Tensor:
        bits = self.space.bits(model_index)
        logits = self._logits(bits.to(self.dtype), params)
        return torch.where(bits, F.logsigmoid(logits), F.logsigmoid(-logits)).sum(-1)

    @torch.no_grad()
    def sample(
        self, num: int, generator: torch.Generator | None = None, incremental: bool = True
    ) -> tuple[Tensor, Tensor]:
        """m ~ q_psi bit by bit, with log q(m): hidden units filled incrementally (about one MADE pass in all,
        :class:`~methods.flows.made.IncrementalMADE`), or with ``incremental=False`` one full pass per bit."""
        bits = torch.zeros(num, self.num_bits, device=self.device, dtype=self.dtype)
        log_q = torch.zeros(num, device=self.device, dtype=self.dtype)
        engine = IncrementalMADE.of_nflows(self.made, num) if incremental else None
        for i in range(self.num_bits):
            if engine is None:
                logit = self(bits)[:, i]
            else:
                logit = engine.outputs(bits, i, slice(i, i + 1)).squeeze(-1).clamp(-LOGIT_CLAMP, LOGIT_CLAMP)
            bit = torch.bernoulli(torch.sigmoid(logit), generator=generator)
            bits[:, i] = bit
            log_q += torch.where(bit > 0, F.logsigmoid(logit), F.logsigmoid(-logit))
        shifts = torch.arange(self.num_bits, device=self.device)
        return (bits.to(torch.int64) << shifts).sum(-1), log_q

    @property
    def can_enumerate(self) -> bool:
        """Up to 2^20 bit strings (one MADE pass per chunk of 2^16)."""
        return self.num_bits <= MAX_ENUMERATED_BITS

    def posterior_log_probs(self) -> Tensor:
        """log q(m) of all 2^L strings, [M] float64; only for L <= 20."""
        if self.num_bits > MAX_ENUMERATED_BITS:
            raise ValueError(f"cannot enumerate 2^{self.num_bits} models (limit 2^{MAX_ENUMERATED_BITS})")
        index = torch.arange(self.num_models, device=self.device)
        chunks = [self.log_prob(chunk) for chunk in index.split(ENUMERATION_CHUNK)]
        return torch.cat(chunks).to(torch.float64)
