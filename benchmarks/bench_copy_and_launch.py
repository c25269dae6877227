"""Copy and launch overhead of the emu device, as ratios to CPU work in the same run.

For each case it prints the wall time per call, a reference measured in this
run, their ratio, and the modelled (projected) device time per call. Targets
(issue #2): a tiny device call costs at most 30x a CPU copy (``Tensor.copy_``)
of the same size in steady state; 1 MiB and 256 MiB copies stay within 3x of a
host memcpy of the same bytes (one ``memmove`` call, as ``ctypes.memmove``).

Run: ``make bench`` or ``python benchmarks/bench_copy_and_launch.py [--quick]``.
"""
from __future__ import annotations

import argparse
import ctypes
import time

import torch

import torch_plugin  # noqa: F401


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


def report(name, wall, reference, modelled_ns, target):
    ratio = wall / reference
    verdict = "ok" if ratio <= target else "OVER TARGET"
    print(f"{name:<34}{wall * 1e6:>11.1f} us{reference * 1e6:>11.1f} us{ratio:>9.2f}x"
          f"{modelled_ns / 1e3:>13.1f} us   target <= {target:g}x  {verdict}")
    return ratio <= target


def copy_cases(sizes, repeats):
    ok = True
    for nbytes in sizes:
        label = f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes} B"
        n = nbytes // 4
        host = torch.rand(n)
        host_dst = torch.empty(n)
        dev = torch.empty(n, device="emu")
        inner = 20 if nbytes <= 1 << 20 else 2
        src_ptr, dst_ptr = host.data_ptr(), host_dst.data_ptr()
        memcpy = best_of(lambda: ctypes.memmove(dst_ptr, src_ptr, nbytes), repeats, inner)
        h2d = best_of(lambda: dev.copy_(host), repeats, inner)
        d2h = best_of(lambda: host_dst.copy_(dev), repeats, inner)
        ok &= report(f"host->device copy {label}", h2d, memcpy, modelled_ns_per_call(lambda: dev.copy_(host), 2), 3)
        ok &= report(f"device->host copy {label}", d2h, memcpy,
                     modelled_ns_per_call(lambda: host_dst.copy_(dev), 2), 3)
        assert torch.equal(host_dst, host)
        del dev
        torch.emu.empty_cache()
    return ok


def tiny_op_case(repeats):
    a_cpu, b_cpu = torch.rand(16), torch.rand(16)
    a, b = a_cpu.to("emu"), b_cpu.to("emu")
    dst = torch.empty(16)
    cpu_copy = best_of(lambda: dst.copy_(a_cpu), repeats, 2000)
    calls = 500

    def burst():
        for _ in range(calls):
            a.add_(b)
        torch.emu.synchronize()  # steady state includes the device work the calls queued
    device_op = best_of(burst, repeats, 1) / calls
    return report("tiny device op (add_, 16 floats)", device_op, cpu_copy, modelled_ns_per_call(lambda: a.add_(b), 200), 30)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 MiB copies only, fewer repeats")
    args = parser.parse_args()
    repeats = 3 if args.quick else 5
    sizes = [1 << 20] if args.quick else [1 << 20, 256 << 20]
    print(f"{'case':<34}{'emu wall':>14}{'reference':>14}{'ratio':>10}{'modelled/call':>16}")
    ok = copy_cases(sizes, repeats)
    ok &= tiny_op_case(repeats)
    print("all targets met" if ok else "some targets missed (see OVER TARGET)")


if __name__ == "__main__":
    main()
