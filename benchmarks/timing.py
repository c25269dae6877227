"""Timing helpers shared by the benchmark scripts: best-of wall time and modelled time per call."""
from __future__ import annotations

import time

import torch


def best_of(fn, repeats: int, inner: int) -> float:
    """Best wall seconds per call over ``repeats`` rounds of ``inner`` calls (noise-robust)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - start) / inner)
    return best


def modelled_ns_per_call(fn, calls: int) -> float:
    """Projected time per call: the host's modelled clock across ``calls`` calls and a sync."""
    from runtime import get_runtime
    clock = get_runtime().clock
    torch.emu.synchronize()
    start = clock.now_ns
    for _ in range(calls):
        fn()
    torch.emu.synchronize()
    return (clock.now_ns - start) / calls
