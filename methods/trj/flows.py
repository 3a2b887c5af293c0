"""Learned transports for TRJ (TRJ paper sec. 3 and App. B): rational-quadratic spline flows fitted to draws.

Both classes map target to reference N(0, I) by T = h^{-1} o F o h o s:
s standardises, h is the elementwise sigmoid (h^{-1} = logit), and F is three
[reverse permutation, masked rational-quadratic autoregressive transform] layers
on [0, 1]: the layer of nflows' ``MaskedPiecewiseRationalQuadraticAutoregressiveTransform``
(10 bins, no tails, nflows' MADE with two residual blocks, hidden width 32 n capped
at 256), with the spline evaluated by :func:`rq_spline`, which gives nflows'
values with fewer passes over the bin tables (the spline, not the MADE, dominates
training time for small hidden widths).

* :class:`SplineTransport` (TRJ): one flow per model of an enumerable space, on the
  model's active coordinates; inactive coordinates pass through.
* :class:`ConditionalSplineTransport` (CTRJ, App. B.1): one flow over the saturated
  space conditioned on the model's context, acting on all coordinates; inactive
  ones are auxiliary N(0, 1) variables.

The forward direction (target -> reference) is one conditioner pass per layer;
the inverse is sequential over coordinates, as for any autoregressive flow.
F starts as the identity (zeroed final MADE layer, spline derivatives 1), so an
untrained transport is the standardisation s.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from nflows.transforms.made import MADE
from nflows.transforms.splines import rational_quadratic
from torch import Tensor, nn

from methods.common.moments import safe_cholesky
from methods.trj.transports import AffineTransport, active_log_prob
from suite.problem import Problem, std_normal_log_prob
from suite.tensor_ops import host_generator, row_sum

NUM_LAYERS = 3
NUM_BINS = 10
NUM_BLOCKS = 2
HIDDEN_PER_FEATURE = 32
MAX_HIDDEN = 256
SD_FLOOR = 1e-10
# nflows' defaults for the minimum bin width, bin height and knot derivative.
MIN_BIN = rational_quadratic.DEFAULT_MIN_DERIVATIVE
# Derivatives are MIN_BIN + softplus(raw); this raw value gives derivative 1.
DERIVATIVE_AT_IDENTITY = math.log(math.expm1(1.0 - MIN_BIN))


#: ``fit`` keywords of the TRJ code's factor-analysis flows (RationalQuadraticFlowFAV): minibatch 32, no
#: doubling, learning-rate factor 0.995 for the first 200 steps, up to 3000 iterations with early stopping.
FACTOR_ANALYSIS_FIT = {"iterations": 3000, "batch_size": 32, "double_batch_every": None, "lr_factor_early": 0.995}

#: ``stop(part, parts)`` is called after each training step of the ``part``-th of ``parts`` flows being fitted
#: (0-based; the conditional flow is part 0 of 1) and ends that flow's training when it returns True (the
#: ``trj``/``ctrj`` methods use it to count steps and to end fitting at a time budget's milestones).
StopFn = Callable[[int, int], bool]


# --------------------------------------------------------------------------- shared helpers
def _log_sigmoid_derivative(x: Tensor) -> Tensor:
    """log d sigmoid(x)/dx, exact for any x."""
    return -F.softplus(-x) - F.softplus(x)


def _logit(t: Tensor) -> tuple[Tensor, Tensor]:
    """logit(t) and log d logit/dt, with t kept off 0 and 1 so that saturated values stay finite."""
    finfo = torch.finfo(t.dtype)
    t = t.clamp(finfo.tiny, 1.0 - finfo.eps / 2)
    log_t, log_1mt = torch.log(t), torch.log1p(-t)
    return log_t - log_1mt, -log_t - log_1mt


def _unit_interval(x: Tensor) -> Tensor:
    # A spline output can leave [0, 1] by a rounding error; the next spline's bin search assumes [0, 1].
    return x.clamp(0.0, 1.0)


def rq_spline(x: Tensor, raw: Tensor, inverse: bool = False) -> tuple[Tensor, Tensor]:
    """Monotone rational-quadratic spline of [0, 1] onto itself, elementwise, and log |dy/dx|.

    ``raw`` is ``[..., 3K + 1]``: K width logits, K height logits, K + 1 raw knot
    derivatives, parameterised exactly as nflows' ``rational_quadratic_spline``
    (softmax bin sizes with a 1e-3 floor, derivatives 1e-3 + softplus). It computes
    the same values with fewer passes over the ``[..., K]`` tables: one bin search
    and one gather of both knots of the bin, and softplus only at those knots.
    """
    k = (raw.shape[-1] - 1) // 3
    logits = raw[..., : 2 * k].unflatten(-1, (2, k))  # widths and heights together
    # softmax written out: torch.softmax over a short last dimension is several times slower on CPU.
    e = torch.exp(logits - logits.detach().amax(-1, keepdim=True))
    size = MIN_BIN + (1.0 - MIN_BIN * k) * (e / e.sum(-1, keepdim=True))
    inner = torch.cumsum(size[..., :-1], dim=-1)
    edge = torch.zeros_like(size[..., :1])
    knots = torch.cat([edge, inner, edge + 1.0], dim=-1).unbind(-2)  # [..., K + 1] each, exactly 0 and 1 at the ends
    # The bin of each input: interior knots at or below it (no clamp needed for inputs in [0, 1]).
    search = knots[1] if inverse else knots[0]
    bin_idx = torch.searchsorted(search[..., 1:-1].contiguous(), x.unsqueeze(-1), right=True)
    table = torch.stack([knots[0], knots[1], raw[..., 2 * k :]], dim=-2)  # [..., 3, K + 1]
    index = torch.cat([bin_idx, bin_idx + 1], dim=-1).unsqueeze(-2).expand(*bin_idx.shape[:-1], 3, 2)
    ends = table.gather(-1, index)  # [..., 3, 2]: (x, y, raw derivative) at both knots of the bin
    x0, y0 = ends[..., 0, 0], ends[..., 1, 0]
    width, height = ends[..., 0, 1] - x0, ends[..., 1, 1] - y0
    deriv = MIN_BIN + F.softplus(ends[..., 2, :])
    d0, d1 = deriv[..., 0], deriv[..., 1]
    slope = height / width
    curve = d0 + d1 - 2.0 * slope
    if inverse:
        dy = x - y0
        a = dy * curve + height * (slope - d0)
        b = height * d0 - dy * curve
        c = -slope * dy
        root = (2.0 * c) / (-b - torch.sqrt((b * b - 4.0 * a * c).clamp_min(0.0)))
        xi = root
        out = root * width + x0
    else:
        xi = (x - x0) / width
        out = None
    xi_1m = xi * (1.0 - xi)
    denominator = slope + curve * xi_1m
    log_num = torch.log(d1 * xi * xi + 2.0 * slope * xi_1m + d0 * (1.0 - xi) * (1.0 - xi))
    log_deriv = 2.0 * torch.log(slope) + log_num - 2.0 * torch.log(denominator)
    if inverse:
        return out, -log_deriv
    return y0 + height * (slope * xi * xi + d0 * xi_1m) / denominator, log_deriv


class _SplineLayer(nn.Module):
    """Masked RQ autoregressive layer on [0, 1]^n: y_i = RQS(x_i; MADE(x_<i, context)_i), identity-initialised.

    The layer of nflows' ``MaskedPiecewiseRationalQuadraticAutoregressiveTransform`` (tails None, residual
    MADE) with the leaner :func:`rq_spline`. With a context, a zero-initialised linear map of the context
    is added to the MADE outputs: in nflows' MADE the parameters of the first coordinate are a bare bias
    that ignores the context, and the shortcut lets every coordinate's spline depend on the model
    without touching the autoregressive structure.
    """

    def __init__(self, features: int, hidden: int, context_dim: int | None) -> None:
        super().__init__()
        self.features, self.width = features, 3 * NUM_BINS + 1
        self.made = MADE(
            features=features,
            hidden_features=hidden,
            context_features=context_dim,
            num_blocks=NUM_BLOCKS,
            output_multiplier=self.width,
            use_residual_blocks=True,
            activation=F.relu,
        )
        final = self.made.final_layer
        nn.init.zeros_(final.weight)
        with torch.no_grad():
            final.bias.zero_()
            final.bias.view(features, self.width)[:, 2 * NUM_BINS :] = DERIVATIVE_AT_IDENTITY
        self.shortcut = None
        if context_dim is not None:
            self.shortcut = nn.Linear(context_dim, features * self.width, bias=False)
            nn.init.zeros_(self.shortcut.weight)

    def _params(self, x: Tensor, context: Tensor | None) -> Tensor:
        out = self.made(x, context)
        if self.shortcut is not None:
            out = out + self.shortcut(context)
        return out.view(x.shape[0], self.features, self.width)

    def forward(self, x: Tensor, context: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """One conditioner pass: y and log |det dy/dx| ``[B]``."""
        y, log_d = rq_spline(x, self._params(x, context))
        return _unit_interval(y), row_sum(log_d)

    def inverse(self, y: Tensor, context: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Coordinate by coordinate: after pass i the first i coordinates of x are exact."""
        x = torch.zeros_like(y)
        log_d = torch.zeros_like(y)
        for _ in range(self.features):
            x, log_d = rq_spline(y, self._params(x, context), inverse=True)
            x = _unit_interval(x)
        return x, row_sum(log_d)


class SplineStack(nn.Module):
    """F: three [reverse permutation, masked RQ autoregressive spline] layers on [0, 1]^n, identity-initialised.

    A last reversal after an odd number of layers puts the coordinates back in
    their slots (a volume-preserving permutation), so the untrained stack is the
    identity and z_i stays associated with theta_i.
    """

    def __init__(
        self, features: int, context_dim: int | None = None, max_hidden: int = MAX_HIDDEN, num_layers: int = NUM_LAYERS
    ) -> None:
        super().__init__()
        hidden = min(HIDDEN_PER_FEATURE * features, max_hidden)
        self.layers = nn.ModuleList(_SplineLayer(features, hidden, context_dim) for _ in range(num_layers))

    def forward(self, u: Tensor, context: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Target side -> reference side on [0, 1]^n, and the log-determinant ``[B]``."""
        log_det = u.new_zeros(u.shape[0])
        for layer in self.layers:
            u, ld = layer(u.flip(-1), context)
            log_det = log_det + ld
        return (u.flip(-1) if len(self.layers) % 2 else u), log_det

    def inverse(self, v: Tensor, context: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Reference side -> target side (sequential over coordinates), and the log-determinant ``[B]``."""
        log_det = v.new_zeros(v.shape[0])
        v = v.flip(-1) if len(self.layers) % 2 else v
        for layer in reversed(self.layers):
            v, ld = layer.inverse(v, context)
            v = v.flip(-1)
            log_det = log_det + ld
        return v, log_det


def _sandwich_forward(stack: SplineStack, x: Tensor, context: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """z = logit(F(sigmoid(x))) and log |det dz/dx| ``[B]``."""
    v, log_det = stack(torch.sigmoid(x), context)
    z, log_dlogit = _logit(v)
    return z, log_det + row_sum(_log_sigmoid_derivative(x) + log_dlogit)


def _sandwich_inverse(stack: SplineStack, z: Tensor, context: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """x = logit(F^{-1}(sigmoid(z))) and log |det dx/dz| ``[B]``."""
    u, log_det = stack.inverse(torch.sigmoid(z), context)
    x, log_dlogit = _logit(u)
    return x, log_det + row_sum(_log_sigmoid_derivative(z) + log_dlogit)


# --------------------------------------------------------------------------- training
@dataclass
class FitSettings:
    """Optimiser, schedule and early-stopping settings shared by both flows (TRJ code's RationalQuadraticFlow2)."""

    iterations: int = 1000
    learning_rate: float = 3e-3
    batch_size: int = 128
    validation_fraction: float = 0.1
    double_batch_every: int | None = 250  # None: fixed batch size
    lr_factor_early: float = 0.992
    lr_factor_late: float = 0.9971
    lr_switch: int = 200
    evaluate_every: int = 10  # validation NLL of the whole held-out set, no gradient
    check_every: int = 100  # compare the mean of the last window of validation NLLs with the previous window's


@dataclass
class FitRecord:
    """Diagnostics of one fit: what was fitted, iterations run, final NLLs (nats per draw) and wall time."""

    model: int | None  # None for the conditional flow
    kind: str  # "flow" or "affine"
    num_train: int
    num_validation: int
    iterations: int
    train_nll: float
    validation_nll: float
    seconds: float  # wall clock
    cpu_seconds: float = math.nan  # this process's CPU time (all threads)


def _maximise_likelihood(
    module: nn.Module,
    batch_nll: Callable[[Tensor], Tensor],
    validation_nll: Callable[[], Tensor] | None,
    sample_rows: Callable[[int], Tensor],
    settings: FitSettings,
    progress: bool = False,
    stop: Callable[[], bool] | None = None,
) -> int:
    """Adam on ``batch_nll(rows)`` with the TRJ schedule and early stopping; leaves the best state in ``module``.

    ``stop()``, called after each step, ends the training early when it returns True. Returns the number of
    iterations run.
    """
    params = [p for p in module.parameters() if p.requires_grad]
    try:  # the fused kernel saves about a quarter of a small-batch iteration on CPU
        optimiser = torch.optim.Adam(params, lr=settings.learning_rate, fused=True)
    except (RuntimeError, TypeError):
        optimiser = torch.optim.Adam(params, lr=settings.learning_rate)

    def factor(step: int) -> float:
        return settings.lr_factor_early if step < settings.lr_switch else settings.lr_factor_late

    scheduler = torch.optim.lr_scheduler.MultiplicativeLR(optimiser, lr_lambda=factor)
    history: list[float] = []
    best_loss, best_state = math.inf, None
    previous_window = math.inf
    done = 0
    bar = _progress_bar(settings.iterations, progress)
    for step in range(settings.iterations):
        if validation_nll is not None and step % settings.evaluate_every == 0:
            with torch.no_grad():
                loss = float(validation_nll())
            history.append(loss)
            if loss < best_loss:
                best_loss, best_state = loss, copy.deepcopy(module.state_dict())
            if step > 0 and step % settings.check_every == 0:
                recent = history[-(settings.check_every // settings.evaluate_every) :]
                window = sum(recent) / len(recent)
                if not window < previous_window:
                    break
                previous_window = window
        doublings = 0 if settings.double_batch_every is None else step // settings.double_batch_every
        batch = settings.batch_size * 2**doublings
        loss = batch_nll(sample_rows(batch))
        optimiser.zero_grad(set_to_none=True)
        if torch.isfinite(loss):
            loss.backward()
            optimiser.step()
        scheduler.step()
        done = step + 1
        if bar is not None:
            bar.update(1)
            bar.set_postfix(nll=float(loss))
        if stop is not None and stop():
            break
    if bar is not None:
        bar.close()
    if validation_nll is not None:
        with torch.no_grad():
            if float(validation_nll()) > best_loss and best_state is not None:
                module.load_state_dict(best_state)
    return done


def _progress_bar(total: int, enabled: bool) -> object | None:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, leave=False)


def _split(num: int, fraction: float, generator: torch.Generator, device: torch.device) -> tuple[Tensor, Tensor]:
    """Random training and validation row indices."""
    order = torch.randperm(num, generator=generator).to(device)
    num_val = round(fraction * num) if fraction > 0 else 0
    return order[num_val:], order[:num_val]


def _seed_from(generator: torch.Generator) -> int:
    return int(torch.randint(0, 2**62, (1,), generator=generator))


def _freeze(module: nn.Module) -> nn.Module:
    module.eval()
    for p in module.parameters():
        p.requires_grad_(False)
    return module


# --------------------------------------------------------------------------- per-model maps
class _FlowBlock(nn.Module):
    """T_k on a model's active block: z = logit(F(sigmoid((x - mean) / sd)))."""

    def __init__(self, mean: Tensor, sd: Tensor, max_hidden: int, num_layers: int = NUM_LAYERS) -> None:
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("sd", sd)
        self.register_buffer("log_sd_sum", torch.log(sd).sum())
        self.stack = SplineStack(mean.shape[0], max_hidden=max_hidden, num_layers=num_layers)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Target -> reference on the block ``[N, n_k]``."""
        z, log_det = _sandwich_forward(self.stack, (x - self.mean) / self.sd)
        return z, log_det - self.log_sd_sum

    def inverse(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """Reference -> target on the block."""
        x, log_det = _sandwich_inverse(self.stack, z)
        return x * self.sd + self.mean, log_det + self.log_sd_sum


class _AffineBlock(nn.Module):
    """Fallback T_k: z = L^{-1} (x - mean) with the draws' mean and Cholesky factor (AffineTransport on a block)."""

    def __init__(self, mean: Tensor, chol: Tensor) -> None:
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("chol_t", chol.T.contiguous())
        self.register_buffer("log_det", torch.log(torch.diagonal(chol)).sum())

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Target -> reference on the block."""
        # Row form: z^T = (x - mean)^T L^{-T}, a triangular solve from the right.
        z = torch.linalg.solve_triangular(self.chol_t, x - self.mean, upper=True, left=False)
        return z, (-self.log_det).expand(x.shape[0])

    def inverse(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """Reference -> target on the block."""
        return z @ self.chol_t + self.mean, self.log_det.expand(z.shape[0])


def _affine_block(x: Tensor) -> _AffineBlock:
    mean = x.mean(0)
    centred = x - mean
    cov = centred.T @ centred / x.shape[0]
    return _AffineBlock(mean, safe_cholesky(cov.unsqueeze(0))[0])


def _fit_flow_block(
    x: Tensor,
    settings: FitSettings,
    generator: torch.Generator,
    max_hidden: int,
    progress: bool,
    num_layers: int,
    stop: Callable[[], bool] | None = None,
) -> tuple[_FlowBlock, int, Tensor, Tensor, float, float]:
    """Maximum likelihood fit of one model's flow.

    Returns the frozen block, iterations run, the training and validation rows,
    and their final NLLs (nats per draw).
    """
    mean = x.mean(0)
    sd = x.std(0, correction=0).clamp_min(SD_FLOOR)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_seed_from(generator))
        block = _FlowBlock(mean, sd, max_hidden, num_layers).to(dtype=x.dtype, device=x.device)
    train, val = _split(x.shape[0], settings.validation_fraction, generator, x.device)
    # s and h are fixed: map the draws to [0, 1] once and train F on them.
    x_std = (x - mean) / sd
    u = torch.sigmoid(x_std)
    fixed = row_sum(_log_sigmoid_derivative(x_std)) - block.log_sd_sum

    def nll(rows: Tensor) -> Tensor:
        v, log_det = block.stack(u[rows])
        z, log_dlogit = _logit(v)
        return -(row_sum(std_normal_log_prob(z) + log_dlogit) + log_det + fixed[rows]).mean()

    def sample_rows(n: int) -> Tensor:
        return train[torch.randint(0, train.numel(), (n,), generator=generator).to(x.device)]

    iterations = _maximise_likelihood(
        block, nll, (lambda: nll(val)) if val.numel() else None, sample_rows, settings, progress, stop
    )
    _freeze(block)
    with torch.no_grad():
        train_nll = float(nll(train))
        val_nll = float(nll(val)) if val.numel() else math.nan
    return block, iterations, train, val, train_nll, val_nll


def _affine_nll(block: _AffineBlock, x: Tensor) -> float:
    with torch.no_grad():
        z, log_det = block(x)
        return float(-(row_sum(std_normal_log_prob(z)) + log_det).mean())


# --------------------------------------------------------------------------- TRJ: a flow per model
class SplineTransport:
    """Per-model RQ spline flows T_k on the active coordinates (the TRJ paper's "RQ NF"); inactive ones pass through.

    Models with fewer than ``min_draws`` draws get the affine transport (mean and
    Cholesky factor of their draws) instead; ``records`` (one per model) says
    which, with the fit's iterations, NLLs and time.
    """

    def __init__(self, blocks: list[nn.Module], masks: Tensor, records: list[FitRecord]) -> None:
        self.blocks, self.masks, self.records = blocks, masks, records
        self.active = [m.nonzero().flatten() for m in masks]
        self._cache: dict[tuple[torch.dtype, torch.device], list[nn.Module]] = {}

    @classmethod
    def fit(
        cls,
        problem: Problem,
        model_index: Tensor,
        theta: Tensor,
        *,
        iterations: int = 1000,
        learning_rate: float = 3e-3,
        batch_size: int = 128,
        validation_fraction: float = 0.1,
        double_batch_every: int | None = 250,
        lr_factor_early: float = 0.992,
        min_draws: int | None = None,
        max_hidden: int = MAX_HIDDEN,
        num_layers: int = NUM_LAYERS,
        generator: torch.Generator | None = None,
        progress: bool = False,
        stop: StopFn | None = None,
    ) -> SplineTransport:
        """Fit each model's flow by maximum likelihood on its draws (one optimisation per model).

        ``min_draws`` defaults to max(50, 10 n_k) per model; below it a model gets
        the affine transport, and below n_k + 2 draws the affine transport of
        moments shrunk towards the pooled ones (``AffineTransport.fit(shrink=True)``).
        ``stop`` (see :data:`StopFn`) sees the flow-fitted models as parts 0 to n - 1, in model order.
        """
        num_models = problem.model_space.num_models
        if num_models is None:
            raise ValueError("per-model spline transports need an enumerable model space")
        generator = torch.Generator().manual_seed(0) if generator is None else host_generator(generator)
        settings = FitSettings(
            iterations, learning_rate, batch_size, validation_fraction, double_batch_every, lr_factor_early
        )
        masks = problem.mask(problem.model_space.all_indices(theta.device))
        dims = masks.sum(-1).tolist()
        draws = torch.bincount(model_index, minlength=num_models).tolist()
        theta = theta.detach()
        # Models with very few (or no) draws get moments shrunk towards the pooled ones.
        shrunk = AffineTransport.fit(problem, model_index, theta, shrink=True)
        blocks: list[nn.Module] = []
        records: list[FitRecord] = []
        needs = [max(50, 10 * dims[k]) if min_draws is None else min_draws for k in range(num_models)]
        flow_models = [k for k in range(num_models) if dims[k] > 0 and draws[k] >= max(dims[k] + 2, needs[k])]
        for k in range(num_models):
            start, cpu_start = time.perf_counter(), time.process_time()
            x = theta[model_index == k][:, masks[k]]
            need = needs[k]
            if draws[k] < dims[k] + 2 or dims[k] == 0:
                chol = shrunk.chol[k][masks[k]][:, masks[k]]
                block = _AffineBlock(shrunk.mean[k][masks[k]], chol).to(dtype=x.dtype, device=x.device)
                record = FitRecord(k, "affine (shrunk to pooled moments)", x.shape[0], 0, 0, math.nan, math.nan, 0.0)
            elif draws[k] < need:
                block = _affine_block(x)
                nll = _affine_nll(block, x)
                record = FitRecord(k, "affine", x.shape[0], 0, 0, nll, math.nan, 0.0)
            else:
                part = flow_models.index(k)
                block, its, train, val, train_nll, val_nll = _fit_flow_block(
                    x,
                    settings,
                    generator,
                    max_hidden,
                    progress,
                    num_layers,
                    None if stop is None else lambda part=part: stop(part, len(flow_models)),
                )
                record = FitRecord(k, "flow", train.numel(), val.numel(), its, train_nll, val_nll, 0.0)
            record.seconds, record.cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
            blocks.append(block)
            records.append(record)
        return cls(blocks, masks, records)

    def _blocks_for(self, dtype: torch.dtype, device: torch.device) -> list[nn.Module]:
        """The blocks in the inputs' dtype and on their device (converted copies are cached)."""
        first = next(iter(self.blocks[0].buffers()))
        if first.dtype == dtype and first.device == device:
            return self.blocks
        key = (dtype, device)
        if key not in self._cache:
            self._cache[key] = [copy.deepcopy(b).to(dtype=dtype, device=device) for b in self.blocks]
        return self._cache[key]

    def _apply(self, model_index: Tensor, x: Tensor, inverse: bool) -> tuple[Tensor, Tensor]:
        """Each model's map on its rows' active block; other coordinates are copied."""
        blocks = self._blocks_for(x.dtype, x.device)
        out = x.clone()
        log_det = x.new_zeros(x.shape[0])
        order = torch.argsort(model_index, stable=True)
        counts = torch.bincount(model_index, minlength=len(blocks)).tolist()
        start = 0
        for k, count in enumerate(counts):
            if count == 0:
                continue
            rows_k, start = order[start : start + count], start + count
            cols = self.active[k].to(x.device)
            if cols.numel() == 0:
                continue
            block_in = x.index_select(0, rows_k).index_select(1, cols)
            block_out, ld = blocks[k].inverse(block_in) if inverse else blocks[k](block_in)
            out.index_put_((rows_k.unsqueeze(-1), cols), block_out)
            log_det.index_copy_(0, rows_k, ld)
        return out, log_det

    def to_reference(self, model_index: Tensor, theta: Tensor) -> tuple[Tensor, Tensor]:
        """z = T_m(theta) on each row's active coordinates and log |det dz/dtheta| ``[B]``."""
        return self._apply(model_index, theta, inverse=False)

    def from_reference(self, model_index: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """theta = T_m^{-1}(z) on each row's active coordinates and log |det dtheta/dz| ``[B]``."""
        return self._apply(model_index, z, inverse=True)

    def log_prob(self, model_index: Tensor, theta: Tensor) -> Tensor:
        """The fitted density log q_m(theta_m) of each row's active coordinates, ``[B]``."""
        z, log_det = self.to_reference(model_index, theta)
        return active_log_prob(z, log_det, self.masks.to(theta.device).index_select(0, model_index))


# --------------------------------------------------------------------------- CTRJ: one conditional flow
class _ConditionalFlow(nn.Module):
    """The parameters of T~(. | k): pooled standardisation and the conditional spline stack."""

    def __init__(
        self, mean: Tensor, sd: Tensor, dim: int, context_dim: int, max_hidden: int, num_layers: int = NUM_LAYERS
    ) -> None:
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("sd", sd)
        self.register_buffer("log_sd", torch.log(sd))
        self.stack = SplineStack(dim, context_dim=context_dim, max_hidden=max_hidden, num_layers=num_layers)

    def standardise(self, xi: Tensor, active: Tensor) -> tuple[Tensor, Tensor]:
        """s(xi | k): standardised active coordinates, auxiliaries unchanged; and its log-determinant ``[B]``."""
        x = torch.where(active, (xi - self.mean) / self.sd, xi)
        return x, -row_sum(torch.where(active, self.log_sd, 0.0))


class ConditionalSplineTransport:
    """Conditional RQ spline flow T~(xi | k) on the saturated space (TRJ App. B.1, CTRJ).

    Active coordinates are standardised with pooled means and sds (over the rows
    where they are active, each model weighted equally); inactive coordinates
    are auxiliary variables u ~ N(0, 1), already on the reference scale. Both
    directions act on all ``dim_max`` coordinates and condition on
    ``problem.context(k)``. The flow models the saturated vector: the density of
    the active coordinates alone would need the auxiliaries integrated out, so
    only :meth:`log_prob_saturated` is offered.
    """

    def __init__(self, problem: Problem, flow: _ConditionalFlow, record: FitRecord | None = None) -> None:
        self.problem, self.flow, self.record = problem, flow, record
        self._cache: dict[tuple[torch.dtype, torch.device], _ConditionalFlow] = {}

    @classmethod
    def fit(
        cls,
        problem: Problem,
        model_index: Tensor,
        theta: Tensor,
        *,
        iterations: int = 1000,
        learning_rate: float = 3e-3,
        batch_size: int = 128,
        validation_fraction: float = 0.1,
        double_batch_every: int | None = 250,
        lr_factor_early: float = 0.992,
        max_hidden: int = MAX_HIDDEN,
        num_layers: int = NUM_LAYERS,
        generator: torch.Generator | None = None,
        progress: bool = False,
        stop: StopFn | None = None,
    ) -> ConditionalSplineTransport:
        """Maximum likelihood on saturated draws with fresh N(0, 1) auxiliaries and equal total weight per model.

        ``stop`` (see :data:`StopFn`) sees the one flow as part 0 of 1.
        """
        start, cpu_start = time.perf_counter(), time.process_time()
        generator = torch.Generator().manual_seed(0) if generator is None else host_generator(generator)
        settings = FitSettings(
            iterations, learning_rate, batch_size, validation_fraction, double_batch_every, lr_factor_early
        )
        theta = theta.detach()
        active = problem.mask(model_index)
        _, group, counts = torch.unique(model_index, return_inverse=True, return_counts=True)
        weight = 1.0 / counts.to(theta.dtype)[group]
        mean, sd = _pooled_moments(theta, active, weight)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(_seed_from(generator))
            flow = _ConditionalFlow(mean, sd, problem.dim_max, problem.context_dim, max_hidden, num_layers)
            flow = flow.to(dtype=theta.dtype, device=theta.device)
        context = problem.context(model_index, theta.dtype).to(theta.device)
        x_std, fixed_log_det = flow.standardise(torch.where(active, theta, 0.0), active)
        train, val = _split(theta.shape[0], settings.validation_fraction, generator, theta.device)

        def fresh(n: int) -> Tensor:
            return torch.randn(n, theta.shape[-1], generator=generator, dtype=theta.dtype).to(theta.device)

        def nll(rows: Tensor, aux: Tensor, w: Tensor | None = None) -> Tensor:
            x = torch.where(active[rows], x_std[rows], aux)
            z, log_det = _sandwich_forward(flow.stack, x, context[rows])
            log_q = row_sum(std_normal_log_prob(z)) + log_det + fixed_log_det[rows]
            return -log_q.mean() if w is None else -(w * log_q).sum()

        train_weight = weight[train].cpu()
        val_aux, val_weight = fresh(val.numel()), weight[val] / weight[val].sum()

        def sample_rows(n: int) -> Tensor:
            return train[torch.multinomial(train_weight, n, replacement=True, generator=generator).to(theta.device)]

        iterations_run = _maximise_likelihood(
            flow.stack,
            lambda rows: nll(rows, fresh(rows.numel())),
            (lambda: nll(val, val_aux, val_weight)) if val.numel() else None,
            sample_rows,
            settings,
            progress,
            None if stop is None else lambda: stop(0, 1),
        )
        _freeze(flow)
        with torch.no_grad():
            w_train = weight[train] / weight[train].sum()
            train_nll = float(nll(train, fresh(train.numel()), w_train))
            val_nll = float(nll(val, val_aux, val_weight)) if val.numel() else math.nan
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        record = FitRecord(
            None, "flow", train.numel(), val.numel(), iterations_run, train_nll, val_nll, seconds, cpu_seconds
        )
        return cls(problem, flow, record)

    def _flow_for(self, like: Tensor) -> _ConditionalFlow:
        """The flow in ``like``'s dtype and on its device (converted copies are cached)."""
        if self.flow.mean.dtype == like.dtype and self.flow.mean.device == like.device:
            return self.flow
        key = (like.dtype, like.device)
        if key not in self._cache:
            self._cache[key] = copy.deepcopy(self.flow).to(dtype=like.dtype, device=like.device)
        return self._cache[key]

    def to_reference(self, model_index: Tensor, xi: Tensor) -> tuple[Tensor, Tensor]:
        """z = T~(xi | k) on all coordinates and log |det dz/dxi| ``[B]``."""
        flow = self._flow_for(xi)
        x, log_det_s = flow.standardise(xi, self.problem.mask(model_index))
        z, log_det = _sandwich_forward(flow.stack, x, self.problem.context(model_index, xi.dtype).to(xi.device))
        return z, log_det + log_det_s

    def from_reference(self, model_index: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """xi = T~^{-1}(z | k) on all coordinates and log |det dxi/dz| ``[B]``."""
        flow = self._flow_for(z)
        active = self.problem.mask(model_index)
        x, log_det = _sandwich_inverse(flow.stack, z, self.problem.context(model_index, z.dtype).to(z.device))
        xi = torch.where(active, x * flow.sd + flow.mean, x)
        return xi, log_det + row_sum(torch.where(active, flow.log_sd, 0.0))

    def log_prob_saturated(self, model_index: Tensor, xi: Tensor) -> Tensor:
        """log q~(xi | k) = sum over all coordinates of log N(z_i; 0, 1) + log |det dz/dxi|, ``[B]``."""
        z, log_det = self.to_reference(model_index, xi)
        return row_sum(std_normal_log_prob(z)) + log_det


def _pooled_moments(theta: Tensor, active: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
    """Weighted mean and sd of each coordinate over the rows where it is active (0 and 1 where never active)."""
    tiny = torch.finfo(theta.dtype).tiny
    w = torch.where(active, weight.unsqueeze(-1), 0.0)
    total = w.sum(0)
    mean = (w * torch.where(active, theta, 0.0)).sum(0) / total.clamp_min(tiny)
    centred = torch.where(active, theta - mean, 0.0)
    var = (w * centred * centred).sum(0) / total.clamp_min(tiny)
    seen = total > 0
    return torch.where(seen, mean, 0.0), torch.where(seen, var.sqrt().clamp_min(SD_FLOOR), 1.0)
