"""All labelled DAGs on d <= 5 nodes as an enumerated model space with edge-toggle jumps."""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from suite.core.model_space import ModelSpace
from suite.core.tensor_ops import DeviceCache

MAX_NODES = 5  # 2^(d(d-1)) adjacency patterns are screened: 2^20 for d = 5


def edge_slots(num_nodes: int) -> list[tuple[int, int]]:
    """Ordered pairs (parent, child) with parent != child, in row-major order; slot k is bit k of a code."""
    return [(i, j) for i in range(num_nodes) for j in range(num_nodes) if i != j]


def codes_to_adjacency(codes: Tensor, num_nodes: int) -> Tensor:
    """Adjacency matrices ``[..., d, d]`` (bool, A[i, j] = edge i -> j) of edge-slot bit codes."""
    slots = edge_slots(num_nodes)
    bits = (codes.unsqueeze(-1) >> torch.arange(len(slots), device=codes.device)) & 1 == 1
    adjacency = torch.zeros(*codes.shape, num_nodes, num_nodes, dtype=torch.bool, device=codes.device)
    parents = torch.tensor([p for p, _ in slots], dtype=torch.int64, device=codes.device)
    children = torch.tensor([c for _, c in slots], dtype=torch.int64, device=codes.device)
    adjacency[..., parents, children] = bits
    return adjacency


def enumerate_dags(num_nodes: int) -> Tensor:
    """Sorted edge-slot codes of every DAG on ``num_nodes`` labelled nodes (1, 3, 25, 543, 29281 for d = 1..5)."""
    if not 1 <= num_nodes <= MAX_NODES:
        raise ValueError(f"num_nodes must lie in [1, {MAX_NODES}] for exhaustive enumeration, got {num_nodes}")
    return _dag_codes(num_nodes).clone()


@functools.cache
def _dag_codes(num_nodes: int) -> Tensor:
    """The enumeration itself, once per process (screening 2^20 patterns for d = 5 takes about a second)."""
    num_slots = num_nodes * (num_nodes - 1)
    keep = []
    for start in range(0, 2**num_slots, 2**18):
        codes = torch.arange(start, min(start + 2**18, 2**num_slots), dtype=torch.int64)
        adjacency = codes_to_adjacency(codes, num_nodes).to(torch.float32)
        # A graph is acyclic iff its adjacency matrix is nilpotent: A^d = 0.
        power = adjacency
        for _ in range(num_nodes - 1):
            power = (power @ adjacency).clamp_max(1.0)
        keep.append(codes[power.flatten(1).sum(-1) == 0])
    return torch.cat(keep)


class DAGSpace(ModelSpace):
    """Every DAG on d labelled nodes; a jump adds, removes or reverses one edge, uniformly over valid moves.

    Reversals let chains move between Markov-equivalent DAGs directly; with
    additions and removals alone such moves must pass through a graph that
    lacks a well-supported edge, which is almost never accepted.

    The identifier lists edges as ``"0->1,2->3"`` (``"empty"`` for no edges);
    the index is the DAG's rank in the sorted list of edge-slot codes.
    """

    def __init__(self, num_nodes: int) -> None:
        self.num_nodes = num_nodes
        self.slots = edge_slots(num_nodes)
        self.codes = enumerate_dags(num_nodes)
        self.num_models = int(self.codes.numel())
        bit = 1 << torch.arange(len(self.slots))
        reverse_bit = 1 << torch.tensor([self.slots.index((c, p)) for p, c in self.slots])
        present = (self.codes[:, None] & bit) != 0
        toggled = self.codes[:, None] ^ bit
        # Reversing a present edge p -> c: clear its slot, set the slot of c -> p.
        reversed_ = torch.where(present, (self.codes[:, None] & ~bit) | reverse_bit, -1)
        candidates = torch.cat([toggled, reversed_], dim=-1)
        pos = torch.searchsorted(self.codes, candidates.clamp_min(0)).clamp_max(self.num_models - 1)
        #: neighbour[m, k]: the DAG reached by move k (toggle slot k, or reverse the edge in slot
        #: k - num_slots), or -1 when that move is impossible or creates a cycle.
        self.neighbour = torch.where(self.codes[pos] == candidates, pos, torch.full_like(pos, -1))
        self.log_num_neighbours = (self.neighbour >= 0).sum(-1).to(torch.float64).log()
        self._device = DeviceCache(
            codes=self.codes, neighbour=self.neighbour, log_num_neighbours=self.log_num_neighbours
        )

    def adjacency(self, model_index: Tensor) -> Tensor:
        """Bool adjacency matrices ``[B, d, d]`` of the models."""
        codes = self._device.get("codes", model_index.device).index_select(0, model_index)
        return codes_to_adjacency(codes, self.num_nodes)

    def index_of_adjacency(self, adjacency: Tensor) -> Tensor:
        """int64 ``[B]``: the index of each DAG ``[B, d, d]``; ValueError naming the rows that are not DAGs."""
        d = self.num_nodes
        if adjacency.ndim != 3 or tuple(adjacency.shape[1:]) != (d, d):
            raise ValueError(f"adjacency must have shape [B, {d}, {d}], got {tuple(adjacency.shape)}")
        adjacency = adjacency.to(torch.bool)
        device = adjacency.device
        # A DAG's index is the rank of its edge-slot code (bit k = slot k) in the sorted table of DAG codes.
        slot_flat = torch.tensor([p * d + c for p, c in self.slots], dtype=torch.int64, device=device)
        bits = adjacency.flatten(1)[:, slot_flat].to(torch.int64)
        codes = (bits << torch.arange(len(self.slots), device=device)).sum(-1)
        table = self._device.get("codes", device)
        pos = torch.searchsorted(table, codes).clamp_max(len(table) - 1)
        bad = (table[pos] != codes) | adjacency.diagonal(dim1=1, dim2=2).any(-1)  # slots omit the diagonal
        if bool(bad.any()):
            rows = bad.nonzero().flatten().tolist()
            shown = ", ".join(map(str, rows[:20])) + (f", ... ({len(rows)} in all)" if len(rows) > 20 else "")
            raise ValueError(f"rows {shown} are not DAGs on {d} nodes (a directed cycle or a self-loop)")
        return pos

    def identifier(self, index: int) -> str:
        """Edge list such as ``"0->1,2->3"``."""
        code = int(self.codes[int(index)])
        edges = [f"{p}->{c}" for k, (p, c) in enumerate(self.slots) if (code >> k) & 1]
        return ",".join(edges) if edges else "empty"

    def index(self, identifier: str) -> int:
        """Index of the DAG with this edge list."""
        code = 0
        if identifier != "empty":
            for edge in identifier.split(","):
                try:
                    parent, child = (int(v) for v in edge.split("->"))
                    code |= 1 << self.slots.index((parent, child))
                except ValueError:
                    raise KeyError(f"bad edge {edge!r} in {identifier!r}; expected e.g. '0->1,2->3'") from None
        pos = int(torch.searchsorted(self.codes, torch.tensor(code)))
        if pos >= self.num_models or int(self.codes[pos]) != code:
            raise KeyError(f"{identifier!r} is not a DAG on {self.num_nodes} nodes")
        return pos

    def sample_uniform(self, num: int, generator: torch.Generator) -> Tensor:
        """Uniform draws over all DAGs."""
        return torch.randint(0, self.num_models, (num,), generator=generator, device=generator.device)

    def propose_jump(self, model_index: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """One uniformly chosen valid move (add, remove or reverse an edge); log j(m|m') - log j(m'|m)."""
        if model_index.numel() == 0:
            return model_index.clone(), torch.zeros(0, dtype=torch.float64, device=model_index.device)
        neighbour = self._device.get("neighbour", model_index.device).index_select(0, model_index)
        # A uniform choice among the valid moves: the argmax of independent uniforms over them
        # (an order of magnitude cheaper than torch.multinomial here).
        keys = torch.rand(neighbour.shape, generator=generator, device=neighbour.device)
        slot = torch.where(neighbour >= 0, keys, -1.0).argmax(-1, keepdim=True)
        proposed = neighbour.gather(-1, slot).squeeze(-1)
        log_counts = self._device.get("log_num_neighbours", model_index.device)
        return proposed, log_counts.index_select(0, model_index) - log_counts.index_select(0, proposed)
