"""Profiling overhead (issue #8): a zoo GPT-2-style forward with and without torch.emu.profile().

Both variants run in this process on the same model and input, alternating, best of N; the emu
call includes ``torch.emu.synchronize()``. Target: the run under the profiler (the ``with`` block,
which ends with a synchronisation and reads the firmware trace) takes at most 1.3x the wall time
of the plain one. Building ``prof.report()`` afterwards is timed on its own and shown as a second
ratio. No assertion: the ratios are printed.

    python benchmarks/bench_profile.py [--quick] [--repeats N]
"""
from __future__ import annotations

import argparse
import time
import warnings

TARGET = 1.3


def build(quick: bool):
    import torch
    from torch_plugin.zoo import hf
    layers, width, heads, tokens = (1, 64, 4, 32) if quick else (4, 256, 4, 128)
    config = hf.build_config("GPT2Config", dict(n_layer=layers, n_embd=width, n_head=heads, n_positions=256,
                                                resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    torch.manual_seed(0)
    model = hf.build_model(config, "GPT2LMHeadModel").to("emu").eval()
    ids = torch.randint(3, config.vocab_size, (1, tokens)).to("emu")
    return model, ids, f"GPT-2-style {layers} layers, width {width}, {tokens} tokens"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller model, fewer repeats (the smoke test)")
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds per variant (default 7, quick 2)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    import torch
    import torch_plugin  # noqa: F401

    repeats = args.repeats or (2 if args.quick else 7)
    model, ids, what = build(args.quick)

    def forward():
        with torch.no_grad():
            model(input_ids=ids)
        torch.emu.synchronize()

    last = None

    def profiled():
        nonlocal last
        with torch.emu.profile() as last:
            forward()

    forward()  # warm-up: caches, first-use costs
    profiled()
    last.report()
    best = {"plain": float("inf"), "profiled": float("inf"), "report": float("inf")}
    for _ in range(repeats):
        for name, fn in (("plain", forward), ("profiled", profiled), ("report", lambda: last.report())):
            if name == "report":
                last._report = None  # build it afresh
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    report = last.report()
    ratio = best["profiled"] / best["plain"]
    with_report = (best["profiled"] + best["report"]) / best["plain"]
    verdict = "meets target" if ratio <= TARGET else "OVER TARGET"
    print(f"workload: {what} forward on emu ({len(report.ops)} op rows, verdict {report.verdict})")
    print(f"plain forward           {best['plain'] * 1e3:9.1f} ms")
    print(f"under torch.emu.profile {best['profiled'] * 1e3:9.1f} ms")
    print(f"prof.report() afterwards {best['report'] * 1e3:8.1f} ms")
    print(f"profiling overhead: {ratio:.2f}x  target <= {TARGET}x  {verdict}")
    print(f"with the report built: {with_report:.2f}x  (no target)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
