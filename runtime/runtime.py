"""The user-mode runtime (CUDA-runtime analogue) the torch plugin builds on.

Launches and copies are asynchronous: they are written to a stream's ring and
the simulation runs later, when the host synchronises. A device fault is
reported by the next synchronising call (or by the faulting call itself under
``EMU_LAUNCH_BLOCKING=1``) and is sticky for its scope; a command the device rejected (bad kernel
arguments) is reported the same way, once, and poisons nothing but its own outputs.
"""
from __future__ import annotations

import itertools
import logging
import threading
from math import prod

from driver import ELEMENT_SIZE, Driver, DriverError, DriverStatus, TensorRef
from driver.driver import RECORDED_KINDS as _COMMAND_KINDS, command_operands as _command_operands
from driver.driver import collective_cost as _driver_collective_cost
from runtime import errors
from runtime.allocator import CachingAllocator
from runtime.host_clock import DEFAULT_INTERRUPT_NS, HostClock
from runtime.settings import Settings
from runtime.stream import Event, Stream

log = logging.getLogger("seed.runtime")


def _contiguous_strides(shape) -> tuple:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def translate_driver_error(err: DriverError) -> errors.EmuError:
    status = err.status
    if status == DriverStatus.INVALID_DEVICE:
        return errors.InvalidDeviceError(str(err))
    if status == DriverStatus.FIRMWARE_VERSION_MISMATCH:
        # Device scope: the device can run nothing until a matching firmware is loaded.
        return errors.InitializationError(str(err), code=errors.ErrorCode.FIRMWARE_VERSION_MISMATCH,
                                          scope=errors.Scope.DEVICE)
    if status == DriverStatus.INVALID_ARGUMENT and getattr(err, "record", None) is not None:
        # A command the firmware rejected (operation scope): it did not run, nothing is sticky.
        return errors.CommandRejectedError(
            f"the device rejected a command: it did not run and its outputs hold no valid data; later "
            f"work runs normally ({_reporting_note(err)}): {err}")
    if status == DriverStatus.CONTEXT_FAULTED:
        page_fault = err.record is not None and getattr(err.record.status, "name", "") == "PAGE_FAULT"
        code = errors.ErrorCode.ILLEGAL_ADDRESS if page_fault else errors.ErrorCode.KERNEL_FAULT
        return errors.DeviceFaultError(f"device fault ({_reporting_note(err)}): {err}", code)
    if status == DriverStatus.STREAM_FAULTED:
        return errors.StreamFaultError(f"stream fault: the stream's queued work was aborted, other streams go "
                                       f"on ({_reporting_note(err)}): {err}", _fault_code(err))
    if status == DriverStatus.DEVICE_NEEDS_RESET:
        return errors.DeviceNeedsResetError(
            f"device fault, the device needs a reset (torch.emu.reset_device / Runtime.reset_device) "
            f"({_reporting_note(err)}): {err}", _fault_code(err))
    if status == DriverStatus.DEVICE_INIT_FAILED:
        return errors.InitializationError(str(err), scope=errors.Scope.DEVICE)
    if status == DriverStatus.NOT_SUPPORTED:
        return errors.EmuError(str(err), code=errors.ErrorCode.NOT_SUPPORTED)
    if status == DriverStatus.INVALID_CONFIGURATION:
        return errors.EmuError(str(err), code=errors.ErrorCode.INVALID_CONFIGURATION)
    if status == DriverStatus.DEADLOCK:
        return errors.StreamError(str(err))
    if status == DriverStatus.INTERNAL_ERROR:
        # A bug in the emulator (firmware's InternalErrorRecord): not a device fault, not sticky.
        return errors.EmulatorBugError(
            f"internal emulator bug, not a device fault (nothing is poisoned, the device stays usable): {err}",
            traceback=getattr(err.record, "traceback", "") or "")
    return errors.InvalidValueError(str(err))


_FAULT_CODES = {"PAGE_FAULT": errors.ErrorCode.ILLEGAL_ADDRESS, "ECC_UNCORRECTABLE": errors.ErrorCode.ECC_UNCORRECTABLE,
                "DMA_ERROR": errors.ErrorCode.DMA_ERROR, "DMA_TIMEOUT": errors.ErrorCode.DMA_TIMEOUT,
                "ENGINE_HANG": errors.ErrorCode.ENGINE_HANG, "HEARTBEAT_LOST": errors.ErrorCode.HEARTBEAT_LOST,
                "RING_CORRUPTED": errors.ErrorCode.RING_CORRUPTED, "LINK_DOWN": errors.ErrorCode.LINK_DOWN,
                "PEER_LINK_ERROR": errors.ErrorCode.PEER_LINK_ERROR}


def _fault_code(err: DriverError) -> errors.ErrorCode:
    name = getattr(getattr(err.record, "status", None), "name", "")
    return _FAULT_CODES.get(name, errors.ErrorCode.DEVICE_NEEDS_RESET if err.status == DriverStatus.DEVICE_NEEDS_RESET
                            else errors.ErrorCode.KERNEL_FAULT)


def _reporting_note(err: DriverError) -> str:
    """Where a device fault surfaces, said in its message (the same text at every later call)."""
    seq = getattr(err, "seq", None)
    if getattr(err, "launch_blocking", False):
        return f"raised at the faulting op under EMU_LAUNCH_BLOCKING=1, correlation id {seq}"
    if getattr(err, "scope", None) == "operation":
        return (f"reported asynchronously: the rejected command, correlation id {seq}, reached the device "
                f"after it was queued, and the error surfaces once, at the next synchronising call; set "
                f"EMU_LAUNCH_BLOCKING=1 to raise it at the op that queued it")
    return (f"reported asynchronously: the faulting command, correlation id {seq}, ran on the device after "
            f"it was queued, and the fault surfaces at the next synchronising call (and every later call "
            f"of its scope); set EMU_LAUNCH_BLOCKING=1 to raise it at the faulting op")


class DeviceState:
    """Per-device runtime state: the primary context, streams and the allocator."""

    def __init__(self, runtime: "Runtime", index: int):
        self.index = index
        self.context = runtime.driver.open_context(index)
        self._stream_ids = itertools.count(1)
        self.streams = {0: Stream(runtime, index, 0, runtime.driver.create_queue(self.context))}
        self.allocator = CachingAllocator(runtime.driver, self.context, index)


class Runtime:
    def __init__(self, settings: Settings | None = None, firmware_image=None):
        self.settings = settings or Settings.from_environment()
        try:
            self.config = self.settings.load_config()
        except DriverError as err:
            raise translate_driver_error(err) from err
        host = self.config.host
        self.clock = HostClock(host.api_call_ns, host.flops_per_s, host.memory_bandwidth_gb_per_s,
                               host.fallback_overhead_ns,
                               getattr(host, "interrupt_service_ns", DEFAULT_INTERRUPT_NS),
                               cached_alloc_ns=host.cached_alloc_ns, command_encode_ns=host.command_encode_ns)
        try:
            self.driver = Driver(self.config, firmware_image, host_clock=self.clock, mode=self.settings.mode)
        except DriverError as err:
            raise translate_driver_error(err) from err
        self.lock = self.driver.lock
        self.projection = self.settings.projection  # EMU_MODE=projection: timed, not computed
        self.launch_blocking = self.settings.launch_blocking
        self.driver.launch_blocking = self.launch_blocking
        self.set_trace_entries(self.settings.trace_entries)
        log.info("emulated system %r powered on: %d x %s, firmware %s", self.config.name,
                 self.driver.device_count, self.config.device.name,
                 ".".join(map(str, self.driver.firmware_versions[0])))
        self._devices: dict[int, DeviceState] = {}
        self._events = itertools.count(1)
        # (device, allocation address) -> (end, cause, correlation id, why): allocations whose data
        # is not valid (a skipped/faulted producer, or a device reset). Empty: one check per launch.
        self._poisoned: dict[tuple[int, int], tuple] = {}
        self._retired_segments: set[tuple[int, int]] = set()  # (device, segment va) to give back
        self._allocation_logs: dict[int, list] = {}  # thread -> [(malloc?, device, address, nbytes)]
        self._arm_configured_faults()

    # -- devices ---------------------------------------------------------
    @property
    def device_count(self) -> int:
        return self.driver.device_count

    def device(self, index: int) -> DeviceState:
        state = self._devices.get(index)
        if state is None:
            if not isinstance(index, int) or not 0 <= index < self.device_count:
                raise errors.InvalidDeviceError(
                    f"invalid device index {index!r}: the system has {self.device_count} emu devices "
                    f"(indices 0..{self.device_count - 1})")
            with self.lock:
                state = self._devices.get(index)
                if state is None:
                    state = self._devices[index] = DeviceState(self, index)
        return state

    def has_context(self, index: int) -> bool:
        return index in self._devices

    def properties(self, index: int):
        self.device(index)
        return self.config.device

    def _check(self, device: int) -> None:
        ctx = self.device(device).context
        if ctx.fault is not None:
            raise translate_driver_error(ctx.fault) from ctx.fault

    def _raise_rejected(self, device: int) -> None:
        """Raises (once) a command of ``device``'s context that the device rejected since the last
        synchronising call (operation scope: CommandRejectedError)."""
        try:
            self.driver.raise_operation_error(self.device(device).context)
        except DriverError as err:
            raise translate_driver_error(err) from err

    # -- memory ------------------------------------------------------------
    def malloc(self, device: int, nbytes: int, stream_id: int = 0) -> int:
        if type(nbytes) is not int or nbytes <= 0:
            raise errors.InvalidValueError(f"allocation size must be a positive int, got {nbytes!r}")
        with self.lock:
            # self.device, self._check and self.stream, inlined (every tensor allocation comes here)
            state = self._devices.get(device)
            if state is None:
                state = self.device(device)
            fault = state.context.fault
            if fault is not None:
                self.clock.charge_call()
                raise translate_driver_error(fault) from fault
            stream = state.streams.get(stream_id)
            if stream is None:
                stream = self.stream(device, stream_id)   # raises InvalidValueError
            allocator = state.allocator
            segments = allocator.num_driver_allocs
            try:
                address = allocator.malloc(nbytes, stream)
            except BaseException:
                self.clock.charge_call()   # it asked the driver (out of memory)
                raise
            # A new segment is a driver call; a block from the cache is the allocator's own work.
            if allocator.num_driver_allocs != segments:
                self.clock.charge_call()
            else:
                self.clock.charge_cached_alloc()
            if self._allocation_logs:
                log_ = self._allocation_logs.get(threading.get_ident())
                if log_ is not None:
                    log_.append((True, device, address, nbytes))
            return address

    def free(self, device: int, address: int) -> None:
        with self.lock:
            if self._allocation_logs:
                log_ = self._allocation_logs.get(threading.get_ident())
                if log_ is not None:
                    log_.append((False, device, address, 0))
            state = self._devices.get(device)
            (state if state is not None else self.device(device)).allocator.free(address)
            if self._poisoned:  # the allocation's data is gone with it: so is its poison
                self._unpoison(device, address)
            if self._retired_segments:
                self._release_retired_segments(device)

    def record_stream(self, device: int, address: int, stream_id: int) -> None:
        with self.lock:
            self.device(device).allocator.record_stream(address, self.stream(device, stream_id))

    def mem_get_info(self, device: int) -> tuple[int, int]:
        self.device(device)
        return self.driver.memory_info(device)

    def memory_snapshot(self, device: int) -> list[dict]:
        with self.lock:
            return self.device(device).allocator.snapshot()

    def empty_cache(self, device: int) -> None:
        with self.lock:
            self.device(device).allocator.empty_cache()

    # -- streams and events ----------------------------------------------
    def stream(self, device: int, stream_id: int = 0) -> Stream:
        state = self._devices.get(device)  # device(), inlined for a device with a context (every op)
        try:
            return (state if state is not None else self.device(device)).streams[stream_id]
        except KeyError:
            raise errors.InvalidValueError(f"emu:{device} has no stream {stream_id}") from None

    def stream_create(self, device: int, priority: int = 0) -> Stream:
        with self.lock:
            state = self.device(device)
            self._check(device)
            sid = next(state._stream_ids)
            state.streams[sid] = Stream(self, device, sid, self.driver.create_queue(state.context), priority)
            return state.streams[sid]

    def wait_semaphore(self, device: int, semaphore: int, value: int, what: str | None = None,
                       charge_host: bool = True) -> float:
        """Blocks the host until ``semaphore`` reaches ``value``; returns the device time it did.
        ``what`` names the waiter (e.g. "stream emu:0/3") for the error raised when no queued work
        can ever get it there. ``charge_host=False`` leaves the modelled host clock where it is."""
        with self.lock:
            try:
                t = self.driver.wait_semaphore(device, semaphore, value, charge_host)
            except DriverError as err:
                if err.status == DriverStatus.DEADLOCK:  # the host's wait cannot complete: a user error
                    at = self.driver.semaphore_value(device, semaphore)
                    raise errors.StreamError(
                        f"{what or f'emu:{device}'}: the host waits for fence semaphore {semaphore} to reach "
                        f"{value} (it is at {at}), but no queued work can ever signal it (a wait on an event "
                        f"or fence that nothing will signal?): {err}") from err
                raise translate_driver_error(err) from err
            finally:
                if self.driver.poison_pending:
                    self._absorb_poisoned()
            self._check(device)
            if self._devices[device].context.errors:
                self._raise_rejected(device)
            return t

    def stream_synchronize(self, stream: Stream) -> None:
        with self.lock:
            self.clock.charge_call()
            self._check(stream.device)
            stream.wait_mark(stream.record_mark())
            if stream.queue.fault is not None:
                self._raise_stream_fault(stream)

    def stream_query(self, stream: Stream) -> bool:
        with self.lock:
            mark = stream.record_mark()
            self.clock.charge_call()  # polling costs host time, so a polling loop sees progress
            # The device runs concurrently with the host: advance it to the host's present.
            self._advance_to_host_time()
            return stream.mark_passed(mark)

    def _advance_to_host_time(self) -> None:
        self.driver.advance_to(self.clock.now_ns)

    def device_synchronize(self, device: int) -> None:
        with self.lock:
            rejected = None
            for stream in list(self.device(device).streams.values()):
                try:
                    self.stream_synchronize(stream)
                except errors.CommandRejectedError as err:  # not sticky: wait for the others first
                    rejected = rejected or err
            if rejected is not None:
                raise rejected

    def event_create(self, device: int, enable_timing: bool = False) -> Event:
        self.device(device)
        return Event(self, device, enable_timing)

    def event_destroy(self, event: Event) -> None:
        """Recycles the event's semaphore once its last record has executed."""
        with self.lock:
            event.release()

    def event_record(self, event: Event, stream: Stream) -> None:
        with self.lock:
            self.clock.charge_call()
            self._check(stream.device)
            if event.device != stream.device:
                event.bind(stream.device)  # a semaphore lives in one device's fence bank
            event.count += 1
            self.driver.submit_signal(stream.queue, event.semaphore, event.count)

    def stream_wait_event(self, stream: Stream, event: Event) -> None:
        if not event.recorded:
            return  # like CUDA: waiting on a never-recorded event is a no-op
        with self.lock:
            self.clock.charge_call()
            self.driver.submit_wait(stream.queue, event.device, event.semaphore, event.count)
            stream.dirty = True

    def event_query(self, event: Event) -> bool:
        if not event.recorded:
            return True
        with self.lock:
            self.clock.charge_call()
            self._advance_to_host_time()
            return self.driver.semaphore_value(event.device, event.semaphore) >= event.count

    def event_synchronize(self, event: Event) -> None:
        if event.recorded:
            self.clock.charge_call()
            self.wait_semaphore(event.device, event.semaphore, event.count,
                                what=f"event emu:{event.device} (semaphore {event.semaphore}, record #{event.count})")

    def event_elapsed_ms(self, start: Event, end: Event) -> float:
        if not (start.enable_timing and end.enable_timing):
            raise errors.InvalidValueError("elapsed_time needs both events created with enable_timing=True")
        if not (start.recorded and end.recorded):
            raise errors.InvalidValueError("elapsed_time needs both events recorded")
        self.event_synchronize(start)
        self.event_synchronize(end)
        t0 = self.driver.semaphore_time_ns(start.device, start.semaphore)
        t1 = self.driver.semaphore_time_ns(end.device, end.semaphore)
        return (t1 - t0) / 1e6

    # -- copies, fills, launches -----------------------------------------
    def _after_submit(self, stream: Stream, blocking: bool) -> None:
        stream.dirty = True
        if blocking or self.launch_blocking:
            self.stream_synchronize(stream)

    def memcpy(self, dst: TensorRef, src: TensorRef, stream: Stream, blocking: bool = False) -> int:
        """Copies between host and device memory, or between devices; same dtype and shape. Returns
        the copy command's seq."""
        if self.projection and dst.host:
            raise errors.ProjectionModeError(
                f"a copy of {prod(src.shape)} elements from emu:{src.device} to host memory: projection mode "
                f"(EMU_MODE=projection) holds no values to copy. Keep results on the device (shapes, "
                f"memory and the modelled times are available), or run in EMU_MODE=functional",
                op="memcpy_d2h")
        with self.lock:
            self.clock.charge_call()
            self._check(stream.device)
            if self._poisoned:
                self._check_poisoned(stream.device, (src,))
                self._unpoison_covered(dst, (src,))
            peers = None
            other = [r.device for r in (dst, src) if not r.host and r.device != stream.device]
            if other:
                peer = other[0]
                peers = {peer: self.device(peer).context.asid}
                # Order against the peer's current work on both sides of the copy.
                peer_stream = self.stream(peer, 0)
                before = self.event_create(peer)
                self.event_record(before, peer_stream)
                self.stream_wait_event(stream, before)
                self.event_destroy(before)
            try:
                seq = self.driver.submit_copy(stream.queue, dst, src, peer_asids=peers)
            except DriverError as err:
                raise translate_driver_error(err) from err
            if other:
                after = self.event_create(stream.device)
                self.event_record(after, stream)
                self.stream_wait_event(peer_stream, after)
                self.event_destroy(after)
            self._after_submit(stream, blocking)
            if blocking and self._poisoned and not src.host:  # the producer's fault came in meanwhile
                self._check_poisoned(stream.device, (src,))
            return seq

    def memset(self, dst: TensorRef, value, stream: Stream) -> int:
        return self._enqueue(stream, self.driver.submit_fill, dst, value)

    def launch(self, kernel: str, args: tuple, stream: Stream) -> int:
        # _enqueue, flattened: this is the hot path of every op (the lock taken without a with
        # statement: its __enter__/__exit__ calls cost about twice acquire and release).
        lock = self.lock
        lock.acquire()
        try:
            self.clock.charge_call()
            fault = stream.queue.context.fault
            if fault is not None:
                raise translate_driver_error(fault) from fault
            if self._poisoned:
                if kernel in ("fill", "copy"):  # pure writers of args[0]
                    self._unpoison_covered(args[0], args[1:])
                self._check_poisoned(stream.device, args)
            try:
                seq = self.driver.submit_launch(stream.queue, kernel, args)
            except DriverError as err:
                raise translate_driver_error(err) from err
            stream.dirty = True
            if self.launch_blocking:
                self.stream_synchronize(stream)
            return seq  # the driver's command seq: the correlation id of the firmware trace
        finally:
            lock.release()

    def _enqueue(self, stream: Stream, submit, *args) -> int:
        with self.lock:
            self.clock.charge_call()
            self._check(stream.device)
            try:
                seq = submit(stream.queue, *args)
            except DriverError as err:
                raise translate_driver_error(err) from err
            self._after_submit(stream, False)
            return seq

    # -- recovery and telemetry ------------------------------------------
    def recover(self, device: int, reason: str) -> dict:
        """The former name of ``reset_device`` (kept as its alias)."""
        return self.reset_device(device, reason)

    def charge_host_work(self, flops: float, nbytes: float) -> float:
        """Charges work the host did itself (an op run on the CPU) to the modelled host clock.

        The cost is the host cost model of ``config.host``, never wall time:
        ``fallback_overhead_ns + max(flops / flops_per_s, nbytes / memory_bandwidth_gb_per_s)``.
        Returns the modelled nanoseconds charged.
        """
        with self.lock:
            return self.clock.charge_host_work(flops, nbytes)

    def set_trace_entries(self, entries: int) -> None:
        """How many command trace records each device keeps (0 switches the trace off; the
        per-kernel statistics of the performance report are kept either way)."""
        try:
            self.driver.configure_trace(entries)
        except DriverError as err:
            raise translate_driver_error(err) from err

    def telemetry(self, device: int) -> dict:
        with self.lock:
            data = dict(self.driver.telemetry(device))
            data["host_time_ns"] = self.clock.now_ns
            data["device_time_ns"] = self.driver.now_ns
            data["api_calls"] = self.clock.api_calls
            return data

    # -- profiling (torch_plugin/profile.py) ----------------------------------
    def command_trace(self, device: int, min_seq: int = 0) -> list:
        """The firmware's trace records of ``device`` (``abi.TraceEntry``; the newest
        ``EMU_TRACE_ENTRIES`` are kept), oldest first. With ``min_seq``: only the newest ones, back
        to the first record of a command older than it (every command of a block that started on
        idle devices; the profiler's read, which does not copy the whole trace). A device without
        a context has none."""
        if not self.has_context(device):
            return []
        with self.lock:
            if min_seq:
                return self.driver.trace_since(device, min_seq)
            return list(self.driver.telemetry(device)["trace"])

    def synchronize_all(self) -> None:
        """Waits for every stream of every device that has a context."""
        with self.lock:
            for index in range(self.device_count):
                if self.has_context(index):
                    self.device_synchronize(index)


    # -- faults: injection, health, poisoned data, reset -------------------
    def _arm_configured_faults(self) -> None:
        """Arms the faults of EMU_FAULTS and of the TOML [faults] section (at power-on)."""
        for kind, device, trigger in self.settings.faults:
            try:
                self.driver.inject_fault(device, kind, trigger)
            except DriverError as err:
                raise errors.InvalidValueError(f"EMU_FAULTS / [faults]: {kind} on device {device}: {err}") from err

    def inject_fault(self, device: int, kind: str, **trigger) -> int:
        """Arms a hardware fault on ``device`` (kinds and triggers: emulator/faults.py); its handle."""
        with self.lock:
            try:
                return self.driver.inject_fault(device, kind, trigger)
            except DriverError as err:
                raise translate_driver_error(err) from err

    def cancel_fault(self, device: int, handle: int) -> bool:
        with self.lock:
            return self.driver.cancel_fault(device, handle)

    def clear_faults(self, device: int | None = None) -> None:
        with self.lock:
            for index in range(self.device_count) if device is None else (device,):
                self.driver.clear_faults(index)

    def health(self, device: int) -> dict:
        with self.lock:
            try:
                data = self.driver.health(device)
            except DriverError as err:
                raise translate_driver_error(err) from err
            data["poisoned_allocations"] = sum(1 for d, _ in self._poisoned if d == device)
            return data

    def error_log(self, device: int) -> dict:
        with self.lock:
            try:
                return self.driver.error_log(device)
            except DriverError as err:
                raise translate_driver_error(err) from err

    def reset_device(self, device: int, reason: str = "user request") -> dict:
        """The one recovery entry point (safe to call twice): dumps state to the log, aborts in-flight
        work (every pending fence completes), resets firmware and engines, retires pages that had an
        uncorrectable error, clears every fault of the device. Afterwards, outputs that skipped or
        faulted commands did not write raise ``PoisonedDataError`` when read; after a device-scope
        fault every allocation that lived on the device does."""
        with self.lock:
            state = self.device(device)
            try:
                dump = self.driver.reset_device(device, reason)
            except DriverError as err:
                raise translate_driver_error(err) from err
            device_fault = dump.pop("device_fault_error", None)
            for context, va in dump.pop("retired_mappings", ()):
                if context is state.context:  # a segment holding a retired page: released once free
                    self._retired_segments.add((device, va))
            self._absorb_poisoned()
            if device_fault is not None:  # memory contents are not trusted after a device-scope fault
                for block in list(state.allocator._live.values()):
                    self._poisoned[(device, block.address)] = (block.address + block.size, device_fault,
                                                               device_fault.seq, "reset")
            for stream in state.streams.values():
                stream.dirty = True  # the next synchronisation records a fresh mark
            log.warning("emu:%d reset (%s)", device, reason)
            return dump

    def _absorb_poisoned(self) -> None:
        """Marks the allocations holding outputs that skipped or faulted commands did not write."""
        for context, va, seq, err in self.driver.collect_poisoned():
            state = self._devices.get(context.device)
            if state is None or state.context is not context:
                continue
            block = state.allocator._find(va)
            if block is not None and (context.device, block.address) not in self._poisoned:
                self._poisoned[(context.device, block.address)] = (block.address + block.size, err, seq, "skipped")

    def _unpoison(self, device: int, address: int) -> None:
        self._poisoned.pop((device, address), None)

    def _release_retired_segments(self, device: int) -> None:
        """Gives a segment holding a retired page back to the driver once none of its blocks is in
        use (the driver keeps the page out of its free list)."""
        allocator = self._devices[device].allocator
        if allocator._busy:  # a deleter inside an allocator call: the next free does it
            return
        for key in [k for k in self._retired_segments if k[0] == device]:
            segment = allocator._segments.get(key[1])
            if segment is None:
                self._retired_segments.discard(key)
            elif not segment.first.allocated and not segment.first.pending and segment.first.next is None:
                allocator.empty_cache()
                self._retired_segments.discard(key)

    def _unpoison_covered(self, dst, sources) -> None:
        """A write of a whole poisoned allocation (an upload, a fill) makes its data valid again,
        unless it reads the same allocation."""
        if type(dst) is not TensorRef or dst.host or (dst.device, dst.address) not in self._poisoned:
            return
        state = self._devices.get(dst.device)
        block = state.allocator._find(dst.address) if state is not None else None
        if block is None or block.address != dst.address:
            return
        span = 1
        for n, st in zip(dst.shape, dst.strides):
            span += (n - 1) * st
        contiguous = all(st == s for st, s in zip(dst.strides, _contiguous_strides(dst.shape)))
        if not contiguous or span * ELEMENT_SIZE.get(dst.dtype, 0) < block.requested:
            return
        if any(type(r) is TensorRef and not r.host and r.device == dst.device
               and block.address <= r.address < block.address + block.size for r in sources):
            return
        del self._poisoned[(dst.device, block.address)]

    def _check_poisoned(self, device: int, refs) -> None:
        """Raises PoisonedDataError if an operand in ``refs`` lies in a poisoned allocation."""
        for ref in refs:
            if type(ref) is not TensorRef or ref.host:
                continue
            for (d, lo), (hi, cause, seq, why) in self._poisoned.items():
                if d == ref.device and lo <= ref.address < hi:
                    if why == "reset":
                        what = (f"it lived on emu:{d} when the device was reset after a device-scope fault "
                                f"(correlation id {seq}); allocate it again")
                    else:
                        what = (f"the command that should have written it (correlation id {seq}) was skipped "
                                f"or faulted")
                    raise errors.PoisonedDataError(
                        f"emu:{d}: the tensor at 0x{ref.address:x} holds no valid data: {what}; cause: "
                        f"{cause}") from cause

    def _raise_stream_fault(self, stream: Stream) -> None:
        try:
            self.driver.check_queue(stream.queue)
        except DriverError as err:
            raise translate_driver_error(err) from err

    # -- simulated time across processes (torch_plugin/distributed) ----------
    def host_time_ns(self) -> float:
        """The modelled host clock now (ns of simulated time)."""
        return self.clock.now_ns

    def advance_host_time(self, t_ns: float) -> float:
        """The host blocks until simulated time ``t_ns`` (a collective that completes then, in every
        rank's time); the devices advance to it too. A no-op if the host is already past it.
        Returns the ns waited (counted as a synchronisation wait)."""
        with self.lock:
            before = self.clock.now_ns
            self.clock.wait_until(float(t_ns))
            self._advance_to_host_time()
            return self.clock.now_ns - before

    # -- collectives (torch_plugin/distributed) --------------------------------
    def stream_reached_ns(self, stream: Stream) -> float:
        """The device time at which ``stream`` passes the work submitted to it so far (the host's
        present if it already did). The host waits for it functionally but its modelled clock does not move: the emulated devices run
        ahead of the host to there (a collective reads its inputs this way; on the hardware
        modelled, the host would not wait). Work submitted meanwhile to another, idle ring of this
        system starts no earlier than where the devices got to."""
        with self.lock:
            self.clock.charge_call()
            self._check(stream.device)
            mark = stream.record_mark()
            t = self.wait_semaphore(stream.device, stream.semaphore, mark,
                                    what=f"stream emu:{stream.device}/{stream.stream_id}", charge_host=False)
            if stream.queue.fault is not None:
                self._raise_stream_fault(stream)
            return max(t, self.clock.now_ns)   # an idle stream: the host's present

    def event_passed(self, event: Event) -> bool:
        """Whether the devices have executed the event's last record so far, without charging an
        API call and without advancing the devices (bookkeeping, not a query of the program)."""
        if not event.recorded:
            return True
        with self.lock:
            return self.driver.semaphore_value(event.device, event.semaphore) >= event.count

    def collective(self, stream: Stream, name: str, pairs, not_before_ns: float = 0.0, op: str = "",
                   nbytes: int = 0, ranks: int = 1, nodes: int = 1, hops: int = 1, algorithm: str = "") -> int:
        """Enqueues a collective's part on ``stream`` (abi.Opcode.COLLECTIVE): from ``not_before_ns``
        (device time) at the earliest it holds the device's network port and links for the time the
        device models ``op`` with (``collective_cost``; ``op`` "": nothing held), then copies each
        (dst, src) pair of TensorRefs without modelled time (the functional path of the data through
        the host). Returns the command's seq."""
        with self.lock:
            self.clock.charge_call()
            self._check(stream.device)
            if self._poisoned:
                self._check_poisoned(stream.device, tuple(src for _, src in pairs))
                for dst, src in pairs:
                    self._unpoison_covered(dst, (src,))
            try:
                seq = self.driver.submit_collective(stream.queue, name, pairs, not_before_ns, op, nbytes, ranks, nodes,
                                                    hops, algorithm)
            except DriverError as err:
                raise translate_driver_error(err) from err
            self._after_submit(stream, False)
            return seq

    def collective_cost(self, op: str, nbytes: int, ranks: int, nodes: int = 1, hops: int = 1, algorithm: str = ""):
        """The time the devices of this system model for a collective (``collective_cost`` on this
        system's interconnect): what ``collective`` with the same fields will hold the links for."""
        return collective_cost(self.config.interconnect, op, nbytes, ranks, nodes, hops, algorithm)

    # -- captured programs (torch_plugin/compile: a compiled graph captured once, replayed) ------
    def begin_capture(self) -> list:
        """Starts a capture on this thread: returns a timeline list to which, in order, each malloc
        and free of this thread is appended as (is_malloc, device, address, nbytes) and each
        command submitted (by any thread) as (stream queue, command). The caller may append its
        own markers. Commands still run. ``end_capture`` stops it."""
        with self.lock:
            timeline: list = []
            self._allocation_logs[threading.get_ident()] = timeline
            self.driver.begin_recording(timeline)
            return timeline

    def end_capture(self) -> None:
        with self.lock:
            self.driver.end_recording()
            self._allocation_logs.pop(threading.get_ident(), None)

    @staticmethod
    def recorded_operands(command) -> list:
        """(address, in device memory?) of each tensor operand of a recorded command."""
        return _command_operands(command)

    @staticmethod
    def recorded_kind(command) -> str:
        """"launch", "copy", "fill", or "other" (a fence, a wait, a collective: not replayable)."""
        return _COMMAND_KINDS.get(command[0], "other")

    def replay_allowed(self) -> bool:
        """False while poisoned allocations exist (each launch must then check its operands)."""
        return not self._poisoned

    def prepare_program(self, stream: Stream, commands, relocations, fixed_bases=None):
        """A replayable image of recorded commands (Driver.prepare_program): ``relocations[i]`` has
        None or (range, offset) per device operand of command i; ranges in ``fixed_bases`` are
        relocated once, now, the others at each replay."""
        try:
            return self.driver.prepare_program(stream.queue, commands, relocations, fixed_bases)
        except DriverError as err:
            raise translate_driver_error(err) from err

    def replay(self, stream: Stream, image, bases) -> int | None:
        """Submits a prepared program on ``stream``: one API call (the submission) plus
        ``host.command_encode_ns`` per command, one ring write and one doorbell. Returns the
        first command's seq, or None when the caller must run the program op by op instead
        (poisoned allocations exist: each launch then checks its operands)."""
        with self.lock:
            if self._poisoned:
                return None
            self.clock.charge_call()   # the submission
            fault = stream.queue.context.fault
            if fault is not None:
                raise translate_driver_error(fault) from fault
            self.clock.charge_encode(len(image))
            try:
                seq = self.driver.submit_program(stream.queue, image, bases)
            except DriverError as err:
                raise translate_driver_error(err) from err
            self._after_submit(stream, False)
            return seq


_runtime: Runtime | None = None
_init_lock = threading.Lock()


def get_runtime() -> Runtime:
    """The process's runtime; created (and the emulated system powered on) on first use."""
    global _runtime
    if _runtime is None:
        with _init_lock:
            if _runtime is None:
                _runtime = Runtime()
    return _runtime


def is_initialized() -> bool:
    return _runtime is not None and not isinstance(_runtime, _ForkedChildRuntime)


class _ForkedChildRuntime:
    """What a forked child sees in place of the runtime its parent had powered on. The emulated
    system (its memory, its simulation, its helper threads) belongs to the parent: a copy of it
    in the child would compute on a half-copied state. Every use raises; device_count still
    answers, and frees of tensors inherited from the parent do nothing."""

    def __init__(self, parent: Runtime, message: str):
        self._parent = parent  # kept alive: its finalisers must not run in the child
        self._message = message
        self.device_count = parent.device_count

    def free(self, *args, **kwargs) -> None:
        pass

    def __getattr__(self, name: str):
        raise errors.InitializationError(self._message)


def refuse_in_forked_child(message: str) -> bool:
    """Called in a forked child (os.register_at_fork): if the parent had powered the system on,
    every later use of the runtime raises InitializationError(message). Returns whether it did."""
    global _runtime
    if _runtime is None or isinstance(_runtime, _ForkedChildRuntime):
        return isinstance(_runtime, _ForkedChildRuntime)
    _runtime = _ForkedChildRuntime(_runtime, message)
    return True


def device_of_address(address: int) -> int:
    """The device whose virtual address window holds ``address``."""
    return Driver.device_of_address(address)


def collective_cost(interconnect, op: str, nbytes: int, ranks: int, nodes: int = 1, hops: int = 1,
                    algorithm: str = ""):
    """The device's model of a collective on ``interconnect`` (a hardware description's
    ``interconnect``), without a powered-on system: an ``emulator.collectives.CollectiveCost``
    (``algorithm``, ``time_ns``, ``candidates``, bus bandwidth). Bad fields: InvalidValueError."""
    try:
        return _driver_collective_cost(interconnect, op, nbytes, ranks, nodes, hops, algorithm)
    except DriverError as err:
        raise translate_driver_error(err) from err


def hardware_description(config) -> dict:
    """A system description as nested dicts (units in the field names)."""
    from driver import describe_configuration
    return describe_configuration(config)


def configured_device_count() -> int:
    """Devices the configuration describes, without powering the system on."""
    if _runtime is not None:
        return _runtime.device_count
    try:
        return Settings.from_environment().load_config().num_devices
    except DriverError as err:
        raise translate_driver_error(err) from err
