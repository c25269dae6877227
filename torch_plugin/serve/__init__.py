"""``python -m torch_plugin.serve``: serving a causal LM on emu with transformers' continuous
batching engine and its paged KV cache (docs/inference.md).

    python -m torch_plugin.serve plan --model llama-3-8b --preset h200 --dtype bfloat16 \\
        --batch 32 --seq-len 4096
    python -m torch_plugin.serve bench --model llama --requests 64 --rate 200 \\
        --prompt 8:32 --output 4:16 --json out/bench.json --plot out/bench.png
    EMU_MODE=projection python -m torch_plugin.serve bench --model llama-3-8b --preset h200 ...

``plan`` (serve/plan.py) reports the weights, the KV cache's bytes per token, the activations of
one step at a batch, and how many tokens and sequences of a length fit the device. ``bench``
(serve/bench.py) serves a bounded, seeded request stream with the engine (serve/engine.py) and
reports modelled TTFT, time per output token, throughput and device memory over time.
``--model`` takes what ``python -m torch_plugin.project`` takes (a zoo model, a shortcut such as
``llama-3-8b``, a transformers model_type with ``--config``, a config.json).
"""
from __future__ import annotations

import sys


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = ("plan", "bench")
    if not argv or argv[0] not in commands:
        print(f"usage: python -m torch_plugin.serve {{{','.join(commands)}}} [--help]\n\n{__doc__.strip()}",
              file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    if argv[0] == "plan":
        from torch_plugin.serve import plan
        return plan.main(argv[1:])
    from torch_plugin.serve import bench
    return bench.main(argv[1:])
