"""Streams and events.

A stream is a driver queue (one submission ring) plus a timeline semaphore.
A *mark* is a value the stream signals on its semaphore once all work before it
completed; synchronising a stream is signalling a new mark and waiting for it.
An event owns its own semaphore: recording signals the next value on a stream,
another stream waits for it with a WAIT command, and its timestamp is the
simulated time the signal executed.
"""
from __future__ import annotations


class Stream:
    def __init__(self, runtime, device: int, stream_id: int, queue, priority: int = 0):
        self._rt = runtime
        self.device = device
        self.stream_id = stream_id
        self.queue = queue
        self.priority = priority
        self.semaphore = runtime.driver.new_semaphore(device)
        # A recycled semaphore starts where its last owner left it: marks count on from there.
        self._base = self._last_mark = runtime.driver.semaphore_value(device, self.semaphore)
        self.dirty = False  # work submitted since the last mark

    def record_mark(self) -> int:
        if self.dirty or self._last_mark == self._base:
            self._last_mark += 1
            self._rt.driver.submit_signal(self.queue, self.semaphore, self._last_mark)
            self.dirty = False
        return self._last_mark

    def pending_mark(self) -> int:
        """The mark that will cover all work submitted so far, without recording it now (the
        allocator notes it at a free; ``wait_mark`` records it if it is still to come)."""
        return self._last_mark + 1 if self.dirty else self._last_mark

    def mark_passed(self, mark: int) -> bool:
        return self._rt.driver.semaphore_value(self.device, self.semaphore) >= mark

    def wait_mark(self, mark: int) -> None:
        if mark > self._last_mark:  # a pending mark: record it first, or nothing will signal it
            self.record_mark()
        self._rt.wait_semaphore(self.device, self.semaphore, mark, what=f"stream emu:{self.device}/{self.stream_id}")

    def synchronize(self) -> None:
        self._rt.stream_synchronize(self)

    def query(self) -> bool:
        return self._rt.stream_query(self)

    def __repr__(self) -> str:
        return f"<runtime.Stream emu:{self.device} id={self.stream_id}>"


class Event:
    def __init__(self, runtime, device: int, enable_timing: bool = False):
        self._rt = runtime
        self.enable_timing = enable_timing
        self.device = -1
        self.semaphore = None
        self.bind(device)

    def bind(self, device: int) -> None:
        """Takes a semaphore of ``device`` (giving back the one of another device, if any). A
        recycled semaphore starts where its last owner left it: records count on from there."""
        driver = self._rt.driver
        if self.semaphore is not None:
            driver.release_semaphore(self.device, self.semaphore, self.count)
        self.device = device
        self.semaphore = driver.new_semaphore(device)
        self.base = self.count = driver.semaphore_value(device, self.semaphore)

    def release(self) -> None:
        """The event is destroyed: its semaphore is recycled once its last record executed."""
        if self.semaphore is not None:
            self._rt.driver.release_semaphore(self.device, self.semaphore, self.count)
            self.semaphore = None

    @property
    def recorded(self) -> bool:
        return self.count > self.base

    def __repr__(self) -> str:
        return f"<runtime.Event emu:{self.device} sem={self.semaphore} count={self.count}>"
