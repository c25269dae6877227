"""``python -m torch_plugin.serve bench``: a bounded, seeded request stream served by transformers'
continuous batching engine on emu (serve/engine.py), timed on the device's modelled clock.

    python -m torch_plugin.serve bench --model llama --requests 64 --rate 2000 --prompt 4:24 --output 2:12 \\
        --json out/serve_bench.json --plot out/serve_bench.png
    EMU_MODE=projection python -m torch_plugin.serve bench --model llama-3-8b --preset h200 \\
        --requests 32 --rate 20 --prompt 128:1024 --output 32:128 --page-size 256 --max-batch-tokens 2048

The stream: ``--requests`` requests, Poisson arrivals at ``--rate`` requests per second of modelled
time, prompt and output lengths uniform over the ``--prompt`` and ``--output`` ranges (inclusive),
prompt ids uniform over the vocabulary, all from ``--seed``. Every request generates exactly its
output length (greedy, no EOS), in both modes. Reported: TTFT (arrival to first token) and time
per output token (after the first) at p50/p90/p99, requests/s and output tokens/s over the
stream's span (first arrival to last token), device memory allocated and reserved after each
step, the requests refused (one that cannot fit the cache), and with ``--profile`` the
profile's verdict and top kernels over the whole run (the profile keeps a record per op and the
firmware trace keeps the newest EMU_TRACE_ENTRIES commands, 200k by default: a small stream's
view). Times are the modelled host
clock's (launches, waits and device work), never wall time.

Without ``--num-blocks`` the cache gets the pages the capacity plan (serve/plan.py) leaves free
at ``--max-requests-per-batch`` sequences of the longest request, capped at what the stream's
requests can use at once.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def parse_range(text: str, name: str) -> tuple[int, int]:
    lo, _, hi = text.partition(":")
    try:
        lo, hi = int(lo), int(hi or lo)
    except ValueError:
        raise SystemExit(f"--{name}: expected N or LO:HI, got {text!r}") from None
    if lo < 1 or hi < lo:
        raise SystemExit(f"--{name}: expected 1 <= LO <= HI, got {text!r}")
    return lo, hi


def request_stream(n: int, rate: float, prompt: tuple[int, int], output: tuple[int, int], vocab: int, seed: int):
    """``n`` requests: exponential inter-arrival times of mean 1/rate s, uniform lengths, ids in
    [3, vocab) (clear of the pad/bos/eos ids of the zoo's configs)."""
    import numpy as np
    from torch_plugin.serve.engine import Request
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1e9 / rate, n) if rate > 0 else np.zeros(n)
    arrivals = np.cumsum(gaps) - gaps[0] if n else gaps
    requests = []
    for i in range(n):
        p = int(rng.integers(prompt[0], prompt[1] + 1))
        o = int(rng.integers(output[0], output[1] + 1))
        ids = rng.integers(3, vocab, p).tolist()
        requests.append(Request(f"req_{i:05d}", ids, o, float(arrivals[i])))
    return requests


def percentiles(values: list[float]) -> dict:
    import numpy as np
    if not values:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    a = np.asarray(values, dtype=np.float64)
    return {"p50": float(np.percentile(a, 50)), "p90": float(np.percentile(a, 90)),
            "p99": float(np.percentile(a, 99)), "mean": float(a.mean())}


def summarize(manager, requests) -> dict:
    """The benchmark's numbers from a served manager (seconds, bytes)."""
    done = [r for r in manager.results.values() if r.error is None and r.token_ns]
    failed = {r.request_id: r.error for r in manager.results.values() if r.error is not None}
    ttft = [r.ttft_ns / 1e9 for r in done]
    tpot = [r.tpot_ns / 1e9 for r in done if r.tpot_ns is not None]
    span_s = max((r.token_ns[-1] for r in done), default=0.0) / 1e9
    tokens = sum(len(r.tokens) for r in done)
    return {
        "requests": len(requests), "completed": len(done), "failed": failed,
        "ttft_s": percentiles(ttft), "tpot_s": percentiles(tpot),
        "span_s": span_s, "requests_per_s": len(done) / span_s if span_s else 0.0,
        "output_tokens": tokens, "output_tokens_per_s": tokens / span_s if span_s else 0.0,
        "memory": [{"t_s": t / 1e9, "allocated_bytes": a, "reserved_bytes": r, "kv_used_bytes": kv}
                   for t, a, r, kv in manager.memory],
        "per_request": [{"id": r.request_id, "arrival_s": r.arrival_ns / 1e9, "prompt_tokens": r.prompt_len,
                         "output_tokens": len(r.tokens),
                         "ttft_s": r.ttft_ns / 1e9 if r.token_ns else None,
                         "tpot_s": r.tpot_ns / 1e9 if r.tpot_ns is not None else None}
                        for r in manager.results.values()],
    }


def plot(summary: dict, path: str, title: str) -> None:
    """Three panels: TTFT by arrival, the CDF of time per output token, device memory over time."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [r for r in summary["per_request"] if r["ttft_s"] is not None]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4), dpi=80)
    ax = axes[0]
    ax.scatter([r["arrival_s"] * 1e3 for r in rows], [r["ttft_s"] * 1e3 for r in rows], s=6)
    for q, style in (("p50", "-"), ("p99", "--")):
        if summary["ttft_s"][q] is not None:
            ax.axhline(summary["ttft_s"][q] * 1e3, linestyle=style, color="gray", linewidth=0.8, label=q)
    ax.set(xlabel="arrival (ms, modelled)", ylabel="TTFT (ms)", title="time to first token")
    ax.legend(fontsize=7)
    ax = axes[1]
    tpot = sorted(r["tpot_s"] * 1e3 for r in rows if r["tpot_s"] is not None)
    ax.plot(tpot, [(i + 1) / len(tpot) for i in range(len(tpot))] if tpot else [])
    ax.set(xlabel="time per output token (ms)", ylabel="fraction of requests", title="TPOT CDF")
    ax = axes[2]
    mem = summary["memory"]
    ax.step([m["t_s"] * 1e3 for m in mem], [m["allocated_bytes"] / 2 ** 20 for m in mem], where="post",
            label="allocated")
    ax.step([m["t_s"] * 1e3 for m in mem], [m["reserved_bytes"] / 2 ** 20 for m in mem], where="post",
            label="reserved")
    ax.step([m["t_s"] * 1e3 for m in mem], [m["kv_used_bytes"] / 2 ** 20 for m in mem], where="post",
            label="KV cache in use")
    ax.set(xlabel="time (ms, modelled)", ylabel="device memory (MiB)", title="device memory")
    ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def build(args, dtype):
    """The model on emu: in projection mode built on the meta device and moved with to_empty
    (torch_plugin.project's builder); in functional mode with seeded random weights."""
    import torch
    from torch_plugin import project
    from torch_plugin.serve import plan
    if torch.emu.is_projection_mode():
        model, spec = project.build_model(args, dtype)
    else:
        torch.manual_seed(args.seed)
        meta = plan.build_meta(args.model, args.config, dtype)   # validates the name, cheap
        config = meta.config
        del meta
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_config(config, dtype=dtype).to("emu")
    if not hasattr(model, "generate_batch"):
        raise SystemExit(f"--model {args.model}: {type(model).__name__} is not a transformers causal LM")
    return model.eval()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_plugin.serve bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="what python -m torch_plugin.project --model accepts")
    parser.add_argument("--config", help="config overrides: name=value,name=value (transformers models)")
    parser.add_argument("--preset", default=None, help="hardware preset (default: EMU_PRESET or 'default')")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--rate", type=float, default=1000.0, help="arrivals per second of modelled time (0: all at 0)")
    parser.add_argument("--prompt", default="4:24", help="prompt tokens, N or LO:HI (uniform)")
    parser.add_argument("--output", default="2:12", help="generated tokens, N or LO:HI (uniform)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--page-size", type=int, default=16, help="tokens per KV cache page")
    parser.add_argument("--num-blocks", type=int, default=None, help="KV cache pages (default: from the plan)")
    parser.add_argument("--max-batch-tokens", type=int, default=256, help="query tokens per step")
    parser.add_argument("--max-requests-per-batch", type=int, default=16)
    parser.add_argument("--profile", action="store_true",
                        help="run under torch.emu.profile: the verdict and the top kernels (costs host memory and "
                             "time per op: a small stream's view)")
    parser.add_argument("--top", type=int, default=8, help="kernels listed with --profile (by modelled time)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--plot", help="write the latency plot (PNG) here")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    for name in ("requests", "page_size", "max_batch_tokens", "max_requests_per_batch"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.rate < 0:
        parser.error("--rate must be >= 0")
    prompt, output = parse_range(args.prompt, "prompt"), parse_range(args.output, "output")
    if args.preset:
        os.environ["EMU_PRESET"] = args.preset
    wall = time.perf_counter()
    import torch
    import runtime
    import torch_plugin  # noqa: F401  (registers emu)
    from torch_plugin.serve import engine, plan
    dtype_name = args.dtype or plan.default_dtype(args.model)
    model = build(args, getattr(torch, dtype_name))
    shape = plan.model_shape(model)
    longest = prompt[1] + output[1]
    if shape.max_positions is not None and longest > shape.max_positions:
        raise SystemExit(f"--prompt/--output: {longest} tokens exceed the model's max_position_embeddings "
                         f"({shape.max_positions})")
    num_blocks = args.num_blocks
    if num_blocks is None:   # the plan's pages in the memory left after the model, capped at what can be used
        free, _ = torch.emu.mem_get_info()
        fit = plan.fits_tokens(shape, free, 0, args.page_size, args.max_batch_tokens, args.max_requests_per_batch)
        want = min(args.requests, args.max_requests_per_batch) * plan.pages(longest, args.page_size) + 1
        num_blocks = int(max(1, min(fit // args.page_size, want)))
    requests = request_stream(args.requests, args.rate, prompt, output, shape.vocab, args.seed)
    bar = None
    if not args.no_progress:
        try:
            from tqdm import tqdm
            bar = tqdm(total=len(requests), desc="requests", unit="req", file=sys.stderr, leave=False)
        except ImportError:
            pass
    seen = [0]

    def on_step(manager):
        finished = len(requests) - manager._open
        if bar is not None and finished > seen[0]:
            bar.update(finished - seen[0])
            seen[0] = finished
    torch.emu.reset_peak_memory_stats()
    config = engine.cb_config(num_blocks=num_blocks, page_size=args.page_size, max_batch_tokens=args.max_batch_tokens,
                              max_requests_per_batch=args.max_requests_per_batch)
    if args.profile:   # the engine thread's kernels too (profile records carry their thread)
        with torch.emu.profile() as prof:
            manager = engine.serve(model, requests, config, on_step=on_step)
        report = prof.report()
        profiled = {"verdict": report.verdict, "top_kernels": report.top_kernels(args.top)}
    else:
        manager = engine.serve(model, requests, config, on_step=on_step)
        profiled = {}
    if bar is not None:
        bar.close()
    rt = runtime.get_runtime()
    summary = summarize(manager, requests)
    result = {"model": args.model, "preset": rt.config.name, "dtype": dtype_name,
              "mode": "projection" if torch.emu.is_projection_mode() else "functional",
              "stream": {"requests": args.requests, "rate_per_s": args.rate, "prompt": list(prompt),
                         "output": list(output), "seed": args.seed},
              "engine": {"num_blocks": num_blocks, "page_size": args.page_size,
                         "max_batch_tokens": args.max_batch_tokens,
                         "max_requests_per_batch": args.max_requests_per_batch},
              "peak_device_memory_bytes": torch.emu.max_memory_allocated(),
              "device_capacity_bytes": torch.emu.mem_get_info()[1],
              **profiled, **summary, "wall_time_s": time.perf_counter() - wall}
    print(format_result(result))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.plot:
        os.makedirs(os.path.dirname(os.path.abspath(args.plot)), exist_ok=True)
        plot(result, args.plot, f"{args.model} ({dtype_name}) on {rt.config.name}, {result['mode']} mode: "
                                f"{args.requests} requests at {args.rate:g}/s")
    return 0 if not result["failed"] else 3


def format_result(r: dict) -> str:
    ms = lambda v: "-" if v is None else f"{v * 1e3:.3f}"  # noqa: E731
    lines = [f"Serving {r['model']} ({r['dtype']}) on {r['preset']}, {r['mode']} mode, modelled time: "
             f"{r['completed']}/{r['requests']} requests completed",
             f"  TTFT ms:                p50 {ms(r['ttft_s']['p50'])}  p90 {ms(r['ttft_s']['p90'])}  "
             f"p99 {ms(r['ttft_s']['p99'])}",
             f"  time per output token ms: p50 {ms(r['tpot_s']['p50'])}  p90 {ms(r['tpot_s']['p90'])}  "
             f"p99 {ms(r['tpot_s']['p99'])}",
             f"  throughput: {r['requests_per_s']:.1f} requests/s, {r['output_tokens_per_s']:.1f} output tokens/s "
             f"over {r['span_s'] * 1e3:.2f} ms",
             f"  device memory: peak {r['peak_device_memory_bytes'] / 2 ** 20:.1f} MiB allocated of "
             f"{r['device_capacity_bytes'] / 2 ** 30:.2f} GiB; KV cache {r['engine']['num_blocks']} pages of "
             f"{r['engine']['page_size']} tokens"]
    if "verdict" in r:
        lines.append(f"  verdict: {r['verdict']}; top kernels by modelled time:")
    for k in r.get("top_kernels", ()):
        lines.append(f"    {k['kernel']:<36} x{k['count']:<6} {k['time_s'] * 1e3:10.3f} ms  {100 * k['share']:5.1f}%  "
                     f"{k['bound']}")
    lines.append(f"  emulation wall time: {r['wall_time_s']:.1f} s")
    for rid, error in sorted(r["failed"].items()):
        lines.append(f"  refused {rid}: {error}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
