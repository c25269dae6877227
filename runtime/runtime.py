"""The user-mode runtime (CUDA-runtime analogue) the torch plugin builds on.

Launches and copies are asynchronous: they are written to a stream's ring and
the simulation runs later, when the host synchronises. A device fault is
reported by the next synchronising call (or by the faulting call itself under
``EMU_LAUNCH_BLOCKING=1``) and is sticky for the context.
"""
from __future__ import annotations

import itertools
import logging
import threading

from driver import Driver, DriverError, DriverStatus, TensorRef
from runtime import errors
from runtime.allocator import CachingAllocator
from runtime.host_clock import HostClock
from runtime.settings import Settings
from runtime.stream import Event, Stream

log = logging.getLogger("seed.runtime")


def translate_driver_error(err: DriverError) -> errors.EmuError:
    status = err.status
    if status == DriverStatus.INVALID_DEVICE:
        return errors.InvalidDeviceError(str(err))
    if status == DriverStatus.FIRMWARE_VERSION_MISMATCH:
        # Device scope: the device can run nothing until a matching firmware is loaded.
        return errors.InitializationError(str(err), code=errors.ErrorCode.FIRMWARE_VERSION_MISMATCH,
                                          scope=errors.Scope.DEVICE)
    if status == DriverStatus.CONTEXT_FAULTED:
        page_fault = err.record is not None and getattr(err.record.status, "name", "") == "PAGE_FAULT"
        code = errors.ErrorCode.ILLEGAL_ADDRESS if page_fault else errors.ErrorCode.KERNEL_FAULT
        return errors.DeviceFaultError(f"device fault: {err}", code)
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
                               host.fallback_overhead_ns)
        try:
            self.driver = Driver(self.config, firmware_image, host_clock=self.clock)
        except DriverError as err:
            raise translate_driver_error(err) from err
        self.lock = self.driver.lock
        self.launch_blocking = self.settings.launch_blocking
        self.set_trace_entries(self.settings.trace_entries)
        log.info("emulated system %r powered on: %d x %s, firmware %s", self.config.name,
                 self.driver.device_count, self.config.device.name,
                 ".".join(map(str, self.driver.firmware_versions[0])))
        self._devices: dict[int, DeviceState] = {}
        self._events = itertools.count(1)

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

    # -- memory ------------------------------------------------------------
    def malloc(self, device: int, nbytes: int, stream_id: int = 0) -> int:
        if type(nbytes) is not int or nbytes <= 0:
            raise errors.InvalidValueError(f"allocation size must be a positive int, got {nbytes!r}")
        with self.lock:
            state = self.device(device)
            self.clock.charge_call()
            self._check(device)
            return state.allocator.malloc(nbytes, self.stream(device, stream_id))

    def free(self, device: int, address: int) -> None:
        with self.lock:
            self.device(device).allocator.free(address)

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
        try:
            return self.device(device).streams[stream_id]
        except KeyError:
            raise errors.InvalidValueError(f"emu:{device} has no stream {stream_id}") from None

    def stream_create(self, device: int, priority: int = 0) -> Stream:
        with self.lock:
            state = self.device(device)
            self._check(device)
            sid = next(state._stream_ids)
            state.streams[sid] = Stream(self, device, sid, self.driver.create_queue(state.context), priority)
            return state.streams[sid]

    def wait_semaphore(self, device: int, semaphore: int, value: int, what: str | None = None) -> None:
        """Blocks the host until ``semaphore`` reaches ``value``. ``what`` names the waiter (e.g.
        "stream emu:0/3") for the error raised when no queued work can ever get it there."""
        with self.lock:
            try:
                self.driver.wait_semaphore(device, semaphore, value)
            except DriverError as err:
                if err.status == DriverStatus.DEADLOCK:  # the host's wait cannot complete: a user error
                    at = self.driver.semaphore_value(device, semaphore)
                    raise errors.StreamError(
                        f"{what or f'emu:{device}'}: the host waits for fence semaphore {semaphore} to reach "
                        f"{value} (it is at {at}), but no queued work can ever signal it (a wait on an event "
                        f"or fence that nothing will signal?): {err}") from err
                raise translate_driver_error(err) from err
            self._check(device)

    def stream_synchronize(self, stream: Stream) -> None:
        with self.lock:
            self.clock.charge_call()
            self._check(stream.device)
            stream.wait_mark(stream.record_mark())

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
            for stream in list(self.device(device).streams.values()):
                self.stream_synchronize(stream)

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

    def memcpy(self, dst: TensorRef, src: TensorRef, stream: Stream, blocking: bool = False) -> None:
        """Copies between host and device memory, or between devices; same dtype and shape."""
        with self.lock:
            self.clock.charge_call()
            self._check(stream.device)
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
                self.driver.submit_copy(stream.queue, dst, src, peer_asids=peers)
            except DriverError as err:
                raise translate_driver_error(err) from err
            if other:
                after = self.event_create(stream.device)
                self.event_record(after, stream)
                self.stream_wait_event(peer_stream, after)
                self.event_destroy(after)
            self._after_submit(stream, blocking)

    def memset(self, dst: TensorRef, value, stream: Stream) -> None:
        self._enqueue(stream, self.driver.submit_fill, dst, value)

    def launch(self, kernel: str, args: tuple, stream: Stream) -> None:
        # _enqueue, flattened: this is the hot path of every op.
        with self.lock:
            self.clock.charge_call()
            fault = stream.queue.context.fault
            if fault is not None:
                raise translate_driver_error(fault) from fault
            try:
                self.driver.submit_launch(stream.queue, kernel, args)
            except DriverError as err:
                raise translate_driver_error(err) from err
            stream.dirty = True
            if self.launch_blocking:
                self.stream_synchronize(stream)

    def _enqueue(self, stream: Stream, submit, *args) -> None:
        with self.lock:
            self.clock.charge_call()
            self._check(stream.device)
            try:
                submit(stream.queue, *args)
            except DriverError as err:
                raise translate_driver_error(err) from err
            self._after_submit(stream, False)

    # -- recovery and telemetry ------------------------------------------
    def recover(self, device: int, reason: str) -> dict:
        with self.lock:
            self.device(device)
            return self.driver.recover(device, reason)

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
    return _runtime is not None


def device_of_address(address: int) -> int:
    """The device whose virtual address window holds ``address``."""
    return Driver.device_of_address(address)


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
