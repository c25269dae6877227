"""DMA engines, the host link and the device-to-device interconnect.

A copy holds one DMA engine for its whole duration and, when bytes cross the
host link or the interconnect, that link direction too, so concurrent copies
share link bandwidth (see emulator/timeline.py). Duration = setup + link latency + bytes / bandwidth, where
the bandwidth is the narrower of the link and HBM. The bytes really move (the
strided copy kernel) when the modelled transfer completes.

Left out: descriptor chaining, scatter-gather page walks, link packet overheads.
"""
from __future__ import annotations

from emulator.config import DmaConfig, HostLinkConfig, InterconnectConfig
from emulator.timeline import Timeline, TimelinePool


class HostLink:
    def __init__(self, env, config: HostLinkConfig):
        self.config = config
        self.to_device = Timeline()
        self.to_host = Timeline()
        self.bytes_to_device = 0
        self.bytes_to_host = 0


class Interconnect:
    def __init__(self, env, config: InterconnectConfig):
        self.config = config
        self.link = Timeline()
        self.bytes_moved = 0


class DmaEngines:
    def __init__(self, env, config: DmaConfig, device_index: int):
        self.env = env
        self.config = config
        self.device_index = device_index
        self.engines = TimelinePool(config.engines)

    @property
    def busy_ns(self) -> float:
        return self.engines.busy_ns

    @property
    def copies(self) -> int:
        return sum(lane.jobs for lane in self.engines.lanes)

    def transfer_ns(self, nbytes: int, bandwidth_gb_per_s: float, latency_ns: float) -> float:
        return self.config.setup_ns + latency_ns + nbytes / bandwidth_gb_per_s
