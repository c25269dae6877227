"""Modelled host time.

Each runtime API call costs ``api_call_ns`` of host time; a synchronisation moves
the host clock to the time the device reached the fence; back-pressure on a full
ring does the same. Projected end-to-end time is this clock, never wall time.

Work the host does itself (an op the torch plugin runs on the CPU through its host
fallback) is charged by a deterministic cost model, never by measuring it::

    ns = overhead_ns + max(flops / flops_per_s * 1e9, nbytes / memory_bandwidth_gb_per_s)

(GB/s is bytes per ns), accumulated in ``host_work_ns`` and ``host_work_calls``.
"""
from __future__ import annotations


class HostClock:
    def __init__(self, api_call_ns: float, flops_per_s: float = 100e9,
                 memory_bandwidth_gb_per_s: float = 20.0, overhead_ns: float = 5000.0):
        self.api_call_ns = api_call_ns
        self.flops_per_s = flops_per_s
        self.memory_bandwidth_gb_per_s = memory_bandwidth_gb_per_s
        self.overhead_ns = overhead_ns
        self.now_ns = 0.0
        self.api_calls = 0
        self.waited_ns = 0.0
        self.host_work_ns = 0.0
        self.host_work_calls = 0

    def charge_call(self) -> None:
        self.api_calls += 1
        self.now_ns += self.api_call_ns

    def wait_until(self, t_ns: float) -> None:
        if t_ns > self.now_ns:
            self.waited_ns += t_ns - self.now_ns
            self.now_ns = t_ns

    def host_work_cost_ns(self, flops: float, nbytes: float) -> float:
        """Modelled host time of one piece of host work: fixed overhead plus its roofline time."""
        compute_ns = flops / self.flops_per_s * 1e9
        memory_ns = nbytes / self.memory_bandwidth_gb_per_s
        return self.overhead_ns + max(compute_ns, memory_ns)

    def charge_host_work(self, flops: float, nbytes: float) -> float:
        """Advances the host clock by the cost of host work; returns the ns charged."""
        ns = self.host_work_cost_ns(flops, nbytes)
        self.host_work_calls += 1
        self.host_work_ns += ns
        self.now_ns += ns
        return ns
