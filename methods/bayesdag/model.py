"""BayesDAG's pieces: the sorting map from potentials to DAGs, the edge network q_phi(W | p), the SCMs, the sampler.

Everything is batched over C parallel chains (leading dimension), with no Python loop over chains.
Adjacency convention of the suite: ``G[c, i, j] = 1`` is the edge i -> j.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

LOG_2PI = math.log(2 * math.pi)
#: Sinkhorn convergence is checked every this many iterations (each check reads a value back from the device).
SINKHORN_CHECK_EVERY = 10


# ------------------------------------------------------------------ sorting map
def order_mask(p: Tensor) -> Tensor:
    """Hard order mask ``[C, d, d]``: 1 where p_i > p_j, i.e. edge i -> j allowed (descending potentials)."""
    return (p[..., :, None] > p[..., None, :]).to(p.dtype)


def permutation(p: Tensor) -> Tensor:
    """sigma(p) ``[C, d, d]``: ``P[c, i, k] = 1`` iff node i has rank k among the potentials (ascending).

    This is the argmax of ``<P, p o^T>`` over permutations, o = [1..d] (BayesDAG eq. 7): for a rank-one score
    matrix the assignment problem is solved exactly by sorting (rearrangement inequality), so no Hungarian
    solver is needed; ties have probability zero.
    """
    ranks = p.argsort(-1).argsort(-1)
    return torch.nn.functional.one_hot(ranks, p.shape[-1]).to(p.dtype)


def sinkhorn(log_alpha: Tensor, max_iterations: int, tolerance: float) -> tuple[Tensor, int]:
    """Doubly stochastic ``exp(S(log_alpha))`` ``[C, d, d]`` by log-space row/column normalisation, and iterations used.

    Stops when every row and column sum is within ``tolerance`` of 1 (checked every ``SINKHORN_CHECK_EVERY``
    iterations) or after ``max_iterations`` (BayesDAG App. D: adaptive, threshold 1e-3, at most 3000).
    """
    done = 0
    while done < max_iterations:
        for _ in range(min(SINKHORN_CHECK_EVERY, max_iterations - done)):
            log_alpha = log_alpha - torch.logsumexp(log_alpha, -1, keepdim=True)
            log_alpha = log_alpha - torch.logsumexp(log_alpha, -2, keepdim=True)
            done += 1
        with torch.no_grad():
            alpha = log_alpha.exp()
            error = torch.maximum((alpha.sum(-1) - 1).abs().amax(), (alpha.sum(-2) - 1).abs().amax())
        if not float(error) >= tolerance:  # converged, or NaN (a diverged chain): more iterations cannot help
            break
    return log_alpha.exp(), done


def relaxed_order_mask(
    p: Tensor, temperature: float, max_iterations: int, tolerance: float, o_scale: float = 1.0
) -> tuple[Tensor, int]:
    """sigma(p) L sigma(p)^T ``[C, d, d]``: the hard order mask forward, Sinkhorn gradients backward (straight-through).

    L is strictly lower triangular, so ``(P L P^T)[i, j] = [rank_i > rank_j] = [p_i > p_j]``. The relaxation is
    ``S(p o^T / t)`` (BayesDAG eq. 9) with ``o = o_scale * [1..d]``; returns the mask and the Sinkhorn iterations used.
    """
    d = p.shape[-1]
    o = o_scale * torch.arange(1, d + 1, dtype=p.dtype, device=p.device)
    soft, iterations = sinkhorn(p[..., :, None] * o / temperature, max_iterations, tolerance)
    perm = permutation(p.detach()) + (soft - soft.detach())
    lower = torch.ones(d, d, dtype=p.dtype, device=p.device).tril(-1)
    return perm @ lower @ perm.transpose(-1, -2), iterations


# ------------------------------------------------------------------ edge network
class EdgeNetwork(torch.nn.Module):
    """mu_phi(p): Bernoulli logits ``[C, d, d]`` of the edge beliefs W given the potentials (BayesDAG eq. 14, App. D).

    LayerNorm (no affine) on p, then a 2-hidden-layer MLP of width ``hidden`` (ReLU) with a residual connection
    around the second layer, as App. D describes. The output layer starts at zero, so q starts at Bernoulli(1/2)
    (minus ``logit_shift``: -1 is the paper's "sparse initialisation").
    """

    def __init__(
        self,
        d: int,
        hidden: int,
        logit_shift: float,
        generator: torch.Generator,
        dtype: torch.dtype,
        hidden_layer_norm: bool = False,
    ) -> None:
        super().__init__()
        device = generator.device
        self.d, self.logit_shift = d, logit_shift
        #: The authors' network (``bayesdag_nonlinear.py``) also normalises the hidden layer (with gain and bias)
        #: before the residual layer and before the output layer.
        self.hidden_layer_norm = hidden_layer_norm
        if hidden_layer_norm:
            self.norm_gains = torch.nn.Parameter(torch.ones(2, hidden, dtype=dtype, device=device))
            self.norm_biases = torch.nn.Parameter(torch.zeros(2, hidden, dtype=dtype, device=device))

        def uniform(rows: int, cols: int) -> torch.nn.Parameter:
            bound = 1 / math.sqrt(cols)
            values = torch.rand(rows, cols, generator=generator, dtype=dtype, device=device) * 2 * bound - bound
            return torch.nn.Parameter(values)

        self.w1, self.b1 = uniform(hidden, d), torch.nn.Parameter(torch.zeros(hidden, dtype=dtype, device=device))
        self.w2, self.b2 = uniform(hidden, hidden), torch.nn.Parameter(torch.zeros(hidden, dtype=dtype, device=device))
        self.w3 = torch.nn.Parameter(torch.zeros(d * d, hidden, dtype=dtype, device=device))
        self.b3 = torch.nn.Parameter(torch.zeros(d * d, dtype=dtype, device=device))

    def forward(self, p: Tensor) -> Tensor:
        """Logits ``[C, d, d]`` of q_phi(W | p)."""
        layer_norm = torch.nn.functional.layer_norm
        h = layer_norm(p, (self.d,))
        h = torch.relu(h @ self.w1.T + self.b1)
        if not self.hidden_layer_norm:
            h = h + torch.relu(h @ self.w2.T + self.b2)
        else:
            width = (h.shape[-1],)
            inner = layer_norm(h, width, self.norm_gains[0], self.norm_biases[0])
            h = h + torch.relu(inner @ self.w2.T + self.b2)
            h = layer_norm(h, width, self.norm_gains[1], self.norm_biases[1])
        return (h @ self.w3.T + self.b3).view(*p.shape[:-1], self.d, self.d) + self.logit_shift


def sample_edges(logits: Tensor, temperature: float, generator: torch.Generator) -> Tensor:
    """W ~ Bernoulli(sigmoid(logits)): hard {0, 1} forward, relaxed-Bernoulli (Gumbel) gradient backward."""
    u = torch.rand(logits.shape, generator=generator, dtype=logits.dtype, device=logits.device)
    u = u.clamp(torch.finfo(logits.dtype).tiny, 1 - torch.finfo(logits.dtype).eps)
    noisy = logits + torch.log(u) - torch.log1p(-u)
    soft = torch.sigmoid(noisy / temperature)
    hard = (noisy > 0).to(logits.dtype)
    return hard + (soft - soft.detach())


def bernoulli_entropy(logits: Tensor) -> Tensor:
    """Entropy of independent Bernoulli(sigmoid(logits)) summed over the off-diagonal entries, ``[C]``."""
    q = torch.sigmoid(logits)
    entropy = q * torch.nn.functional.softplus(-logits) + (1 - q) * torch.nn.functional.softplus(logits)
    off = 1 - torch.eye(logits.shape[-1], dtype=logits.dtype, device=logits.device)
    return (entropy * off).sum((-1, -2))


# ------------------------------------------------------------------ SCMs
def init_theta(
    model: str, num_chains: int, d: int, hidden: int, generator: torch.Generator, dtype: torch.dtype
) -> dict[str, Tensor]:
    """Initial SCM parameters Theta per chain (leaf tensors): edge weights or MLP weights, and log noise variances."""
    device = generator.device

    def draw(*shape: int, scale: float) -> Tensor:
        values = torch.randn(num_chains, *shape, generator=generator, dtype=dtype, device=device) * scale
        return values.requires_grad_()

    log_noise = torch.zeros(num_chains, d, dtype=dtype, device=device, requires_grad=True)
    if model == "linear":
        return {"weights": draw(d, d, scale=0.1), "log_noise": log_noise}
    embed = d  # node embedding size of the weight-shared networks (eq. 10)
    return {
        "embedding": draw(d, embed, scale=1.0),
        "l1": draw(1 + embed, hidden, scale=1 / math.sqrt(1 + embed)),
        "l1_bias": draw(hidden, scale=0.0),
        "l2": draw(hidden, hidden, scale=1 / math.sqrt(hidden)),
        "l2_bias": draw(hidden, scale=0.0),
        "z1": draw(hidden + embed, hidden, scale=1 / math.sqrt(hidden + embed)),
        "z1_bias": draw(hidden, scale=0.0),
        "z2": draw(hidden, 1, scale=1 / math.sqrt(hidden)),
        "z2_bias": draw(1, scale=0.0),
        "log_noise": log_noise,
    }


def predict(model: str, theta: dict[str, Tensor], graph: Tensor, x: Tensor) -> Tensor:
    """Mean of each node given its parents, ``[C, B, d]``, for graphs ``[C, d, d]`` and data ``[B, d]``.

    linear: ``sum_i G_ij Theta_ij x_i``. mlp: BayesDAG eq. 10, ``zeta(u_j, sum_i G_ij l(u_i, x_i))`` with shared
    networks l and zeta (one hidden layer each, LeakyReLU) and trainable node embeddings u (App. D's LayerNorm and
    residual connections are left out: one hidden layer has nothing to skip).
    """
    if model == "linear":
        return torch.einsum("bi,cij->cbj", x, graph * theta["weights"])
    leaky = torch.nn.functional.leaky_relu
    c, (b, d) = graph.shape[0], x.shape
    embedding = theta["embedding"]  # [C, d, e]

    def layer(inputs: Tensor, name: str) -> Tensor:  # [C, B * d, in] -> [C, B * d, out] as one batched product
        return torch.baddbmm(theta[f"{name}_bias"][:, None], inputs, theta[name])

    inputs = torch.cat([x.reshape(1, b * d, 1).expand(c, -1, -1), embedding.repeat(1, b, 1)], -1)
    messages = leaky(layer(leaky(layer(inputs, "l1")), "l2")).view(c, b, d, -1)  # l(u_i, x_i), [C, B, d, H]
    pooled = torch.einsum("cij,cbih->cbjh", graph, messages).reshape(c, b * d, -1)  # sum over the parents i of j
    z = leaky(layer(torch.cat([pooled, embedding.repeat(1, b, 1)], -1), "z1"))
    return layer(z, "z2").view(c, b, d)


def log_likelihood(model: str, theta: dict[str, Tensor], graph: Tensor, x: Tensor) -> Tensor:
    """Gaussian additive-noise log-likelihood of the rows ``x`` ``[B, d]`` summed over rows, per chain ``[C]``."""
    residual = x - predict(model, theta, graph, x)
    log_noise = theta["log_noise"][:, None, :]
    return (-0.5 * (LOG_2PI + log_noise + residual.square() * torch.exp(-log_noise))).sum((-1, -2))


def log_prior_theta(theta: dict[str, Tensor]) -> Tensor:
    """N(0, I) on every SCM parameter (BayesDAG's prior on Theta; the log noise variances included), per chain."""
    total = 0.0
    for value in theta.values():
        total = total + (-0.5 * (LOG_2PI + value.square())).flatten(1).sum(-1)
    return total


# ------------------------------------------------------------------ sampler
@dataclass
class AdamSGMCMC:
    """BayesDAG App. C: SG-HMC with an Adam-like diagonal preconditioner, Euler-Maruyama step, for one tensor.

    With ``l = sqrt(lr)``: ``V <- b2 V + (1 - b2) g^2``, ``G = 1 / sqrt(eps + sqrt(eps + V))``,
    ``r <- b1 r + l G g + s sqrt(2 l ((1 - b1) / l - l / 2)) eta``, ``x <- x - l G r``, with g the gradient of U
    (momentum sign flipped from the paper's, same dynamics). The paper's correction ``l dG/dx`` is left out, as
    in the authors' code. ``s`` (``scale``) sets the injected noise: "scale p" and "scale Theta".
    """

    lr: float
    scale: float
    betas: tuple[float, float] = (0.9, 0.99)
    eps: float = 1e-8
    momentum: Tensor | None = None
    second_moment: Tensor | None = None

    def step(self, value: Tensor, gradient: Tensor, generator: torch.Generator) -> None:
        """Move ``value`` in place (no autograd) given the gradient of U at it."""
        b1, b2 = self.betas
        l = math.sqrt(self.lr)  # noqa: E741 (the paper's name)
        if self.momentum is None:
            self.momentum, self.second_moment = torch.zeros_like(value), torch.zeros_like(value)
        assert self.second_moment is not None
        self.second_moment.mul_(b2).add_((1 - b2) * gradient.square())
        precondition = 1 / torch.sqrt(self.eps + torch.sqrt(self.eps + self.second_moment))
        noise_sd = self.scale * math.sqrt(max(2 * l * ((1 - b1) / l - l / 2), 0.0))
        eta = torch.randn(value.shape, generator=generator, dtype=value.dtype, device=value.device)
        self.momentum.mul_(b1).add_(l * precondition * gradient + noise_sd * eta)
        value.sub_(l * precondition * self.momentum)
