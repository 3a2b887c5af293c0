"""Harness: devices, phase timers, peak memory, and runs that fail."""

import time

import numpy as np
import pytest
import torch

from suite.core.context import RunContext
from suite.core.device import resolve_device
from suite.core.method import Method, Result
from suite.core.registry import make_problem
from suite.run.harness import PeakMemory, PhaseTimer, _proc_status_kib, environment
from suite.run.runner import execute


def test_resolve_device() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="valid: auto, cpu, cuda"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            resolve_device("cuda")


def test_phase_timer_accumulates() -> None:
    timer = PhaseTimer(torch.device("cpu"))
    for _ in range(2):
        with timer.phase("train"):
            time.sleep(0.02)
    assert 0.035 < timer.timings["train"] < 1.0


def test_peak_memory_sees_a_large_allocation() -> None:
    with PeakMemory(torch.device("cpu")) as small:
        pass
    with PeakMemory(torch.device("cpu")) as big:
        rss_before = _proc_status_kib().get("VmRSS", 0) * 1024
        block = np.ones(300 * 2**20 // 8)  # 300 MiB, touched
        rss_grew = _proc_status_kib().get("VmRSS", 0) * 1024 - rss_before > 250 * 2**20
        del block
    if big.scope == "process":
        assert big.peak_bytes >= small.peak_bytes
    elif not rss_grew:
        pytest.skip("this machine's RSS accounting does not show a touched 300 MiB allocation")
    else:
        assert big.peak_bytes - small.peak_bytes > 250 * 2**20


class Exploding(Method):
    """Raises during run."""

    name = "exploding"

    def run(self, problem, context):
        raise RuntimeError("boom")


class NoDensity(Method):
    """Returns model probabilities only."""

    name = "no-density"

    def run(self, problem, context):
        return Result(model_probs=problem.reference_model_probs(), timings={"sample": 0.0})


def test_failed_method_becomes_a_failed_record() -> None:
    record = execute(make_problem("sas"), Exploding(), RunContext(seed=0))
    assert record["status"] == "failed"
    assert record["reason"] == "RuntimeError: boom"
    assert "Traceback" in record["traceback"]


def test_record_carries_environment_and_metrics() -> None:
    record = execute(make_problem("sas"), NoDensity(), RunContext(seed=3))
    assert record["status"] == "ok" and record["seed"] == 3
    assert record["metrics"]["model_prob_tv"]["value"] == 0.0
    assert "cross_entropy" not in record["metrics"]  # no density, no cross-entropy
    env = record["environment"]
    assert {"device", "dtype", "torch", "python"} <= set(env) and env["torch"] == torch.__version__
    assert set(record["timings_s"]) >= {"sample", "evaluate", "method_total"}
    assert record["peak_memory_bytes"] > 0


def test_environment_names_device_and_dtype() -> None:
    env = environment(torch.device("cpu"), "float32")
    assert env["device"] == "cpu" and env["dtype"] == "float32"
