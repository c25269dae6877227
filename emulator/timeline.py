"""Reservation timelines: how engines, DMA channels and links are shared.

A unit that serves one job at a time is a timeline: a job that asks at ``now``
for ``duration`` starts when the unit is free and holds it until it ends. The
DES process then waits once, until the end. Requests are served in the order
they are made in simulated time, which is what a FIFO SimPy ``Resource`` would
do, at the cost of one event per job instead of three.
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
    """A compute engine served through one timeline: its busy time and kernel count."""

    def __init__(self, clock_ghz: float):
        self.clock_ghz = clock_ghz
        self.timeline = Timeline()

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
