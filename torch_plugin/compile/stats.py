"""Counters of compiled execution: ``torch_plugin.compile.compile_stats()``.

graphs_compiled   FX graphs the ``emu`` backend lowered (forward and backward count separately)
recompiles        of those, graphs dynamo compiled again for a frame it had compiled (a guard failed)
graph_breaks      graph breaks dynamo reported since the last reset (its own counter, read here)
fused_kernels     fused_pointwise launches per run of the lowered graphs, summed over graphs
fused_ops         aten ops those kernels (and the epilogues) absorbed
epilogues         matmuls with their elementwise consumer fused in (one matmul_epilogue launch)
aten_ops          ops the programs run through the dispatcher (their own kernels, or their path)
planned_buffers   fused results given a planned slot; buffer_slots: the slots they share
constant_steps    steps that depend on no graph input, computed in the first run and kept
outside_program   op instances that ran outside the device (host fallback) in a program's first run
"""
from __future__ import annotations

import threading
from collections import Counter

_lock = threading.Lock()
_counts: Counter = Counter()
_graph_breaks_at_reset = 0


def _dynamo_graph_breaks() -> int:
    from torch._dynamo.utils import counters
    return sum(counters["graph_break"].values())


def note_graph(program_stats: dict, recompile: bool) -> None:
    with _lock:
        _counts["graphs_compiled"] += 1
        _counts["recompiles"] += int(recompile)
        _counts.update(program_stats)


def note_outside_program(n: int) -> None:
    with _lock:
        _counts["outside_program"] += n


def compile_stats() -> dict:
    keys = ("graphs_compiled", "recompiles", "graph_breaks", "fused_kernels", "fused_ops", "epilogues", "aten_ops",
            "planned_buffers", "buffer_slots", "constant_steps", "outside_program")
    with _lock:
        result = {k: _counts.get(k, 0) for k in keys}
    result["graph_breaks"] = _dynamo_graph_breaks() - _graph_breaks_at_reset
    return result


def reset_compile_stats() -> None:
    global _graph_breaks_at_reset
    with _lock:
        _counts.clear()
        _graph_breaks_at_reset = _dynamo_graph_breaks()
