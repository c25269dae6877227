"""A lowered graph captured once as a device program and replayed (docs/compile.md#capture-and-replay).

The first call of a DeviceProgram (and the first call with other input metadata) runs it op by op
with the runtime capturing: every command the graph issues and every malloc and free, in order.
From that timeline:

- each step is **replayable** or a **boundary**: a boundary synchronised with the host, ran on
  the host (host fallback), draws random numbers (its launch carries the generator's host-side
  state), or issued a command that is not a launch, copy or fill on the program's stream;
- consecutive replayable steps form a **segment**: their commands, prepared once by the driver;
- each device operand is **relocated** by where its address lay when the command was issued: a
  graph input's storage (patched with that input's storage at each call), an intermediate (moved
  into the program's **pool**, one allocation reserved at capture and reused by every replay; its
  layout packs intermediates whose lifetimes do not overlap), a graph output's allocation (a fresh
  allocation per call, so a caller may keep an output), a boundary's result (patched with the
  result that boundary gave at this call), or a constant (kept by the program, never moved).

A replay then patches the slots and submits each segment in one ring write and one doorbell,
without the dispatcher; boundaries run op by op between segments, on views of the pool. A program
whose capture cannot be relocated (an operand in memory the graph does not own) is never
replayed: it runs op by op, with the reason in ``Capture.refused``.

Left out: replay across streams (a call on another stream than the capture's runs op by op), and
graphs on several devices.
"""
from __future__ import annotations

import torch

from torch_plugin.ops import registry
from torch_plugin.ops._common import current_stream, rt

POOL_ALIGNMENT = 512   # every pooled intermediate starts at a multiple (the allocator's own granule)


def _storage(t: torch.Tensor):
    s = t.untyped_storage()
    return s.data_ptr(), s.nbytes()


def signature(args) -> tuple | None:
    """What a capture depends on in its inputs: device, dtype, sizes, strides and storage offset of
    every tensor, which inputs share a storage, and every non-tensor value. None: not capturable
    (a tensor not on emu, or graphs spanning several devices)."""
    parts, shared, device = [], {}, None
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            if a.device.type != "emu":
                return None
            if device is None:
                device = a.device.index
            elif a.device.index != device:
                return None
            ptr = a.untyped_storage().data_ptr()
            parts.append((a.dtype, tuple(a.shape), a.stride(), a.storage_offset(), shared.setdefault(ptr, i)))
        elif isinstance(a, (int, float, bool, type(None))):
            parts.append((type(a), a))
        else:
            return None
    if device is None:   # no device tensor among the inputs: nothing to replay on
        return None
    return device, tuple(parts)


class _Alloc:
    __slots__ = ("address", "nbytes", "step", "freed", "kind", "slot", "start", "end", "result")

    def __init__(self, address, nbytes, step, start):
        self.address, self.nbytes, self.step, self.start = address, nbytes, step, start
        self.freed = False
        self.end = None
        self.kind = None     # "pool" | "output" | "live" | "fixed" | None (referenced: refused)
        self.slot = None     # pool offset, or the range index (output, live)
        self.result = None   # live: (step index, tensor index in its flattened result)


def _tensors(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


class _Unrelocatable(Exception):
    pass


class Capture:
    """One captured program: segments and boundaries in graph order (see the module docstring)."""

    def __init__(self, program, device: int, stream, sig):
        self.program, self.device, self.stream, self.signature = program, device, stream, sig
        self.plan: list = []              # ("segment", image) | ("boundary", step, reads, live ranges)
        self.boundaries: list = []        # (step name, reason)
        self.refused: str | None = None
        self.pool: torch.Tensor | None = None
        self.pool_bytes = 0
        self.n_ranges = 0
        self.input_ranges: list = []      # (range, input index)
        self.output_ranges: list = []     # (range, nbytes)
        self.outputs = None               # description of the graph's outputs
        self.commands = 0
        self.segments = 0

    # -- capture ------------------------------------------------------------------
    @classmethod
    def run_and_capture(cls, program, args: list, sig):
        """Runs the program once, op by op, capturing it; returns (outputs, Capture)."""
        device = sig[0]
        runtime = rt()
        stream = current_stream(device)
        inputs = list(args)
        cap = cls(program, device, stream, sig)
        clock = runtime.clock
        timeline = runtime.begin_capture()
        reasons: dict[int, str] = {}
        held = set(program._constants) | {step.node for step in program.steps
                                          if step.kind == "attr" or step.kind.startswith("constant_")}
        results: dict[int, list] = {}
        try:
            env = {}
            for node, value in zip(program.placeholders, args):
                env[node] = value
            args.clear()
            for i, step in enumerate(program.steps):
                timeline.append(("step", i))
                if step.kind.startswith("constant_"):
                    env[step.node] = program._constant_value(step, env)
                    reasons[i] = "constant"
                else:
                    timeline.append(("reads", i, [(r, _raw(env[r], r in held)) for r in step.reads]))
                    syncs, fallbacks = clock.sync_waits, _host_fallbacks()
                    value = env[step.node] = step.fn(env)
                    reason = _boundary_reason(step, clock.sync_waits != syncs, _host_fallbacks() != fallbacks)
                    if reason is not None:
                        reasons[i] = reason
                        results[i] = [_storage(t)[0] for t in _tensors(value)]
                for r in step.free_after:
                    del env[r]
            timeline.append(("step", len(program.steps)))
            outputs = program._outputs(env)
            timeline.append(("outputs", _raw(outputs, False)))
            del env
        finally:
            runtime.end_capture()
        try:
            cap._build(timeline, inputs, reasons, results, stream)
        except _Unrelocatable as why:
            cap.refused = str(why)
            cap.plan = []
            cap.pool = None
        return outputs, cap

    def _build(self, timeline, inputs, reasons, results, stream):
        runtime = rt()
        queue = stream.queue
        input_storage = {}
        for index, a in enumerate(inputs):
            if isinstance(a, torch.Tensor):
                ptr, nbytes = _storage(a)
                if ptr and ptr not in input_storage:
                    input_storage[ptr] = (nbytes, index)
        ranges = {}   # key -> range index (from 1: range 0 is the pool)
        self._range_allocs = {}
        for ptr, (nbytes, index) in input_storage.items():
            ranges[("input", ptr)] = len(ranges) + 1
            self._range_allocs[len(ranges)] = ("input", ptr)
            self.input_ranges.append((len(ranges), index))
        fixed = {}    # storage ptr -> nbytes of constants and graph attributes (never moved)
        for value in (*self.program._constants.values(), *self.program._attr_values()):
            for t in _tensors(value):
                ptr, nbytes = _storage(t)
                fixed[ptr] = nbytes

        active: dict[int, _Alloc] = {}   # address -> allocation live now
        allocs: list[_Alloc] = []
        step = -1
        segment: list = []               # [(command, [alloc or ("input", ptr) or None per operand])]
        order: list = []                 # ("segment", [...]) | ("boundary", step index, reads)
        outputs_desc = None

        def locate(address):
            # Allocations live at this point of the timeline first: an address the capture run
            # freed and handed out again (to a constant, say) means the allocation of that time.
            for base, alloc in active.items():
                if base <= address < base + alloc.nbytes:
                    return alloc, address - base
            for ptr, (nbytes, _) in input_storage.items():
                if ptr <= address < ptr + nbytes:
                    return ("input", ptr), address - ptr
            for ptr, nbytes in fixed.items():
                if ptr <= address < ptr + nbytes:
                    return None, 0
            raise _Unrelocatable(f"an operand at 0x{address:x} lies in memory the graph does not own")

        def describe(raw):
            if raw[0] == "t":
                _, ptr, dtype, shape, stride, storage_offset = raw
                if ptr == 0:
                    return ("empty", dtype, shape, stride)
                where, offset = locate(ptr)
                if where is None:
                    raise _Unrelocatable("a value the program keeps is read through a view it does not keep")
                return ("tensor", where, offset, dtype, shape, stride, storage_offset)
            if raw[0] == "seq":
                return ("seq", raw[1], [describe(v) for v in raw[2]])
            return raw

        for position, entry in enumerate(timeline):
            if len(entry) == 4:                       # a malloc or a free of this thread
                is_malloc, device, address, nbytes = entry
                if device != self.device:
                    continue
                if is_malloc:
                    alloc = active[address] = _Alloc(address, nbytes, step, position)
                    allocs.append(alloc)
                elif address in active:
                    alloc = active.pop(address)
                    alloc.freed, alloc.end = True, position
                continue
            if entry[0] == "step":
                step = entry[1]
                boundary = reasons.get(step, "constant") != "constant"
                if segment and (boundary or step == len(self.program.steps)):
                    order.append(("segment", segment))
                    segment = []
                continue
            if entry[0] == "reads":   # (right after its step's marker)
                if reasons.get(entry[1], "constant") != "constant":
                    order.append(("boundary", entry[1], [(node, describe(v)) for node, v in entry[2]]))
                    self.boundaries.append((str(self.program.steps[entry[1]].node.target), reasons[entry[1]]))
                continue
            if entry[0] == "outputs":
                outputs_desc = describe(entry[1])
                continue
            command_queue, command = entry
            if step in reasons:                       # a boundary's or a constant's own commands
                if reasons[step] != "constant" and command_queue is not queue:
                    raise _Unrelocatable("a boundary submitted to another stream")
                continue
            if command_queue is not queue:
                raise _Unrelocatable(f"step {self.program.steps[step].node} submitted to another stream")
            if runtime.recorded_kind(command) == "other":
                raise _Unrelocatable(f"step {self.program.steps[step].node} issued a fence or a collective")
            targets = []
            for address, on_device in runtime.recorded_operands(command):
                if not on_device:
                    raise _Unrelocatable(f"step {self.program.steps[step].node} reads host memory")
                targets.append(locate(address))
            segment.append((command, targets))
        if segment:
            order.append(("segment", segment))
        for alloc in allocs:                          # what each allocation the capture made is
            if alloc.freed:
                producer = alloc.step
                if producer in reasons and reasons[producer] != "constant":
                    alloc.kind = "live" if alloc.address in results.get(producer, ()) else None
                else:
                    alloc.kind = "pool"
            elif reasons.get(alloc.step) == "constant":
                alloc.kind = "fixed"     # a constant the program keeps: never moved
            else:
                alloc.kind = "output"
                if alloc.step in reasons:
                    alloc.kind = "live" if alloc.address in results.get(alloc.step, ()) else None
            if alloc.kind == "live":
                alloc.result = (alloc.step, results[alloc.step].index(alloc.address))
        self._pack_pool(allocs)
        self._lay_out(order, outputs_desc, ranges, stream)

    def _pack_pool(self, allocs) -> None:
        """Offsets in one pool for the intermediates: first fit by size, sharing bytes between
        allocations whose lifetimes (capture timeline positions) do not overlap."""
        placed = []   # (offset, size, start, end)
        for alloc in sorted((a for a in allocs if a.kind == "pool"), key=lambda a: -a.nbytes):
            size = -(-alloc.nbytes // POOL_ALIGNMENT) * POOL_ALIGNMENT
            offset = 0
            for o, s, start, end in sorted(p for p in placed if p[2] < alloc.end and alloc.start < p[3]):
                if offset + size <= o:
                    break
                offset = max(offset, o + s)
            placed.append((offset, size, alloc.start, alloc.end))
            alloc.slot = offset
            self.pool_bytes = max(self.pool_bytes, offset + size)
        if self.pool_bytes:
            self.pool = torch.empty(self.pool_bytes, dtype=torch.uint8, device=torch.device("emu", self.device))

    def _range_of(self, where, ranges) -> int:
        """The replay-time range of an input storage or of an output's or a boundary result's
        allocation (range 0 is the pool, relocated once at capture)."""
        key = ("input", where[1]) if type(where) is tuple else id(where)
        r = ranges.get(key)
        if r is None:
            r = ranges[key] = len(ranges) + 1
            self._range_allocs[r] = where
            if where.kind == "output":
                self.output_ranges.append((r, where.nbytes))
        return r

    def _target(self, where, offset, ranges):
        """(range, offset) of a located operand, or None (kept where it is)."""
        if where is None:
            return None
        if type(where) is not tuple:
            if where.kind is None:
                raise _Unrelocatable("an operand lies in an allocation of a boundary that is not its result")
            if where.kind == "fixed":
                return None
            if where.kind == "pool":
                return 0, where.slot + offset
        return self._range_of(where, ranges), offset

    def _lay_out(self, order, outputs_desc, ranges, stream):
        runtime = rt()
        pool_base = self.pool.data_ptr() if self.pool is not None else 0
        for item in order:
            if item[0] == "segment":
                commands = [command for command, _ in item[1]]
                relocations = [[self._target(where, offset, ranges) for where, offset in targets]
                               for _, targets in item[1]]
                image = runtime.prepare_program(stream, commands, relocations, {0: pool_base})
                self.plan.append(("segment", image))
                self.commands += len(commands)
                self.segments += 1
            else:
                _, step, reads = item
                self.plan.append(["boundary", self.program.steps[step],
                                  [(node, self._resolve_desc(d, ranges)) for node, d in reads], [], step])
        self.outputs = self._resolve_desc(outputs_desc, ranges)
        self.n_ranges = len(ranges) + 1
        for item in self.plan:   # the ranges each boundary's results set at replay
            if item[0] == "boundary":
                item[3] = [(r, a.result[1]) for r, a in self._range_allocs.items()
                           if type(a) is not tuple and a.kind == "live" and a.result[0] == item[4]]

    def _resolve_desc(self, desc, ranges):
        kind = desc[0]
        if kind in ("value", "empty"):
            return desc
        if kind == "seq":
            return ("seq", desc[1], [self._resolve_desc(d, ranges) for d in desc[2]])
        _, where, offset, dtype, shape, stride, storage_offset = desc
        if type(where) is not tuple:
            if where.kind is None or where.kind == "fixed":
                raise _Unrelocatable("a boundary or an output reads memory of another step that is not its value")
            if where.kind == "pool":
                return ("tensor", 0, where.slot + offset, dtype, shape, stride, storage_offset)
        return ("tensor", self._range_of(where, ranges), offset, dtype, shape, stride, storage_offset)

    # -- replay -------------------------------------------------------------------
    def replay(self, args: list):
        """One call: patch the slots, submit each segment, run the boundaries; the outputs."""
        runtime = rt()
        storages = [None] * self.n_ranges
        bases = [0] * self.n_ranges
        if self.pool is not None:
            storages[0] = self.pool.untyped_storage()
        for r, index in self.input_ranges:
            storage = args[index].untyped_storage()
            storages[r], bases[r] = storage, storage.data_ptr()
        device = torch.device("emu", self.device)
        buffers = []
        for r, nbytes in self.output_ranges:
            buffer = torch.empty(nbytes, dtype=torch.uint8, device=device)
            buffers.append(buffer)
            storages[r] = buffer.untyped_storage()
            bases[r] = storages[r].data_ptr()
        inputs = args[:]
        args.clear()
        observed = registry._observers is not None
        kept = []
        for item in self.plan:
            if item[0] == "segment":
                image = item[1]
                record = registry.begin_op("compiled::replay", (), {}) if observed else None
                if observed:
                    for name in image.kernels:
                        registry.note_kernel(name)
                runtime.replay(self.stream, image, bases)
                registry.count("compiled::replay", registry.NATIVE)
                if record is not None:
                    registry.end_op(record, registry.NATIVE)
            else:
                _, step, reads, live, _index = item
                env = {node: _materialize(d, storages, device) for node, d in reads}
                value = step.fn(env)
                kept.append(value)
                if live:
                    tensors = _tensors(value)
                    for r, k in live:
                        storages[r] = tensors[k].untyped_storage()
                        bases[r] = storages[r].data_ptr()
        del inputs, kept
        return _materialize(self.outputs, storages, device)


def _materialize(desc, storages, device):
    kind = desc[0]
    if kind == "value":
        return desc[1]
    if kind == "seq":
        return desc[1](_materialize(d, storages, device) for d in desc[2])
    if kind == "empty":
        return torch.empty_strided(desc[2], desc[3], dtype=desc[1], device=device)
    _, r, offset, dtype, shape, stride, storage_offset = desc
    itemsize = dtype.itemsize
    return torch.empty(0, dtype=dtype, device=device).set_(
        storages[r], offset // itemsize + storage_offset, shape, stride)


def _raw(value, hold: bool):
    """A value as the capture notes it: a tensor by its storage and layout, without a reference
    (so the capture run frees its intermediates as a call does), unless ``hold``."""
    if isinstance(value, torch.Tensor):
        if hold and value.untyped_storage().data_ptr() != 0:
            return ("value", value)
        return ("t", value.untyped_storage().data_ptr(), value.dtype, tuple(value.shape), value.stride(),
                value.storage_offset())
    if isinstance(value, (list, tuple)):
        return ("seq", type(value), [_raw(v, hold) for v in value])
    return ("value", value)


def _host_fallbacks() -> int:
    return sum(registry.op_stats()[registry.HOST_FALLBACK].values())


def _boundary_reason(step, synchronised: bool, fell_back: bool) -> str | None:
    """Why a step cannot be replayed from its recorded commands (None: it can)."""
    if synchronised:
        return "synchronises with the host (its launch depends on data)"
    if fell_back:
        return "runs on the host (host fallback)"
    target = step.node.target
    if torch.Tag.nondeterministic_seeded in getattr(target, "tags", ()):
        return "draws random numbers (the generator's state is host state)"
    return None
