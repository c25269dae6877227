"""The totals of a profiled block, and the ``ProfileReport`` built from them and its op rows.

From the host clock's snapshots at the block's start and end: where the modelled host time went
(launch overhead, waits, back-pressure, interrupts, host work); from the firmware trace records
(runtime/report.py does the arithmetic): device busy time, per-lane utilisation, energy, and the
verdict. Leaves out the op rows themselves (attribution.py) and the text (report.py).
"""
from __future__ import annotations

from runtime import report as device_report
from torch_plugin.profile.attribution import op_rows
from torch_plugin.profile.report import ProfileReport

# The host clock's counters a report lists (runtime/host_clock.py's snapshot keys).
HOST_COUNTERS = ("api_calls", "api_ns", "sync_waits", "sync_wait_ns", "backpressure_waits", "backpressure_wait_ns",
                 "interrupts", "interrupt_stolen_ns", "host_work_calls", "host_work_ns")


def host_breakdown(start: dict, end: dict) -> dict:
    """The host clock's counters over the block, with dispatch_ns (launch overhead and interrupts)
    and total_ns (the block end to end)."""
    delta = {k: end[k] - start[k] for k in start}
    host = {k: delta[k] for k in HOST_COUNTERS}
    host["dispatch_ns"] = delta["api_ns"] + delta["interrupt_stolen_ns"]
    host["total_ns"] = delta["now_ns"]
    return host


def build_report(analysis) -> ProfileReport:
    prof, config = analysis.prof, analysis.config
    t0, t1 = analysis.t0, analysis.t1
    rows, fallbacks = op_rows(analysis)
    entries = prof._entries
    device_ns = device_report.device_busy_ns(entries, t0, t1, analysis.spans)
    host = host_breakdown(prof._start, prof._end)
    details = {"host": host, "hardware": f"{config.device.name} x{config.num_devices} (preset {config.name})",
               "energy": device_report.energy_summary(entries, config, t0, t1),
               "verdict": device_report.verdict(device_ns, host["host_work_ns"], host["dispatch_ns"]),
               "missing_commands": prof._missing}
    return ProfileReport(device_ns / 1e9, host["total_ns"] / 1e9, prof._wall1 - prof._wall0, rows,
                         device_report.engine_utilization(entries, config, t0, t1, analysis.spans),
                         fallbacks, details)
