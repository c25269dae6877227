"""One device command of a profiled block, from its firmware trace records.

A command may leave several trace records (one per engine phase, and the lanes runtime/report.py
splits where records overlap); ``merge_commands`` folds them into one ``_Command``: its span and
launch start, cycles, flops, bytes, energy, the lanes it occupied, its time-weighted fraction of
peak and the bound of its longest record. ``EntryLanes`` says which lane spans each record holds.
Leaves out which op submitted a command (attribution.py) and how it is drawn (chrome_trace.py).
"""
from __future__ import annotations

from runtime import report as device_report


class _Command:
    """One command of the block, its trace records merged (a command may have several)."""
    __slots__ = ("seq", "name", "device", "ring", "start", "end", "launch_start", "cycles", "flops",
                 "nbytes", "lanes", "bound", "dtype", "tiling", "fraction", "entries", "energy", "throttled")

    @property
    def busy_s(self) -> float:
        """The summed duration of its trace records (seconds)."""
        return _busy_s(self.entries)


def _busy_s(entries) -> float:
    return sum(e.end_ns - e.start_ns for e in entries) / 1e9


class EntryLanes:
    """The lane spans of runtime/report.py's ``lane_spans`` ({lane: [(start, end, entry)]}), by record."""

    def __init__(self, spans: dict):
        self._by_entry: dict[int, list] = {}  # id(entry) -> [(lane, span)]
        for lane, lane_spans in spans.items():
            for span in lane_spans:
                self._by_entry.setdefault(id(span[2]), []).append((lane, span))

    def lanes(self, entry) -> list:
        """The lanes ``entry`` occupied after overlaps were split (a lane once per span)."""
        return [lane for lane, _ in self._by_entry.get(id(entry), ())]

    def of_command(self, cmd: _Command) -> list:
        """[(lane, [spans of the command's records on it])], lanes in first-seen order."""
        out: dict[str, list] = {}
        for entry in cmd.entries:
            for lane, span in self._by_entry.get(id(entry), ()):
                out.setdefault(lane, []).append(span)
        return list(out.items())


def merge_commands(entries, entry_lanes: EntryLanes, config) -> dict:
    """{seq: _Command} of the trace records ``entries``."""
    peaks = _PeaksByDtype(config)
    clock_ghz = config.device.clock_ghz
    top_clock = device_report.mode_top_clock_ghz(config)
    commands: dict[int, _Command] = {}
    for entry in entries:
        cmd = commands.get(entry.seq)
        if cmd is None:
            cmd = commands[entry.seq] = _new_command(entry)
        _add_record(cmd, entry, peaks, clock_ghz, top_clock)
        hbm = tuple(lane for lane in getattr(entry, "engines", None) or () if lane.endswith(".hbm"))
        for lane in (*entry_lanes.lanes(entry), *hbm):
            if lane not in cmd.lanes:
                cmd.lanes.append(lane)
    for cmd in commands.values():
        busy = cmd.busy_s
        cmd.fraction = cmd.fraction / busy if busy else 0.0
    return commands


class _PeaksByDtype:
    """runtime/report.py's engine peaks of ``config``, computed once per dtype."""

    def __init__(self, config):
        self._config, self._peaks = config, {}

    def __call__(self, dtype: str) -> dict:
        peaks = self._peaks.get(dtype)
        if peaks is None:
            peaks = self._peaks[dtype] = device_report.engine_peaks(self._config, dtype or None)
        return peaks


def _new_command(entry) -> _Command:
    cmd = _Command()
    cmd.seq, cmd.name, cmd.device, cmd.ring = entry.seq, entry.name, entry.device, entry.ring
    cmd.start, cmd.end = entry.start_ns, entry.end_ns
    cmd.launch_start = getattr(entry, "launch_start_ns", entry.start_ns)
    cmd.cycles = cmd.flops = cmd.nbytes = 0
    cmd.energy, cmd.throttled = 0.0, False
    cmd.fraction, cmd.lanes, cmd.entries = 0.0, [], []
    cmd.bound, cmd.dtype, cmd.tiling = None, _dtype(entry), getattr(entry, "tiling", "") or ""
    return cmd


def _add_record(cmd: _Command, entry, peaks: _PeaksByDtype, clock_ghz: float, top_clock) -> None:
    """Folds one trace record into ``cmd`` (its fraction stays time-weighted until merge_commands
    divides it by the command's busy time)."""
    entry_peaks = peaks(_dtype(entry))
    seconds = (entry.end_ns - entry.start_ns) / 1e9
    cmd.start, cmd.end = min(cmd.start, entry.start_ns), max(cmd.end, entry.end_ns)
    cmd.launch_start = min(cmd.launch_start, getattr(entry, "launch_start_ns", entry.start_ns))
    cmd.cycles += device_report.command_cycles(entry, clock_ghz)
    cmd.flops += entry.flops
    cmd.nbytes += entry.nbytes
    cmd.energy += getattr(entry, "energy_j", 0.0) or 0.0
    cmd.throttled = cmd.throttled or device_report.is_throttled(entry, top_clock)
    cmd.fraction += _fraction_of_peak(entry, entry_peaks, seconds) * seconds
    if cmd.bound is None or seconds > max(e.end_ns - e.start_ns for e in cmd.entries) / 1e9:
        cmd.bound = device_report.command_bound(entry, entry_peaks)
    cmd.entries.append(entry)


def _fraction_of_peak(entry, peaks: dict, seconds: float) -> float:
    """How close one record ran to its engine's compute ceiling or its path's bandwidth."""
    cls = device_report.engine_class(entry)
    compute = peaks["matrix_flops"] if cls == "matrix" else peaks["vector_flops"] if cls == "vector" else 0.0
    traffic = device_report.command_traffic(entry)[0]
    return device_report.fraction_of_peak(entry.flops, traffic, seconds, compute,
                                          device_report.path_bandwidth(peaks, entry))


def _dtype(entry) -> str:
    return getattr(entry, "dtype", "") or ""
