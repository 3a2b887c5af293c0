"""Every method runs on the device ``pytest --device`` names (``--device cuda`` on a GPU machine, docs/gpu.md).

On CPU, the default, this module is skipped: every other test already runs there. Its job is to catch host/device
mix-ups (a CUDA generator handed to a CPU draw, a buffer left on the host) that only a GPU shows: issue 21's
session found six methods failing on CUDA that way.
"""

import pytest
import torch

from suite.core.context import RunContext
from suite.core.registry import available_methods, make_method, make_problem
from suite.core.tensor_ops import host_generator
from suite.run.runner import execute

#: Small problems, in the order tried: each method runs on the first it supports.
PROBLEMS = ("sas", "eight-schools", "linear-dag-d4")


def test_host_generator_keeps_a_cpu_generator() -> None:
    generator = torch.Generator().manual_seed(3)
    assert host_generator(generator) is generator


@pytest.mark.parametrize("method_name", sorted(available_methods()))
def test_method_runs_on_the_device(method_name: str, device: torch.device) -> None:
    if device.type == "cpu":
        pytest.skip("the rest of the suite runs every method on CPU; pass --device cuda on a GPU machine")
    method = make_method(method_name)
    problem = next((p for p in map(make_problem, PROBLEMS) if method.supports(p) is None), None)
    assert problem is not None, f"{method_name} supports none of {PROBLEMS}"
    record = execute(problem, method.resolve(problem, "smoke"), RunContext(seed=0, profile="smoke", device=device))
    assert record["status"] == "ok", record.get("traceback") or record.get("reason")
    assert record["environment"]["device"] == device.type
