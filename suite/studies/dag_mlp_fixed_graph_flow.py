"""Train ``vti-mcg``'s flow with q held at the true dag-mlp graph and print its loss (docs/limitations.md).

Tells whether the flow can fit the dense true graph at all: its loss (minus the ELBO of that graph) is to be
compared with the graph's Laplace evidence (``dag_mlp_edge_evidence.py``) and with VTI's terminal losses.
It starts from the method's ``untrained`` flow and model sampler and trains them with the fixed model.

    python -m suite.cli.dag_mlp_diagnostics fixed-graph-flow --data-seed 0 --iterations 500 --flow-lr 0.01
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from methods.vti import Trainer
from suite.core.context import RunContext
from suite.core.registry import make_method, make_problem


class FixedModel:
    """A model sampler that always proposes one model and never learns (duck-types ``ModelSampler``)."""

    def __init__(self, model_index: Tensor) -> None:
        self.model_index = model_index

    def sample(self, num: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``num`` copies of the model, log q = 0."""
        return self.model_index.expand(num, -1), torch.zeros(num)

    def update(self, *args: object) -> None:
        """Nothing to learn."""


def run_fixed_graph_flow(
    data_seed: int = 0, iterations: int = 500, flow: str = "affine(3,3)", flow_lr: float = 1e-2
) -> None:
    """Train and print the mean loss of every 250 iterations' last 50."""
    torch.set_num_threads(1)
    problem = make_problem("dag-mlp", data_seed=data_seed)
    method = make_method("vti-mcg", flow=flow, flow_lr=flow_lr).resolve(problem, "quick")
    built = method.untrained(problem, RunContext(seed=0, dtype=torch.float32, profile="quick"))
    train_settings = dataclasses.replace(
        method.train_settings(), num_iterations=iterations, grad_clip=50.0, warmup_iterations=0
    )
    trainer = Trainer(
        problem,
        built.flow,
        FixedModel(problem.true_model_index[None]),
        built.context_of,
        train_settings,
        built.generator,
    )
    for iteration in range(iterations):
        trainer.step(iteration)
        if (iteration + 1) % 250 == 0:
            recent = trainer.trace["loss"][-50:]
            print(f"iteration {iteration + 1}: loss {sum(recent) / len(recent):.1f}", flush=True)
