"""Kernel-library throughput of the emu device, as ratios to the same torch ops on CPU (issue #6).

For each workload it prints the wall time per call of the emu op and of the same torch op
on CPU tensors measured in this run (best of N), their ratio, the ratio against torch
limited to one thread (for information: the device's kernels are single-threaded, torch CPU
uses every core), and the modelled (projected) device time per call. The emu call is
synchronised (``torch.emu.synchronize()`` is inside the timed region), its inputs are already
on the device and its output is preallocated with ``out=`` where the op has that form, so what
is measured is the kernel, not allocation. Each emu result is checked against the CPU result
once before timing.

Workloads and targets (issue #6, "Benchmarks"): elementwise add and gelu on 16M floats, sum
over 16M floats, softmax 4096x4096 (dim -1), layer_norm 8192x1024: within 3x of torch CPU wall
time; mm 1024^3 in float32 and bfloat16, conv2d (batch 8, 64->64 channels, 56x56, 3x3,
padding 1): within 1.5x.

Run: ``python benchmarks/bench_kernels.py [--quick]`` with ``EMU_PRESET`` unset (16 GiB
devices, committed lazily). ``--quick`` (the smoke test, under ``EMU_PRESET=tiny``) uses small
shapes that fit 64 MiB devices and fewer repeats. The exit status is 0 whatever the ratios.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

import torch_plugin  # noqa: F401
from timing import modelled_ns_per_call

ELEMENTWISE_TARGET = 3.0
MATRIX_TARGET = 1.5


@dataclass
class Case:
    name: str
    target: float
    make: Callable          # make(device) -> (call, result): call() runs the op once
    tolerance: dict         # assert_close kwargs for the one correctness check


def _seeded(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=_generator, dtype=dtype)


_generator = torch.Generator().manual_seed(0)


def _cases(quick: bool) -> list[Case]:
    n = (1 << 16) if quick else (1 << 24)                     # 16M floats in the full run
    rows, cols = (256, 256) if quick else (4096, 4096)         # softmax
    mm = 128 if quick else 1024
    conv_batch, conv_hw = (1, 16) if quick else (8, 56)
    ln_rows = 512 if quick else 8192
    tol32 = dict(rtol=1.3e-6, atol=1e-5)
    host = {}

    def inputs(key, factory):
        if key not in host:
            host[key] = factory()
        return host[key]

    def to(device, *tensors):
        return [t.to(device) for t in tensors]

    def add(device):
        a, b = to(device, *inputs("ab", lambda: (_seeded(n), _seeded(n))))
        out = torch.empty_like(a)
        return (lambda: torch.add(a, b, out=out)), out

    def gelu(device):
        (a,) = to(device, inputs("ab", lambda: (_seeded(n), _seeded(n)))[0])
        out = torch.empty_like(a)
        return (lambda: torch._C._nn.gelu(a, out=out)), out

    def total(device):
        (a,) = to(device, inputs("ab", lambda: (_seeded(n), _seeded(n)))[0])
        out = torch.empty((), device=device)
        return (lambda: torch.sum(a, dim=(0,), out=out)), out

    def softmax(device):
        (x,) = to(device, inputs("softmax", lambda: _seeded(rows, cols)))
        out = torch.empty_like(x)
        return (lambda: torch._softmax(x, -1, False, out=out)), out

    def matmul(dtype):
        def make(device):
            a, b = to(device, *(t.to(dtype) for t in inputs("mm", lambda: (_seeded(mm, mm), _seeded(mm, mm)))))
            out = torch.empty((mm, mm), dtype=dtype, device=device)
            return (lambda: torch.mm(a, b, out=out)), out
        return make

    def conv2d(device):
        x, w, bias = to(device, *inputs("conv", lambda: (_seeded(conv_batch, 64, conv_hw, conv_hw),
                                                         _seeded(64, 64, 3, 3) * 0.05, _seeded(64))))
        holder = {}

        def call():
            holder["out"] = F.conv2d(x, w, bias, padding=1)     # conv2d has no out= form
        call()
        return call, holder

    def layer_norm(device):
        x, w, bias = to(device, *inputs("ln", lambda: (_seeded(ln_rows, 1024), _seeded(1024), _seeded(1024))))
        holder = {}

        def call():
            holder["out"] = F.layer_norm(x, (1024,), w, bias)  # no out= form either
        call()
        return call, holder

    label = "64K" if quick else "16M"
    return [
        Case(f"add {label} float32", ELEMENTWISE_TARGET, add, dict(rtol=0, atol=0)),
        Case(f"gelu {label} float32", ELEMENTWISE_TARGET, gelu, tol32),
        Case(f"sum {label} float32", ELEMENTWISE_TARGET, total, dict(rtol=1e-5, atol=1e-3)),
        Case(f"softmax {rows}x{cols} dim -1", ELEMENTWISE_TARGET, softmax, tol32),
        Case(f"layer_norm {ln_rows}x1024", ELEMENTWISE_TARGET, layer_norm, dict(rtol=1e-5, atol=1e-5)),
        Case(f"mm {mm}^3 float32", MATRIX_TARGET, matmul(torch.float32), dict(rtol=1e-5, atol=1e-4)),
        Case(f"mm {mm}^3 bfloat16", MATRIX_TARGET, matmul(torch.bfloat16), dict(rtol=1.6e-2, atol=1e-1)),
        Case(f"conv2d {conv_batch}x64x{conv_hw}x{conv_hw} 3x3", MATRIX_TARGET, conv2d, dict(rtol=1e-4, atol=1e-4)),
    ]


def _result(r):
    return r["out"] if isinstance(r, dict) else r


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def best_of_interleaved(fns, repeats: int) -> list[float]:
    """Best wall seconds of one call of each of ``fns`` over ``repeats`` rounds; each round runs
    every function once, so load from other processes on a shared host hits them alike."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], _seconds(fn))
    return best


def _one_thread(fn):
    def call():
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            fn()
        finally:
            torch.set_num_threads(threads)
    return call


def run_case(case: Case, repeats: int) -> bool:
    cpu_call, cpu_result = case.make("cpu")
    emu_call, emu_result = case.make("emu")
    cpu_call()
    emu_call()
    torch.testing.assert_close(_result(emu_result).cpu(), _result(cpu_result), **case.tolerance)

    def synchronised():
        emu_call()
        torch.emu.synchronize()
    emu, cpu, cpu_one_thread = best_of_interleaved([synchronised, cpu_call, _one_thread(cpu_call)], repeats)
    modelled = modelled_ns_per_call(emu_call, 1)
    ratio = emu / cpu
    verdict = f"target <= {case.target:g}x  " + ("ok" if ratio <= case.target else "OVER TARGET")
    print(f"{case.name:<30}{emu * 1e3:>10.2f} ms{cpu * 1e3:>10.2f} ms{ratio:>8.2f}x"
          f"{emu / cpu_one_thread:>9.2f}x{modelled / 1e3:>12.1f} us   {verdict}", flush=True)
    return ratio <= case.target


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes (fit the tiny preset), fewer repeats")
    parser.add_argument("--only", default="", help="run only the cases whose name contains this text")
    args = parser.parse_args()
    repeats = 2 if args.quick else 5
    torch.emu.set_host_fallback(False)   # a workload that left the device would measure the host
    print(f"torch CPU threads: {torch.get_num_threads()}")
    print(f"{'case':<30}{'emu wall':>13}{'torch cpu':>13}{'ratio':>9}{'1-thread':>10}{'modelled/call':>15}")
    ok = True
    for case in _cases(args.quick):
        if args.only in case.name:
            ok &= run_case(case, repeats)
            torch.emu.empty_cache()
    print("all targets met" if ok else "some targets missed (see OVER TARGET)")


if __name__ == "__main__":
    main()
