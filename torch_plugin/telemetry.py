"""``with torch.emu.telemetry() as t:``: what ran how, for one block of code.

Inside the block every op instance is recorded with its path (native, composite,
decomposition, host_fallback, rejection; host_fallback_copies for the fallback's own
copies), the dtypes and shapes of its tensor operands, and the device kernels it
launched (``binary.add``, ``memcpy_d2h``..., the names of the firmware's kernel
statistics; an op that runs other ops lists theirs too). The block also counts host
synchronisations (a blocking copy, ``item()``, ``synchronize()``, an event wait: one
each, however many streams it waits for) and host<->device copies (count and bytes).
Ops and copies of every thread are recorded (backward runs on autograd's worker thread).

The same hooks feed ``torch.emu.profile()`` (torch_plugin/profile/): each launch, copy
and fill reports its command seq (the correlation id of the firmware trace) to the op
records open on its thread and to the observers, and while a profiler is open each op
record also notes the modelled host clock when it began.

Cost: nothing outside a block. The op wrappers read one module global
(``registry._observers``); the runtime's launch, memcpy and synchronize methods are
wrapped on the runtime object only while a block is open. Blocks may nest and overlap;
each sees everything that ran while it was open.
"""
from __future__ import annotations

import sys
import threading
from collections import Counter
from threading import get_ident
from math import prod

import torch

import runtime
from torch_plugin.ops import registry

_SPACE_KEYS = {(True, False): "host_to_device", (False, True): "device_to_host", (False, False): "device_to_device"}
_KERNEL_OF_COPY = {"host_to_device": "memcpy_h2d", "device_to_host": "memcpy_d2h", "device_to_device": "memcpy_d2d"}
# The runtime's host clock while a profiler is open (torch_plugin/profile/block.py), else None: op records
# then note when (modelled host time) they began and the host work charged so far.
_profile_clock = None


class OpRecord:
    """One op instance while it runs: its name, operands, the kernels it launched, its path."""
    __slots__ = ("op", "dtypes", "shapes", "kernels", "path", "seqs", "t0_ns", "host_work0", "thread")

    def __init__(self, op: str, dtypes: tuple, shapes: tuple):
        self.op, self.dtypes, self.shapes = op, dtypes, shapes
        self.kernels: list[str] = []
        self.path: str | None = None
        self.seqs: list[int] = []       # command seqs it (or an op it ran) submitted
        # While a profiler is open: the host clock when it began, (ns, flops, bytes) of host work
        # charged so far, and its thread.
        self.t0_ns = self.host_work0 = self.thread = None

    @classmethod
    def of(cls, op: str, args, kwargs) -> "OpRecord":
        tensors = []
        for value in (*args, *kwargs.values()):
            if isinstance(value, torch.Tensor):
                tensors.append(value)
            elif isinstance(value, (list, tuple)):
                tensors.extend(v for v in value if isinstance(v, torch.Tensor))
        record = cls(op, tuple(str(t.dtype).removeprefix("torch.") for t in tensors),
                     tuple(tuple(t.shape) for t in tensors))
        clock = _profile_clock
        if clock is not None:
            record.t0_ns, record.thread = clock.now_ns, get_ident()
            record.host_work0 = (clock.host_work_ns, clock.host_work_flops, clock.host_work_bytes)
        return record


COMPILE_COUNTERS = ("graphs_compiled", "recompiles", "graph_breaks", "outside_program")


def _compile_counters() -> dict:
    """The compiled-execution counters (torch_plugin.compile.compile_stats()) that telemetry
    reports; all zero while nothing was compiled (dynamo is not even imported then)."""
    if "torch._dynamo" not in sys.modules or "torch_plugin.compile.stats" not in sys.modules:
        return dict.fromkeys(COMPILE_COUNTERS, 0)
    from torch_plugin.compile.stats import compile_stats
    stats = compile_stats()
    return {key: stats[key] for key in COMPILE_COUNTERS}


class Telemetry:
    """Records the ops, paths, kernels, synchronisations and copies of a ``with`` block, and the
    graphs compiled, recompiles, graph breaks and ops run outside a compiled device program."""

    def __init__(self):
        self._lock = threading.Lock()
        self._ops: dict[tuple, list] = {}   # (op, path, dtypes, shapes) -> [count, Counter(kernels)]
        self._syncs = 0
        self._copies = {key: [0, 0] for key in _SPACE_KEYS.values()}
        self._open = False
        self._compile_start = dict.fromkeys(COMPILE_COUNTERS, 0)
        self._compile_end: dict | None = None

    # -- the block -------------------------------------------------------------
    def __enter__(self) -> "Telemetry":
        if self._open:
            raise RuntimeError("torch.emu.telemetry(): this block is already open")
        self._open = True
        self._compile_start, self._compile_end = _compile_counters(), None
        _runtime_hooks.acquire(runtime.get_runtime())
        registry.add_observer(self)
        return self

    def __exit__(self, *exc) -> bool:
        self._compile_end = _compile_counters()
        registry.remove_observer(self)
        _runtime_hooks.release()
        self._open = False
        return False

    # -- what the hooks report -----------------------------------------------------
    def add_op(self, record: OpRecord) -> None:
        key = (record.op, record.path, record.dtypes, record.shapes)
        with self._lock:
            entry = self._ops.get(key)
            if entry is None:
                entry = self._ops[key] = [0, Counter()]
            entry[0] += 1
            entry[1].update(record.kernels)

    def add_sync(self) -> None:
        with self._lock:
            self._syncs += 1

    def add_copy(self, direction: str, nbytes: int) -> None:
        with self._lock:
            entry = self._copies[direction]
            entry[0] += 1
            entry[1] += nbytes

    def add_command(self, seq: int, name: str, t0_ns: float, t1_ns: float) -> None:
        """A launch, copy or fill was submitted (the profiler's hook; telemetry keeps kernels per op)."""

    def add_wait(self, name: str, t0_ns: float, t1_ns: float) -> None:
        """A host synchronisation ran from t0 to t1 (modelled host time; the profiler's hook)."""

    # -- results -------------------------------------------------------------------
    def as_dict(self) -> dict:
        """{"ops": [{op, path, dtypes, shapes, count, kernels: {name: launches}}, ...] (most frequent
        first), "paths": {path: {op: count}} (op_stats()'s layout), "syncs": n,
        "copies": {"host_to_device" | "device_to_host" | "device_to_device": {"count", "bytes"}},
        "compiled": {graphs_compiled, recompiles, graph_breaks, outside_program} during the block}."""
        with self._lock:
            ops = [{"op": op, "path": path, "dtypes": list(dtypes), "shapes": [list(s) for s in shapes],
                    "count": count, "kernels": dict(kernels)}
                   for (op, path, dtypes, shapes), (count, kernels) in self._ops.items()]
            paths = {path: {} for path in (*registry.PATHS, registry.HOST_FALLBACK_COPIES)}
            for row in ops:
                paths[row["path"]][row["op"]] = paths[row["path"]].get(row["op"], 0) + row["count"]
            copies = {key: {"count": n, "bytes": b} for key, (n, b) in self._copies.items()}
            syncs = self._syncs
        ops.sort(key=lambda row: (-row["count"], row["op"], row["path"]))
        end = self._compile_end if self._compile_end is not None else _compile_counters()
        compiled = {key: end[key] - self._compile_start[key] for key in COMPILE_COUNTERS}
        return {"ops": ops, "paths": paths, "syncs": syncs, "copies": copies, "compiled": compiled}

    def summary(self) -> str:
        """A table for people: one line per (op, path, dtypes, shapes), then the totals."""
        data = self.as_dict()
        header = ("op", "path", "dtypes", "shapes", "count", "kernels")
        rows = [(r["op"], r["path"], ", ".join(r["dtypes"]) or "-",
                 " ".join(str(s).replace(" ", "") for s in r["shapes"]) or "-", str(r["count"]),
                 ", ".join(f"{k} x{n}" for k, n in sorted(r["kernels"].items())) or "-")
                for r in data["ops"]]
        widths = [max(len(line[i]) for line in (header, *rows)) for i in range(len(header))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in (header, *rows)]
        lines.insert(1, "  ".join("-" * w for w in widths))
        totals = {path: sum(ops.values()) for path, ops in data["paths"].items() if ops}
        lines.append("")
        lines.append("op instances by path: " + (", ".join(f"{p} {n}" for p, n in totals.items()) or "none"))
        copies = data["copies"]
        lines.append(f"host synchronisations: {data['syncs']}")
        lines.append("copies: " + ", ".join(f"{key.replace('_', ' ')} {c['count']} ({c['bytes']} bytes)"
                                            for key, c in copies.items()))
        c = data["compiled"]
        if any(c.values()):
            lines.append(f"compiled graphs: {c['graphs_compiled']} (recompiles {c['recompiles']}, graph breaks "
                         f"{c['graph_breaks']}, op instances outside the device program {c['outside_program']})")
        return "\n".join(lines)

    def __repr__(self) -> str:
        data = self.as_dict()
        return f"<emu telemetry: {sum(r['count'] for r in data['ops'])} op instances, {data['syncs']} syncs>"


class _RuntimeHooks:
    """Wraps the runtime's launch, memcpy and synchronize methods on the runtime object while
    at least one telemetry block is open (instance attributes that shadow the methods; removed
    when the last block closes, so the hot path pays nothing otherwise)."""
    _METHODS = ("launch", "memcpy", "memset", "collective", "replay", "stream_synchronize", "event_synchronize",
                "device_synchronize")

    def __init__(self):
        self._lock = threading.Lock()
        self._users = 0
        self._runtime = None
        self._local = threading.local()  # sync depth: a sync inside a sync is one sync

    def acquire(self, rt) -> None:
        with self._lock:
            self._users += 1
            if self._users == 1:
                self._runtime = rt
                self._install(rt)

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._runtime is not None:
                for name in self._METHODS:
                    self._runtime.__dict__.pop(name, None)
                self._runtime = None

    def _install(self, rt) -> None:
        cls = type(rt)
        launch, memcpy, memset = cls.launch.__get__(rt), cls.memcpy.__get__(rt), cls.memset.__get__(rt)
        collective = cls.collective.__get__(rt)
        local = self._local
        clock = rt.clock

        def note_command(seq, name, t0):
            # The innermost op record is the one that ends first: the profiler attributes the
            # command to it (outer records see it too, as their kernels list does).
            if seq is None:
                return
            for record in registry._local.records:
                record.seqs.append(seq)
            for observer in registry._observers or ():
                observer.add_command(seq, name, t0, clock.now_ns)

        def hooked_launch(kernel, args, stream):
            name = f"{kernel}.{args[0]}" if args and isinstance(args[0], str) else kernel
            registry.note_kernel(name)
            t0 = clock.now_ns
            seq = launch(kernel, args, stream)
            note_command(seq, name, t0)
            return seq

        def hooked_memset(dst, value, stream):
            t0 = clock.now_ns
            seq = memset(dst, value, stream)
            note_command(seq, "fill", t0)
            return seq

        def hooked_memcpy(dst, src, stream, blocking=False):
            direction = _SPACE_KEYS.get((src.host, dst.host))
            kernel = "memcpy"
            if direction is not None:
                kernel = _KERNEL_OF_COPY[direction]
                if direction == "device_to_device" and dst.device != src.device:
                    kernel = "memcpy_p2p"
                registry.note_kernel(kernel)
                nbytes = prod(src.shape) * runtime.ELEMENT_SIZE[src.dtype]
                for observer in registry._observers or ():
                    observer.add_copy(direction, nbytes)
            t0 = clock.now_ns
            seq = memcpy(dst, src, stream, blocking)
            note_command(seq, kernel, t0)
            return seq

        def hooked_collective(stream, name, pairs, not_before_ns=0.0, **model):
            # A collective's functional data path crosses the host: its copies count as host traffic.
            kernel = f"collective.{name}"
            registry.note_kernel(kernel)
            for dst, src in pairs:
                direction = _SPACE_KEYS.get((src.host, dst.host))
                if direction is not None:
                    nbytes = prod(src.shape) * runtime.ELEMENT_SIZE[src.dtype]
                    for observer in registry._observers or ():
                        observer.add_copy(direction, nbytes)
            t0 = clock.now_ns
            seq = collective(stream, name, pairs, not_before_ns, **model)
            note_command(seq, kernel, t0)
            return seq

        replay = cls.replay.__get__(rt)

        def hooked_replay(stream, image, bases):
            # A compiled program's segment: its commands take consecutive seqs from the first one.
            t0 = clock.now_ns
            first = replay(stream, image, bases)
            if first is not None:
                for offset, name in enumerate(image.kernels):
                    note_command(first + offset, name, t0)
            return first

        def synchronizing(name, method):
            def hooked(*args, **kwargs):
                depth = getattr(local, "depth", 0)
                if depth == 0:
                    for observer in registry._observers or ():
                        observer.add_sync()
                local.depth = depth + 1
                t0 = clock.now_ns
                try:
                    return method(*args, **kwargs)
                finally:
                    local.depth = depth
                    if depth == 0:
                        for observer in registry._observers or ():
                            observer.add_wait(name, t0, clock.now_ns)
            return hooked

        rt.launch, rt.memcpy, rt.memset, rt.collective = hooked_launch, hooked_memcpy, hooked_memset, hooked_collective
        rt.replay = hooked_replay
        for name in ("stream_synchronize", "event_synchronize", "device_synchronize"):
            setattr(rt, name, synchronizing(name, getattr(cls, name).__get__(rt)))


_runtime_hooks = _RuntimeHooks()
