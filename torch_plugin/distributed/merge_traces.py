"""Merges the ranks' Chrome traces into one file, one process lane per rank.

    python -m torch_plugin.distributed.merge_traces out.json rank0.json rank1.json ...

The n-th input is rank n. Each input is generic Chrome trace JSON (an object with
``"traceEvents"``, or a bare list of events). Every event of rank r moves to process ``r``
(when a rank's trace has several pids, each (pid, tid) becomes a named thread of that process, so the
lanes inside a rank survive), and
``process_name`` / ``process_sort_index`` metadata name the lane "rank r". All ranks share one
time base (simulated time agrees across ranks), so timestamps are kept as they are.
"""
from __future__ import annotations

import argparse
import json
import sys


def _events(data, path) -> list:
    if isinstance(data, dict) and isinstance(data.get("traceEvents"), list):
        return data["traceEvents"]
    if isinstance(data, list):
        return data
    raise ValueError(f"{path}: not a Chrome trace (expected an object with a 'traceEvents' list, or a list)")


def merge(traces: list, names: list[str] | None = None) -> dict:
    """``traces``: the ranks' parsed traces, rank order. Returns the merged trace object."""
    merged, other = [], {}
    for rank, data in enumerate(traces):
        events = _events(data, names[rank] if names else f"trace {rank}")
        pids = sorted({str(e.get("pid", 0)) for e in events})
        several = len(pids) > 1
        pid_names = {str(e.get("pid", 0)): e.get("args", {}).get("name") for e in events
                     if e.get("ph") == "M" and e.get("name") == "process_name"}
        tid_of: dict = {}
        for e in events:
            if e.get("ph") == "M" and e.get("name") in ("process_name", "process_sort_index", "process_labels"):
                continue
            e = dict(e)
            pid, tid = str(e.get("pid", 0)), e.get("tid", 0)
            if several:  # a rank's several processes become threads of its lane, named after them
                if (pid, tid) not in tid_of:
                    tid_of[(pid, tid)] = len(tid_of) + 1
                    merged.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid_of[(pid, tid)],
                                   "args": {"name": f"{pid_names.get(pid) or pid}/{tid}"}})
                tid = tid_of[(pid, tid)]
                if e.get("ph") == "M" and e.get("name") == "thread_name":
                    e["args"] = {"name": f"{pid_names.get(pid) or pid}/{e.get('args', {}).get('name', tid)}"}
            e["pid"], e["tid"] = rank, tid
            merged.append(e)
        merged.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}})
        merged.append({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
        if isinstance(data, dict):
            for k, v in data.items():
                if k != "traceEvents":
                    other.setdefault(k, v)
    out = dict(other)
    out["traceEvents"] = merged
    return out


def merge_files(out_path: str, paths: list[str]) -> dict:
    traces = []
    for p in paths:
        try:
            with open(p) as f:
                traces.append(json.load(f))
        except json.JSONDecodeError as err:
            raise ValueError(f"{p}: not JSON: {err}") from None
    merged = merge(traces, paths)
    with open(out_path, "w") as f:
        json.dump(merged, f)
    return merged


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_plugin.distributed.merge_traces",
                                     description="Merge per-rank Chrome traces, one process lane per rank.")
    parser.add_argument("out", help="merged trace to write")
    parser.add_argument("traces", nargs="+", help="rank 0's trace, rank 1's trace, ...")
    args = parser.parse_args(argv)
    try:
        merged = merge_files(args.out, args.traces)
    except (OSError, ValueError) as err:
        print(f"merge_traces: {err}", file=sys.stderr)
        return 2
    print(f"{args.out}: {len(merged['traceEvents'])} events from {len(args.traces)} ranks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
