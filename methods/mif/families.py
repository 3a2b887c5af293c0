"""Variational families for fixed-dimensional targets, batched over models (MIF paper sec. 2-4).

Every family here holds the parameters of ``M`` independent approximations,
one per model, with a leading model dimension; coordinates are those of the
saturated space taken in the problem's topological order, and a model's
inactive coordinates are pinned at zero and left out of log q. Two kinds:

- :class:`GaussianVIP`: mean-field or full-rank Gaussian ``q_w(z~)``, pushed
  through the VIP map ``z_i = f_i + g_i^{1 - lambda_i} (z~_i - lambda_i f_i)``
  with a learnable ``lambda_i`` in [0, 1] per latent (a sigmoid: the paper does
  not say how lambda is kept in range) or without it (MF, FR).
- :class:`ModelInformedFlow`: one forward-autoregressive MIF layer (Definition 4,
  Algorithm 1), ``z_i = m_i + s_i (eps_i - t_i)`` with conditioners on
  ``u_i = [z_{<i}, f_i, log g_i]`` (``t_i`` also sees ``eps_{<i}``), each a linear
  layer plus, for ``hidden > 0``, a one-hidden-layer ReLU MLP. Its switches give
  the ablations of Table 2 and an inverse autoregressive flow (IAF: conditioned
  on ``eps_{<i}``, no translation, no prior inputs).

``f_i`` and ``log g_i`` come from ``Problem.prior_location_scale``; for problems
without it they are zero (VIP is then the identity and MIF has no prior inputs).
All parameters start from N(0, 0.1^2), as in the paper.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from methods.flows.made import degree_mask
from suite.core.problem import LOG_SQRT_2PI

#: (ordered z [M', n, D], model rows or None) -> (f, log g), each [M', n, D]; entry i depends on z_{<i} only.
PriorFn = Callable[[Tensor, Tensor | None], tuple[Tensor, Tensor]]
INIT_SCALE = 0.1
#: The MIF/IAF conditioners' log scales are clamped to [-LOG_SCALE_BOUND, LOG_SCALE_BOUND] (s in [4.5e-5, 2.2e4]).
#: Unbounded, z_i = m_i + exp(log s_i(z_<i)) (eps_i - t_i) compounds along the coordinates: on galaxy (45 raw-scale
#: coordinates) log s of one coordinate grew with the exponentials before it and q's draws overflowed to inf/NaN
#: within 15 Adam steps. Inside the bound the flow is unchanged, bit for bit.
LOG_SCALE_BOUND = 10.0


def _init(*shape: int, dtype: torch.dtype, generator: torch.Generator) -> nn.Parameter:
    return nn.Parameter(INIT_SCALE * torch.randn(*shape, generator=generator, dtype=dtype, device=generator.device))


def _std_normal_log_prob(eps: Tensor, active: Tensor) -> Tensor:
    """sum over active coordinates of log N(eps_i; 0, 1): [M, n]."""
    return torch.where(active[:, None, :], -0.5 * eps * eps - LOG_SQRT_2PI, 0.0).sum(-1)


class VariationalFamily(nn.Module):
    """M approximations q_m(z) on ordered coordinates with active masks ``active`` [M, D]."""

    def __init__(self, active: Tensor, prior_fn: PriorFn | None) -> None:
        super().__init__()
        self.register_buffer("active", active.clone())
        self.prior_fn = prior_fn
        self.num_models, self.dim = active.shape

    def sample(self, num: int, generator: torch.Generator, models: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``num`` reparameterised draws per model (all, or the rows ``models``) and their log q."""
        rows = self.num_models if models is None else len(models)
        eps = torch.randn(rows, num, self.dim, generator=generator, dtype=self.active_dtype, device=self.active.device)
        return self.forward_map(eps, models)

    @staticmethod
    def _rows(tensor: Tensor, models: Tensor | None) -> Tensor:
        """The per-model rows ``models`` of a parameter or buffer (all rows for None)."""
        return tensor if models is None else tensor.index_select(0, models)

    @property
    def active_dtype(self) -> torch.dtype:
        """The parameters' dtype."""
        return next(self.parameters()).dtype

    def _prior(self, z: Tensor, models: Tensor | None) -> tuple[Tensor, Tensor]:
        if self.prior_fn is None:
            return torch.zeros_like(z), torch.zeros_like(z)
        return self.prior_fn(z, models)

    def forward_map(self, eps: Tensor, models: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """z = T(eps) and log q(z) for base noise ``eps`` [M', n, D] (row r: model ``models[r]``, or r)."""
        raise NotImplementedError

    def log_prob(self, z: Tensor, models: Tensor | None = None) -> Tensor:
        """log q_m(z) for ordered ``z`` [M', n, D] (row r: model ``models[r]``, or r)."""
        raise NotImplementedError


class GaussianVIP(VariationalFamily):
    """Gaussian ``q_w`` (diagonal or full-rank) through the VIP map with learnable lambda (or none)."""

    def __init__(
        self,
        active: Tensor,
        prior_fn: PriorFn | None,
        *,
        full_rank: bool,
        vip: bool,
        dtype: torch.dtype,
        generator: torch.Generator,
    ) -> None:
        super().__init__(active, prior_fn)
        m, d = active.shape
        self.full_rank, self.vip = full_rank, vip and prior_fn is not None
        self.loc = _init(m, d, dtype=dtype, generator=generator)
        self.log_diag = _init(m, d, dtype=dtype, generator=generator)
        self.lower = _init(m, d, d, dtype=dtype, generator=generator) if full_rank else None
        self.lambda_logit = _init(m, d, dtype=dtype, generator=generator) if self.vip else None
        pair = active[:, :, None] & active[:, None, :]
        self.register_buffer("_strict", torch.tril(torch.ones(d, d, dtype=torch.bool, device=pair.device), -1) & pair)

    def _scale_tril(self, models: Tensor | None) -> Tensor:
        diag = torch.diag_embed(torch.exp(self._rows(self.log_diag, models)))
        if self.lower is None:
            return diag
        return diag + torch.where(self._rows(self._strict, models), self._rows(self.lower, models), 0.0)

    def _lam(self, models: Tensor | None) -> Tensor:
        assert self.lambda_logit is not None
        return torch.sigmoid(self._rows(self.lambda_logit, models))[:, None, :]

    def forward_map(self, eps: Tensor, models: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """z~ = mu + L eps, then the VIP map coordinate by coordinate (f_i needs z_{<i})."""
        on = self._rows(self.active, models)
        active = on[:, None, :]
        eps = torch.where(active, eps, 0.0)
        loc = self._rows(self.loc, models)[:, None, :]
        tilde = torch.where(active, loc + eps @ self._scale_tril(models).transpose(-1, -2), 0.0)
        log_det = torch.where(on, self._rows(self.log_diag, models), 0.0).sum(-1)[:, None]
        log_q = _std_normal_log_prob(eps, on) - log_det
        if not self.vip:
            return tilde, log_q
        lam = self._lam(models)
        z = tilde
        for i in range(self.dim):  # f_i and g_i depend on z_{<i}, already final
            f, log_g = self._prior(z, models)
            zi = f[..., i] + torch.exp((1 - lam[..., i]) * log_g[..., i]) * (tilde[..., i] - lam[..., i] * f[..., i])
            z = torch.cat([z[..., :i], zi.unsqueeze(-1), z[..., i + 1 :]], dim=-1)
        z = torch.where(active, z, 0.0)
        f, log_g = self._prior(z, models)
        return z, log_q - torch.where(active, (1 - lam) * log_g, 0.0).sum(-1)

    def log_prob(self, z: Tensor, models: Tensor | None = None) -> Tensor:
        """Invert the VIP map (direct: f, g of the given z), then the Gaussian density of z~."""
        on = self._rows(self.active, models)
        active = on[:, None, :]
        z = torch.where(active, z, 0.0)
        correction = torch.zeros(z.shape[:-1], dtype=z.dtype, device=z.device)
        tilde = z
        if self.vip:
            lam = self._lam(models)
            f, log_g = self._prior(z, models)
            tilde = (z - f) * torch.exp(-(1 - lam) * log_g) + lam * f
            correction = torch.where(active, (1 - lam) * log_g, 0.0).sum(-1)
        centred = torch.where(active, tilde - self._rows(self.loc, models)[:, None, :], 0.0)
        scale = self._scale_tril(models)
        eps = torch.linalg.solve_triangular(scale, centred.transpose(-1, -2), upper=False).transpose(-1, -2)
        log_det = torch.where(on, self._rows(self.log_diag, models), 0.0).sum(-1)[:, None]
        return _std_normal_log_prob(eps, on) - log_det - correction


class ModelInformedFlow(VariationalFamily):
    """One MIF layer (or an ablation of it, or an IAF), batched over models.

    Options: ``translation`` (the t_i term), ``prior_inputs`` (f_i, log g_i as
    inputs), ``conditioning`` ("z": u_i holds z_{<i}; "eps": eps_{<i}, the
    IAF-like ablation), ``hidden`` (0: affine conditioners; h > 0: linear plus
    a one-hidden-layer ReLU MLP of width h, per coordinate).
    """

    def __init__(
        self,
        active: Tensor,
        prior_fn: PriorFn | None,
        *,
        hidden: int,
        translation: bool,
        prior_inputs: bool,
        conditioning: str,
        dtype: torch.dtype,
        generator: torch.Generator,
        zero_z_weights: bool = False,
    ) -> None:
        super().__init__(active, prior_fn)
        if conditioning not in ("z", "eps"):
            raise ValueError(f"conditioning must be 'z' or 'eps'; got {conditioning!r}")
        m, d = active.shape
        self.hidden, self.translation, self.conditioning = hidden, translation, conditioning
        self.prior_inputs = prior_inputs and prior_fn is not None
        self.num_nets = 3 if translation else 2  # m, log s, (t)
        # Inputs of coordinate i's networks: [conditioning vector (D), f_i, log g_i (with prior inputs),
        # eps (D; the translation net of z-conditioning only)]: no block that every network ignores.
        self.eps_block = translation and conditioning == "z"
        width = d + (2 if self.prior_inputs else 0) + (d if self.eps_block else 0)
        # mask[k, i, :] = the inputs of network k for coordinate i.
        mask = torch.zeros(self.num_nets, d, width, dtype=torch.bool)
        mask[:, :, :d] = degree_mask(torch.arange(d), torch.arange(d), strict=True)  # coordinate i reads z_<i
        if self.prior_inputs:
            mask[:, :, d : d + 2] = True
        if self.eps_block:
            mask[2, :, width - d :] = mask[2, :, :d]
        self.register_buffer("mask", mask)
        self.weight = _init(m, self.num_nets, d, width, dtype=dtype, generator=generator)
        self.bias = _init(m, self.num_nets, d, dtype=dtype, generator=generator)
        if hidden > 0:
            self.w1 = _init(m, self.num_nets, d, hidden, width, dtype=dtype, generator=generator)
            self.b1 = _init(m, self.num_nets, d, hidden, dtype=dtype, generator=generator)
            self.w2 = _init(m, self.num_nets, d, hidden, dtype=dtype, generator=generator)
        if zero_z_weights:
            with torch.no_grad():
                self.weight[..., :d] = 0.0
                if hidden > 0:
                    self.w1[..., :d] = 0.0

    @classmethod
    def inverse_autoregressive(
        cls, active: Tensor, *, hidden: int, dtype: torch.dtype, generator: torch.Generator
    ) -> ModelInformedFlow:
        """The IAF baseline: conditioned on eps_{<i}, no translation, no prior inputs."""
        return cls(
            active,
            None,
            hidden=hidden,
            translation=False,
            prior_inputs=False,
            conditioning="eps",
            dtype=dtype,
            generator=generator,
        )

    def _outputs(self, inputs: Tensor, models: Tensor | None, i: int | None = None) -> Tensor:
        """Network outputs [M', n, num_nets] for coordinate i, or [M', n, num_nets, D] for all (i None)."""
        pick = slice(None) if i is None else slice(i, i + 1)
        weight = torch.where(self.mask[:, pick], self._rows(self.weight[:, :, pick], models), 0.0)
        out = torch.einsum("mkdw,mnw->mnkd", weight, inputs) + self._rows(self.bias[:, :, pick], models)[:, None]
        if self.hidden > 0:
            w1 = torch.where(self.mask[:, pick, None, :], self._rows(self.w1[:, :, pick], models), 0.0)
            pre = torch.einsum("mkdhw,mnw->mnkdh", w1, inputs) + self._rows(self.b1[:, :, pick], models)[:, None]
            out = out + torch.einsum("mkdh,mnkdh->mnkd", self._rows(self.w2[:, :, pick], models), torch.relu(pre))
        return out if i is None else out.squeeze(-1)

    @property
    def one_pass(self) -> bool:
        """Sampling needs no sequential loop: conditioners see eps_{<i} only (the IAF case)."""
        return self.conditioning == "eps" and not self.prior_inputs

    def _sample_one_pass(self, eps: Tensor, models: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """All coordinates at once when every conditioner input is known from eps."""
        on = self._rows(self.active, models)
        eps = torch.where(on[:, None, :], eps, 0.0)
        out = self._outputs(eps, models)  # [M', n, K, D]: the conditioning vector is the only input block
        loc, log_s = out[:, :, 0], out[:, :, 1].clamp(-LOG_SCALE_BOUND, LOG_SCALE_BOUND)
        shift = out[:, :, 2] if self.translation else 0.0
        z = torch.where(on[:, None, :], loc + torch.exp(log_s) * (eps - shift), 0.0)
        return z, eps, torch.where(on[:, None, :], log_s, 0.0).sum(-1)

    def _run(self, eps: Tensor | None, z: Tensor | None, models: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """Coordinate by coordinate, fill whichever of (eps, z) is missing; returns z, eps, sum of log s."""
        if z is None and self.one_pass:
            assert eps is not None
            return self._sample_one_pass(eps, models)
        given = eps if eps is not None else z
        assert given is not None
        rows, n, d = given.shape
        on = self._rows(self.active, models)
        active = on[:, None, :]
        z_cur = torch.zeros_like(given) if z is None else torch.where(active, z, 0.0)
        eps_cur = torch.zeros_like(given) if eps is None else torch.where(active, eps, 0.0)
        log_s_sum = torch.zeros(rows, n, dtype=given.dtype, device=given.device)
        for i in range(d):
            parts = [z_cur if self.conditioning == "z" else eps_cur]
            if self.prior_inputs:
                f, log_g = self._prior(z_cur, models)
                parts += [f[..., i : i + 1], log_g[..., i : i + 1]]
            if self.eps_block:
                parts.append(eps_cur)
            out = self._outputs(torch.cat(parts, dim=-1), models, i)
            loc, log_s = out[..., 0], out[..., 1].clamp(-LOG_SCALE_BOUND, LOG_SCALE_BOUND)
            shift = out[..., 2] if self.translation else 0.0
            on_i = on[:, i, None]
            if z is None:  # sampling: z_i = m_i + s_i (eps_i - t_i)
                zi = torch.where(on_i, loc + torch.exp(log_s) * (eps_cur[..., i] - shift), 0.0)
                z_cur = torch.cat([z_cur[..., :i], zi.unsqueeze(-1), z_cur[..., i + 1 :]], dim=-1)
            else:  # density: eps_i = (z_i - m_i) / s_i + t_i
                ei = torch.where(on_i, (z_cur[..., i] - loc) * torch.exp(-log_s) + shift, 0.0)
                eps_cur = torch.cat([eps_cur[..., :i], ei.unsqueeze(-1), eps_cur[..., i + 1 :]], dim=-1)
            log_s_sum = log_s_sum + torch.where(on_i, log_s, 0.0)
        return z_cur, eps_cur, log_s_sum

    def forward_map(self, eps: Tensor, models: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Sequential sampling (Algorithm 1); log q = log N(eps) - sum log s."""
        z, eps, log_s = self._run(eps, None, models)
        return z, _std_normal_log_prob(eps, self._rows(self.active, models)) - log_s

    def log_prob(self, z: Tensor, models: Tensor | None = None) -> Tensor:
        """Sequential inversion (no root finding: each step is affine in z_i).

        Far from where q has its mass (a funnel's neck, say) the inversion overflows: eps_i grows without bound,
        the next conditioners see it and return inf, and inf - inf makes the rest NaN. log q is then below the
        floating-point range (log N(eps) ~ -eps^2 / 2 dominates), so such a finite ``z`` gets -inf, not NaN.
        """
        _, eps, log_s = self._run(None, z, models)
        log_q = _std_normal_log_prob(eps, self._rows(self.active, models)) - log_s
        overflowed = torch.isnan(log_q) & torch.isfinite(z).all(-1)
        return torch.where(overflowed, -math.inf, log_q)


def num_parameters(family: nn.Module) -> int:
    """Number of learnable scalars (all models together)."""
    return sum(p.numel() for p in family.parameters())
