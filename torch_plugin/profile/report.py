"""The profile report: one ``OpRow`` per op instance, and ``ProfileReport``, the block's totals
with its text for people (``table()``, ``summary_lines()``) and its JSON for programs.

It only presents figures already computed (summary.py builds the report, attribution.py the
rows); it reads no trace and holds no device state.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

from torch_plugin.ops import registry

OUTSIDE_OPS = "(outside aten ops)"   # the op of a command no aten op submitted
RUNTIME_PATH = "runtime"             # ... and its path
HOST_PATH = registry.HOST_FALLBACK


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


class _RowTotals:
    """Sums over a group of op rows, in the order the rows come: count, time, flops, bytes, energy,
    throttled rows, the time-weighted fraction of peak, and the bound that took the most time."""
    __slots__ = ("count", "time_s", "flops", "bytes", "weighted_peak", "energy_j", "throttled", "_bound_time")

    def __init__(self):
        self.count, self.throttled = 0, 0
        self.time_s = self.flops = self.bytes = self.weighted_peak = self.energy_j = 0.0
        self._bound_time: dict[str, float] = {}

    @classmethod
    def grouped(cls, rows, key) -> dict:
        """{key(row): _RowTotals of its rows}, keys in first-seen order."""
        groups: dict = {}
        for row in rows:
            groups.setdefault(key(row), cls()).add(row)
        return groups

    def add(self, row: OpRow) -> None:
        self.count += 1
        self.time_s += row.time_s
        self.flops += row.flops
        self.bytes += row.bytes
        self.weighted_peak += row.fraction_of_peak * row.time_s
        self.energy_j += row.energy_j
        self.throttled += row.throttled
        self._bound_time[row.bound] = self._bound_time.get(row.bound, 0.0) + row.time_s

    @property
    def bound(self) -> str:
        return max(self._bound_time, key=self._bound_time.get)


def _energy_figure(key: str) -> property:
    """A ProfileReport property: one figure of the block's energy summary."""
    return property(lambda report: report._details["energy"][key])


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

    energy_j = _energy_figure("energy_j")
    average_power_w = _energy_figure("average_power_w")
    peak_power_w = _energy_figure("peak_power_w")
    throttled_commands = _energy_figure("throttled_commands")

    @property
    def host_time(self) -> dict:
        """Where the modelled host time went (ns): launch overhead, waits, interrupts, host work."""
        return dict(self._details["host"])

    def top_kernels(self, n: int = 10) -> list[dict]:
        """Device kernels by total modelled time: {kernel, count, time_s, share, bound,
        fraction_of_peak} (share: of the summed engine time of all kernels)."""
        device_rows = (row for row in self.ops if not (row.path == HOST_PATH and row.kernel == "host"))
        by_kernel = _RowTotals.grouped(device_rows, lambda row: row.kernel)
        total = sum(e.time_s for e in by_kernel.values()) or 1.0
        out = []
        for kernel, e in sorted(by_kernel.items(), key=lambda kv: -kv[1].time_s)[:n]:
            out.append({"kernel": kernel, "count": e.count, "time_s": e.time_s, "share": e.time_s / total,
                        "bound": e.bound, "fraction_of_peak": e.weighted_peak / e.time_s if e.time_s else 0.0})
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
        groups = _RowTotals.grouped(self.ops, lambda row: (row.op, row.kernel, row.shapes, row.dtype, row.path))
        header = ("op", "kernel", "path", "dtype", "shapes", "count", "time us", "GFLOP/s", "GB/s", "% peak",
                  "energy uJ", "bound", "throttled")
        rows = []
        for (op, kernel, shapes, dtype, path), g in sorted(groups.items(), key=lambda kv: -kv[1].time_s)[:top]:
            t = g.time_s
            rows.append((op, kernel, path, dtype or "-", " ".join(str(list(s)).replace(" ", "") for s in shapes) or "-",
                         str(g.count), f"{t * 1e6:.1f}", f"{g.flops / t / 1e9:.1f}" if t else "-",
                         f"{g.bytes / t / 1e9:.1f}" if t else "-", f"{100 * g.weighted_peak / t:.1f}" if t else "-",
                         f"{g.energy_j * 1e6:.2f}", g.bound, f"{g.throttled}/{g.count}" if g.throttled else ""))
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
