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
from math import prod

from driver.errors import DriverError, DriverStatus, FirmwareRecordError, InternalErrorRecordError
from driver.firmware_loader import load_and_check
from driver.memory_manager import VA_WINDOW, AddressSpace, AddressSpaceExhausted, PhysicalAllocator
from firmware import (ConfigError, FirmwareImage, HostTransport, Platform, WaitNeverSatisfied, abi,
                      describe_description, load_description)
from firmware.lru import LRUCache

log = logging.getLogger("seed.driver")

# What user space describes a tensor operand with; the driver adds the context's asid.
TensorRef = namedtuple("TensorRef", "host device address dtype shape strides")
MAX_RANK = 12
_ITEMSIZE = abi.ELEMENT_SIZE
_INT = frozenset({int})
_LAUNCH_ARG_TYPES = frozenset({abi.TensorDescriptor, bool, int, float, str, type(None)})
_LAUNCH = abi.Opcode.LAUNCH
_new_tuple = tuple.__new__  # builds ABI records without their Python-level namedtuple __new__
DESCRIPTOR_CACHE_ENTRIES = 4096


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
        self.fault: FirmwareRecordError | None = None
        # TensorRef -> validated abi.TensorDescriptor. Validation is a pure function of the operand
        # and the context, and a training loop launches the same operands over and over.
        self.descriptors = LRUCache(DESCRIPTOR_CACHE_ENTRIES)


class Queue:
    def __init__(self, context: Context, ring_id: int):
        self.context = context
        self.device = context.device
        self.ring_id = ring_id


class Driver:
    def __init__(self, config, image: FirmwareImage | None = None, host_clock=None,
                 transport: HostTransport | None = None):
        # The emulated system is the transport unless a caller hands another one in.
        self.transport = transport if transport is not None else Platform(config)
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
            self._physical[context.device].release(*mapping)

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
            return Queue(context, self._endpoint(context.device).create_ring())

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
        resolved = []
        for a in args:
            kind = type(a)
            if kind is TensorRef:
                a = self._checked_descriptor(a, queue)
            elif kind not in _LAUNCH_ARG_TYPES:
                raise DriverError(DriverStatus.INVALID_ARGUMENT, f"invalid launch argument {a!r}")
            resolved.append(a)
        return self._submit(queue, abi.LaunchCommand, _LAUNCH, kernel, tuple(resolved))

    def submit_signal(self, queue: Queue, semaphore: int, value: int) -> int:
        return self._submit(queue, abi.SignalCommand, abi.Opcode.SIGNAL, semaphore, value)

    def submit_wait(self, queue: Queue, device: int, semaphore: int, value: int) -> int:
        self._endpoint(device)
        return self._submit(queue, abi.WaitCommand, abi.Opcode.WAIT, device, semaphore, value)

    def _submit(self, queue: Queue, command_type, opcode, *fields) -> int:
        """Builds ``command_type(opcode, seq, asid, *fields)`` and writes it to the queue's ring."""
        with self.lock:
            endpoint = self._devices[queue.device]
            seq = next(self._seq)
            command = _new_tuple(command_type, (opcode, seq, queue.context.asid, *fields))
            clock = self.host_clock
            while not endpoint.submit(queue.ring_id, clock.now_ns if clock is not None else self.transport.now_ns(),
                                      command):
                # Back-pressure: the host blocks until the firmware drained half the ring
                # (one wake-up per half ring keeps the simulation batched).
                half = max(1, endpoint.ring_entries(queue.ring_id) // 2)
                self._host_waited_until(endpoint.wait_ring_space(queue.ring_id, half))
            return seq

    def _host_now(self) -> float:
        return self.host_clock.now_ns if self.host_clock is not None else self.transport.now_ns()

    def _host_waited_until(self, t: float) -> None:
        if self.host_clock is not None:
            self.host_clock.wait_until(t)

    # -- completion ------------------------------------------------------
    def semaphore_value(self, device: int, semaphore: int) -> int:
        return self._endpoint(device).semaphore_value(semaphore)

    def semaphore_time_ns(self, device: int, semaphore: int) -> float:
        """Device time of the semaphore's last signal."""
        return self._endpoint(device).semaphore_time_ns(semaphore)

    def wait_semaphore(self, device: int, semaphore: int, value: int) -> float:
        """Blocks the host until the semaphore reaches ``value``; returns the device time it did."""
        with self.lock:
            endpoint = self._endpoint(device)
            try:
                t = endpoint.wait_semaphore(semaphore, value)
            except WaitNeverSatisfied as err:
                raise DriverError(DriverStatus.DEADLOCK,
                                  f"device {device}: semaphore {semaphore} can never reach {value} "
                                  f"(it is at {endpoint.semaphore_value(semaphore)}): {err}") from err
            self._host_waited_until(t)
            self._raise_internal_error()  # an emulator bug seen while the devices ran
            return t

    def _interrupt_handler(self, device: int):
        if not hasattr(self, "_internal_errors"):
            self._internal_errors: list = []  # InternalErrorRecords (of any device) not yet raised
        pending = self._internal_errors

        def handle(vector, payload):
            self.interrupts += 1
            if vector == abi.Irq.ERROR:
                context = self._contexts.get(payload.asid)
                if context is not None and context.fault is None:
                    context.fault = FirmwareRecordError(payload)
            elif vector == abi.Irq.INTERNAL_ERROR:  # an emulator bug: reported once, never sticky
                pending.append(payload)
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
        """Raises the context's sticky fault, if any, else (once) an emulator bug the firmware reported."""
        if context.fault is not None:
            raise context.fault
        self._raise_internal_error()

    # -- recovery --------------------------------------------------------
    def recover(self, device: int, reason: str) -> dict:
        """Dumps state, drains the device and clears its contexts' faults. Safe to call twice."""
        with self.lock:
            endpoint = self._endpoint(device)
            contexts = [c for c in self._contexts.values() if c.device == device]
            dump = {
                "device": device, "reason": reason, "sim_time_ns": self.transport.now_ns(),
                "faults": [c.fault.record._asdict() for c in contexts if c.fault is not None],
                "memory_used": self._physical[device].used,
            }
            log.warning("recovering device %d: %s; state %s", device, reason, dump)
            self.transport.drain()
            for context in contexts:
                context.fault = None
                endpoint.clear_context_fault(context.asid)
            self.resets += 1
            return dump

    def configure_trace(self, entries: int) -> None:
        """Every device keeps its last ``entries`` command trace records (0: no trace)."""
        if type(entries) is not int or entries < 0:
            raise DriverError(DriverStatus.INVALID_ARGUMENT, f"trace entries must be an int >= 0, got {entries!r}")
        with self.lock:
            for endpoint in self._devices:
                endpoint.configure_trace(entries)

    def telemetry(self, device: int) -> dict:
        return self._endpoint(device).telemetry()
