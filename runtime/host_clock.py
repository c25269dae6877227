"""Modelled host time.

Each runtime API call costs ``api_call_ns`` of host time; a synchronisation moves
the host clock to the time the device reached the fence; back-pressure on a full
ring does the same. Projected end-to-end time is this clock, never wall time.
"""
from __future__ import annotations


class HostClock:
    def __init__(self, api_call_ns: float):
        self.api_call_ns = api_call_ns
        self.now_ns = 0.0
        self.api_calls = 0
        self.waited_ns = 0.0

    def charge_call(self) -> None:
        self.api_calls += 1
        self.now_ns += self.api_call_ns

    def wait_until(self, t_ns: float) -> None:
        if t_ns > self.now_ns:
            self.waited_ns += t_ns - self.now_ns
            self.now_ns = t_ns
