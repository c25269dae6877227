"""The kernel-mode-driver analogue: the host side of the device boundary.

It enumerates devices on the platform, loads firmware and checks its version,
manages physical memory and per-context address spaces, owns submission rings
and doorbells, services interrupts, validates everything user space hands it,
and decodes firmware error records. It reaches the devices only through the
transport interface (firmware/transport.py: ring slots, doorbells, fence words,
page tables, interrupts, waits), which returns plain values. All entry points are
thread-safe: one lock serialises the driver and the device time it advances.
"""
from __future__ import annotations

import itertools
import logging
import threading
from collections import namedtuple

from driver.errors import DriverError, DriverStatus, FirmwareRecordError, InternalErrorRecordError, describe_record
from driver.firmware_loader import load_and_check
from driver.memory_manager import VA_WINDOW, AddressSpace, AddressSpaceExhausted, PhysicalAllocator
from firmware import (ConfigError, FirmwareImage, HostTransport, InvalidRequest, Platform, WaitNeverSatisfied,
                      abi, collective_model, describe_description, load_description)
from firmware.lru import LRUCache

log = logging.getLogger("seed.driver")

# What user space describes a tensor operand with; the driver adds the context's asid.
TensorRef = namedtuple("TensorRef", "host device address dtype shape strides")
MAX_RANK = 64  # torch's own limit of dim lists; the kernel library's (emulator/kernels/_common.pxi)
_ITEMSIZE = abi.ELEMENT_SIZE
_INT = frozenset({int})
_LAUNCH_ARG_TYPES = frozenset({abi.TensorDescriptor, bool, int, float, str, type(None)})
_LAUNCH = abi.Opcode.LAUNCH
_LAUNCH_COMMAND = abi.LaunchCommand
_new_tuple = tuple.__new__  # builds ABI records without their Python-level namedtuple __new__
DESCRIPTOR_CACHE_ENTRIES = 4096
# What the runtime may read of a recorded command (Driver.begin_recording), without the ABI module.
RECORDED_KINDS = {abi.Opcode.LAUNCH: "launch", abi.Opcode.COPY: "copy", abi.Opcode.FILL: "fill"}


def collective_cost(interconnect, op: str, nbytes: int, ranks: int, nodes: int = 1, hops: int = 1,
                    algorithm: str = ""):
    """The time the device models for a COLLECTIVE with these fields on ``interconnect`` (the
    hardware description's ``interconnect``), as an ``emulator.collectives.CollectiveCost``: the
    same model the firmware books the command with. Bad fields: DriverError INVALID_ARGUMENT."""
    try:
        return collective_model.collective_cost(op, nbytes, ranks, interconnect, nodes, hops, algorithm)
    except ValueError as err:
        raise DriverError(DriverStatus.INVALID_ARGUMENT, f"a collective's {err}") from None


def load_configuration(preset: str, path: str | None = None):
    """The system description the driver enumerates devices from (TOML file or preset)."""
    try:
        return load_description(preset, path)
    except ConfigError as err:
        raise DriverError(DriverStatus.INVALID_CONFIGURATION, f"invalid hardware configuration: {err}",
                          field=err.field) from err


def describe_configuration(config) -> dict:
    return describe_description(config)


class Context:
    def __init__(self, device: int, asid: int, space: AddressSpace):
        self.device = device
        self.asid = asid
        self.space = space
        self.fault: FirmwareRecordError | None = None  # sticky: context or device scope
        # Operation-scope records (a command the firmware rejected): raised once, at the next
        # synchronising call on the context; nothing else is poisoned.
        self.errors: list[FirmwareRecordError] = []
        # TensorRef -> validated abi.TensorDescriptor. Validation is a pure function of the operand
        # and the context, and a training loop launches the same operands over and over.
        self.descriptors = LRUCache(DESCRIPTOR_CACHE_ENTRIES)


class Queue:
    def __init__(self, context: Context, ring_id: int):
        self.context = context
        self.device = context.device
        self.ring_id = ring_id
        self.fault: FirmwareRecordError | None = None  # stream scope: reported once, then cleared


class Driver:
    def __init__(self, config, image: FirmwareImage | None = None, host_clock=None,
                 transport: HostTransport | None = None, mode: str = "functional"):
        # The emulated system is the transport unless a caller hands another one in. ``mode``
        # "projection": the devices time every command but compute nothing, and their memory is
        # address space only (docs/projection.md); the driver's own work is the same in both modes.
        self.transport = transport if transport is not None else Platform(config, mode=mode)
        self.projection = mode == "projection"
        self._devices = list(self.transport.devices)
        self.lock = threading.RLock()
        self.config = config
        self.host_clock = host_clock
        self._seq = itertools.count(1)
        self._asids = itertools.count(1)
        self._semaphores = itertools.count(1)
        self._free_semaphores: dict[int, list[int]] = {}              # device -> recyclable ids
        self._retired_semaphores: dict[int, list[tuple[int, int]]] = {}  # device -> (id, last value)
        self.firmware_versions = []
        self._contexts: dict[int, Context] = {}
        self._physical = []
        for endpoint in self._devices:
            self.firmware_versions.append(load_and_check(endpoint, image or FirmwareImage()))
            endpoint.connect_interrupts(self._interrupt_handler(endpoint.index))
            self._physical.append(PhysicalAllocator(endpoint.memory_bytes, endpoint.page_size))
        self.interrupts = 0
        self.resets = 0
        self._queues: dict[tuple[int, int], Queue] = {}       # (device, ring id) -> queue
        self.device_faults: dict[int, FirmwareRecordError] = {}  # device -> fault needing a reset
        self._retired: dict[int, set[int]] = {}               # device -> retired physical pages
        self._resets_of: dict[int, int] = {}                  # device -> resets done
        self.poison_pending = False  # an error interrupt arrived: skipped commands' outputs to collect
        self.launch_blocking = False  # the runtime's EMU_LAUNCH_BLOCKING (named in fault messages)
        self._recording: list | None = None  # begin_recording: (queue, command) of every submission

    # -- discovery -------------------------------------------------------
    @property
    def device_count(self) -> int:
        return len(self._devices)

    def _endpoint(self, device: int):
        if not isinstance(device, int) or not 0 <= device < self.device_count:
            raise DriverError(DriverStatus.INVALID_DEVICE,
                              f"device {device!r} does not exist; {self.device_count} devices "
                              f"(0..{self.device_count - 1})")
        return self._devices[device]

    def device_properties(self, device: int):
        return self._endpoint(device).config

    @property
    def now_ns(self) -> float:
        return self.transport.now_ns()

    def advance_to(self, t_ns: float) -> None:
        """Lets the devices run up to host time ``t_ns`` (a query polls a device that runs
        concurrently with the host)."""
        with self.lock:
            self.transport.advance_to(t_ns)

    # -- contexts and memory --------------------------------------------
    def open_context(self, device: int) -> Context:
        with self.lock:
            endpoint = self._endpoint(device)
            asid = next(self._asids)
            endpoint.create_address_space(asid)
            context = Context(device, asid, AddressSpace(device, asid, endpoint.page_size))
            self._contexts[asid] = context
            return context

    def allocate(self, context: Context, nbytes: int) -> int:
        if not isinstance(nbytes, int) or nbytes <= 0:
            raise DriverError(DriverStatus.INVALID_ARGUMENT, f"allocation size must be a positive int, got {nbytes!r}")
        with self.lock:
            physical = self._physical[context.device]
            size = physical.round_up(nbytes)
            try:
                va = context.space.reserve(size)
            except AddressSpaceExhausted as err:
                raise DriverError(DriverStatus.OUT_OF_MEMORY, str(err), requested=size,
                                  free=physical.free_bytes) from err
            pa = physical.allocate(size)
            if pa is None:
                context.space.release(va, size)
                raise DriverError(DriverStatus.OUT_OF_MEMORY,
                                  f"device {context.device}: cannot allocate {size} bytes "
                                  f"({physical.free_bytes} free, largest free block {physical.largest_free})",
                                  requested=size, free=physical.free_bytes)
            self._endpoint(context.device).map_pages(context.asid, va, pa, size)
            context.space.mappings[va] = (pa, size)
            return va

    def release(self, context: Context, va: int) -> None:
        with self.lock:
            mapping = context.space.mappings.pop(va, None)
            if mapping is None:
                raise DriverError(DriverStatus.INVALID_HANDLE, f"0x{va:x} is not an allocation of this context")
            self._endpoint(context.device).unmap_pages(context.asid, va)
            context.space.release(va, mapping[1])
            self._release_physical(context.device, *mapping)

    def memory_info(self, device: int) -> tuple[int, int]:
        """(free, total) bytes of a device's physical memory."""
        endpoint = self._endpoint(device)
        return self._physical[device].free_bytes, endpoint.memory_bytes

    @staticmethod
    def device_of_address(va: int) -> int:
        return va // VA_WINDOW - 1

    # -- submission ------------------------------------------------------
    def create_queue(self, context: Context) -> Queue:
        with self.lock:
            queue = Queue(context, self._endpoint(context.device).create_ring())
            self._queues[(context.device, queue.ring_id)] = queue
            return queue

    def new_semaphore(self, device: int) -> int:
        """A fence semaphore of ``device``. Released ones are recycled, so it may not start at 0:
        its owner counts from its current value (``semaphore_value``)."""
        self._endpoint(device)
        with self.lock:
            free = self._free_semaphores.setdefault(device, [])
            if not free:
                self._collect_semaphores(device)
            return free.pop() if free else next(self._semaphores)

    def release_semaphore(self, device: int, semaphore: int, last_value: int) -> None:
        """The owner is done with ``semaphore``, whose last signal is ``last_value``. It is handed out
        again once that signal executed: values only grow, so a queued wait of the old owner is
        already satisfied and the new owner's values lie above every old one."""
        with self.lock:
            retired = self._retired_semaphores.setdefault(device, [])
            retired.append((semaphore, last_value))
            if len(retired) >= 64:
                self._collect_semaphores(device)

    def _collect_semaphores(self, device: int) -> None:
        retired = self._retired_semaphores.get(device)
        if not retired:
            return
        endpoint = self._endpoint(device)
        waiting = []
        free = self._free_semaphores.setdefault(device, [])
        for semaphore, last_value in retired:
            if endpoint.semaphore_value(semaphore) >= last_value:
                free.append(semaphore)
            else:
                waiting.append((semaphore, last_value))
        self._retired_semaphores[device] = waiting

    def _checked_descriptor(self, ref, queue: Queue) -> abi.TensorDescriptor:
        """_descriptor, remembered per context (a bounded LRU cache)."""
        cache = queue.context.descriptors
        try:
            desc = cache.get(ref)
        except TypeError:  # unhashable contents: let validation say what is wrong
            return self._descriptor(ref, queue)
        if desc is None:
            desc = self._descriptor(ref, queue)
            cache.put(ref, desc)
        return desc

    def _descriptor(self, ref, queue: Queue, peer_asids=None) -> abi.TensorDescriptor:
        if type(ref) is not TensorRef:
            raise DriverError(DriverStatus.INVALID_ARGUMENT, f"expected a TensorRef, got {type(ref).__name__}")
        host, device, address, dtype, shape, strides = ref
        if not isinstance(shape, (tuple, list)) or not isinstance(strides, (tuple, list)) or not isinstance(dtype, int):
            raise DriverError(DriverStatus.INVALID_ARGUMENT,
                              f"invalid tensor descriptor: dtype code {dtype!r}, shape {shape!r}, strides {strides!r} "
                              f"(need an int dtype code and tuples of ints)")
        dims = (*shape, *strides)
        if (dtype not in _ITEMSIZE or len(shape) != len(strides) or len(shape) > MAX_RANK
                or (dims and (not set(map(type, dims)) <= _INT or min(dims) < 0))):
            raise DriverError(DriverStatus.INVALID_ARGUMENT,
                              f"invalid tensor descriptor: dtype code {dtype!r}, shape {shape}, strides "
                              f"{strides} (need a known dtype and non-negative int shape/strides of the "
                              f"same rank <= {MAX_RANK})")
        if type(address) is not int or (address == 0 and 0 not in shape):
            raise DriverError(DriverStatus.INVALID_ARGUMENT, f"invalid address {address!r}")
        if host:
            return abi.TensorDescriptor(abi.MemorySpace.HOST, -1, 0, address, dtype, tuple(shape), tuple(strides))
        if device == queue.device:
            asid = queue.context.asid
        else:
            self._endpoint(device)
            if peer_asids is None or device not in peer_asids:
                raise DriverError(DriverStatus.INVALID_ARGUMENT, f"no context given for peer device {device}")
            asid = peer_asids[device]
        return abi.TensorDescriptor(abi.MemorySpace.DEVICE, device, asid, address, dtype, tuple(shape),
                                    tuple(strides))

    def submit_copy(self, queue: Queue, dst: TensorRef, src: TensorRef, peer_asids=None) -> int:
        if peer_asids is None:
            d, s = self._checked_descriptor(dst, queue), self._checked_descriptor(src, queue)
        else:
            d, s = self._descriptor(dst, queue, peer_asids), self._descriptor(src, queue, peer_asids)
        if d.shape != s.shape or d.dtype != s.dtype:
            raise DriverError(DriverStatus.INVALID_ARGUMENT,
                              f"copy needs equal shapes and dtypes, got {d.shape}/{d.dtype} and {s.shape}/{s.dtype}")
        if d.space == s.space == abi.MemorySpace.HOST:
            raise DriverError(DriverStatus.INVALID_ARGUMENT, "host-to-host copies are not a device operation")
        return self._submit(queue, abi.CopyCommand, abi.Opcode.COPY, d, s)

    def submit_fill(self, queue: Queue, dst: TensorRef, value) -> int:
        d = self._checked_descriptor(dst, queue)
        if d.space != abi.MemorySpace.DEVICE or not isinstance(value, (bool, int, float)):
            raise DriverError(DriverStatus.INVALID_ARGUMENT, f"fill needs device memory and a number, got {value!r}")
        return self._submit(queue, abi.FillCommand, abi.Opcode.FILL, d, value)

    def submit_launch(self, queue: Queue, kernel: str, args: tuple) -> int:
        if type(kernel) is not str or type(args) is not tuple:
            raise DriverError(DriverStatus.INVALID_ARGUMENT,
                              f"a launch needs a kernel name (str) and a tuple of arguments, got {kernel!r}, {args!r}")
        resolved = []
        cache = queue.context.descriptors
        cached = cache._data  # _checked_descriptor and LRUCache.get, inlined: the hot path of every op
        last = last_desc = None  # an in-place op names its output twice: looked up once
        for a in args:
            kind = type(a)
            if kind is TensorRef:
                if a is last:
                    a = last_desc
                    resolved.append(a)
                    continue
                last = a
                try:
                    desc = cached.get(a)
                except TypeError:  # unhashable contents: let validation say what is wrong
                    desc = self._descriptor(a, queue)
                else:
                    if desc is None:
                        desc = self._descriptor(a, queue)
                        cache.put(a, desc)
                    else:
                        cached.move_to_end(a)
                a = last_desc = desc
            elif kind not in _LAUNCH_ARG_TYPES:
                raise DriverError(DriverStatus.INVALID_ARGUMENT, f"invalid launch argument {a!r}")
            resolved.append(a)
        lock = self.lock  # _submit, inlined for a launch that fits in the ring (no with: see Runtime.launch)
        lock.acquire()
        try:
            seq = next(self._seq)
            command = _new_tuple(_LAUNCH_COMMAND, (_LAUNCH, seq, queue.context.asid, kernel, tuple(resolved)))
            if self._recording is not None:
                self._recording.append((queue, command))
            clock = self.host_clock
            if self._devices[queue.device].submit(
                    queue.ring_id, clock.now_ns if clock is not None else self.transport.now_ns(), command):
                return seq
            self._submit_written(queue, command)
            return seq
        finally:
            lock.release()

    def submit_collective(self, queue: Queue, name: str, pairs, not_before_ns: float = 0.0, op: str = "",
                          nbytes: int = 0, ranks: int = 1, nodes: int = 1, hops: int = 1, algorithm: str = "") -> int:
        """A collective's part on the queue's device (abi.Opcode.COLLECTIVE): from ``not_before_ns``
        (device time) at the earliest it holds the device's network port and links for the time the
        device models ``op`` with (``collective_cost``; ``op`` "": nothing held), then copies each
        (dst, src) pair of TensorRefs (same shape and dtype; host or this device's memory), taking no
        time for them."""
        if type(name) is not str or not name.isidentifier():
            raise DriverError(DriverStatus.INVALID_ARGUMENT, f"a collective needs a name (an identifier), got {name!r}")
        if type(not_before_ns) not in (int, float) or not 0 <= not_before_ns < float("inf"):
            raise DriverError(DriverStatus.INVALID_ARGUMENT,
                              f"a collective's not_before_ns must be a finite number >= 0, got {not_before_ns!r}")
        if type(op) is not str or type(algorithm) is not str:
            raise DriverError(DriverStatus.INVALID_ARGUMENT,
                              f"a collective's op and algorithm are names, got {op!r} and {algorithm!r}")
        if op:
            collective_cost(self.config.interconnect, op, nbytes, ranks, nodes, hops, algorithm)  # checks the fields
        if not isinstance(pairs, (tuple, list)):
            raise DriverError(DriverStatus.INVALID_ARGUMENT, f"a collective's pairs must be a sequence, got {pairs!r}")
        resolved = []
        for pair in pairs:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise DriverError(DriverStatus.INVALID_ARGUMENT, f"a collective pair is (dst, src), got {pair!r}")
            d, s = self._checked_descriptor(pair[0], queue), self._checked_descriptor(pair[1], queue)
            if d.shape != s.shape or d.dtype != s.dtype:
                raise DriverError(DriverStatus.INVALID_ARGUMENT, f"a collective pair needs equal shapes and dtypes, "
                                                                 f"got {d.shape}/{d.dtype} and {s.shape}/{s.dtype}")
            resolved.append((d, s))
        return self._submit(queue, abi.CollectiveCommand, abi.Opcode.COLLECTIVE, name, tuple(resolved),
                            float(not_before_ns), op, nbytes, ranks, nodes, hops, algorithm)

    def submit_signal(self, queue: Queue, semaphore: int, value: int) -> int:
        _check_fence(semaphore, value)
        return self._submit(queue, abi.SignalCommand, abi.Opcode.SIGNAL, semaphore, value)

    def submit_wait(self, queue: Queue, device: int, semaphore: int, value: int) -> int:
        self._endpoint(device)
        _check_fence(semaphore, value)
        return self._submit(queue, abi.WaitCommand, abi.Opcode.WAIT, device, semaphore, value)

    def _submit(self, queue: Queue, command_type, opcode, *fields) -> int:
        """Builds ``command_type(opcode, seq, asid, *fields)`` and writes it to the queue's ring."""
        with self.lock:
            seq = next(self._seq)
            command = _new_tuple(command_type, (opcode, seq, queue.context.asid, *fields))
            if self._recording is not None:
                self._recording.append((queue, command))
            self._submit_written(queue, command)
            return seq

    def _submit_written(self, queue: Queue, command) -> None:
        """Writes a built command to the queue's ring and rings the doorbell, waiting for space."""
        endpoint = self._devices[queue.device]
        clock = self.host_clock
        while not endpoint.submit(queue.ring_id, clock.now_ns if clock is not None else self.transport.now_ns(),
                                  command):
            # Back-pressure: the host blocks until the firmware drained half the ring
            # (one wake-up per half ring keeps the simulation batched).
            half = max(1, endpoint.ring_entries(queue.ring_id) // 2)
            self._host_waited_until(endpoint.wait_ring_space(queue.ring_id, half), "backpressure")

    # -- captured programs (a command list recorded once, replayed with relocated operands) ------
    def begin_recording(self, sink: list) -> None:
        """Every command submitted from now on (to any queue) is also appended to ``sink`` as
        (queue, command); the commands still run."""
        with self.lock:
            self._recording = sink

    def end_recording(self) -> None:
        with self.lock:
            self._recording = None

    def prepare_program(self, queue: Queue, commands, relocations, fixed_bases=None) -> "ProgramImage":
        """A replayable image of recorded ``commands``. ``relocations[i]`` lists, for each device
        operand of command i in order (``command_operands``), None (kept) or (range, offset): the
        operand's address becomes ``bases[range] + offset`` at each submission, or
        ``fixed_bases[range] + offset`` once, here. Only launches, copies and fills of ``queue``'s
        context can be replayed (a fence or a collective is a boundary the caller runs live)."""
        return ProgramImage.build(queue, commands, relocations, fixed_bases or {})

    def submit_program(self, queue: Queue, image: "ProgramImage", bases) -> int:
        """Submits ``image`` with its relocatable ranges at ``bases``: fresh sequence numbers, the
        whole list in one ring write and one doorbell (more only when the ring has too few free
        slots: then what fits is written, the doorbell rung, and the host waits for half the ring,
        as back-pressure). Returns the first command's seq (the others follow it)."""
        if len(bases) < image.n_ranges or not set(map(type, bases)) <= _INT:
            raise DriverError(DriverStatus.INVALID_ARGUMENT,
                              f"a program with {image.n_ranges} relocatable ranges needs as many int bases, got {bases!r}")
        if queue.context is not image.context:
            raise DriverError(DriverStatus.INVALID_ARGUMENT, "a program replays only on its own context's queues")
        with self.lock:
            commands = image.relocated(bases, self._seq)
            first = commands[0].seq if commands else 0
            endpoint = self._devices[queue.device]
            ring = queue.ring_id
            clock = self.host_clock
            start = 0
            while start < len(commands):
                free = endpoint.ring_free_slots(ring)
                if free == 0:
                    half = max(1, endpoint.ring_entries(ring) // 2)
                    self._host_waited_until(endpoint.wait_ring_space(ring, half), "backpressure")
                    continue
                chunk = commands[start:start + free] if start or free < len(commands) else commands
                endpoint.write_ring_many(ring, clock.now_ns if clock is not None else self.transport.now_ns(), chunk)
                endpoint.ring_doorbell(ring)
                start += len(chunk)
            return first

    def _host_now(self) -> float:
        return self.host_clock.now_ns if self.host_clock is not None else self.transport.now_ns()

    def _host_waited_until(self, t: float, reason: str = "sync") -> None:
        if self.host_clock is not None:
            self.host_clock.wait_until(t, reason)

    # -- completion ------------------------------------------------------
    def semaphore_value(self, device: int, semaphore: int) -> int:
        return self._endpoint(device).semaphore_value(semaphore)

    def semaphore_time_ns(self, device: int, semaphore: int) -> float:
        """Device time of the semaphore's last signal."""
        return self._endpoint(device).semaphore_time_ns(semaphore)

    def wait_semaphore(self, device: int, semaphore: int, value: int, charge_host: bool = True) -> float:
        """Blocks the host until the semaphore reaches ``value``; returns the device time it did.
        ``charge_host=False``: the modelled host clock does not move (the devices run ahead of
        it; a collective's functional read of its inputs, which is not part of the modelled time)."""
        with self.lock:
            endpoint = self._endpoint(device)
            try:
                t = endpoint.wait_semaphore(semaphore, value)
            except WaitNeverSatisfied as err:
                fault = self.device_faults.get(device)
                if fault is not None:  # the device died under the wait: that is the error to report
                    raise fault from err
                raise DriverError(DriverStatus.DEADLOCK,
                                  f"device {device}: semaphore {semaphore} can never reach {value} "
                                  f"(it is at {endpoint.semaphore_value(semaphore)}): {err}") from err
            if charge_host:
                self._host_waited_until(t)
            self._raise_internal_error()  # an emulator bug seen while the devices ran
            return t

    def _interrupt_handler(self, device: int):
        if not hasattr(self, "_internal_errors"):
            self._internal_errors: list = []  # InternalErrorRecords (of any device) not yet raised
        pending = self._internal_errors

        def handle(vector, payload):
            self.interrupts += 1
            if self.host_clock is not None:  # servicing it costs host CPU (runtime/host_clock.py)
                self.host_clock.service_interrupt(payload.sim_time_ns)
            if vector == abi.Irq.ERROR:
                self._record_fault(device, payload)
            elif vector == abi.Irq.INTERNAL_ERROR:  # an emulator bug: reported once, never sticky
                pending.append(payload)
            elif vector == abi.Irq.POISONED:  # a command read unwritten data: its outputs to collect
                self.poison_pending = True
        return handle

    def _raise_internal_error(self) -> None:
        """Raises (once) the emulator bugs the firmware reported since the last call, as
        ``DriverError(INTERNAL_ERROR)`` holding the first ``InternalErrorRecord`` (the others in
        ``details["more"]``); then forgets them. Any device's: a bug is never left unreported."""
        pending = getattr(self, "_internal_errors", None)
        if pending:
            records = list(pending)
            pending.clear()
            err = InternalErrorRecordError(records[0])
            err.details["more"] = records[1:]
            raise err

    def check_context(self, context: Context) -> None:
        """Raises the context's sticky fault, if any, else (once) a command the firmware rejected
        (``raise_operation_error``), else (once) an emulator bug the firmware reported."""
        if context.fault is not None:
            raise context.fault
        self.raise_operation_error(context)
        self._raise_internal_error()

    def raise_operation_error(self, context: Context) -> None:
        """Raises (once) the first operation-scope record of ``context`` since the last call (the
        others in ``details["more"]``), then forgets them: the context is not faulted."""
        if context.errors:
            records, context.errors = context.errors, []
            err = records[0]
            err.details["more"] = records[1:]
            raise err

    # -- faults: scopes, poisoned outputs, retired pages -------------------
    def _record_fault(self, device: int, record) -> None:
        """An error interrupt: the record's scope decides what it poisons (driver side)."""
        err = FirmwareRecordError(record)
        err.launch_blocking = self.launch_blocking  # how the runtime will report it (for its message)
        self.poison_pending = True
        if err.scope == "operation":
            context = self._contexts.get(record.asid)
            if context is not None:
                context.errors.append(err)
        elif err.scope == "device":
            if device not in self.device_faults:
                self.device_faults[device] = err
            for context in self._contexts.values():
                if context.device == device and context.fault is None:
                    context.fault = self.device_faults[device]
        elif err.scope == "stream":
            queue = self._queues.get((device, record.ring))
            if queue is not None and queue.fault is None:
                queue.fault = err
        else:
            context = self._contexts.get(record.asid)
            if context is not None and context.fault is None:
                context.fault = err

    def check_queue(self, queue: Queue) -> None:
        """Raises the stream-scope fault of ``queue``, if any: sticky for the queue (its ring aborts
        every later command) until the device is reset; other queues go on."""
        if queue.fault is not None:
            raise queue.fault

    def collect_poisoned(self) -> list:
        """(context, va, seq, FirmwareRecordError) for each output a skipped or faulted command did not
        write, since the last call (any device)."""
        with self.lock:
            self.poison_pending = False
            out, errors = [], {}
            for endpoint in self._devices:
                for device, asid, va, seq, record in endpoint.take_poisoned_writes():
                    context = self._contexts.get(asid)
                    if context is None:
                        continue
                    err = errors.get(id(record))
                    if err is None:
                        err = errors[id(record)] = (self.device_faults.get(record.device)
                                                    if record.status == abi.Status.DEVICE_RESET
                                                    else None) or FirmwareRecordError(record)
                    out.append((context, va, seq, err))
            return out

    def _release_physical(self, device: int, pa: int, size: int) -> None:
        """Returns a physical range to the free list, except pages retired after an uncorrectable
        ECC error: those are never handed out again."""
        retired = self._retired.get(device)
        physical = self._physical[device]
        if not retired:
            physical.release(pa, size)
            return
        page = physical.page_size
        start = pa
        for p in range(pa, pa + size, page):
            if p in retired:
                if p > start:
                    physical.release(start, p - start)
                physical.used -= page  # retired: neither used nor free
                start = p + page
        if start < pa + size:
            physical.release(start, pa + size - start)

    def _retire_pages(self, device: int, pages) -> list:
        """Retires physical pages: never handed out again. Returns (context, va) of the mappings
        that hold one (their owner should release them soon; the page stays out when it does)."""
        retired = self._retired.setdefault(device, set())
        physical = self._physical[device]
        holders = []
        for page in pages:
            if page in retired:
                continue
            retired.add(page)
            holder = next(((c, va) for c in self._contexts.values() if c.device == device
                           for va, (pa, size) in c.space.mappings.items() if pa <= page < pa + size), None)
            if holder is None:
                _take_free_page(physical, page)  # free now: take it out of the free list
            else:
                holders.append(holder)
            log.warning("device %d: physical page 0x%x retired after an uncorrectable ECC error", device, page)
        return holders

    def close_context(self, context: Context) -> None:
        """Destroys a context: releases its memory and address space and forgets its sticky fault
        (the firmware too). Its queues must not be used afterwards."""
        with self.lock:
            endpoint = self._endpoint(context.device)
            for va in list(context.space.mappings):
                self.release(context, va)
            endpoint.destroy_address_space(context.asid)
            endpoint.clear_context_fault(context.asid)
            self._contexts.pop(context.asid, None)
            for key in [k for k, q in self._queues.items() if q.context is context]:
                del self._queues[key]
            context.fault = None

    # -- fault injection, health, error log (firmware mailbox) --------------
    def inject_fault(self, device: int, kind: str, trigger: dict) -> int:
        with self.lock:
            endpoint = self._endpoint(device)
            try:
                return endpoint.inject_fault(kind, dict(trigger))
            except InvalidRequest as err:
                raise DriverError(DriverStatus.INVALID_ARGUMENT, str(err)) from err
            except NotImplementedError as err:
                raise DriverError(DriverStatus.NOT_SUPPORTED, str(err)) from err

    def cancel_fault(self, device: int, handle: int) -> bool:
        with self.lock:
            return self._endpoint(device).cancel_fault(handle)

    def clear_faults(self, device: int) -> None:
        with self.lock:
            self._endpoint(device).clear_faults()

    def health(self, device: int) -> dict:
        with self.lock:
            data = dict(self._endpoint(device).health())
            data["retired_pages"] = len(self._retired.get(device, ()))
            data["resets"] = self._resets_of.get(device, 0)
            data["needs_reset"] = device in self.device_faults
            return data

    def error_log(self, device: int) -> dict:
        """{"errors": [record dict with kind, scope, correlation_id, message], "events": [...]}."""
        with self.lock:
            data = self._endpoint(device).error_log()
        errors = []
        for record in data["errors"]:
            entry = record._asdict()
            entry["status"] = getattr(record.status, "name", record.status)
            entry["kind"] = abi.STATUS_KIND.get(record.status, str(entry["status"]).lower())
            entry["scope"] = abi.STATUS_SCOPE.get(record.status, "context")
            entry["correlation_id"] = record.seq
            entry["message"] = describe_record(record)
            errors.append(entry)
        return {"errors": errors, "events": list(data["events"])}

    # -- recovery --------------------------------------------------------
    def reset_device(self, device: int, reason: str) -> dict:
        """The one recovery entry point; safe to call twice. It dumps state to the log, aborts the
        in-flight work (every queued command skipped, every pending fence signalled: nothing waits
        forever), resets the firmware and the engines, retires the pages that had an uncorrectable
        ECC error, and clears every fault of the device (context, stream, device scope). Returns the
        dump; ``dump["device_fault"]`` says whether memory contents must be considered lost."""
        with self.lock:
            endpoint = self._endpoint(device)
            contexts = [c for c in self._contexts.values() if c.device == device]
            queues = [q for (d, _), q in self._queues.items() if d == device]
            device_fault = self.device_faults.get(device)
            try:
                health = dict(endpoint.health())
            except NotImplementedError:
                health = {}
            dump = {
                "device": device, "reason": reason, "sim_time_ns": self.transport.now_ns(),
                "faults": [c.fault.record._asdict() for c in contexts
                           if c.fault is not None and c.fault is not device_fault],
                "stream_faults": [q.fault.record._asdict() for q in queues if q.fault is not None],
                "device_fault": device_fault.record._asdict() if device_fault is not None else None,
                "memory_used": self._physical[device].used, "health": health,
            }
            if device_fault is not None:
                dump["faults"].insert(0, dump["device_fault"])
            log.warning("resetting device %d: %s; state %s", device, reason, dump)
            try:
                endpoint.begin_reset()
            except NotImplementedError:  # a transport without a reset: at least let the work drain
                endpoint = None
            self.transport.drain()
            if endpoint is None:
                endpoint = self._endpoint(device)
            else:
                endpoint.finish_reset()
            # A fault the aborted work raised while it drained (a watchdog expiring) counts too.
            device_fault = self.device_faults.get(device, device_fault)
            if device_fault is not None and dump["device_fault"] is None:
                dump["device_fault"] = device_fault.record._asdict()
                dump["faults"].insert(0, dump["device_fault"])
            dump["device_fault_error"] = device_fault
            dump["retired_mappings"] = self._retire_pages(device, endpoint.take_bad_pages())
            for context in contexts:
                context.fault = None
                context.errors = []
                endpoint.clear_context_fault(context.asid)
            for queue in queues:
                queue.fault = None
            self.device_faults.pop(device, None)
            self._resets_of[device] = self._resets_of.get(device, 0) + 1
            self.resets += 1
            dump["retired_pages"] = len(self._retired.get(device, ()))
            return dump

    recover = reset_device  # the former name of the recovery entry point

    def trace_since(self, device: int, min_seq: int) -> list:
        """The device's newest trace records back to the first one older than ``min_seq``
        (firmware/platform.py ``DeviceEndpoint.trace_since``)."""
        with self.lock:
            return self._endpoint(device).trace_since(min_seq)

    def configure_trace(self, entries: int) -> None:
        """Every device keeps its last ``entries`` command trace records (0: no trace)."""
        if type(entries) is not int or entries < 0:
            raise DriverError(DriverStatus.INVALID_ARGUMENT, f"trace entries must be an int >= 0, got {entries!r}")
        with self.lock:
            for endpoint in self._devices:
                endpoint.configure_trace(entries)

    def telemetry(self, device: int) -> dict:
        return self._endpoint(device).telemetry()


class ProgramImage:
    """Recorded commands with their relocation sites (Driver.prepare_program)."""
    _REPLAYABLE = {abi.Opcode.LAUNCH: 4, abi.Opcode.COPY: None, abi.Opcode.FILL: None}

    def __init__(self, context, templates, sites, n_ranges, kernels):
        self.context = context
        self.templates = templates      # commands, fixed ranges relocated
        self.sites = sites              # [(command index, [(field, arg or -1, range, offset)])]
        self.n_ranges = n_ranges
        self.kernels = kernels          # each command's trace name (launch kernel, "copy", "fill")

    def __len__(self) -> int:
        return len(self.templates)

    @classmethod
    def build(cls, queue, commands, relocations, fixed_bases):
        asid = queue.context.asid
        n_ranges = 1 + max((r[0] for rel in relocations for r in rel if r is not None), default=-1)
        templates, sites, kernels = [], [], []
        for command, relocation in zip(commands, relocations, strict=True):
            op = command[0]
            if op not in cls._REPLAYABLE or command.asid != asid:
                raise DriverError(DriverStatus.INVALID_ARGUMENT, f"command {command!r} cannot be replayed")
            where = command_operand_positions(command)
            if len(where) != len(relocation):
                raise DriverError(DriverStatus.INVALID_ARGUMENT,
                                  f"{len(relocation)} relocations for a command with {len(where)} operands")
            fields = list(command)
            args = list(command.args) if op == abi.Opcode.LAUNCH else None
            patches = []
            for (field, arg), target in zip(where, relocation):
                if target is None:
                    continue
                r, offset = target
                if r in fixed_bases:
                    d = args[arg] if arg >= 0 else fields[field]
                    moved = _new_tuple(abi.TensorDescriptor, (*d[:3], fixed_bases[r] + offset, *d[4:]))
                    if arg >= 0:
                        args[arg] = moved
                    else:
                        fields[field] = moved
                else:
                    patches.append((field, arg, r, offset))
            if args is not None:
                fields[4] = tuple(args)
            kernels.append(command.kernel if op == abi.Opcode.LAUNCH else ("copy" if op == abi.Opcode.COPY else "fill"))
            templates.append(_new_tuple(type(command), tuple(fields)))
            if patches:
                sites.append((len(templates) - 1, patches))
        return cls(queue.context, templates, sites, n_ranges, kernels)

    def relocated(self, bases, seqs) -> list:
        """The commands with ``bases`` applied and fresh seqs from the iterator ``seqs``."""
        out = list(self.templates)
        TD = abi.TensorDescriptor
        for index, patches in self.sites:
            fields = list(out[index])
            args = None
            for field, arg, r, offset in patches:
                if arg < 0:
                    d = fields[field]
                    fields[field] = _new_tuple(TD, (d[0], d[1], d[2], bases[r] + offset, d[4], d[5], d[6]))
                else:
                    if args is None:
                        args = list(fields[field])
                    d = args[arg]
                    args[arg] = _new_tuple(TD, (d[0], d[1], d[2], bases[r] + offset, d[4], d[5], d[6]))
            if args is not None:
                fields[4] = tuple(args)
            out[index] = fields
        return [_new_tuple(type(self.templates[i]), (c[0], next(seqs), *c[2:])) for i, c in enumerate(out)]


def command_operand_positions(command) -> list:
    """(field, arg index or -1) of each device tensor operand of a recorded command, in order."""
    if command[0] == abi.Opcode.LAUNCH:
        return [(4, j) for j, a in enumerate(command.args)
                if type(a) is abi.TensorDescriptor and a.space == abi.MemorySpace.DEVICE]
    return [(f, -1) for f in (3, 4)[:len(command) - 3]
            if type(command[f]) is abi.TensorDescriptor and command[f].space == abi.MemorySpace.DEVICE]


def command_operands(command) -> list:
    """(address, in device memory?) of each tensor operand of a recorded command, in order; the
    device ones are those ``prepare_program``'s relocations list."""
    fields = command.args if command[0] == abi.Opcode.LAUNCH else command[3:5]
    return [(a.address, a.space == abi.MemorySpace.DEVICE) for a in fields if type(a) is abi.TensorDescriptor]


def _take_free_page(physical, page: int) -> None:
    """Removes one free page from a physical allocator's free list (a page being retired)."""
    free = physical._free  # the driver's own allocator (driver/memory_manager.py)
    size = physical.page_size
    for i, (start, length) in enumerate(free):
        if start <= page < start + length:
            pieces = [(start, page - start), (page + size, start + length - page - size)]
            free[i:i + 1] = [(a, n) for a, n in pieces if n > 0]
            return


_FENCE_MAX = (1 << 63) - 1


def _check_fence(semaphore, value) -> None:
    """Fence words are 64-bit: a semaphore id is an int >= 1, a value an int in [0, 2^63)."""
    if type(semaphore) is not int or semaphore < 1 or type(value) is not int or not 0 <= value <= _FENCE_MAX:
        raise DriverError(DriverStatus.INVALID_ARGUMENT,
                          f"invalid fence: semaphore {semaphore!r}, value {value!r} (need an int id >= 1 and an "
                          f"int value in [0, 2^63))")
