"""Collectives in the Chrome/Perfetto trace: this rank's events, and their merge across ranks."""
from __future__ import annotations

import json

from torch_plugin.distributed.backend import collective_records


COLLECTIVE_TID = 9000  # the "collectives" lane of a rank's process


def collective_trace_events(pid: int | None = None) -> list[dict]:
    """This process's modelled collectives as Chrome trace events (microseconds of simulated time):
    one complete event per collective on a "collectives" lane (tid COLLECTIVE_TID of ``pid``, default: the rank),
    and, when a rank waited for a later one, a "wait" event before it."""
    events = []
    lanes = set()
    for r in collective_records():
        p = r["rank"] if pid is None else pid
        if p not in lanes:
            lanes.add(p)
            events.append({"ph": "M", "name": "thread_name", "pid": p, "tid": COLLECTIVE_TID,
                           "args": {"name": "collectives"}})
        args = {k: r[k] for k in ("op", "algorithm", "bytes", "ranks", "seq", "group", "host_copy_bytes")}
        if r["wait_ns"] > 0:
            events.append({"name": f"wait for peers ({r['op']})", "cat": "collective", "ph": "X", "pid": p,
                           "tid": COLLECTIVE_TID, "ts": r["ready_ns"] / 1e3, "dur": r["wait_ns"] / 1e3,
                           "args": {"seq": r["seq"]}})
        events.append({"name": f"{r['op']} [{r['algorithm']}]", "cat": "collective", "ph": "X", "pid": p,
                       "tid": COLLECTIVE_TID, "ts": r["start_ns"] / 1e3, "dur": r["duration_ns"] / 1e3,
                       "args": args})
    return events


def add_collectives_to_trace(path, rank: int | None = None) -> None:
    """Appends this rank's collective events to the Chrome trace at ``path`` (as the profiler or
    ``torch.emu.export_timeline`` wrote it), in place."""
    with open(path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    pids = {e.get("pid") for e in events if "pid" in e}
    pid = next(iter(pids)) if len(pids) == 1 else rank
    events.extend(collective_trace_events(pid))
    with open(path, "w") as f:
        json.dump(data if isinstance(data, dict) else {"traceEvents": events}, f)
