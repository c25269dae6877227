"""The object the C++ core calls into: allocator, guard and hooks -> runtime.

The C++ core only forwards; every device semantic lives in the runtime.
"""
from __future__ import annotations

import itertools

import runtime
from runtime.runtime import Runtime
from torch_plugin import _C
from torch_plugin.errors import raises_torch_errors


def _rt() -> Runtime:
    return runtime.get_runtime()


class Bridge:
    def __init__(self):
        self._events: dict[int, runtime.Event] = {}
        # next() on a count is atomic under the GIL; `id = n; n += 1` could hand two threads
        # (e.g. the autograd worker and the main thread) the same event id.
        self._event_ids = itertools.count(1)
        self.async_host_streams: set = set()  # streams with async copies touching pinned memory

    def device_count(self) -> int:
        try:
            return runtime.configured_device_count()
        except runtime.EmuError:
            # The device guard asks this and must not raise: a broken configuration shows as
            # no devices here, and as its own error (naming the field) at first use.
            return 0

    @raises_torch_errors
    def lazy_init(self) -> None:
        _rt()

    def has_primary_context(self, device: int) -> bool:
        return runtime.is_initialized() and _rt().has_context(device)

    @raises_torch_errors
    def malloc(self, device: int, nbytes: int) -> int:
        return _rt().malloc(device, nbytes, _C._current_stream_id(device))

    def free(self, device: int, ptr: int) -> None:
        _rt().free(device, ptr)

    @raises_torch_errors
    def memcpy_d2d(self, device: int, dst: int, src: int, nbytes: int) -> None:
        rt = _rt()
        code = 1  # uint8 elements: a raw byte copy
        rt.memcpy(runtime.TensorRef(False, device, dst, code, (nbytes,), (1,)),
                  runtime.TensorRef(False, device, src, code, (nbytes,), (1,)),
                  rt.stream(device, _C._current_stream_id(device)), blocking=True)

    def supported_dtypes(self) -> list:
        """The dtypes an emu tensor can hold, copy, convert and fill (torch.accelerator's
        get_device_capability()["supported_dtypes"])."""
        from torch_plugin._dtypes import STORABLE
        return sorted(STORABLE, key=str)

    def device_from_ptr(self, ptr: int) -> int:
        return runtime.device_of_address(ptr)

    # -- streams ---------------------------------------------------------
    @raises_torch_errors
    def stream_create(self, device: int, priority: int) -> int:
        return _rt().stream_create(device, priority).stream_id

    @raises_torch_errors
    def stream_query(self, device: int, stream_id: int) -> bool:
        return _rt().stream(device, stream_id).query()

    @raises_torch_errors
    def stream_synchronize(self, device: int, stream_id: int) -> None:
        _rt().stream(device, stream_id).synchronize()

    @raises_torch_errors
    def device_synchronize(self, device: int) -> None:
        _rt().device_synchronize(device)

    # -- events ----------------------------------------------------------
    @raises_torch_errors
    def event_create(self, device: int, flags: int) -> int:
        # c10::EventFlag: PYTORCH_DEFAULT = 0, BACKEND_DEFAULT = 1; timing is on unless asked off.
        event = _rt().event_create(device, enable_timing=True)
        event_id = next(self._event_ids)
        self._events[event_id] = event
        return event_id

    @raises_torch_errors
    def event_record(self, event_id: int, device: int, stream_id: int) -> None:
        rt = _rt()
        rt.event_record(self._events[event_id], rt.stream(device, stream_id))

    @raises_torch_errors
    def event_block(self, event_id: int, device: int, stream_id: int) -> None:
        rt = _rt()
        rt.stream_wait_event(rt.stream(device, stream_id), self._events[event_id])

    @raises_torch_errors
    def event_query(self, event_id: int) -> bool:
        return _rt().event_query(self._events[event_id])

    @raises_torch_errors
    def event_synchronize(self, event_id: int) -> None:
        _rt().event_synchronize(self._events[event_id])

    @raises_torch_errors
    def event_elapsed_ms(self, start_id: int, end_id: int, device: int) -> float:
        return _rt().event_elapsed_ms(self._events[start_id], self._events[end_id])

    def event_destroy(self, event_id: int, device: int) -> None:
        event = self._events.pop(event_id, None)
        if event is not None and runtime.is_initialized():
            _rt().event_destroy(event)  # the C++ deleter calls this through call_noexcept

    @raises_torch_errors
    def record_stream(self, device: int, ptr: int, stream_id: int) -> None:
        _rt().record_stream(device, ptr, stream_id)

    # -- memory statistics (c10::DeviceAllocator) ---------------------------
    # Queries never power the emulated system on, nor create a device's context: while either
    # is missing the answers are zeros (as torch.cuda.memory_allocated does not initialise CUDA).
    def _live_allocator(self, device: int):
        if not runtime.is_initialized():
            return None
        rt = _rt()
        return rt.device(device).allocator if rt.has_context(device) else None

    def memory_initialized(self) -> bool:
        return runtime.is_initialized()

    @raises_torch_errors
    def memory_stats(self, device: int) -> dict:
        """The allocator's statistics, flat, in torch.cuda.memory_stats() naming
        ("allocated_bytes.all.current", "num_ooms", ...). Only integer entries; the C++ core maps
        them into c10::CachingDeviceAllocator::DeviceStats (absent entries stay 0)."""
        allocator = self._live_allocator(device)
        if allocator is None:
            return {}
        return dict(allocator.stats())

    @raises_torch_errors
    def memory_reset_peak(self, device: int) -> None:
        allocator = self._live_allocator(device)
        if allocator is not None:
            allocator.reset_peak()

    @raises_torch_errors
    def memory_reset_accumulated(self, device: int) -> None:
        allocator = self._live_allocator(device)
        if allocator is not None:
            allocator.reset_accumulated()

    @raises_torch_errors
    def empty_cache(self) -> None:
        """Releases the cached blocks of every device that has a context (powers nothing on)."""
        if runtime.is_initialized():
            rt = _rt()
            for index in range(rt.device_count):
                if rt.has_context(index):
                    rt.empty_cache(index)

    @raises_torch_errors
    def mem_get_info(self, device: int) -> tuple[int, int]:
        """(free, total) bytes of the device; powers the system on if needed."""
        free, total = _rt().mem_get_info(device)
        return int(free), int(total)

    def pinned_free(self, ptr: int) -> None:
        # A pinned block may still be read or written by a queued DMA: finish those first.
        if self.async_host_streams and runtime.is_initialized():
            streams, self.async_host_streams = self.async_host_streams, set()
            for stream in streams:
                stream.synchronize()


# Historical totals torch.accelerator.reset_accumulated_memory_stats() resets.
BRIDGE = Bridge()
