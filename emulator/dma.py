"""DMA engines, each device's host link, and the device-to-device interconnect.

A copy holds one DMA engine for its whole duration and, when bytes cross a link, every link
(direction) on its route, so concurrent copies share link bandwidth (see emulator/timeline.py).
Duration = setup + link latency (per hop) + bytes / bandwidth, where the bandwidth is the
narrowest of the DMA engine (``bytes_per_cycle`` x clock), the links and HBM.

Each device has its own host link (one timeline per direction). Device pairs are linked per
``interconnect.topology``: ``fully_connected`` (a link per ordered pair), ``ring`` (device i to
i +- 1; other pairs route the shorter way round, holding every hop) or ``switch`` (each device
has an up and a down port to a switch; a transfer holds the source's up and the destination's
down port). A collective (firmware COLLECTIVE command) holds its device's network port
``dev<i>.net`` and every link direction leaving the device (``collective_links``). Byte counters: ``HostLink.bytes_to_device/bytes_to_host``, ``Link.bytes``,
``Interconnect.bytes_moved``.

Left out: descriptor chaining, scatter-gather page walks, link packet overheads.
"""
from __future__ import annotations

from emulator.config import DmaConfig, HostLinkConfig, InterconnectConfig
from emulator.timeline import Timeline, TimelinePool


class HostLink:
    """One device's host link."""

    def __init__(self, env, config: HostLinkConfig, device_index: int = 0):
        self.config = config
        self.to_device = Timeline()
        self.to_host = Timeline()
        self.bytes_to_device = 0
        self.bytes_to_host = 0
        self.lane_h2d = f"dev{device_index}.host_link.h2d"
        self.lane_d2h = f"dev{device_index}.host_link.d2h"


class Link(Timeline):
    """One direction of a device-to-device link (or switch port)."""
    __slots__ = ("name", "bytes")

    def __init__(self, name: str):
        super().__init__()
        self.name = name
        self.bytes = 0


class Interconnect:
    def __init__(self, env, config: InterconnectConfig, num_devices: int = 2):
        self.config = config
        self.num_devices = num_devices
        self.links: dict[tuple[int, int], Link] = {}
        self._routes: dict[tuple[int, int], tuple] = {}
        n = num_devices
        if config.topology == "switch":
            self.ports_up = [Link(f"dev{i}-switch.link") for i in range(n)]
            self.ports_down = [Link(f"switch-dev{i}.link") for i in range(n)]
        for a in range(n):
            for b in range(n):
                if a != b:
                    self._routes[(a, b)] = self._route(a, b)
        self.bandwidth_gb_per_s = config.bandwidth_gb_per_s * config.links_per_pair
        # Each device's port into the fabric beyond this system (ranks in other processes, other
        # nodes): every collective the device takes part in holds it.
        self.ports_net = [Link(f"dev{i}.net") for i in range(n)]
        self._collective_links: dict[int, tuple] = {}
        self._bytes = 0

    def _link(self, a: int, b: int) -> Link:
        link = self.links.get((a, b))
        if link is None:
            link = self.links[(a, b)] = Link(f"dev{a}-dev{b}.link")
        return link

    def _route(self, a: int, b: int) -> tuple:
        topology, n = self.config.topology, self.num_devices
        if topology == "fully_connected":
            return (self._link(a, b),)
        if topology == "switch":
            return (self.ports_up[a], self.ports_down[b])
        forward = (b - a) % n
        step = 1 if forward <= n - forward else -1
        hops, at = [], a
        while at != b:
            nxt = (at + step) % n
            hops.append(self._link(at, nxt))
            at = nxt
        return tuple(hops)

    def route(self, src: int, dst: int) -> tuple:
        """The links (directions) a transfer from device ``src`` to ``dst`` holds."""
        return self._routes[(src, dst)]

    def collective_links(self, device: int) -> tuple:
        """What a collective of ``device`` holds: its network port, then every link direction of
        this system that leaves it (a ring or tree algorithm sends on all of them at once; what it
        receives is its peers' sending). Two collectives of one device take turns, and a peer copy
        from the device waits for its collective there, and the other way round."""
        links = self._collective_links.get(device)
        if links is None:
            if self.config.topology == "switch":
                own = (self.ports_up[device],)
            else:
                own = tuple(link for (a, _), link in sorted(self.links.items()) if a == device)
            links = self._collective_links[device] = (self.ports_net[device], *own)
        return links

    @property
    def bytes_moved(self) -> int:
        """Bytes carried between devices (each transfer counted once, however many hops)."""
        return self._bytes

    def all_links(self) -> list:
        if self.config.topology == "switch":
            return self.ports_up + self.ports_down
        return list(self.links.values())

    def count(self, nbytes: int, route) -> None:
        self._bytes += nbytes
        for link in route:
            link.bytes += nbytes


class DmaEngines:
    def __init__(self, env, config: DmaConfig, device_index: int, clock_ghz: float = 1.0):
        self.env = env
        self.config = config
        self.device_index = device_index
        self.engines = TimelinePool(config.engines)
        self.lane_names = tuple(f"dev{device_index}.dma{i}" for i in range(config.engines))
        self.bandwidth_gb_per_s = config.bytes_per_cycle * clock_ghz   # B/cycle * Gcycle/s = GB/s

    @property
    def busy_ns(self) -> float:
        return self.engines.busy_ns

    @property
    def copies(self) -> int:
        return sum(lane.jobs for lane in self.engines.lanes)

    def transfer_ns(self, nbytes: int, bandwidth_gb_per_s: float, latency_ns: float) -> float:
        bandwidth = min(bandwidth_gb_per_s, self.bandwidth_gb_per_s)
        return self.config.setup_ns + latency_ns + nbytes / bandwidth

    def copy_ns(self, nbytes: int, hbm, link_gb_per_s: float | None = None, link_latency_ns: float = 0.0,
                hops: int = 0) -> float:
        """Duration of a copy of ``nbytes`` on one engine, alone on its links and HBM. Within the
        device (no link) it reads and writes HBM: 2 x nbytes through HBM; across a link: the
        narrowest of the link, HBM and the engine, plus the link latency per hop."""
        if link_gb_per_s is None:
            return self.transfer_ns(2 * nbytes, hbm.bytes_per_ns, hbm.config.latency_ns)
        return self.transfer_ns(nbytes, min(link_gb_per_s, hbm.bytes_per_ns), link_latency_ns * hops)
