"""Projected-performance report from the runtime's and firmware's telemetry.

Projected time is modelled time (host clock and device clock of the DES), never
wall time. Per kernel it lists the count, modelled busy time, bytes moved,
flops, and the roofline bottleneck: compute-bound when the kernel's arithmetic
intensity exceeds the device's machine balance, memory-bound otherwise. Ops that
ran on the host CPU (the torch plugin's host fallback) are shown with their host
time, charged by the host cost model of ``runtime/host_clock.py``.

The second half is the device side of ``torch.emu.profile()`` (torch_plugin/profile.py):
lanes, utilisation, peaks, bounds and the verdict from the firmware's trace records, and
the what-if descriptions of its ``--sweep``. See docs/profiling.md.
"""
from __future__ import annotations

import json


def device_peaks(config) -> dict:
    device = config.device
    matrix_flops = 2 * device.matrix_engine.rows * device.matrix_engine.cols * device.clock_ghz * 1e9
    vector_flops = device.vector_engine.lanes * device.clock_ghz * 1e9
    bandwidth = device.hbm.bandwidth_gb_per_s * 1e9
    return {"matrix_flops": matrix_flops, "vector_flops": vector_flops, "hbm_bytes_per_s": bandwidth}


def kernel_rows(telemetry: dict, config) -> list[dict]:
    peaks = device_peaks(config)
    rows = []
    for name, stats in sorted(telemetry["kernel_stats"].items(), key=lambda kv: -kv[1].busy_ns):
        peak = peaks["matrix_flops"] if name.startswith("matmul") else peaks["vector_flops"]
        intensity = stats.flops / stats.nbytes if stats.nbytes else float("inf")
        balance = peak / peaks["hbm_bytes_per_s"]
        if name.startswith("memcpy"):
            bottleneck = "link" if name in ("memcpy_h2d", "memcpy_d2h", "memcpy_p2p") else "memory"
        else:
            bottleneck = "compute" if intensity > balance else "memory"
        seconds = stats.busy_ns / 1e9
        rows.append({
            "kernel": name, "count": stats.count, "busy_us": stats.busy_ns / 1e3,
            "bytes": stats.nbytes, "flops": stats.flops,
            "gbytes_per_s": stats.nbytes / seconds / 1e9 if seconds else 0.0,
            "gflops_per_s": stats.flops / seconds / 1e9 if seconds else 0.0,
            "bottleneck": bottleneck,
            "energy_j": getattr(stats, "energy_j", 0.0), "throttled": getattr(stats, "throttled", 0),
        })
    return rows


def format_report(runtime) -> str:
    config = runtime.config
    lines = [f"Projected performance on {config.device.name} x{config.num_devices} "
             f"(preset {config.name}), modelled time"]
    host_ns = runtime.clock.now_ns
    device_ns = runtime.driver.now_ns
    lines.append(f"  host time      {host_ns / 1e3:12.1f} us  ({runtime.clock.api_calls} runtime calls, "
                 f"{runtime.clock.waited_ns / 1e3:.1f} us waiting for the device)")
    clock = runtime.clock
    if clock.host_work_calls:
        # Ops the torch plugin ran on the host CPU (host fallback), by the host cost model.
        share = 100 * clock.host_work_ns / host_ns if host_ns else 0.0
        lines.append(f"  host fallback: {clock.host_work_calls} ops, {clock.host_work_ns / 1e3:.1f} us "
                     f"of modelled host time ({share:.1f}% of host time)")
    lines.append(f"  host time by cause: {clock.api_ns / 1e3:.1f} us launch overhead ({clock.api_calls} calls "
                 f"{clock.call_ns / 1e3:.1f} us, {clock.cached_allocs} cached allocations "
                 f"{clock.cached_alloc_total_ns / 1e3:.1f} us, {clock.encoded_commands} commands encoded "
                 f"{clock.encode_ns / 1e3:.1f} us), host work {clock.host_work_ns / 1e3:.1f} us, "
                 f"{clock.sync_wait_ns / 1e3:.1f} us synchronising ({clock.sync_waits} waits), "
                 f"{clock.backpressure_wait_ns / 1e3:.1f} us ring back-pressure ({clock.backpressure_waits} waits), "
                 f"{clock.interrupt_stolen_ns / 1e3:.1f} us servicing interrupts ({clock.interrupts} interrupts)")
    lines.append(f"  device time    {device_ns / 1e3:12.1f} us")
    for index in range(runtime.device_count):
        if not runtime.has_context(index):
            continue
        telemetry = runtime.driver.telemetry(index)
        busy = telemetry["engines_busy_ns"]
        span = max(device_ns, 1e-9)
        lines.append(f"  emu:{index} utilisation: " + ", ".join(
            f"{unit} {100 * ns / span:.1f}%" for unit, ns in busy.items()))
        rows = kernel_rows(telemetry, config)
        if rows:
            lines.append(f"  {'kernel':<22}{'count':>7}{'busy us':>12}{'GB/s':>9}{'GFLOP/s':>10}{'energy uJ':>12}"
                         f"  bottleneck")
            for r in rows:
                lines.append(f"  {r['kernel']:<22}{r['count']:>7}{r['busy_us']:>12.1f}{r['gbytes_per_s']:>9.1f}"
                             f"{r['gflops_per_s']:>10.1f}{r['energy_j'] * 1e6:>12.2f}  {r['bottleneck']}"
                             + (f" (throttled x{r['throttled']})" if r["throttled"] else ""))
            power = config.device.power
            energy = sum(r["energy_j"] for r in rows)
            throttled = sum(r["throttled"] for r in rows)
            lines.append(f"  emu:{index} energy: {energy:.6g} J in its commands (power mode {power.default_mode}, "
                         f"cap {power.mode().power_cap_w:g} W; {throttled} commands throttled by the cap)")
    if host_ns > 0 and device_ns > 0:
        # The profiler's rule (docs/profiling.md#verdict), with the busiest device's summed engine
        # time standing for its busy time.
        busiest = max((sum(runtime.driver.telemetry(i)["engines_busy_ns"].values())
                       for i in range(runtime.device_count) if runtime.has_context(i)), default=0.0)
        dispatch = clock.api_ns + clock.interrupt_stolen_ns
        bound = verdict(busiest, clock.host_work_ns, dispatch)
        lines.append(f"  verdict: {bound} (device busy {busiest / 1e3:.1f} us, host dispatch {dispatch / 1e3:.1f} us, "
                     f"host work {clock.host_work_ns / 1e3:.1f} us)")
    return "\n".join(lines)


def chrome_trace(runtime) -> dict:
    """The firmware's timeline as a Chrome/Perfetto trace (open it at ui.perfetto.dev).

    One process per device, one track per unit (dma, vector_engine, matrix_engine); each
    command is a complete event in modelled microseconds, with its ring, sequence number,
    bytes and flops. The firmware keeps the most recent entries (see firmware/scheduler.py).
    """
    events = []
    for index in range(runtime.device_count):
        if not runtime.has_context(index):
            continue
        events.append({"name": "process_name", "ph": "M", "pid": index, "args": {"name": f"emu:{index}"}})
        units = {}
        for entry in runtime.driver.telemetry(index)["trace"]:
            tid = units.setdefault(entry.engine, len(units))
            events.append({
                "name": entry.name, "ph": "X", "pid": index, "tid": tid,
                "ts": entry.start_ns / 1e3, "dur": (entry.end_ns - entry.start_ns) / 1e3,
                "args": {"ring": entry.ring, "seq": entry.seq, "bytes": entry.nbytes, "flops": entry.flops},
            })
        for unit, tid in units.items():
            events.append({"name": "thread_name", "ph": "M", "pid": index, "tid": tid, "args": {"name": unit}})
        trace = runtime.driver.telemetry(index)["trace"]
        if trace:
            t0, t1 = min(e.start_ns for e in trace), max(e.end_ns for e in trace)
            events.extend(power_counter_events(power_track(trace, runtime.config, t0, t1).get(index, []),
                                               index, lambda ns: ns / 1e3))
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_chrome_trace(runtime, path) -> None:
    import json
    with open(path, "w") as out:
        json.dump(chrome_trace(runtime), out)


# -- the profiler's device side (torch_plugin/profile.py) ------------------------------------
#
# Everything here works from the firmware's trace records after the fact (no per-command work
# while the profiled code runs). A record (``abi.TraceEntry``) carries, besides the command's
# seq, name, engine class, [start_ns, end_ns], bytes and flops, the cost model's terms when the
# firmware provides them: ``bound``, ``cycles``, ``cores``, ``tiling``, ``engines`` (the lanes it
# occupied, e.g. "dev0.core1.matrix", "dev0.dma2", "dev0.host_link.h2d", "dev0-dev1.link",
# "dev0.cp" for its launch on the command processor, "dev0.hbm"), ``dtype`` and
# ``launch_start_ns``/``launch_end_ns``. A record without them (an older firmware) gets lanes
# derived from its engine class and a ``bound`` computed from its roofline terms.

BOUNDS = ("compute", "memory", "latency")
_LEGACY_DMA = "dma*"  # an older record's DMA lane: split into dma0, dma1... by overlap

# Element type -> the key of MatrixRates / VectorRates (emulator/config.py) that prices it.
_MATRIX_RATE = {"bool": "int8", "uint8": "int8", "int8": "int8", "int16": "int32", "int32": "int32",
                "int64": "int32", "uint16": "int32", "uint32": "int32", "uint64": "int32",
                "float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "float64": "float64",
                "complex64": "float32", "complex128": "float64"}
_VECTOR_RATE = {"bool": "int8", "uint8": "int8", "int8": "int8", "int16": "int32", "int32": "int32",
                "uint16": "int32", "uint32": "int32", "int64": "int64", "uint64": "int64",
                "float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "float64": "float64",
                "complex64": "float64", "complex128": "float64"}


def _rate(rates, dtype: str | None, table: dict) -> float:
    """Per-PE (per-lane) rate for ``dtype``; the best rate when the dtype is unknown; 1.0 for a
    description without per-dtype rates."""
    if rates is None:
        return 1.0
    key = table.get(dtype or "")
    if key is None or not hasattr(rates, key):
        return max(getattr(rates, k) for k in set(table.values()) if hasattr(rates, k))
    return getattr(rates, key)


def engine_peaks(config, dtype: str | None = None) -> dict:
    """One device's ceilings for ``dtype``: matrix and vector FLOP/s of all its cores (a MAC is 2
    flops), and the bytes/s of HBM, of its host link (per direction) and of a device pair's links."""
    device = config.device
    cores = getattr(device, "cores", 1)
    hz = device.clock_ghz * 1e9
    me, ve = device.matrix_engine, device.vector_engine
    matrix = 2 * me.rows * me.cols * _rate(getattr(me, "macs_per_cycle", None), dtype, _MATRIX_RATE) * hz * cores
    vector = ve.lanes * _rate(getattr(ve, "ops_per_cycle", None), dtype, _VECTOR_RATE) * hz * cores
    links = getattr(config.interconnect, "links_per_pair", 1)
    return {"matrix_flops": matrix, "vector_flops": vector,
            "hbm_bytes_per_s": device.hbm.bandwidth_gb_per_s * 1e9,
            "host_link_bytes_per_s": config.host_link.bandwidth_gb_per_s * 1e9,
            "interconnect_bytes_per_s": config.interconnect.bandwidth_gb_per_s * 1e9 * links}


def engine_class(entry) -> str:
    """"matrix", "vector" or "dma": the kind of unit that did a command's work."""
    engine = entry.engine
    if engine.startswith("matrix"):
        return "matrix"
    if engine.startswith("vector"):
        return "vector"
    return "dma"


def _copy_kind(name: str) -> str | None:
    return name[len("memcpy_"):] if name.startswith("memcpy_") else None


def command_traffic(entry) -> tuple[float, float]:
    """(bytes a command moved, the bandwidth in bytes/s of the path it moved them on)."""
    kind = _copy_kind(entry.name)
    return entry.nbytes * (2 if kind == "d2d" else 1), kind


def path_bandwidth(peaks: dict, entry) -> float:
    kind = _copy_kind(entry.name)
    if kind in ("h2d", "d2h"):
        return peaks["host_link_bytes_per_s"]
    if kind == "p2p":
        return peaks["interconnect_bytes_per_s"]
    return peaks["hbm_bytes_per_s"]


def roofline_terms(entry, peaks: dict) -> tuple[float, float]:
    """(compute seconds, memory seconds) of a command at the ceilings of the engines it used."""
    cls = engine_class(entry)
    peak = peaks["matrix_flops"] if cls == "matrix" else peaks["vector_flops"]
    compute = entry.flops / peak if cls != "dma" and peak else 0.0
    traffic, _ = command_traffic(entry)
    return compute, traffic / path_bandwidth(peaks, entry)


def command_bound(entry, peaks: dict) -> str:
    """The firmware's ``bound`` verbatim when the record has it; for an older record, the larger
    roofline term, or "latency" when neither explains half the command's time."""
    bound = getattr(entry, "bound", None)
    if bound:
        return bound
    compute, memory = roofline_terms(entry, peaks)
    seconds = (entry.end_ns - entry.start_ns) / 1e9
    if max(compute, memory) < 0.5 * seconds:
        return "latency"
    return "compute" if compute >= memory else "memory"


def command_cycles(entry, clock_ghz: float) -> int:
    cycles = getattr(entry, "cycles", None)
    return int(cycles) if cycles is not None else round((entry.end_ns - entry.start_ns) * clock_ghz)


def fraction_of_peak(flops: float, traffic: float, seconds: float, flops_peak: float, bandwidth: float) -> float:
    """How close work ran to its binding ceiling: max(achieved FLOP/s / peak FLOP/s, achieved bytes/s /
    bandwidth), at most 1.0 (byte counts include operands a kernel may reuse from its scratchpad)."""
    if seconds <= 0:
        return 0.0
    compute = flops / seconds / flops_peak if flops_peak and flops else 0.0
    memory = traffic / seconds / bandwidth if bandwidth and traffic else 0.0
    return min(1.0, max(compute, memory))


def command_lanes(entry) -> list[tuple[str, float, float]]:
    """(lane, start_ns, end_ns) for each unit the command occupied. The command processor's lane
    ("devN.cp") holds the launch, [launch_start_ns, launch_end_ns]; "devN.hbm" is left out (its
    occupancy is bandwidth, see ``hbm_busy_ns``)."""
    start, end = entry.start_ns, entry.end_ns
    engines = getattr(entry, "engines", None)
    if engines:
        lanes = []
        for lane in engines:
            if lane.endswith(".cp"):
                lanes.append((lane, entry.launch_start_ns, entry.launch_end_ns))
            elif not lane.endswith(".hbm"):
                lanes.append((lane, start, end))
        return lanes
    d = entry.device
    cls = engine_class(entry)
    if cls != "dma":
        return [(f"dev{d}.core0.{cls}", start, end)]
    lanes = [(f"dev{d}.{_LEGACY_DMA}", start, end)]
    kind = _copy_kind(entry.name)
    if kind in ("h2d", "d2h"):
        lanes.append((f"dev{d}.host_link.{kind}", start, end))
    elif kind == "p2p":
        lanes.append((f"dev{d}.interconnect", start, end))
    return lanes


def split_overlaps(spans: list, base: str, legacy_dma: bool) -> dict:
    """Assigns overlapping spans of one lane to sub-lanes (first free, as DMA engines are taken),
    so that every lane of a timeline holds disjoint events. Returns {sub-lane name: [span, ...]}.
    ``spans`` are (start, end, payload) tuples."""
    ends: list[float] = []
    out: dict[str, list] = {}
    for span in sorted(spans, key=lambda s: (s[0], s[1])):
        for k, free_at in enumerate(ends):
            if free_at <= span[0]:
                break
        else:
            k = len(ends)
            ends.append(0.0)
        ends[k] = span[1]
        name = f"{base}{k}" if legacy_dma else (base if k == 0 else f"{base}~{k}")
        out.setdefault(name, []).append(span)
    return out


def union_ns(intervals, lo: float, hi: float) -> float:
    """Length of the union of [start, end] intervals, clipped to [lo, hi]."""
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(intervals):
        start, end = max(start, lo), min(end, hi)
        if end <= start:
            continue
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        elif end > cur_end:
            cur_end = end
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def hbm_busy_ns(entries, config) -> dict:
    """{"devN.hbm": ns}: the time each device's HBM needed for the commands' bytes at its sustained
    bandwidth (HBM is shared by bandwidth, not held by one command)."""
    hbm = config.device.hbm
    bytes_per_ns = hbm.bandwidth_gb_per_s * min(getattr(hbm, "efficiency", 1.0), 1.0)
    busy: dict[str, float] = {}
    for entry in entries:
        kind = _copy_kind(entry.name)
        if kind in ("h2d", "d2h", "p2p"):
            traffic = entry.nbytes          # one side of the transfer is this device's HBM
        else:
            traffic = command_traffic(entry)[0]
        lane = f"dev{entry.device}.hbm"
        busy[lane] = busy.get(lane, 0.0) + traffic / bytes_per_ns
    return busy


def lane_spans(entries) -> dict:
    """{lane: [(start, end, entry), ...]} with overlapping spans of a lane split into sub-lanes
    (older records' DMA lane into dma0, dma1...)."""
    raw: dict[str, list] = {}
    for entry in entries:
        for lane, start, end in command_lanes(entry):
            raw.setdefault(lane, []).append((start, end, entry))
    lanes: dict[str, list] = {}
    for lane, spans in raw.items():
        legacy = lane.endswith(_LEGACY_DMA)
        base = lane[:-1] if legacy else lane
        lanes.update(split_overlaps(spans, base, legacy))
    return lanes


def engine_utilization(entries, config, t0_ns: float, t1_ns: float, spans_by_lane: dict | None = None) -> dict:
    """{lane: busy fraction of [t0, t1]} for every lane the commands used (each <= 1.0: the union of
    a lane's busy intervals, clipped to the window), HBM by bandwidth. ``spans_by_lane``: the
    commands' ``lane_spans`` if already computed."""
    span = t1_ns - t0_ns
    if span <= 0:
        return {}
    out = {}
    for lane, spans in sorted((spans_by_lane if spans_by_lane is not None else lane_spans(entries)).items()):
        out[lane] = union_ns([(s, e) for s, e, _ in spans], t0_ns, t1_ns) / span
    for lane, ns in sorted(hbm_busy_ns(entries, config).items()):
        out[lane] = min(1.0, ns / span)
    return out


def device_busy_ns(entries, t0_ns: float, t1_ns: float, spans_by_lane: dict | None = None) -> float:
    """The time in [t0, t1] during which at least one unit of a device worked on these commands."""
    if spans_by_lane is not None:
        intervals = [(s, e) for spans in spans_by_lane.values() for s, e, _ in spans]
    else:
        intervals = [(s, e) for entry in entries for _, s, e in command_lanes(entry)]
    return union_ns(intervals, t0_ns, t1_ns)


# -- energy and power (emulator/power.py computes each command's energy; docs/profiling.md) --------

POWER_COUNTER = "power (W)"


def _mode_static_w(config) -> float:
    """A device's static power at the top of its power mode (what it draws while idle)."""
    power = config.device.power
    mode = power.mode()
    volts = mode.voltages_v[0] if mode.voltages_v else power.nominal_voltage_v
    return power.static_w * volts / power.nominal_voltage_v


def mode_top_clock_ghz(config) -> float:
    mode = config.device.power.mode()
    return mode.clocks_ghz[0] if mode.clocks_ghz else config.device.clock_ghz


def dynamic_j(entry) -> float:
    """A command's energy beyond the static power it drew while it ran (0 for an older record)."""
    energy = getattr(entry, "energy_j", None)
    if energy is None:
        return 0.0
    return max(0.0, energy - entry.static_w * (entry.end_ns - entry.start_ns) * 1e-9)


def is_throttled(entry, top_clock_ghz: float) -> bool:
    clock = getattr(entry, "clock_ghz", None)
    return clock is not None and clock < top_clock_ghz - 1e-9


def _above_static_w(entry, static: float, duration_ns: float) -> float:
    """What a command adds to the device's idle power while it runs: its dynamic power, less the
    static power its lower voltage saves when the cap throttled it."""
    saved = static - entry.static_w if getattr(entry, "static_w", None) is not None else 0.0
    return dynamic_j(entry) / (duration_ns * 1e-9) - max(saved, 0.0)


def power_track(entries, config, t0_ns: float, t1_ns: float) -> dict:
    """{device: [(t_ns, watts), ...]}: each device's modelled power over [t0, t1] as a step function
    (the value holds until the next point): its static power at the mode's top voltage plus the
    dynamic power (dynamic energy / duration) of every command running (a throttled command's
    lower static power replacing the top voltage's). A command of zero duration adds its energy
    to the totals but no step."""
    static = _mode_static_w(config)
    steps: dict[int, list] = {}
    for entry in entries:
        duration = entry.end_ns - entry.start_ns
        if duration <= 0:
            continue
        watts = _above_static_w(entry, static, duration)
        lo, hi = max(entry.start_ns, t0_ns), min(entry.end_ns, t1_ns)
        if watts and hi > lo:
            steps.setdefault(entry.device, []).extend(((lo, watts), (hi, -watts)))
    devices = {e.device for e in entries}
    tracks = {}
    for device in sorted(devices):
        level, points = static, [(t0_ns, static)]
        for t, delta in sorted(steps.get(device, ())):
            level += delta
            if points[-1][0] == t:
                points[-1] = (t, level)
            else:
                points.append((t, level))
        if points[-1][0] < t1_ns:
            points.append((t1_ns, points[-1][1]))
        tracks[device] = [(t, max(w, 0.0)) for t, w in points]   # float residue never dips below 0
    return tracks


def power_counter_events(points, pid: int, us) -> list:
    """Chrome "C" (counter) events of one device's power track (``us``: ns -> trace microseconds)."""
    return [{"name": POWER_COUNTER, "cat": "power", "ph": "C", "pid": pid, "ts": us(t), "args": {"W": round(w, 3)}}
            for t, w in points]


def energy_summary(entries, config, t0_ns: float, t1_ns: float) -> dict:
    """Energy and power of the devices that ran ``entries`` over [t0, t1]: ``energy_j`` (every
    command's dynamic energy plus each device's static power over the whole window, at the voltage
    each command ran at while it ran: the integral of ``power_track``),
    ``average_power_w`` (energy / window), ``peak_power_w`` (the highest summed power of the
    devices), ``throttled_commands`` (commands the power cap ran below the mode's top clock),
    ``power_mode`` and ``power_cap_w``."""
    window = max(t1_ns - t0_ns, 0.0) * 1e-9
    devices = {e.device for e in entries}
    static = _mode_static_w(config)
    # The track's integral: static power over the window, plus what each command added to it.
    energy = static * window * len(devices) + sum(
        _above_static_w(e, static, e.end_ns - e.start_ns) * (min(e.end_ns, t1_ns) - max(e.start_ns, t0_ns)) * 1e-9
        for e in entries if e.end_ns > e.start_ns and min(e.end_ns, t1_ns) > max(e.start_ns, t0_ns))
    energy += sum(dynamic_j(e) for e in entries if e.end_ns <= e.start_ns)
    tracks = power_track(entries, config, t0_ns, t1_ns)
    peak = 0.0
    if tracks:   # the devices' tracks summed at every step of any of them
        times = sorted({t for points in tracks.values() for t, _ in points})
        cursor = {d: 0 for d in tracks}
        for t in times:
            total = 0.0
            for d, points in tracks.items():
                i = cursor[d]
                while i + 1 < len(points) and points[i + 1][0] <= t:
                    i += 1
                cursor[d] = i
                total += points[i][1]
            peak = max(peak, total)
    top = mode_top_clock_ghz(config)
    power = config.device.power
    return {"energy_j": energy, "average_power_w": energy / window if window else 0.0, "peak_power_w": peak,
            "throttled_commands": sum(1 for e in entries if is_throttled(e, top)),
            "power_mode": power.default_mode, "power_cap_w": power.mode().power_cap_w}


VERDICTS = ("device-bound", "host-bound", "launch-bound")


def verdict(device_ns: float, host_work_ns: float, dispatch_ns: float) -> str:
    """The largest of three projected terms names the bottleneck (docs/profiling.md):
    device busy time -> "device-bound"; host work (host-fallback ops on the CPU) -> "host-bound";
    dispatch overhead (runtime API calls + interrupt servicing on the host) -> "launch-bound".
    Ties go to the device, then to host work."""
    if device_ns >= host_work_ns and device_ns >= dispatch_ns:
        return "device-bound"
    return "host-bound" if host_work_ns >= dispatch_ns else "launch-bound"


# -- what-if descriptions (torch_plugin.profile's --sweep) -----------------------------------------
def current_description(settings=None) -> dict:
    """The hardware description the settings (default: the environment) select, as nested dicts,
    without powering a system on."""
    from driver import DriverError, describe_configuration
    from runtime.runtime import translate_driver_error
    from runtime.settings import Settings
    settings = settings or Settings.from_environment()
    try:
        return describe_configuration(settings.load_config())
    except DriverError as err:
        raise translate_driver_error(err) from err


def with_field(description: dict, field: str, value) -> dict:
    """A copy of ``description`` with the dotted ``field`` (e.g. "device.hbm.bandwidth_gb_per_s")
    set to ``value``; an error naming the field if the description has no such field."""
    from runtime.errors import InvalidValueError
    parts = field.split(".")
    out = _deep_copy(description)
    table = out
    for depth, part in enumerate(parts):
        if not isinstance(table, dict) or part not in table:
            where = ".".join(parts[:depth]) or "the top level"
            known = ", ".join(sorted(table)) if isinstance(table, dict) else "none: it is not a table"
            raise InvalidValueError(f"hardware field {field!r}: {where} has no field {part!r} (known: {known})")
        if depth == len(parts) - 1:
            if isinstance(table[part], dict):
                raise InvalidValueError(f"hardware field {field!r} is a table; name one of its fields "
                                        f"({', '.join(sorted(table[part]))})")
            table[part] = value
        else:
            table = table[part]
    return out


def _deep_copy(data):
    return {k: _deep_copy(v) for k, v in data.items()} if isinstance(data, dict) else data


def description_toml(description: dict) -> str:
    """TOML text of a nested description (tables mirror the dataclasses; emulator/config.py)."""
    lines: list[str] = []

    def value(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            if v != v:
                return "nan"
            if v in (float("inf"), float("-inf")):
                return "inf" if v > 0 else "-inf"
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        raise TypeError(f"cannot write {v!r} to TOML")

    def table(prefix: str, data: dict) -> None:
        scalars = [(k, v) for k, v in data.items() if not isinstance(v, dict)]
        if prefix and scalars:
            lines.append(f"\n[{prefix}]")
        for k, v in scalars:
            lines.append(f"{k} = {value(v)}")
        for k, v in data.items():
            if isinstance(v, dict):
                table(f"{prefix}.{k}" if prefix else k, v)

    table("", description)
    return "\n".join(lines).lstrip("\n") + "\n"


def check_description_file(path) -> str:
    """Loads a TOML description as the runtime would (EMU_CONFIG); returns its name. A bad field
    raises the runtime's configuration error, which names it."""
    from driver import DriverError
    from runtime.runtime import translate_driver_error
    from runtime.settings import Settings
    try:
        return Settings(config_path=str(path)).load_config().name
    except DriverError as err:
        raise translate_driver_error(err) from err
