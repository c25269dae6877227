"""``torch.emu.profile()``: projected performance of one block of code, per op, per engine.

    with torch.emu.profile() as prof:
        model(x)
    report = prof.report()            # fields: see ProfileReport
    print(report)                     # report.table(): for people
    report.to_json("report.json")
    prof.export_chrome_trace("trace.json")    # open in https://ui.perfetto.dev
    prof.save_roofline("roofline.png")

    python -m torch_plugin.profile [--out-dir DIR] script.py [args...]
    python -m torch_plugin.profile --sweep device.hbm.bandwidth_gb_per_s=800,1600,3200 script.py

Times are modelled (the host clock and the devices' DES clock, runtime/host_clock.py), never
wall time, except ``wall_time_s``. How it works, so that profiling stays cheap: while the
block runs, the plugin's op wrappers keep a record per aten op instance (name, operands, path,
the modelled host time it began and ended) and the runtime hooks note each launch, copy and
fill's command seq on the op records open on its thread. Everything about the device (which
engines, when, cycles, bound, tiling) is read after the block from the firmware's trace
records, matched by seq (the correlation id). A command belongs to the innermost op that was
open when it was submitted.

The block starts and ends with a synchronisation of every device in use, so its projected
times are its own work, complete. Not modelled: the Python time of the plugin between runtime
calls (the host clock only moves by the costs of runtime/host_clock.py).
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import asdict, dataclass, fields
from threading import get_ident

import runtime
from runtime import report as device_report
from torch_plugin import _C, telemetry
from torch_plugin.errors import raises_torch_errors
from torch_plugin.ops import registry

DEFAULT_OUT_DIR = "emu_profile"
OUTSIDE_OPS = "(outside aten ops)"   # the op of a command no aten op submitted
RUNTIME_PATH = "runtime"             # ... and its path
HOST_PATH = registry.HOST_FALLBACK
_TRACE_ENTRIES_WHEN_OFF = 200_000


@dataclass(frozen=True)
class OpRow:
    """One op instance's share of the work (``row.op`` or ``row["op"]``).

    ``kernel``: the device kernels of its own commands ("+"-joined, in order), "host" for the
    CPU work of a host-fallback op. ``engines``: the lanes they occupied. ``cycles``: device
    clock cycles of their engine work (0 for host rows). ``time_s``: their modelled engine time
    (launch overhead on the command processor excluded), or the host cost of a host-fallback
    op. ``bytes``/``flops``: what they moved and computed. ``fraction_of_peak``: how close they
    ran to the binding ceiling (time-weighted over the commands; the host's own ceilings for
    host rows). ``bound``: the cost model's limiting term of the longest command (compute,
    memory, latency), or "host". ``energy_j``: the modelled energy of its commands (their dynamic
    energy plus the static power while they ran; 0 for host rows; emulator/power.py).
    ``throttled``: the power mode's cap ran one of its commands below the mode's top clock."""
    op: str
    shapes: tuple
    dtype: str
    path: str
    kernel: str
    engines: tuple
    cycles: int
    time_s: float
    flops: float
    bytes: float
    fraction_of_peak: float
    bound: str
    energy_j: float = 0.0
    throttled: bool = False

    def __getitem__(self, key: str):
        if key not in _ROW_FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def keys(self):
        return list(_ROW_FIELDS)

    def as_dict(self) -> dict:
        row = asdict(self)
        row["shapes"] = [list(s) for s in self.shapes]
        row["engines"] = list(self.engines)
        return row


_ROW_FIELDS = tuple(f.name for f in fields(OpRow))


class ProfileReport:
    """What ``prof.report()`` returns. Fields (names scripts use):

    - ``projected_device_time_s``: modelled time during which at least one unit of a device
      (a core's matrix or vector engine, a DMA engine, a link, the command processor launching
      a kernel) worked on the block's commands;
    - ``projected_total_time_s``: the block end to end on the modelled host clock, host
      included (launch overhead, synchronisation, ring back-pressure, interrupts, host work);
    - ``wall_time_s``: wall time of the emulation of the block;
    - ``ops``: ``OpRow``s, in program order;
    - ``engine_utilization``: {lane: busy fraction of the projected total time} (<= 1.0);
    - ``host_fallback_count``: op instances that ran on the host CPU (their rows carry their
      modelled host cost).

    Energy (properties, and keys of ``as_dict()``): ``energy_j`` (the devices' modelled energy over
    the block: every command's dynamic energy plus static power over the whole block),
    ``average_power_w`` (energy_j / projected total time), ``peak_power_w`` (the highest modelled
    power of the devices in use, summed), ``throttled_commands`` (commands the power mode's cap
    slowed down), ``power_mode`` and ``power_cap_w``.
    """

    def __init__(self, projected_device_time_s, projected_total_time_s, wall_time_s, ops,
                 engine_utilization, host_fallback_count, details):
        self.projected_device_time_s = projected_device_time_s
        self.projected_total_time_s = projected_total_time_s
        self.wall_time_s = wall_time_s
        self.ops = ops
        self.engine_utilization = engine_utilization
        self.host_fallback_count = host_fallback_count
        self._details = details

    FIELDS = ("projected_device_time_s", "projected_total_time_s", "wall_time_s", "ops",
              "engine_utilization", "host_fallback_count")

    @property
    def verdict(self) -> str:
        """"device-bound", "host-bound" or "launch-bound" (docs/profiling.md#verdict)."""
        return self._details["verdict"]

    @property
    def energy_j(self) -> float:
        return self._details["energy"]["energy_j"]

    @property
    def average_power_w(self) -> float:
        return self._details["energy"]["average_power_w"]

    @property
    def peak_power_w(self) -> float:
        return self._details["energy"]["peak_power_w"]

    @property
    def throttled_commands(self) -> int:
        return self._details["energy"]["throttled_commands"]

    @property
    def host_time(self) -> dict:
        """Where the modelled host time went (ns): launch overhead, waits, interrupts, host work."""
        return dict(self._details["host"])

    def top_kernels(self, n: int = 10) -> list[dict]:
        """Device kernels by total modelled time: {kernel, count, time_s, share, bound,
        fraction_of_peak} (share: of the summed engine time of all kernels)."""
        by_kernel: dict[str, dict] = {}
        for row in self.ops:
            if row.path == HOST_PATH and row.kernel == "host":
                continue
            entry = by_kernel.setdefault(row.kernel, {"kernel": row.kernel, "count": 0, "time_s": 0.0,
                                                      "weighted_peak": 0.0, "bounds": {}})
            entry["count"] += 1
            entry["time_s"] += row.time_s
            entry["weighted_peak"] += row.fraction_of_peak * row.time_s
            entry["bounds"][row.bound] = entry["bounds"].get(row.bound, 0.0) + row.time_s
        total = sum(e["time_s"] for e in by_kernel.values()) or 1.0
        out = []
        for e in sorted(by_kernel.values(), key=lambda e: -e["time_s"])[:n]:
            out.append({"kernel": e["kernel"], "count": e["count"], "time_s": e["time_s"],
                        "share": e["time_s"] / total,
                        "bound": max(e["bounds"], key=e["bounds"].get),
                        "fraction_of_peak": e["weighted_peak"] / e["time_s"] if e["time_s"] else 0.0})
        return out

    # -- for people ------------------------------------------------------------------
    def summary_lines(self) -> list[str]:
        d = self._details
        host = d["host"]
        us = 1e6
        lines = [f"Projected performance on {d['hardware']}, modelled time",
                 f"  total (host included) {self.projected_total_time_s * us:12.1f} us   "
                 f"device busy {self.projected_device_time_s * us:.1f} us   "
                 f"emulation wall time {self.wall_time_s:.3f} s",
                 f"  verdict: {self.verdict}  (device busy {self.projected_device_time_s * us:.1f} us, "
                 f"host dispatch {host['dispatch_ns'] / 1e3:.1f} us, host work {host['host_work_ns'] / 1e3:.1f} us)",
                 f"  host: {host['api_ns'] / 1e3:.1f} us launch overhead ({host['api_calls']} runtime calls), "
                 f"{host['sync_wait_ns'] / 1e3:.1f} us synchronising ({host['sync_waits']} waits), "
                 f"{host['backpressure_wait_ns'] / 1e3:.1f} us ring back-pressure, "
                 f"{host['interrupt_stolen_ns'] / 1e3:.1f} us interrupts ({host['interrupts']} serviced)",
                 f"  host fallback: {self.host_fallback_count} ops, {host['host_work_ns'] / 1e3:.1f} us of host work"]
        e = d["energy"]
        lines.append(f"  energy: {e['energy_j']:.6g} J, average {e['average_power_w']:.1f} W, peak "
                     f"{e['peak_power_w']:.1f} W (power mode {e['power_mode']}, cap {e['power_cap_w']:g} W; "
                     f"{e['throttled_commands']} commands throttled)")
        busy = [(lane, f) for lane, f in self.engine_utilization.items() if f > 0]
        if busy:
            lines.append("  utilisation: " + ", ".join(f"{lane} {100 * f:.1f}%" for lane, f in busy))
        if d.get("missing_commands"):
            lines.append(f"  note: {d['missing_commands']} commands of the block have no firmware trace record "
                         f"(trace full or switched off: EMU_TRACE_ENTRIES); their device time is not counted")
        return lines

    def table(self, top: int = 25) -> str:
        """The summary, then op rows grouped by (op, kernel, shapes, dtype, path), most time first."""
        groups: dict[tuple, dict] = {}
        for row in self.ops:
            key = (row.op, row.kernel, row.shapes, row.dtype, row.path)
            g = groups.setdefault(key, {"count": 0, "time_s": 0.0, "flops": 0.0, "bytes": 0.0, "peak": 0.0,
                                        "bounds": {}, "energy": 0.0, "throttled": 0})
            g["energy"] += row.energy_j
            g["throttled"] += row.throttled
            g["count"] += 1
            g["time_s"] += row.time_s
            g["flops"] += row.flops
            g["bytes"] += row.bytes
            g["peak"] += row.fraction_of_peak * row.time_s
            g["bounds"][row.bound] = g["bounds"].get(row.bound, 0.0) + row.time_s
        header = ("op", "kernel", "path", "dtype", "shapes", "count", "time us", "GFLOP/s", "GB/s", "% peak",
                  "energy uJ", "bound", "throttled")
        rows = []
        for (op, kernel, shapes, dtype, path), g in sorted(groups.items(), key=lambda kv: -kv[1]["time_s"])[:top]:
            t = g["time_s"]
            rows.append((op, kernel, path, dtype or "-", " ".join(str(list(s)).replace(" ", "") for s in shapes) or "-",
                         str(g["count"]), f"{t * 1e6:.1f}", f"{g['flops'] / t / 1e9:.1f}" if t else "-",
                         f"{g['bytes'] / t / 1e9:.1f}" if t else "-", f"{100 * g['peak'] / t:.1f}" if t else "-",
                         f"{g['energy'] * 1e6:.2f}", max(g["bounds"], key=g["bounds"].get),
                         f"{g['throttled']}/{g['count']}" if g["throttled"] else ""))
        widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
        widths[4] = min(widths[4], 40)
        fmt = lambda r: "  ".join(c[:w].ljust(w) if i < 5 else c.rjust(w) if i < 11 else c.ljust(w)  # noqa: E731
                                  for i, (c, w) in enumerate(zip(r, widths))).rstrip()
        lines = self.summary_lines() + ["", fmt(header), fmt(tuple("-" * w for w in widths))]
        lines += [fmt(r) for r in rows]
        if len(groups) > top:
            lines.append(f"  ... {len(groups) - top} more groups (report.ops has every row)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return (f"<emu profile report: {len(self.ops)} op rows, total {self.projected_total_time_s * 1e6:.1f} us, "
                f"device {self.projected_device_time_s * 1e6:.1f} us, {self.verdict}>")

    # -- for programs -------------------------------------------------------------------
    def as_dict(self) -> dict:
        d = self._details
        return {"projected_device_time_s": self.projected_device_time_s,
                "projected_total_time_s": self.projected_total_time_s,
                "wall_time_s": self.wall_time_s,
                "ops": [row.as_dict() for row in self.ops],
                "engine_utilization": dict(self.engine_utilization),
                "host_fallback_count": self.host_fallback_count,
                "verdict": self.verdict, "host_time_ns": dict(d["host"]), "hardware": d["hardware"],
                **d["energy"],
                "top_kernels": self.top_kernels(20)}

    def to_json(self, path=None) -> str:
        """The report as JSON (``as_dict()``); written to ``path`` too when given."""
        text = json.dumps(self.as_dict(), indent=1)
        if path is not None:
            with open(path, "w") as out:
                out.write(text)
        return text


class Profile:
    """``with torch.emu.profile() as prof:`` (see the module docstring). One block per object."""

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
        self._restore_trace = rt.settings.trace_entries == 0
        if self._restore_trace:
            rt.set_trace_entries(_TRACE_ENTRIES_WHEN_OFF)
        self._rt, self._clock, self._config = rt, rt.clock, rt.config
        self._main_thread = get_ident()
        _open_clock(rt.clock)
        telemetry._runtime_hooks.acquire(rt)
        registry.add_observer(self)
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
            registry.remove_observer(self)
            telemetry._runtime_hooks.release()
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

    def add_sync(self) -> None:
        pass

    def add_copy(self, direction: str, nbytes: int) -> None:
        pass

    def _collect_trace(self) -> None:
        self._commands = [c for c in self._commands if c[0] is not None]  # a runtime without seqs
        seqs = {c[0] for c in self._commands}
        entries = []
        if seqs:
            lo = min(seqs)
            for device in range(self._rt.device_count):
                entries.extend(e for e in self._rt.command_trace(device, lo) if e.seq in seqs)
        if self._restore_trace:
            self._rt.set_trace_entries(0)
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
            self._report = _Analysis(self).report()
        return self._report

    def export_chrome_trace(self, path) -> None:
        """Writes the block as Chrome trace JSON (open it in Perfetto): see docs/profiling.md#trace."""
        self._check_done("export_chrome_trace()")
        with open(path, "w") as out:
            json.dump(_Analysis(self).chrome_trace(), out)

    def save_roofline(self, path) -> None:
        """Draws the block's kernels against the chip's compute and bandwidth ceilings (PNG)."""
        self._check_done("save_roofline()")
        _save_roofline(self.report(), self._config, path)


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


# -- PyTorch's profiler (torch.profiler with ProfilerActivity.PrivateUse1; csrc/profiler.cpp) -----
class _TorchProfilerFeed:
    """The device commands submitted while PyTorch's profiler records, for the kineto session of
    torch_plugin/csrc/profiler.cpp: each command's seq and kernel, the profiler's wall clock when
    it was submitted and the correlation id of the op that submitted it. Their modelled device
    times are read from the firmware's trace after the block, matched by seq, as Profile does."""

    def __init__(self, rt):
        self._rt = rt
        self._commands: list = []  # (seq, name, wall ns at submission, correlation id)
        self._restore_trace = rt.settings.trace_entries == 0
        if self._restore_trace:
            rt.set_trace_entries(_TRACE_ENTRIES_WHEN_OFF)
        telemetry._runtime_hooks.acquire(rt)
        registry.add_observer(self)

    def add_command(self, seq: int, name: str, t0_ns: float, t1_ns: float) -> None:
        if seq is not None:
            self._commands.append((seq, name, _C._profiler_wall_ns(), _C._profiler_correlation_id()))

    def add_op(self, record) -> None:
        pass

    def add_wait(self, name: str, t0_ns: float, t1_ns: float) -> None:
        pass

    def add_sync(self) -> None:
        pass

    def add_copy(self, direction: str, nbytes: int) -> None:
        pass

    def close(self) -> list[tuple]:
        """Stops observing; waits for the block's commands and returns one row per command, in
        submission order: (name, kind, device, ring, seq, submit wall ns, modelled start ns,
        modelled end ns, correlation id). kind: "kernel", "memcpy" or "memset"."""
        rt = self._rt
        try:
            rt.synchronize_all()  # the block's commands, complete, so their trace records exist
        finally:
            registry.remove_observer(self)
            telemetry._runtime_hooks.release()
        spans: dict[int, list] = {}  # seq -> [device, ring, start, end]
        if self._commands:
            lo = min(c[0] for c in self._commands)
            for device in range(rt.device_count):
                for entry in rt.command_trace(device, lo):
                    span = spans.get(entry.seq)
                    if span is None:
                        spans[entry.seq] = [entry.device, entry.ring, entry.start_ns, entry.end_ns]
                    else:
                        span[2], span[3] = min(span[2], entry.start_ns), max(span[3], entry.end_ns)
        if self._restore_trace:
            rt.set_trace_entries(0)
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


# -- analysis (after the block) ---------------------------------------------------------------
class _Command:
    """One command of the block, its trace records merged (a command may have several)."""
    __slots__ = ("seq", "name", "device", "ring", "start", "end", "launch_start", "cycles", "flops",
                 "nbytes", "lanes", "bound", "dtype", "tiling", "fraction", "entries", "energy", "throttled")


class _Analysis:
    def __init__(self, prof: Profile):
        self.prof = prof
        self.config = prof._config
        self.t0, self.t1 = prof._start["now_ns"], prof._end["now_ns"]
        self.names = {seq: name for seq, name, *_ in prof._commands}
        self.spans = device_report.lane_spans(prof._entries)  # {lane: [(start, end, entry)]}
        self.commands = self._merge_commands(prof._entries)
        self.owner = self._owners()

    def _merge_commands(self, entries) -> dict:
        config = self.config
        clock_ghz = config.device.clock_ghz
        top_clock = device_report.mode_top_clock_ghz(config)
        peaks_by_dtype: dict = {}
        lane_of: dict[int, list] = {}  # id(entry) -> its lanes after splitting overlaps
        for lane, spans in self.spans.items():
            for _, _, entry in spans:
                lane_of.setdefault(id(entry), []).append(lane)
        commands: dict[int, _Command] = {}
        for entry in entries:
            dtype = getattr(entry, "dtype", "") or ""
            peaks = peaks_by_dtype.get(dtype)
            if peaks is None:
                peaks = peaks_by_dtype[dtype] = device_report.engine_peaks(config, dtype or None)
            seconds = (entry.end_ns - entry.start_ns) / 1e9
            cls = device_report.engine_class(entry)
            traffic = device_report.command_traffic(entry)[0]
            fraction = device_report.fraction_of_peak(
                entry.flops, traffic, seconds,
                peaks["matrix_flops"] if cls == "matrix" else peaks["vector_flops"] if cls == "vector" else 0.0,
                device_report.path_bandwidth(peaks, entry))
            cmd = commands.get(entry.seq)
            if cmd is None:
                cmd = commands[entry.seq] = _Command()
                cmd.seq, cmd.name, cmd.device, cmd.ring = entry.seq, entry.name, entry.device, entry.ring
                cmd.start, cmd.end = entry.start_ns, entry.end_ns
                cmd.launch_start = getattr(entry, "launch_start_ns", entry.start_ns)
                cmd.cycles = cmd.flops = cmd.nbytes = 0
                cmd.energy, cmd.throttled = 0.0, False
                cmd.fraction, cmd.lanes, cmd.entries = 0.0, [], []
                cmd.bound, cmd.dtype, cmd.tiling = None, dtype, getattr(entry, "tiling", "") or ""
            cmd.start, cmd.end = min(cmd.start, entry.start_ns), max(cmd.end, entry.end_ns)
            cmd.launch_start = min(cmd.launch_start, getattr(entry, "launch_start_ns", entry.start_ns))
            cmd.cycles += device_report.command_cycles(entry, clock_ghz)
            cmd.flops += entry.flops
            cmd.nbytes += entry.nbytes
            cmd.energy += getattr(entry, "energy_j", 0.0) or 0.0
            cmd.throttled = cmd.throttled or device_report.is_throttled(entry, top_clock)
            cmd.fraction += fraction * seconds
            if cmd.bound is None or seconds > max(e.end_ns - e.start_ns for e in cmd.entries) / 1e9:
                cmd.bound = device_report.command_bound(entry, peaks)
            cmd.entries.append(entry)
            hbm = tuple(lane for lane in getattr(entry, "engines", None) or () if lane.endswith(".hbm"))
            for lane in (*lane_of.get(id(entry), ()), *hbm):
                if lane not in cmd.lanes:
                    cmd.lanes.append(lane)
        for cmd in commands.values():
            busy = sum(e.end_ns - e.start_ns for e in cmd.entries) / 1e9
            cmd.fraction = cmd.fraction / busy if busy else 0.0
        return commands

    def _owners(self) -> dict:
        """seq -> index in prof._records of the innermost op that submitted it (records arrive in
        the order ops end, so the first record that lists a seq is the innermost)."""
        owner = {}
        for index, (record, _, _) in enumerate(self.prof._records):
            for seq in record.seqs:
                owner.setdefault(seq, index)
        return owner

    def _own_host_work(self) -> list:
        """Each record's host work (ns, flops, bytes), less that of the ops nested in it."""
        records = self.prof._records
        totals = []
        for record, t1, end in records:
            start = record.host_work0 or end
            totals.append(tuple(b - a for a, b in zip(start, end)))
        own = list(totals)
        open_children: dict = {}  # thread -> [(index, t0)] of ended records not yet adopted
        for index, (record, t1, _) in enumerate(records):
            t0 = record.t0_ns if record.t0_ns is not None else t1
            pending = open_children.setdefault(record.thread, [])
            while pending and pending[-1][1] >= t0:
                child, _ = pending.pop()
                own[index] = tuple(a - b for a, b in zip(own[index], totals[child]))
            pending.append((index, t0))
        return own

    def report(self) -> ProfileReport:
        prof, config = self.prof, self.config
        rows: list[tuple] = []   # (sort key, OpRow)
        own_seqs: dict[int, list] = {}
        for seq, index in self.owner.items():
            own_seqs.setdefault(index, []).append(seq)
        host_work = self._own_host_work()
        host = config.host
        fallbacks = 0
        for index, (record, t1, _) in enumerate(prof._records):
            t0 = record.t0_ns if record.t0_ns is not None else t1
            if record.path == HOST_PATH:
                fallbacks += 1
                ns, flops, nbytes = host_work[index]
                seconds = ns / 1e9
                fraction = device_report.fraction_of_peak(flops, nbytes, seconds, host.flops_per_s,
                                                          host.memory_bandwidth_gb_per_s * 1e9)
                rows.append(((t0, index, 0), OpRow(record.op, record.shapes, _first(record.dtypes), record.path,
                                                   "host", ("host",), 0, seconds, flops, nbytes, fraction, "host")))
            seqs = sorted(own_seqs.get(index, ()))
            if seqs:
                rows.append(((t0, index, 1), self._device_row(record.op, record.shapes, _first(record.dtypes),
                                                               record.path, seqs)))
        for seq, _, t0, _, _ in prof._commands:
            if seq not in self.owner:
                rows.append(((t0, len(prof._records), seq), self._device_row(OUTSIDE_OPS, (), "", RUNTIME_PATH, [seq])))
        rows.sort(key=lambda r: r[0])
        entries = prof._entries
        device_ns = device_report.device_busy_ns(entries, self.t0, self.t1, self.spans)
        start, end = prof._start, prof._end
        delta = {k: end[k] - start[k] for k in start}
        host_breakdown = {k: delta[k] for k in ("api_calls", "api_ns", "sync_waits", "sync_wait_ns",
                                                "backpressure_waits", "backpressure_wait_ns", "interrupts",
                                                "interrupt_stolen_ns", "host_work_calls", "host_work_ns")}
        host_breakdown["dispatch_ns"] = delta["api_ns"] + delta["interrupt_stolen_ns"]
        host_breakdown["total_ns"] = delta["now_ns"]
        details = {"host": host_breakdown, "hardware": f"{config.device.name} x{config.num_devices} (preset {config.name})",
                   "energy": device_report.energy_summary(entries, config, self.t0, self.t1),
                   "verdict": device_report.verdict(device_ns, delta["host_work_ns"], host_breakdown["dispatch_ns"]),
                   "missing_commands": prof._missing}
        return ProfileReport(device_ns / 1e9, delta["now_ns"] / 1e9, prof._wall1 - prof._wall0,
                             [row for _, row in rows],
                             device_report.engine_utilization(entries, config, self.t0, self.t1, self.spans),
                             fallbacks, details)

    def _device_row(self, op, shapes, dtype, path, seqs) -> OpRow:
        commands = [self.commands[s] for s in seqs if s in self.commands]
        kernels = []
        for seq in seqs:
            name = self.commands[seq].name if seq in self.commands else self.names.get(seq, "?")
            if name not in kernels:
                kernels.append(name)
        lanes = []
        for cmd in commands:
            lanes.extend(lane for lane in cmd.lanes if lane not in lanes)
        busy = [(sum(e.end_ns - e.start_ns for e in c.entries) / 1e9, c) for c in commands]
        seconds = sum(b for b, _ in busy)
        longest = max(busy, key=lambda bc: bc[0])[1] if busy else None
        return OpRow(op, shapes, (longest.dtype if longest is not None and longest.dtype else dtype), path,
                     "+".join(kernels), tuple(lanes), sum(c.cycles for c in commands), seconds,
                     sum(c.flops for c in commands), sum(c.nbytes for c in commands),
                     sum(b * c.fraction for b, c in busy) / seconds if seconds else 0.0,
                     longest.bound if longest is not None else "latency",
                     sum(c.energy for c in commands), any(c.throttled for c in commands))

    # -- the Chrome trace -------------------------------------------------------------------
    def chrome_trace(self) -> dict:
        prof = self.prof
        origin = self.t0
        us = lambda ns: (ns - origin) / 1e3  # noqa: E731
        events: list[dict] = []
        host_pid = 0
        threads = {prof._main_thread: 1}
        for record, _, _ in prof._records:
            if record.thread is not None:
                threads.setdefault(record.thread, len(threads) + 1)
        for _, _, _, _, thread in prof._commands:
            threads.setdefault(thread, len(threads) + 1)
        runtime_tid, driver_tid = 1000, 1001
        meta = [{"name": "process_name", "ph": "M", "pid": host_pid, "args": {"name": "host"}},
                {"name": "process_sort_index", "ph": "M", "pid": host_pid, "args": {"sort_index": 0}},
                {"name": "thread_name", "ph": "M", "pid": host_pid, "tid": runtime_tid, "args": {"name": "runtime"}},
                {"name": "thread_name", "ph": "M", "pid": host_pid, "tid": driver_tid, "args": {"name": "driver"}}]
        for thread, tid in threads.items():
            label = "host thread" if thread == prof._main_thread else f"host thread {thread}"
            meta.append({"name": "thread_name", "ph": "M", "pid": host_pid, "tid": tid, "args": {"name": label}})
            meta.append({"name": "thread_sort_index", "ph": "M", "pid": host_pid, "tid": tid,
                         "args": {"sort_index": tid}})
        own: dict[int, list] = {}
        for seq, index in self.owner.items():
            own.setdefault(index, []).append(seq)
        # aten ops on their host thread
        for index, (record, t1, _) in enumerate(prof._records):
            t0 = record.t0_ns if record.t0_ns is not None else t1
            events.append({"name": record.op, "cat": "aten", "ph": "X", "pid": host_pid,
                           "tid": threads.get(record.thread, 1), "ts": us(t0), "dur": (t1 - t0) / 1e3,
                           "args": {"path": record.path, "dtypes": list(record.dtypes),
                                    "shapes": [list(s) for s in record.shapes],
                                    "correlation_ids": sorted(own.get(index, ()))}})
        for name, t0, t1, thread in prof._waits:
            events.append({"name": f"wait ({name})", "cat": "sync", "ph": "X", "pid": host_pid,
                           "tid": threads.get(thread, 1), "ts": us(t0), "dur": (t1 - t0) / 1e3, "args": {}})
        device_pid = lambda d: d + 1  # noqa: E731
        ring_tids: dict[tuple, int] = {}
        ring_ends: dict[tuple, float] = {}
        lane_tids = _lane_tids(self.commands.values(), self._lane_spans_of, self.config)
        flows = []
        for seq, name, t0, t1, thread in prof._commands:
            cid = {"correlation_id": seq}
            tid = threads[thread]
            if seq not in self.owner:  # a command no aten op submitted: a host slice of its own
                events.append({"name": OUTSIDE_OPS, "cat": "aten", "ph": "X", "pid": host_pid, "tid": tid,
                               "ts": us(t0), "dur": (t1 - t0) / 1e3, "args": {"correlation_ids": [seq],
                                                                             "path": RUNTIME_PATH}})
            events.append({"name": f"runtime {name}", "cat": "runtime", "ph": "X", "pid": host_pid,
                           "tid": runtime_tid, "ts": us(t0), "dur": (t1 - t0) / 1e3, "args": cid})
            events.append({"name": f"submit {name}", "cat": "driver", "ph": "X", "pid": host_pid,
                           "tid": driver_tid, "ts": us(t0), "dur": (t1 - t0) / 1e3, "args": dict(cid, seq=seq)})
            chain = [(host_pid, tid, t0), (host_pid, runtime_tid, t0), (host_pid, driver_tid, t0)]
            cmd = self.commands.get(seq)
            if cmd is not None:
                pid = device_pid(cmd.device)
                ring_tid = ring_tids.setdefault((cmd.device, cmd.ring), 100_000 + len(ring_tids))
                # Launches are pipelined (a ring's next launch overlaps its current kernel): the
                # ring's slices start at the later of the launch and the ring's previous end.
                fw_start = max(min(cmd.launch_start, cmd.start), ring_ends.get((cmd.device, cmd.ring), 0.0))
                ring_ends[(cmd.device, cmd.ring)] = max(cmd.end, fw_start)
                events.append({"name": cmd.name, "cat": "firmware", "ph": "X", "pid": pid, "tid": ring_tid,
                               "ts": us(fw_start), "dur": (cmd.end - fw_start) / 1e3,
                               "args": dict(cid, ring=cmd.ring, bound=cmd.bound, tiling=cmd.tiling, dtype=cmd.dtype)})
                chain.append((pid, ring_tid, fw_start))
                first_lane = None
                for lane, spans in self._lane_spans_of(cmd):
                    lane_tid = lane_tids[(cmd.device, lane)]
                    for start, end, entry in spans:
                        events.append({"name": cmd.name, "cat": "engine", "ph": "X", "pid": pid, "tid": lane_tid,
                                       "ts": us(start), "dur": (end - start) / 1e3,
                                       "args": dict(cid, bytes=entry.nbytes, flops=entry.flops,
                                                    bound=cmd.bound, cycles=device_report.command_cycles(
                                                        entry, self.config.device.clock_ghz))})
                        if first_lane is None:
                            first_lane = (pid, lane_tid, start)
                if first_lane is not None:
                    chain.append(first_lane)
            flows.append((seq, chain))
        for seq, chain in flows:
            for k, (pid, tid, ts) in enumerate(chain):
                ph = "s" if k == 0 else "f" if k == len(chain) - 1 else "t"
                event = {"name": "correlation", "cat": "correlation", "ph": ph, "id": seq, "pid": pid, "tid": tid,
                         "ts": us(ts)}
                if ph != "s":
                    event["bp"] = "e"
                events.append(event)
        devices = sorted({d for d, _ in ring_tids} | {d for d, _ in lane_tids})
        # A power counter track per device (runtime/report.py's power_track).
        for d, points in device_report.power_track(prof._entries, self.config, self.t0, self.t1).items():
            events.extend(device_report.power_counter_events(points, device_pid(d), us))
        for d in devices:
            meta.append({"name": "process_name", "ph": "M", "pid": device_pid(d), "args": {"name": f"emu:{d}"}})
            meta.append({"name": "process_sort_index", "ph": "M", "pid": device_pid(d),
                         "args": {"sort_index": device_pid(d)}})
        for (d, ring), tid in ring_tids.items():
            meta.append({"name": "thread_name", "ph": "M", "pid": device_pid(d), "tid": tid,
                         "args": {"name": f"dev{d}.ring{ring} (firmware)"}})
        for (d, lane), tid in lane_tids.items():
            meta.append({"name": "thread_name", "ph": "M", "pid": device_pid(d), "tid": tid, "args": {"name": lane}})
            meta.append({"name": "thread_sort_index", "ph": "M", "pid": device_pid(d), "tid": tid,
                         "args": {"sort_index": tid}})
        return {"traceEvents": meta + events, "displayTimeUnit": "ns",
                "otherData": {"hardware": f"{self.config.device.name} (preset {self.config.name})",
                              "time": "modelled microseconds from the start of the profiled block"}}

    def _lane_spans_of(self, cmd):
        if not hasattr(self, "_spans_by_entry"):
            by_entry: dict[int, list] = {}
            for lane, spans in self.spans.items():
                for span in spans:
                    by_entry.setdefault(id(span[2]), []).append((lane, span))
            self._spans_by_entry = by_entry
        out: dict[str, list] = {}
        for entry in cmd.entries:
            for lane, span in self._spans_by_entry.get(id(entry), ()):
                out.setdefault(lane, []).append(span)
        return list(out.items())


_LANE_ORDER = (".cp", ".core", ".dma", ".host_link", "link", ".interconnect")


def _lane_key(lane: str) -> tuple:
    """Command processor first, then the cores' engines, DMA engines, host link, device links;
    numbers in names sort as numbers (core2 before core10)."""
    rank = next((i for i, key in enumerate(_LANE_ORDER) if key in lane), len(_LANE_ORDER))
    parts, digits = [], ""
    for ch in lane + " ":
        if ch.isdigit():
            digits += ch
            continue
        if digits:
            parts.append((1, int(digits), ""))
            digits = ""
        parts.append((0, 0, ch))
    return rank, parts


def _lane_tids(commands, spans_of, config) -> dict:
    """{(device, lane): tid} for every lane a command used, and every engine of each device that
    ran one (idle lanes included: each core's matrix and vector engine, each DMA engine, the host
    link's directions, the command processor), tids in lane order (device lanes start at 100;
    the firmware's ring lanes use 100000+)."""
    commands = list(commands)
    lanes = {(cmd.device, lane) for cmd in commands for lane, _ in spans_of(cmd)}
    device = config.device
    for d in {cmd.device for cmd in commands}:
        names = [f"dev{d}.host_link.h2d", f"dev{d}.host_link.d2h"]
        names += [f"dev{d}.core{c}.{unit}" for c in range(getattr(device, "cores", 1)) for unit in ("matrix", "vector")]
        names += [f"dev{d}.dma{k}" for k in range(device.dma.engines)]
        if any(getattr(e, "engines", None) for cmd in commands for e in cmd.entries):
            names.append(f"dev{d}.cp")
        lanes.update((d, name) for name in names)
    return {key: 100 + i for i, key in enumerate(sorted(lanes, key=lambda k: (k[0], _lane_key(k[1]))))}


def _first(values) -> str:
    return values[0] if values else ""


# -- the roofline -------------------------------------------------------------------------------
def _save_roofline(report: ProfileReport, config, path) -> None:
    try:
        import matplotlib
    except ImportError as err:
        raise RuntimeError("save_roofline() needs matplotlib (pip install matplotlib; the Makefile's install "
                           "target installs it)") from err
    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    points: dict[tuple, list] = {}  # (kernel, dtype) -> [flops, bytes, seconds]
    for row in report.ops:
        if row.bound == "host" or row.time_s <= 0 or row.flops <= 0 or row.bytes <= 0:
            continue
        p = points.setdefault((row.kernel, row.dtype), [0.0, 0.0, 0.0])
        p[0] += row.flops
        p[1] += row.bytes
        p[2] += row.time_s
    fig = Figure(figsize=(9, 6))
    ax = fig.add_subplot()
    dtypes = sorted({dtype for _, dtype in points}) or [None]
    peaks = {d: device_report.engine_peaks(config, d) for d in dtypes}
    bandwidth = peaks[dtypes[0]]["hbm_bytes_per_s"]
    intensities = [f / b for f, b, _ in points.values()] or [1.0]
    lo, hi = min(intensities + [0.1]) / 4, max(intensities + [1e3]) * 4
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    seen = set()
    for dtype, p in peaks.items():
        for key, label, style in (("matrix_flops", "matrix", "-"), ("vector_flops", "vector", "--")):
            peak = p[key]
            if (key, peak) in seen:
                continue
            seen.add((key, peak))
            ax.plot(xs, [min(peak, bandwidth * x) for x in xs], style,
                    label=f"{label} engines {peak / 1e12:.2f} TFLOP/s" + (f" ({dtype})" if dtype else ""))
    ax.plot(xs, [bandwidth * x for x in xs], ":", color="grey", label=f"HBM {bandwidth / 1e9:.0f} GB/s")
    total = sum(s for _, _, s in points.values()) or 1.0
    ranked = sorted(points.items(), key=lambda kv: -kv[1][2])
    for rank, ((kernel, dtype), (flops, nbytes, seconds)) in enumerate(ranked):
        x, y = flops / nbytes, flops / seconds
        ax.scatter([x], [y], s=20 + 400 * seconds / total, alpha=0.7)
        if rank < 12:
            ax.annotate(f"{kernel}" + (f" {dtype}" if dtype else ""), (x, y), fontsize=7,
                        xytext=(4, 4), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    top = max(p[key] for p in peaks.values() for key in ("matrix_flops", "vector_flops"))
    ax.set_ylim(top=top * 3)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved FLOP/s")
    skipped = sum(1 for row in report.ops if row.bound != "host" and row.flops <= 0)
    ax.set_title(f"Roofline: {config.device.name} (preset {config.name}); {len(points)} kernels"
                 + (f", {skipped} op rows without flops (copies) not shown" if skipped else ""), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.savefig(path, dpi=110, bbox_inches="tight")


# -- running a script under the profiler --------------------------------------------------------
REPORT_FILE, TRACE_FILE, ROOFLINE_FILE = "report.json", "trace.json", "roofline.png"


class _Progress:
    """A tqdm bar over the CLI's phases (stderr), showing the op count while the script runs."""
    PHASES = ("run script", "report", "trace", "roofline")

    def __init__(self, enabled: bool, prof: Profile | None = None, total: int | None = None, desc: str = ""):
        self.bar = None
        self._stop = threading.Event()
        if not enabled:
            return
        from tqdm import tqdm
        self.bar = tqdm(total=total or len(self.PHASES), desc=desc or "profiling", unit="step",
                        file=sys.stderr, leave=True, dynamic_ncols=True)
        self.prof = prof

    def phase(self, name: str) -> None:
        if self.bar is not None:
            self.bar.set_description_str(name)

    def watch_ops(self) -> None:
        """Refreshes the op count twice a second from a helper thread while the script runs."""
        if self.bar is None or self.prof is None:
            return

        def watch():
            while not self._stop.wait(0.5):
                self.bar.set_postfix_str(f"{len(self.prof._records)} ops", refresh=True)
        threading.Thread(target=watch, name="emu-profile-progress", daemon=True).start()

    def step(self) -> None:
        self._stop.set()
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        self._stop.set()
        if self.bar is not None:
            self.bar.close()


def run_script(script: str, args=(), out_dir: str = DEFAULT_OUT_DIR, progress: bool = True,
               top: int = 10, quiet: bool = False) -> ProfileReport:
    """Runs ``script`` (as ``python script args``) under the profiler and writes ``report.json``,
    ``trace.json`` and ``roofline.png`` into ``out_dir``. Returns the report. The script's own
    ``SystemExit`` with a non-zero code, or its exception, is re-raised after the files are written."""
    if not os.path.isfile(script):
        raise FileNotFoundError(f"python -m torch_plugin.profile: no such script: {script}")
    os.makedirs(out_dir, exist_ok=True)
    prof = Profile()
    bar = _Progress(progress, prof, desc="run script")
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    failure = None
    try:
        bar.watch_ops()
        with prof:
            try:
                runpy.run_path(script, run_name="__main__")
            except SystemExit as exit_:
                if exit_.code not in (None, 0):
                    failure = exit_
            except BaseException as err:  # the script's error: still report what ran
                failure = err
        bar.step()
        bar.phase("report")
        report = prof.report()
        report.to_json(os.path.join(out_dir, REPORT_FILE))
        bar.step()
        bar.phase("trace")
        prof.export_chrome_trace(os.path.join(out_dir, TRACE_FILE))
        bar.step()
        bar.phase("roofline")
        prof.save_roofline(os.path.join(out_dir, ROOFLINE_FILE))
        bar.step()
    finally:
        bar.close()
        sys.argv, sys.path[:] = saved_argv, saved_path
    if not quiet:
        print(_cli_summary(report, out_dir, top))
    if failure is not None:
        raise failure
    return report


def _cli_summary(report: ProfileReport, out_dir: str, top: int) -> str:
    lines = report.summary_lines()
    kernels = report.top_kernels(top)
    if kernels:
        lines += ["", f"top kernels (of {len(report.ops)} op rows):",
                  f"  {'kernel':<34}{'count':>7}{'time us':>12}{'share':>8}{'% peak':>8}  bound"]
        for k in kernels:
            lines.append(f"  {k['kernel'][:34]:<34}{k['count']:>7}{k['time_s'] * 1e6:>12.1f}"
                         f"{100 * k['share']:>7.1f}%{100 * k['fraction_of_peak']:>7.1f}%  {k['bound']}")
    lines += ["", f"verdict: {report.verdict}",
              f"wrote {os.path.join(out_dir, REPORT_FILE)}, {os.path.join(out_dir, TRACE_FILE)} "
              f"(open in https://ui.perfetto.dev), {os.path.join(out_dir, ROOFLINE_FILE)}"]
    return "\n".join(lines)


# -- what-if sweeps ---------------------------------------------------------------------------
def parse_sweep(text: str) -> tuple[str, list]:
    """"field=v1,v2,..." -> (field, [values]); each value a TOML literal (2, 1.5, true, "ws") or
    else a bare string."""
    import tomllib
    field, sep, values = text.partition("=")
    field = field.strip()
    if not sep or not field or not values.strip():
        raise ValueError(f"--sweep {text!r}: expected FIELD=V1,V2,... (e.g. device.hbm.bandwidth_gb_per_s=800,1600)")
    out = []
    for raw in values.split(","):
        raw = raw.strip()
        if not raw:
            raise ValueError(f"--sweep {text!r}: an empty value")
        try:
            out.append(tomllib.loads(f"v = {raw}")["v"])
        except tomllib.TOMLDecodeError:
            out.append(raw)
    return field, out


def sweep(script: str, field: str, values, args=(), out_dir: str = DEFAULT_OUT_DIR,
          progress: bool = True) -> list[dict]:
    """Reruns ``script`` once per value with the hardware field ``field`` (dotted path of the
    hardware description, e.g. "device.hbm.bandwidth_gb_per_s") set to it, each in a fresh
    process with a fresh emulated system (``EMU_CONFIG`` names a generated TOML: the current
    description, EMU_CONFIG's or EMU_PRESET's, with that one field changed). Returns one dict
    per value: value, projected_total_time_s, projected_device_time_s, wall_time_s, verdict,
    out_dir. Every value is validated before anything runs."""
    if not os.path.isfile(script):
        raise FileNotFoundError(f"python -m torch_plugin.profile: no such script: {script}")
    values = list(values)
    if not values:
        raise ValueError("sweep: no values")
    base = device_report.current_description()
    plans = []
    for value in values:
        run_dir = os.path.join(out_dir, "sweep", f"{field}={value}")
        os.makedirs(run_dir, exist_ok=True)
        description = device_report.with_field(base, field, value)
        description["name"] = f"{base.get('name', 'custom')} with {field}={value}"
        config_path = os.path.join(run_dir, "hardware.toml")
        with open(config_path, "w") as out:
            out.write(f"# {base.get('name')} with {field} = {value!r} (python -m torch_plugin.profile --sweep)\n")
            out.write(device_report.description_toml(description))
        device_report.check_description_file(config_path)  # a bad value: the error names the field
        plans.append((value, run_dir, config_path))
    bar = _Progress(progress, total=len(plans), desc=f"sweep {field}")
    results = []
    try:
        for value, run_dir, config_path in plans:
            bar.phase(f"{field}={value}")
            env = dict(os.environ, EMU_CONFIG=os.path.abspath(config_path))
            env.pop("EMU_PRESET", None)
            done = subprocess.run([sys.executable, "-m", "torch_plugin.profile", "--out-dir", run_dir,
                                   "--no-progress", "--quiet", script, *args],
                                  env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"sweep: the run with {field}={value!r} failed (exit {done.returncode}):\n"
                                   f"{done.stderr[-4000:]}")
            with open(os.path.join(run_dir, REPORT_FILE)) as f:
                data = json.load(f)
            results.append({"value": value, "projected_total_time_s": data["projected_total_time_s"],
                            "projected_device_time_s": data["projected_device_time_s"],
                            "wall_time_s": data["wall_time_s"], "verdict": data["verdict"], "out_dir": run_dir})
            bar.step()
    finally:
        bar.close()
    return results


def sweep_table(field: str, results: list[dict]) -> str:
    """The sweep for people: projected times per value, and the speed-up over the first value."""
    first = results[0]["projected_total_time_s"] if results else 0.0
    width = max([len(field)] + [len(str(r["value"])) for r in results])
    lines = [f"{field:<{width}}  {'total us':>12}  {'device us':>12}  {'speed-up':>8}  verdict"]
    for r in results:
        speedup = first / r["projected_total_time_s"] if r["projected_total_time_s"] else float("inf")
        lines.append(f"{str(r['value']):<{width}}  {r['projected_total_time_s'] * 1e6:>12.1f}  "
                     f"{r['projected_device_time_s'] * 1e6:>12.1f}  {speedup:>7.2f}x  {r['verdict']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_plugin.profile",
        description="Run a Python script under torch.emu.profile(): writes report.json, trace.json (Perfetto) "
                    "and roofline.png, and prints the top kernels and the verdict (docs/profiling.md).")
    parser.add_argument("--out-dir", default=DEFAULT_OUT_DIR, help=f"where to write (default ./{DEFAULT_OUT_DIR})")
    parser.add_argument("--sweep", metavar="FIELD=V1,V2,...", default=None,
                        help="rerun once per value with one hardware field changed (dotted path, e.g. "
                             "device.hbm.bandwidth_gb_per_s=800,1600,3200) and tabulate the projected time")
    parser.add_argument("--top", type=int, default=10, help="kernels to list (default 10)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--quiet", action="store_true", help="print nothing (the files are still written)")
    parser.add_argument("script", help="the Python script to run, unmodified")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    ns = parser.parse_args(argv)
    if ns.sweep is not None:
        try:
            field, values = parse_sweep(ns.sweep)
            results = sweep(ns.script, field, values, ns.args, ns.out_dir, progress=not ns.no_progress)
        except (ValueError, FileNotFoundError, runtime.EmuError, RuntimeError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        if not ns.quiet:
            print(sweep_table(field, results))
        return 0
    try:
        run_script(ns.script, ns.args, ns.out_dir, progress=not ns.no_progress, top=ns.top, quiet=ns.quiet)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 1
    return 0


if __name__ == "__main__":
    # Run the imported module's main: the profiler state (and torch.emu.profile's) is that module's.
    from torch_plugin.profile import main as _main
    sys.exit(_main())
