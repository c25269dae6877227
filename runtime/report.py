"""Projected-performance report from the runtime's and firmware's telemetry.

Projected time is modelled time (host clock and device clock of the DES), never
wall time. Per kernel it lists the count, modelled busy time, bytes moved,
flops, and the roofline bottleneck: compute-bound when the kernel's arithmetic
intensity exceeds the device's machine balance, memory-bound otherwise. Ops that
ran on the host CPU (the torch plugin's host fallback) are shown with their host
time, charged by the host cost model of ``runtime/host_clock.py``.
"""
from __future__ import annotations


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
            lines.append(f"  {'kernel':<22}{'count':>7}{'busy us':>12}{'GB/s':>9}{'GFLOP/s':>10}  bottleneck")
            for r in rows:
                lines.append(f"  {r['kernel']:<22}{r['count']:>7}{r['busy_us']:>12.1f}{r['gbytes_per_s']:>9.1f}"
                             f"{r['gflops_per_s']:>10.1f}  {r['bottleneck']}")
    if host_ns > 0 and device_ns > 0:
        busiest = max((sum(runtime.driver.telemetry(i)["engines_busy_ns"].values())
                       for i in range(runtime.device_count) if runtime.has_context(i)), default=0.0)
        bound = "launch-bound (host time dominates)" if busiest < 0.5 * host_ns else "device-bound"
        if busiest < 0.5 * host_ns and runtime.clock.host_work_ns >= 0.5 * host_ns:
            bound = "host-bound (host fallback dominates host time)"
        lines.append(f"  verdict: {bound}")
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
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_chrome_trace(runtime, path) -> None:
    import json
    with open(path, "w") as out:
        json.dump(chrome_trace(runtime), out)
