"""Timing harness: devices, per-phase wall clocks, peak memory and the run environment."""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from suite.core.device import synchronize

PHASES = ("setup", "train", "sample", "evaluate")


class PhaseTimer:
    """Accumulates wall-clock seconds per named phase.

    On CUDA the device is synchronised before each clock read and the GPU time
    of each phase is also measured with CUDA events (``gpu_timings``).

    Example:
        >>> timer = PhaseTimer(torch.device("cpu"))
        >>> with timer.phase("train"):
        ...     _ = sum(range(10))
        >>> sorted(timer.timings)
        ['train']
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.timings: dict[str, float] = {}
        self.gpu_timings: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the enclosed block under ``name`` (times add up over repeated phases)."""
        cuda = self.device.type == "cuda"
        if cuda:
            start_event = torch.cuda.Event(enable_timing=True)
            end_event = torch.cuda.Event(enable_timing=True)
            synchronize(self.device)
            start_event.record()
        start = time.perf_counter()
        try:
            yield
        finally:
            if cuda:
                end_event.record()
                synchronize(self.device)
                gpu_s = start_event.elapsed_time(end_event) / 1000.0
                self.gpu_timings[name] = self.gpu_timings.get(name, 0.0) + gpu_s
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - start


class PeakMemory:
    """Peak memory over a block: GPU bytes allocated on CUDA, resident set size on CPU.

    On Linux the process's RSS high-water mark is reset at the start (through
    ``/proc/self/clear_refs``), so the peak belongs to this block alone; where
    that is impossible the process-lifetime peak is reported and ``scope``
    says so.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.peak_bytes: int | None = None
        self.kind = "cuda_allocated" if device.type == "cuda" else "rss"
        self.scope = "block"

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            try:
                Path("/proc/self/clear_refs").write_text("5")
            except OSError:
                self.scope = "process"
            else:
                # Some kernels (and sandboxes such as gVisor) accept the write but keep the old mark.
                status = _proc_status_kib()
                if status.get("VmHWM", 0) > 1.05 * status.get("VmRSS", 0) + 16 * 1024:
                    self.scope = "process"
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            self.peak_bytes = int(torch.cuda.max_memory_allocated(self.device))
            return
        # Where the kernel updates the mark lazily, the RSS now can exceed it; never report less.
        self.peak_bytes = max(_rss_high_water_mark(), _proc_status_kib().get("VmRSS", 0) * 1024)


def _proc_status_kib() -> dict[str, int]:
    """The kB-valued fields of ``/proc/self/status`` (empty where there is no procfs)."""
    fields: dict[str, int] = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, value = line.partition(":")
            parts = value.split()
            if len(parts) == 2 and parts[1] == "kB":
                fields[key] = int(parts[0])
    except OSError:
        pass
    return fields


def _rss_high_water_mark() -> int:
    hwm = _proc_status_kib().get("VmHWM")
    if hwm is not None:
        return hwm * 1024
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is bytes on macOS, KiB on Linux
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale


def git_revision(path: Path | None = None) -> str | None:
    """Commit SHA of the checkout (with ``-dirty`` if modified), or None outside git."""
    cwd = path or Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def environment(device: torch.device, dtype: str) -> dict[str, Any]:
    """Where and with what a run happened: device, dtype, versions, machine."""

    cpu_name = platform.processor() or platform.machine()
    info: dict[str, Any] = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name,
        "dtype": dtype,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "git": git_revision(),
    }
    if device.type == "cuda":
        info["cuda"] = torch.version.cuda
    return info


def warm_up_torch() -> None:
    """Import what the first optimiser step of a process would import (``torch._dynamo``, about 3 s).

    Done before any run starts, so that this one-off cost never lands on a method's compute clock (a timed run
    would otherwise lose seconds of its budget to it).
    """
    import torch._dynamo  # noqa: F401
