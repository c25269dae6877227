"""A profiled block as Chrome trace JSON (the format Perfetto and chrome://tracing open).

Process 0 is the host: one lane per host thread (its aten ops and waits), a runtime lane and a
driver lane (each command's submission). Process d+1 is device d: one lane per firmware ring (the
command as the ring ran it) and one per engine (its trace records), a power counter, and one flow
per command (its correlation id) from the op that submitted it down to its first engine slice.
Times are modelled microseconds from the block's start. Leaves out which lanes exist and their
order (lanes.py) and everything computed for the report (attribution.py, summary.py).
"""
from __future__ import annotations

from runtime import report as device_report
from torch_plugin.profile.attribution import record_start_ns
from torch_plugin.profile.lanes import lane_tids
from torch_plugin.profile.report import OUTSIDE_OPS, RUNTIME_PATH

HOST_PID = 0
RUNTIME_TID, DRIVER_TID = 1000, 1001
RING_TID_BASE = 100_000   # the firmware's ring lanes (device lanes start at 100: lanes.py)


def chrome_trace(analysis) -> dict:
    return _TraceBuilder(analysis).build()


def _device_pid(device: int) -> int:
    return device + 1


class _TraceBuilder:
    def __init__(self, analysis):
        self.analysis = analysis
        self.prof = analysis.prof
        self.config = analysis.config
        self.origin = analysis.t0
        self.events: list[dict] = []
        self.threads = _host_threads(self.prof)
        self.ring_tids: dict[tuple, int] = {}
        self.ring_ends: dict[tuple, float] = {}
        self.lane_tids = lane_tids(analysis.commands.values(), analysis.lane_spans_of, self.config)

    def us(self, ns: float) -> float:
        return (ns - self.origin) / 1e3

    def build(self) -> dict:
        meta = self._host_meta()
        self._op_events()
        self._wait_events()
        flows = [self._command_events(*command) for command in self.prof._commands]
        for seq, chain in flows:
            self._flow_events(seq, chain)
        # A power counter track per device (runtime/report.py's power_track).
        analysis = self.analysis
        for d, points in device_report.power_track(self.prof._entries, self.config, analysis.t0, analysis.t1).items():
            self.events.extend(device_report.power_counter_events(points, _device_pid(d), self.us))
        meta += self._device_meta()
        return {"traceEvents": meta + self.events, "displayTimeUnit": "ns",
                "otherData": {"hardware": f"{self.config.device.name} (preset {self.config.name})",
                              "time": "modelled microseconds from the start of the profiled block"}}

    def _slice(self, name: str, cat: str, pid: int, tid: int, start: float, end: float, args: dict) -> None:
        self.events.append({"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid, "ts": self.us(start),
                            "dur": (end - start) / 1e3, "args": args})

    # -- the host --------------------------------------------------------------------------
    def _host_meta(self) -> list:
        meta = [{"name": "process_name", "ph": "M", "pid": HOST_PID, "args": {"name": "host"}},
                {"name": "process_sort_index", "ph": "M", "pid": HOST_PID, "args": {"sort_index": 0}},
                {"name": "thread_name", "ph": "M", "pid": HOST_PID, "tid": RUNTIME_TID, "args": {"name": "runtime"}},
                {"name": "thread_name", "ph": "M", "pid": HOST_PID, "tid": DRIVER_TID, "args": {"name": "driver"}}]
        for thread, tid in self.threads.items():
            label = "host thread" if thread == self.prof._main_thread else f"host thread {thread}"
            meta.append({"name": "thread_name", "ph": "M", "pid": HOST_PID, "tid": tid, "args": {"name": label}})
            meta.append({"name": "thread_sort_index", "ph": "M", "pid": HOST_PID, "tid": tid,
                         "args": {"sort_index": tid}})
        return meta

    def _op_events(self) -> None:
        """The aten ops, on their host thread."""
        own = self.analysis.own_seqs
        for index, (record, t1, _) in enumerate(self.prof._records):
            self._slice(record.op, "aten", HOST_PID, self.threads.get(record.thread, 1), record_start_ns(record, t1),
                        t1, {"path": record.path, "dtypes": list(record.dtypes),
                             "shapes": [list(s) for s in record.shapes],
                             "correlation_ids": sorted(own.get(index, ()))})

    def _wait_events(self) -> None:
        for name, t0, t1, thread in self.prof._waits:
            self._slice(f"wait ({name})", "sync", HOST_PID, self.threads.get(thread, 1), t0, t1, {})

    # -- each command, from its submission to its engines ----------------------------------
    def _command_events(self, seq: int, name: str, t0: float, t1: float, thread) -> tuple:
        """The command's slices; returns (seq, its flow: [(pid, tid, ts ns)])."""
        cid = {"correlation_id": seq}
        tid = self.threads[thread]
        if seq not in self.analysis.owner:  # a command no aten op submitted: a host slice of its own
            self._slice(OUTSIDE_OPS, "aten", HOST_PID, tid, t0, t1, {"correlation_ids": [seq], "path": RUNTIME_PATH})
        self._slice(f"runtime {name}", "runtime", HOST_PID, RUNTIME_TID, t0, t1, cid)
        self._slice(f"submit {name}", "driver", HOST_PID, DRIVER_TID, t0, t1, dict(cid, seq=seq))
        chain = [(HOST_PID, tid, t0), (HOST_PID, RUNTIME_TID, t0), (HOST_PID, DRIVER_TID, t0)]
        cmd = self.analysis.commands.get(seq)
        if cmd is not None:
            chain.extend(self._device_events(cmd, cid))
        return seq, chain

    def _device_events(self, cmd, cid: dict) -> list:
        """The command on its firmware ring and on its engines; returns the flow's device steps."""
        pid = _device_pid(cmd.device)
        ring = (cmd.device, cmd.ring)
        ring_tid = self.ring_tids.setdefault(ring, RING_TID_BASE + len(self.ring_tids))
        # Launches are pipelined (a ring's next launch overlaps its current kernel): the
        # ring's slices start at the later of the launch and the ring's previous end.
        fw_start = max(min(cmd.launch_start, cmd.start), self.ring_ends.get(ring, 0.0))
        self.ring_ends[ring] = max(cmd.end, fw_start)
        self._slice(cmd.name, "firmware", pid, ring_tid, fw_start, cmd.end,
                    dict(cid, ring=cmd.ring, bound=cmd.bound, tiling=cmd.tiling, dtype=cmd.dtype))
        steps = [(pid, ring_tid, fw_start)]
        clock_ghz = self.config.device.clock_ghz
        first_lane = None
        for lane, spans in self.analysis.lane_spans_of(cmd):
            lane_tid = self.lane_tids[(cmd.device, lane)]
            for start, end, entry in spans:
                self._slice(cmd.name, "engine", pid, lane_tid, start, end,
                            dict(cid, bytes=entry.nbytes, flops=entry.flops, bound=cmd.bound,
                                 cycles=device_report.command_cycles(entry, clock_ghz)))
                if first_lane is None:
                    first_lane = (pid, lane_tid, start)
        if first_lane is not None:
            steps.append(first_lane)
        return steps

    def _flow_events(self, seq: int, chain: list) -> None:
        for k, (pid, tid, ts) in enumerate(chain):
            ph = "s" if k == 0 else "f" if k == len(chain) - 1 else "t"
            event = {"name": "correlation", "cat": "correlation", "ph": ph, "id": seq, "pid": pid, "tid": tid,
                     "ts": self.us(ts)}
            if ph != "s":
                event["bp"] = "e"
            self.events.append(event)

    # -- the devices -----------------------------------------------------------------------
    def _device_meta(self) -> list:
        meta = []
        for d in sorted({d for d, _ in self.ring_tids} | {d for d, _ in self.lane_tids}):
            meta.append({"name": "process_name", "ph": "M", "pid": _device_pid(d), "args": {"name": f"emu:{d}"}})
            meta.append({"name": "process_sort_index", "ph": "M", "pid": _device_pid(d),
                         "args": {"sort_index": _device_pid(d)}})
        for (d, ring), tid in self.ring_tids.items():
            meta.append({"name": "thread_name", "ph": "M", "pid": _device_pid(d), "tid": tid,
                         "args": {"name": f"dev{d}.ring{ring} (firmware)"}})
        for (d, lane), tid in self.lane_tids.items():
            meta.append({"name": "thread_name", "ph": "M", "pid": _device_pid(d), "tid": tid, "args": {"name": lane}})
            meta.append({"name": "thread_sort_index", "ph": "M", "pid": _device_pid(d), "tid": tid,
                         "args": {"sort_index": tid}})
        return meta


def _host_threads(prof) -> dict:
    """{thread ident: tid}: the block's main thread 1, then each thread that ran an op or submitted."""
    threads = {prof._main_thread: 1}
    for record, _, _ in prof._records:
        if record.thread is not None:
            threads.setdefault(record.thread, len(threads) + 1)
    for _, _, _, _, thread in prof._commands:
        threads.setdefault(thread, len(threads) + 1)
    return threads
