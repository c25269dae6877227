"""The device side of PyTorch's profiler (``torch.profiler`` with ProfilerActivity.PrivateUse1).

The kineto session of torch_plugin/csrc/profiler.cpp calls ``_torch_profiler_start`` and
``_torch_profiler_stop`` on the package; between the two a ``_TorchProfilerFeed`` notes each
device command submitted, and afterwards gives its modelled device span from the firmware trace.
Leaves out the op rows, the report and the Chrome trace of torch.emu.profile() (block.py,
analysis.py): PyTorch's profiler builds its own tables from these rows.
"""
from __future__ import annotations

import threading
import warnings

import runtime
from torch_plugin import _C
from torch_plugin.errors import raises_torch_errors
from torch_plugin.profile.observer import BlockObserver, FirmwareTraceWindow


class _TorchProfilerFeed(BlockObserver):
    """The device commands submitted while PyTorch's profiler records, for the kineto session of
    torch_plugin/csrc/profiler.cpp: each command's seq and kernel, the profiler's wall clock when
    it was submitted and the correlation id of the op that submitted it. Their modelled device
    times are read from the firmware's trace after the block, matched by seq, as Profile does."""

    def __init__(self, rt):
        self._rt = rt
        self._commands: list = []  # (seq, name, wall ns at submission, correlation id)
        self._trace = FirmwareTraceWindow(rt)
        self._listen(rt)

    def add_command(self, seq: int, name: str, t0_ns: float, t1_ns: float) -> None:
        if seq is not None:
            self._commands.append((seq, name, _C._profiler_wall_ns(), _C._profiler_correlation_id()))

    def close(self) -> list[tuple]:
        """Stops observing; waits for the block's commands and returns one row per command, in
        submission order: (name, kind, device, ring, seq, submit wall ns, modelled start ns,
        modelled end ns, correlation id). kind: "kernel", "memcpy" or "memset"."""
        try:
            self._rt.synchronize_all()  # the block's commands, complete, so their trace records exist
        finally:
            self._stop_listening()
        spans = self._command_spans()
        self._trace.close()
        rows, missing = [], 0
        for seq, name, wall_ns, correlation in self._commands:
            span = spans.get(seq)
            if span is None:
                missing += 1
                continue
            kind = "memset" if name == "fill" else "memcpy" if name.startswith("memcpy") else "kernel"
            device, ring, start, end = span
            rows.append((name, kind, int(device), int(ring), int(seq), int(wall_ns), float(start), float(end),
                         int(correlation)))
        if missing:
            warnings.warn(f"torch.profiler: {missing} of the block's {len(self._commands)} emu commands have no "
                          f"firmware trace record (the trace keeps the newest EMU_TRACE_ENTRIES records, or a "
                          f"command faulted); they are left out of the profile", stacklevel=2)
        return rows

    def _command_spans(self) -> dict:
        """seq -> [device, ring, start ns, end ns] over the command's trace records."""
        spans: dict[int, list] = {}
        for entry in self._trace.records({c[0] for c in self._commands}):
            span = spans.get(entry.seq)
            if span is None:
                spans[entry.seq] = [entry.device, entry.ring, entry.start_ns, entry.end_ns]
            else:
                span[2], span[3] = min(span[2], entry.start_ns), max(span[3], entry.end_ns)
        return spans


_torch_feeds: list = []  # open feeds, innermost last (torch allows one profiler at a time)
_torch_feeds_lock = threading.Lock()


@raises_torch_errors
def _torch_profiler_start() -> None:
    """Called by the kineto session's start() (csrc/profiler.cpp). Powers the emulated system on
    if it is off: a block's commands are only seen from its start."""
    feed = _TorchProfilerFeed(runtime.get_runtime())
    with _torch_feeds_lock:
        _torch_feeds.append(feed)


@raises_torch_errors
def _torch_profiler_stop() -> list[tuple]:
    """Called by the kineto session's stop(): the rows of _TorchProfilerFeed.close()."""
    with _torch_feeds_lock:
        if not _torch_feeds:
            return []
        feed = _torch_feeds.pop()
    return feed.close()
