"""Projecting a data-parallel step to many emulated devices without running them.

From one rank's measured step (simulated time) and its gradient bytes, the step on ``n`` devices is

    step(n) = compute + exposed(all_reduce of the gradients at n ranks)

Assumptions (docs/distributed.md):

- Weak scaling: every rank keeps its per-rank batch, so the compute part of the step (the measured
  step minus the collective time measured in it) does not change with ``n``.
- The gradients are all-reduced in DDP buckets of ``bucket_bytes`` (DDP's default 25 MiB); each
  bucket is one all_reduce, timed by ``cost_model.collective_cost`` at ``n`` ranks (its algorithm is
  chosen per bucket size, as NCCL would).
- Overlap: ``exposed = max(0, comm - overlap * compute)``; ``overlap=0`` (the default) assumes none of
  the communication hides behind backward, ``overlap=1`` the other bound. Both bounds are reported.
  The emulator overlaps a rank's collectives with its compute where the program allows, so the
  measured step lies between them.
- Devices beyond ``topology.devices_per_node`` sit in other nodes: the group's collectives then pay
  the node link (``interconnect.internode_*``), flat algorithms, no hierarchy. The collective's
  time is the device's own model (emulator/collectives.py, through the runtime).
- Stragglers, jitter and the optimizer step's own communication (none in DDP) are not modelled.
"""
from __future__ import annotations

from torch_plugin.distributed import cost_model

DEFAULT_RANKS = (8, 64, 512)
DDP_BUCKET_BYTES = 25 * (1 << 20)


def _gradient_all_reduce_ns(grad_bytes: int, n: int, topo, bucket_bytes: int) -> tuple[float, str]:
    full, rest = divmod(int(grad_bytes), bucket_bytes)
    total, algos = 0.0, []
    if full:
        c = cost_model.collective_cost("all_reduce", bucket_bytes, n, topo)
        total += full * c.time_ns
        algos.append(c.algorithm)
    if rest:
        c = cost_model.collective_cost("all_reduce", rest, n, topo)
        total += c.time_ns
        algos.append(c.algorithm)
    return total, "+".join(dict.fromkeys(algos)) or "-"


def project_data_parallel(step_ns: float, grad_bytes: int, topology: cost_model.Topology,
                          ranks=DEFAULT_RANKS, measured_comm_ns: float = 0.0, overlap: float = 0.0,
                          bucket_bytes: int = DDP_BUCKET_BYTES, samples_per_rank: int | None = None) -> list[dict]:
    """One row per device count: ``ranks``, ``nodes``, ``algorithm``, ``all_reduce_ns``, ``step_ns``
    (with ``overlap``), ``step_ns_full_overlap``, ``efficiency`` (compute / step),
    ``samples_per_s`` (when ``samples_per_rank`` is given)."""
    if not step_ns > 0:
        raise ValueError(f"step_ns must be > 0, got {step_ns!r}")
    if not 0.0 <= overlap <= 1.0:
        raise ValueError(f"overlap must be in [0, 1], got {overlap!r}")
    if not 0.0 <= measured_comm_ns <= step_ns:
        raise ValueError(f"measured_comm_ns must be in [0, step_ns], got {measured_comm_ns!r}")
    if not bucket_bytes > 0:
        raise ValueError(f"bucket_bytes must be > 0, got {bucket_bytes!r}")
    compute = step_ns - measured_comm_ns
    rows = []
    for n in ranks:
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"device counts must be positive ints, got {n!r}")
        comm, algo = _gradient_all_reduce_ns(grad_bytes, n, topology, bucket_bytes)
        step = compute + max(0.0, comm - overlap * compute)
        per_node = topology.devices_per_node or n
        row = {"ranks": n, "nodes": -(-n // per_node), "algorithm": algo, "all_reduce_ns": comm,
               "step_ns": step, "step_ns_full_overlap": max(compute, comm), "efficiency": compute / step}
        if samples_per_rank:
            row["samples_per_s"] = samples_per_rank * n / (step * 1e-9)
        rows.append(row)
    return rows


def _merged(intervals) -> list:
    out = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def exposed_collective_ns(records, trace, t0_ns: float, t1_ns: float) -> float:
    """How much of ``[t0_ns, t1_ns]`` the collectives in ``records`` (``collective_records()``
    rows) kept the links busy while the device ran nothing else: the communication that compute did
    not hide. ``trace``: the device's ``abi.TraceEntry`` records (``Runtime.command_trace``); its
    collective commands do not count as compute."""
    comm = _merged((max(r["start_ns"], t0_ns), min(r["end_ns"], t1_ns)) for r in records)
    busy = _merged((max(e.start_ns, t0_ns), min(e.end_ns, t1_ns)) for e in trace
                   if not e.name.startswith("collective.") and e.end_ns > t0_ns and e.start_ns < t1_ns)
    exposed, j = 0.0, 0
    for a, b in comm:
        covered = 0.0
        while j < len(busy) and busy[j][1] <= a:
            j += 1
        k = j
        while k < len(busy) and busy[k][0] < b:
            covered += min(b, busy[k][1]) - max(a, busy[k][0])
            k += 1
        exposed += (b - a) - covered
    return exposed


def format_projection(rows: list[dict]) -> str:
    """The projection as a table."""
    head = f"{'devices':>8} {'nodes':>6} {'algorithm':>10} {'all_reduce':>12} {'step':>12} " \
           f"{'step(overlap)':>14} {'efficiency':>10}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['ranks']:>8} {r['nodes']:>6} {r['algorithm']:>10} {r['all_reduce_ns'] / 1e3:>10.1f}us "
                     f"{r['step_ns'] / 1e3:>10.1f}us {r['step_ns_full_overlap'] / 1e3:>12.1f}us "
                     f"{r['efficiency']:>9.1%}")
    return "\n".join(lines)
