"""Reservation timelines: how engines, DMA channels and links are shared.

A unit that serves one job at a time is a timeline: a job that asks at ``now``
for ``duration`` starts when the unit is free and holds it until it ends. The
DES process then waits once, until the end. Requests are served in the order
they are made in simulated time, which is what a FIFO SimPy ``Resource`` would
do, at the cost of one event per job instead of three. A core's matrix engine and
its vector engine are separate units (``CoreTimelines``, one per core and kind).
"""
from __future__ import annotations


class Timeline:
    __slots__ = ("free_at", "busy_ns", "jobs")

    def __init__(self):
        self.free_at = 0.0
        self.busy_ns = 0.0
        self.jobs = 0

    def earliest_start(self, now: float) -> float:
        return max(now, self.free_at)

    def hold(self, start: float, duration: float) -> float:
        """Occupies the unit from ``start`` (>= earliest_start) for ``duration``; returns the end."""
        end = start + duration
        self.free_at = end
        self.busy_ns += duration
        self.jobs += 1
        return end


class TimedEngine:
    """A compute engine kind of a device: one timeline per core (``CoreTimelines``), its busy time
    and kernel count."""

    def __init__(self, clock_ghz: float, cores: int = 1):
        self.clock_ghz = clock_ghz
        self.timeline = CoreTimelines(cores)

    @property
    def busy_ns(self) -> float:
        return self.timeline.busy_ns

    @property
    def kernels(self) -> int:
        return self.timeline.jobs


class TimelinePool:
    """``lanes`` identical units (e.g. DMA engines); a job takes the one free first."""

    def __init__(self, lanes: int):
        self.lanes = [Timeline() for _ in range(lanes)]

    def first_free(self) -> Timeline:
        return min(self.lanes, key=lambda lane: lane.free_at)

    @property
    def busy_ns(self) -> float:
        return sum(lane.busy_ns for lane in self.lanes)


class CoreTimelines:
    """One engine kind's units, one per core (``free[i]``: when core i's engine is free). A kernel
    that runs on k cores takes the k cores free first, from the time the last of them is free, and
    holds them until it ends; kernels of other rings run side by side on the other cores.
    ``busy_ns`` is the time any of the cores is busy (the union of kernels' spans), ``jobs`` the
    kernels."""

    __slots__ = ("free", "all_free_at", "busy_ns", "jobs", "cores")

    def __init__(self, cores: int):
        self.cores = cores
        self.free = [0.0] * cores
        self.all_free_at = 0.0   # max(free): from then on every core is free (the common case)
        self.busy_ns = 0.0
        self.jobs = 0

    def reserve(self, now: float, k: int):
        """(start, chosen): the earliest start of a k-core kernel asked for at ``now``, and the
        cores it takes (None: cores 0..k-1, every core being free by ``now``)."""
        if self.all_free_at <= now:
            return now, None
        free = self.free
        idle = [i for i, at in enumerate(free) if at <= now]
        if len(idle) >= k:   # enough cores free already: the lowest-numbered ones
            return now, idle[:k]
        chosen = sorted(range(self.cores), key=free.__getitem__)[:k]
        chosen.sort()
        return free[max(chosen, key=free.__getitem__)], chosen

    def hold(self, chosen, k: int, start: float, end: float) -> None:
        """Occupies ``chosen`` (or cores 0..k-1) until ``end``."""
        free = self.free
        if chosen is None:
            free[:k] = [end] * k
        else:
            for i in chosen:
                free[i] = end
        # busy_ns: time during which any core of this kind is busy (the union of the kernels'
        # spans, as bookings come in time order), so it never exceeds the elapsed time.
        busy_from = start if start > self.all_free_at else self.all_free_at
        if end > busy_from:
            self.busy_ns += end - busy_from
        if end > self.all_free_at:
            self.all_free_at = end
        self.jobs += 1

    def hold_all(self, start: float, duration: float) -> None:
        """Every core busy from ``start`` (a hung engine: nothing runs on any core)."""
        end = max(start, self.all_free_at) + duration
        self.free[:] = [end] * self.cores
        self.all_free_at = end

    def earliest_start(self, now: float) -> float:
        """When a kernel on every core could start."""
        return max(now, self.all_free_at)
