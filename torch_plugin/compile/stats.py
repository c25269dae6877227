"""Counters of compiled execution: ``torch_plugin.compile.compile_stats()``.

graphs_compiled   FX graphs the ``emu`` backend lowered (forward and backward count separately)
recompiles        of those, graphs dynamo compiled again for a frame it had compiled (a guard failed)
graph_breaks      graph breaks dynamo reported since the last reset (its own counter, read here)
fused_kernels     fused_pointwise launches per run of the lowered graphs, summed over graphs
fused_ops         aten ops those kernels (and the epilogues) absorbed
epilogues         matmuls with their elementwise consumer fused in (one matmul_epilogue launch)
bmm_epilogues     of those, bmms (one bmm_epilogue launch)
row_fusions       softmaxes and layer norms fused with their producer and/or consumer chain, and
                  RMS norms (of those, rms_norm_fusions: one fused_rms_norm launch each)
kept_values       of those, row steps that also compute a value other steps read (a residual sum
                  feeding the norm and the next residual add): one fused_keep launch for both
fused_attention   SDPA calls (forward and backward) run as the fused attention kernel's ops
aten_ops          ops the programs run through the dispatcher (their own kernels, or their path)
planned_buffers   fused results given a planned slot; buffer_slots: the slots they share
constant_steps    steps that depend on no graph input, computed in the first run and kept
outside_program   op instances that ran outside the device (host fallback) in a program's first run
captures          programs captured (first call, and each call with another input layout)
refused_captures  of those, captures that cannot be replayed (the program then runs op by op)
segments          replayable command lists in the captured programs; boundaries: the steps
                  between them that run op by op at every replay (replay.py says why)
captured_commands commands in the segments; pool_bytes: the captured programs' pools
replays           calls served by a replay; replayed_segments: ring writes they made
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


def note_capture(capture) -> None:
    with _lock:
        _counts["captures"] += 1
        _counts["refused_captures"] += capture.refused is not None
        _counts["segments"] += capture.segments
        _counts["boundaries"] += len(capture.boundaries)
        _counts["captured_commands"] += capture.commands
        _counts["pool_bytes"] += capture.pool_bytes


def note_replay(capture) -> None:
    with _lock:
        _counts["replays"] += 1
        _counts["replayed_segments"] += capture.segments


def compile_stats() -> dict:
    keys = ("graphs_compiled", "recompiles", "graph_breaks", "fused_kernels", "fused_ops", "epilogues", "aten_ops",
            "planned_buffers", "buffer_slots", "constant_steps", "outside_program", "captures", "refused_captures",
            "segments", "boundaries", "captured_commands", "pool_bytes", "replays", "replayed_segments",
            "row_fusions", "bmm_epilogues", "fused_attention", "rms_norm_fusions", "kept_values")
    with _lock:
        result = {k: _counts.get(k, 0) for k in keys}
    result["graph_breaks"] = _dynamo_graph_breaks() - _graph_breaks_at_reset
    return result


def reset_compile_stats() -> None:
    global _graph_breaks_at_reset
    with _lock:
        _counts.clear()
        _graph_breaks_at_reset = _dynamo_graph_breaks()
