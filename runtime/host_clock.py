"""Modelled host time.

The host is one thread with a clock in the same time base as the devices' DES.
What moves it, each term kept apart so a report can say where host time went:

- **Runtime API calls** (launch overhead): each call costs ``api_call_ns``
  (``api_calls``, ``call_ns``).
- **Cached allocations**: a malloc the caching allocator serves from its cache makes
  no driver call and costs ``cached_alloc_ns`` (``cached_allocs``, ``cached_alloc_total_ns``);
  one that needs a new segment from the driver is an API call.
- **Command encoding**: a replayed program (torch_plugin/compile) is one submission (an
  API call) plus ``command_encode_ns`` per command it writes (``encoded_commands``,
  ``encode_ns``).
- ``api_ns`` is those three together: all host time spent inside the runtime's API.
- **Synchronisation**: waiting for a fence moves the clock to the time the device
  reached it (``sync_waits``, ``sync_wait_ns``).
- **Ring back-pressure**: a full submission ring blocks the host until the
  firmware drained part of it (``backpressure_waits``, ``backpressure_wait_ns``).
  ``waited_ns`` is both kinds of waiting together.
- **Interrupt servicing**, charged to the host: each interrupt the driver services
  costs ``interrupt_ns`` of host CPU. One that arrives while the host thread runs
  (the device raised it at or before the host's present) steals that time from it:
  the clock moves on by ``interrupt_ns`` (``interrupt_stolen_ns``). One that arrives
  while the host is blocked in a wait is serviced on the otherwise idle CPU and
  delays nothing. A synchronisation is modelled as polling the fence, so the
  completion interrupt is not on its critical path.
- **Host work** (an op the torch plugin runs on the CPU through its host
  fallback), charged by a deterministic cost model, never by measuring it::

      ns = overhead_ns + max(flops / flops_per_s * 1e9, nbytes / memory_bandwidth_gb_per_s)

  (GB/s is bytes per ns), accumulated in ``host_work_ns`` and ``host_work_calls``.

Not modelled: the Python time of the torch plugin itself between runtime calls.
"""
from __future__ import annotations

SYNC, BACKPRESSURE = "sync", "backpressure"
DEFAULT_INTERRUPT_NS = 1000.0  # host.interrupt_service_ns's default (a description without the field)


class HostClock:
    def __init__(self, api_call_ns: float, flops_per_s: float = 100e9,
                 memory_bandwidth_gb_per_s: float = 20.0, overhead_ns: float = 5000.0,
                 interrupt_ns: float = DEFAULT_INTERRUPT_NS, cached_alloc_ns: float = 0.0,
                 command_encode_ns: float = 0.0):
        self.api_call_ns = api_call_ns
        self.cached_alloc_ns = cached_alloc_ns
        self.command_encode_ns = command_encode_ns
        self.flops_per_s = flops_per_s
        self.memory_bandwidth_gb_per_s = memory_bandwidth_gb_per_s
        self.overhead_ns = overhead_ns
        self.interrupt_ns = interrupt_ns
        self.now_ns = 0.0
        self.api_calls = 0
        self.call_ns = 0.0
        self.cached_allocs = 0
        self.cached_alloc_total_ns = 0.0
        self.encoded_commands = 0
        self.encode_ns = 0.0
        self.waited_ns = 0.0
        self.sync_waits = 0
        self.sync_wait_ns = 0.0
        self.backpressure_waits = 0
        self.backpressure_wait_ns = 0.0
        self.interrupts = 0
        self.interrupt_stolen_ns = 0.0
        self.host_work_ns = 0.0
        self.host_work_calls = 0
        self.host_work_flops = 0.0
        self.host_work_bytes = 0.0

    @property
    def api_ns(self) -> float:
        """Host time spent inside the runtime's API (the launch overhead): calls, cached
        allocations and command encoding. With ``waited_ns``, ``interrupt_stolen_ns`` and
        ``host_work_ns`` it is every nanosecond the clock moved."""
        return self.call_ns + self.cached_alloc_total_ns + self.encode_ns

    def charge_call(self) -> None:
        self.api_calls += 1
        self.call_ns += self.api_call_ns
        self.now_ns += self.api_call_ns

    def charge_cached_alloc(self) -> None:
        """A malloc served from the caching allocator's cache (no driver call)."""
        self.cached_allocs += 1
        self.cached_alloc_total_ns += self.cached_alloc_ns
        self.now_ns += self.cached_alloc_ns

    def charge_encode(self, commands: int) -> None:
        """``commands`` descriptors written into a ring by a program's replay."""
        ns = commands * self.command_encode_ns
        self.encoded_commands += commands
        self.encode_ns += ns
        self.now_ns += ns

    def wait_until(self, t_ns: float, reason: str = SYNC) -> None:
        """The host blocks until ``t_ns``: for a fence (``"sync"``) or for ring space
        (``"backpressure"``)."""
        if reason == BACKPRESSURE:
            self.backpressure_waits += 1
        else:
            self.sync_waits += 1
        if t_ns > self.now_ns:
            waited = t_ns - self.now_ns
            self.waited_ns += waited
            if reason == BACKPRESSURE:
                self.backpressure_wait_ns += waited
            else:
                self.sync_wait_ns += waited
            self.now_ns = t_ns

    def service_interrupt(self, t_ns: float) -> None:
        """The driver serviced an interrupt the device raised at ``t_ns``."""
        self.interrupts += 1
        if t_ns <= self.now_ns:  # the host thread was running: the handler steals its time
            self.interrupt_stolen_ns += self.interrupt_ns
            self.now_ns += self.interrupt_ns

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
        self.host_work_flops += flops
        self.host_work_bytes += nbytes
        self.now_ns += ns
        return ns

    def snapshot(self) -> dict:
        """Every counter now (a profiler subtracts two snapshots)."""
        return {"now_ns": self.now_ns, "api_calls": self.api_calls, "api_ns": self.api_ns, "call_ns": self.call_ns,
                "cached_allocs": self.cached_allocs, "cached_alloc_ns": self.cached_alloc_total_ns,
                "encoded_commands": self.encoded_commands, "encode_ns": self.encode_ns,
                "waited_ns": self.waited_ns, "sync_waits": self.sync_waits, "sync_wait_ns": self.sync_wait_ns,
                "backpressure_waits": self.backpressure_waits, "backpressure_wait_ns": self.backpressure_wait_ns,
                "interrupts": self.interrupts, "interrupt_stolen_ns": self.interrupt_stolen_ns,
                "host_work_ns": self.host_work_ns, "host_work_calls": self.host_work_calls,
                "host_work_flops": self.host_work_flops, "host_work_bytes": self.host_work_bytes}
