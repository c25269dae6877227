"""``with torch.emu.profile() as prof:``: the profiled block, and what it records while it runs.

While the block is open, ``Profile`` keeps each op record as it ends (with the modelled host clock
and the host work charged so far), each command's seq, name, host time and thread, and each host
wait; the op records read the runtime's host clock through ``telemetry._profile_clock``, set while
at least one profiler is open. When the block ends it reads the firmware trace records of its
commands. Leaves out everything computed from them (analysis.py and what it calls) and the
command line (cli.py).
"""
from __future__ import annotations

import json
import threading
import time
import warnings
from threading import get_ident

import runtime
from torch_plugin import telemetry
from torch_plugin.errors import raises_torch_errors
from torch_plugin.profile.analysis import BlockAnalysis
from torch_plugin.profile.observer import BlockObserver, FirmwareTraceWindow
from torch_plugin.profile.report import ProfileReport
from torch_plugin.profile.roofline import save_roofline


class Profile(BlockObserver):
    """``with torch.emu.profile() as prof:`` (see the package docstring). One block per object."""

    def __init__(self):
        self._state = "new"
        self._report = None
        self._records: list = []    # (OpRecord, t1_ns, host work (ns, flops, bytes) at its end)
        self._commands: list = []   # (seq, kernel, t0_ns, t1_ns, thread)
        self._waits: list = []      # (what, t0_ns, t1_ns, thread)

    # -- the block -------------------------------------------------------------------
    @raises_torch_errors
    def __enter__(self) -> "Profile":
        if self._state != "new":
            raise RuntimeError("torch.emu.profile(): this profiler already profiled a block; create another")
        rt = runtime.get_runtime()
        rt.synchronize_all()  # earlier work must not count as the block's
        self._trace = FirmwareTraceWindow(rt)
        self._rt, self._clock, self._config = rt, rt.clock, rt.config
        self._main_thread = get_ident()
        _open_clock(rt.clock)
        self._listen(rt)
        self._start = rt.clock.snapshot()
        self._wall0 = time.perf_counter()
        self._state = "open"
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            try:
                self._rt.synchronize_all()  # the block's work, complete
            except runtime.EmuError as err:
                if exc_type is None:
                    from torch_plugin.errors import translate
                    raise translate(err) from err
        finally:
            self._wall1 = time.perf_counter()
            self._end = self._clock.snapshot()
            self._stop_listening()
            _close_clock()
            self._state = "done"
            self._collect_trace()
        return False

    # -- what the hooks report (the observer protocol of torch_plugin/telemetry.py) ----
    def add_op(self, record) -> None:
        clock = self._clock
        self._records.append((record, clock.now_ns, (clock.host_work_ns, clock.host_work_flops,
                                                     clock.host_work_bytes)))

    def add_command(self, seq: int, name: str, t0_ns: float, t1_ns: float) -> None:
        self._commands.append((seq, name, t0_ns, t1_ns, get_ident()))

    def add_wait(self, name: str, t0_ns: float, t1_ns: float) -> None:
        self._waits.append((name, t0_ns, t1_ns, get_ident()))

    def _collect_trace(self) -> None:
        self._commands = [c for c in self._commands if c[0] is not None]  # a runtime without seqs
        seqs = {c[0] for c in self._commands}
        entries = self._trace.records(seqs)
        self._trace.close()
        self._entries = entries
        missing = len(seqs - {e.seq for e in entries})
        self._missing = missing
        if missing:
            warnings.warn(f"torch.emu.profile(): {missing} of the block's {len(seqs)} commands have no firmware "
                          f"trace record (the trace keeps the newest EMU_TRACE_ENTRIES records, or a command "
                          f"faulted); their device time is not counted", stacklevel=3)

    def _check_done(self, what: str) -> None:
        if self._state != "done":
            raise RuntimeError(f"torch.emu.profile(): {what} needs the profiled block to have ended "
                               f"(call it after the `with` block)")

    # -- results -----------------------------------------------------------------------
    def report(self) -> ProfileReport:
        """The report of the block (computed once, after it ended)."""
        self._check_done("report()")
        if self._report is None:
            self._report = BlockAnalysis(self).report()
        return self._report

    def export_chrome_trace(self, path) -> None:
        """Writes the block as Chrome trace JSON (open it in Perfetto): see docs/profiling.md#trace."""
        self._check_done("export_chrome_trace()")
        with open(path, "w") as out:
            json.dump(BlockAnalysis(self).chrome_trace(), out)

    def save_roofline(self, path) -> None:
        """Draws the block's kernels against the chip's compute and bandwidth ceilings (PNG)."""
        self._check_done("save_roofline()")
        save_roofline(self.report(), self._config, path)


# -- the host clock the op records read while a profiler is open -------------------------------
_clock_users = 0
_clock_lock = threading.Lock()


def _open_clock(clock) -> None:
    global _clock_users
    with _clock_lock:
        _clock_users += 1
        telemetry._profile_clock = clock


def _close_clock() -> None:
    global _clock_users
    with _clock_lock:
        _clock_users -= 1
        if _clock_users == 0:
            telemetry._profile_clock = None
