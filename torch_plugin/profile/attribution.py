"""Which op a profiled block's commands and host work belong to, and the op rows made of them.

A command belongs to the innermost op record that lists its seq; a host-fallback op's host work
is its own, less that of the ops nested in it. ``op_rows`` turns each op record into its rows
(a host row for a host-fallback op, a device row for the commands it submitted itself) and each
command no op submitted into a row of its own, in program order. Leaves out the block's totals
(summary.py) and reading the trace (commands.py).
"""
from __future__ import annotations

from runtime import report as device_report
from torch_plugin.profile.report import HOST_PATH, OUTSIDE_OPS, RUNTIME_PATH, OpRow


def record_start_ns(record, t1_ns: float) -> float:
    """When an op record began on the host clock (its end when the clock was not noted)."""
    return record.t0_ns if record.t0_ns is not None else t1_ns


def owners(records) -> dict:
    """seq -> index in ``records`` (Profile._records) of the innermost op that submitted it
    (records arrive in the order ops end, so the first record that lists a seq is the innermost)."""
    owner = {}
    for index, (record, _, _) in enumerate(records):
        for seq in record.seqs:
            owner.setdefault(seq, index)
    return owner


def own_seqs(owner: dict) -> dict:
    """index -> [the seqs that op record submitted itself] (the inverse of ``owners``)."""
    own: dict[int, list] = {}
    for seq, index in owner.items():
        own.setdefault(index, []).append(seq)
    return own


def own_host_work(records) -> list:
    """Each record's host work (ns, flops, bytes), less that of the ops nested in it."""
    totals = []
    for record, t1, end in records:
        start = record.host_work0 or end
        totals.append(tuple(b - a for a, b in zip(start, end)))
    own = list(totals)
    open_children: dict = {}  # thread -> [(index, t0)] of ended records not yet adopted
    for index, (record, t1, _) in enumerate(records):
        t0 = record_start_ns(record, t1)
        pending = open_children.setdefault(record.thread, [])
        while pending and pending[-1][1] >= t0:
            child, _ = pending.pop()
            own[index] = tuple(a - b for a, b in zip(own[index], totals[child]))
        pending.append((index, t0))
    return own


def op_rows(analysis) -> tuple[list, int]:
    """(the block's OpRows in program order, the number of host-fallback op instances)."""
    prof = analysis.prof
    rows: list[tuple] = []   # (sort key, OpRow)
    host_work = own_host_work(prof._records)
    host = analysis.config.host
    fallbacks = 0
    for index, (record, t1, _) in enumerate(prof._records):
        t0 = record_start_ns(record, t1)
        if record.path == HOST_PATH:
            fallbacks += 1
            rows.append(((t0, index, 0), _host_row(record, host_work[index], host)))
        seqs = sorted(analysis.own_seqs.get(index, ()))
        if seqs:
            rows.append(((t0, index, 1), device_row(analysis, record.op, record.shapes, _first(record.dtypes),
                                                     record.path, seqs)))
    for seq, _, t0, _, _ in prof._commands:
        if seq not in analysis.owner:
            rows.append(((t0, len(prof._records), seq), device_row(analysis, OUTSIDE_OPS, (), "", RUNTIME_PATH,
                                                                    [seq])))
    rows.sort(key=lambda r: r[0])
    return [row for _, row in rows], fallbacks


def _host_row(record, host_work: tuple, host) -> OpRow:
    """A host-fallback op's CPU work, against the host's own ceilings."""
    ns, flops, nbytes = host_work
    seconds = ns / 1e9
    fraction = device_report.fraction_of_peak(flops, nbytes, seconds, host.flops_per_s,
                                              host.memory_bandwidth_gb_per_s * 1e9)
    return OpRow(record.op, record.shapes, _first(record.dtypes), record.path, "host", ("host",), 0, seconds,
                 flops, nbytes, fraction, "host")


def device_row(analysis, op, shapes, dtype, path, seqs) -> OpRow:
    """The row of the commands ``seqs`` of one op (or of none: OUTSIDE_OPS)."""
    commands = [analysis.commands[s] for s in seqs if s in analysis.commands]
    kernels = []
    for seq in seqs:
        name = analysis.commands[seq].name if seq in analysis.commands else analysis.names.get(seq, "?")
        if name not in kernels:
            kernels.append(name)
    lanes = []
    for cmd in commands:
        lanes.extend(lane for lane in cmd.lanes if lane not in lanes)
    busy = [(c.busy_s, c) for c in commands]
    seconds = sum(b for b, _ in busy)
    longest = max(busy, key=lambda bc: bc[0])[1] if busy else None
    return OpRow(op, shapes, (longest.dtype if longest is not None and longest.dtype else dtype), path,
                 "+".join(kernels), tuple(lanes), sum(c.cycles for c in commands), seconds,
                 sum(c.flops for c in commands), sum(c.nbytes for c in commands),
                 sum(b * c.fraction for b, c in busy) / seconds if seconds else 0.0,
                 longest.bound if longest is not None else "latency",
                 sum(c.energy for c in commands), any(c.throttled for c in commands))


def _first(values) -> str:
    return values[0] if values else ""
