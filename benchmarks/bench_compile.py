"""Eager vs torch.compile(backend="emu") for the zoo's GPT-2-style forward (and the small-shape
dispatch/launch overhead of the custom ops).

For each mode: the projected device time (summed engine busy time of the emulated device),
the projected end-to-end time (the runtime's modelled host clock across the calls and a final
sync: for the compiled forward, what replay charges: one submission per segment plus
host.command_encode_ns per command), the emulation's wall time per call after warm-up, and
(compiled) the compile time. The calls after the first are replays of the captured program.
Targets, printed as ratios measured in the same run (no asserts): the compiled forward projects
>= 1.5x faster end to end than eager, and its emulation wall time is >= 2x faster than eager's.

    .venv/bin/python benchmarks/bench_compile.py [--model gpt2|llama] [--calls N] [--quick]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("EMU_PRESET", "tiny")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import torch_plugin  # noqa: E402,F401
from torch_plugin.compile import compile_stats, reset_compile_stats  # noqa: E402
from torch_plugin.zoo import MODELS  # noqa: E402

PROJECTED_TARGET = 1.5
WALL_TARGET = 2.0


def _device_busy_ns() -> float:
    from runtime import get_runtime
    rt = get_runtime()
    return sum(sum(rt.driver.telemetry(i)["engines_busy_ns"].values()) for i in range(torch.emu.device_count()))


def measure(fn, calls: int) -> dict:
    """Projected device and end-to-end time and wall time per call (after one warm-up call)."""
    from runtime import get_runtime
    clock = get_runtime().clock
    with torch.no_grad():
        fn()
        torch.emu.synchronize()
        busy0, host0, wall0 = _device_busy_ns(), clock.now_ns, time.perf_counter()
        for _ in range(calls):
            fn()
        torch.emu.synchronize()
        wall = time.perf_counter() - wall0
    return {"device_us": (_device_busy_ns() - busy0) / calls / 1e3, "e2e_us": (clock.now_ns - host0) / calls / 1e3,
            "wall_ms": wall / calls * 1e3}


def _launches(fn) -> int:
    with torch.no_grad(), torch.emu.telemetry() as t:
        fn()
        torch.emu.synchronize()
    return sum(sum(row["kernels"].values()) for row in t.as_dict()["ops"])


def _row(name, m, launches, extra=""):
    print(f"  {name:<10}{m['device_us']:>12.1f}{m['e2e_us']:>14.1f}{m['wall_ms']:>12.2f}{launches:>10}  {extra}")


def bench_model(name: str, calls: int) -> None:
    spec = MODELS[name]
    model = spec.build(0).to("emu").eval()
    batch = {k: v.to("emu") for k, v in spec.batch(0).items()}
    eager_fn = lambda: spec.output(model, batch)  # noqa: E731
    reset_compile_stats()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="emu")
    compiled_fn = lambda: spec.output(compiled, batch)  # noqa: E731
    start = time.perf_counter()
    with torch.no_grad():
        got = compiled_fn()
        torch.emu.synchronize()
    compile_s = time.perf_counter() - start
    with torch.no_grad():
        torch.testing.assert_close(got.cpu(), eager_fn().cpu(), **spec.forward_tol)
    eager = measure(eager_fn, calls)
    comp = measure(compiled_fn, calls)
    print(f"{name}: {spec.description}")
    print(f"  {'mode':<10}{'device us':>12}{'end-to-end us':>14}{'wall ms':>12}{'launches':>10}")
    _row("eager", eager, _launches(eager_fn))
    _row("replay", comp, _launches(compiled_fn), f"compile + capture {compile_s:.1f} s (first call, wall)")
    projected = eager["e2e_us"] / comp["e2e_us"]
    device = eager["device_us"] / comp["device_us"]
    wall = eager["wall_ms"] / comp["wall_ms"]
    print(f"  projected end-to-end speedup {projected:.2f}x (target >= {PROJECTED_TARGET}x: "
          f"{'ok' if projected >= PROJECTED_TARGET else 'BELOW TARGET'}); device time {device:.2f}x")
    print(f"  emulation wall speedup {wall:.2f}x (target >= {WALL_TARGET}x: "
          f"{'ok' if wall >= WALL_TARGET else 'BELOW TARGET'})")
    print(f"  compile stats: {compile_stats()}")


# Shapes of fused_add_rms_norm in the zoo's decoders (rows = batch x tokens, hidden), and a small
# one where dispatch and launch overhead dominate.
CUSTOM_OP_SHAPES = ((4, 64), (32, 64), (32, 256), (128, 1024))


def bench_custom_ops(calls: int, shapes=CUSTOM_OP_SHAPES) -> None:
    """fused_add_rms_norm vs its eager pieces vs the pieces compiled, per shape."""
    print("fused_add_rms_norm: eager pieces vs the custom op vs the pieces compiled")
    print(f"  {'shape':<12}{'mode':<10}{'device us':>12}{'end-to-end us':>14}{'wall ms':>12}{'launches':>10}")
    for rows, hidden in shapes:
        x, r, w = (torch.randn(s, device="emu") for s in ((rows, hidden), (rows, hidden), (hidden,)))

        def pieces(x=x, r=r, w=w):
            h = x + r
            return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w, h

        fused = lambda x=x, r=r, w=w: torch.ops.emu.fused_add_rms_norm(x, r, w, 1e-6)  # noqa: E731
        compiled = torch.compile(pieces, backend="emu")
        for name, fn in (("pieces", pieces), ("custom op", fused), ("compiled", compiled)):
            m = measure(fn, calls)
            print(f"  {f'{rows}x{hidden}':<12}{name:<10}{m['device_us']:>12.1f}{m['e2e_us']:>14.1f}"
                  f"{m['wall_ms']:>12.2f}{_launches(fn):>10}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2", choices=sorted(MODELS))
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="2 calls per measurement (a smoke run)")
    args = parser.parse_args(argv)
    calls = 2 if args.quick else args.calls
    bench_model(args.model, calls)
    bench_custom_ops(calls if args.quick else max(calls, 20))
    return 0


if __name__ == "__main__":
    sys.exit(main())
