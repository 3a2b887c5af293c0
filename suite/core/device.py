"""Devices: the ``--device`` choices, resolving one, waiting for its queued kernels; the process allocator."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def resolve_device(choice: str) -> torch.device:
    """Turn ``auto|cpu|cuda`` into a device; ``auto`` picks CUDA when present."""
    if choice not in DEVICE_CHOICES:
        raise ValueError(f"unknown device {choice!r}; valid: {', '.join(DEVICE_CHOICES)}")
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if choice == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "--device cuda was asked for but torch sees no CUDA device (torch.cuda.is_available() is False)"
        )
    return torch.device(choice)


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels on ``device`` so that a clock read covers them."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def tune_allocator() -> bool:
    """Keep freed buffers in the process (glibc): returns True if applied.

    glibc returns large freed blocks (batched temporaries of a few MB) to the
    OS and faults them back in on the next call; on this kind of VM that made
    batch-4096 log joints 4-5x slower and RJMCMC on robust-vs 20% slower.
    Raising the mmap and trim thresholds to 256 MiB keeps them. Peak memory
    is unchanged; only its return to the OS is deferred.
    """

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 256 << 20)) and bool(libc.mallopt(m_trim_threshold, 512 << 20))
    except (OSError, AttributeError):  # not glibc
        return False
