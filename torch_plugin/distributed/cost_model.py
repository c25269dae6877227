"""The modelled cost of a collective over the emulated topology (alpha-beta model, NCCL-style).

Each collective has candidate algorithms; like NCCL's tuner (``ncclTopoGetAlgoTime``), the model
computes every candidate's time for the message size and picks the fastest, and reports which one.

Terms (all times in ns, sizes in bytes, bandwidths in GB/s = bytes per ns):

- ``S``: the message size (all_reduce/broadcast: the tensor; all_gather: the gathered output;
  reduce_scatter: the input; all_to_all: one rank's input).
- ``n``: ranks in the group.
- ``B``: bandwidth of one link, per direction: ``interconnect.bandwidth_gb_per_s *
  interconnect.links_per_pair`` inside a node; across nodes the slower of that and the node link
  (``CollectiveParams.internode_bandwidth_gb_per_s``).
- ``a``: one step's latency: the link latency (``interconnect.latency_ns``, or the node link's
  across nodes) plus ``CollectiveParams.step_overhead_ns``.

Algorithms:

- ``ring``: all_reduce ``2(n-1) (a + S/(n B))`` (reduce-scatter then all-gather round a ring: its
  bus bandwidth is the analytical ring bound ``2(n-1)/n * S / B``); all_gather / reduce_scatter
  ``(n-1)(a + S/(n B))``; broadcast, pipelined along a chain, ``(n-1) a + S / B``.
- ``tree`` (n > 2): all_reduce ``2 ceil(log2 n) a + 2 S / B`` (reduce up, broadcast down, not
  pipelined across the two phases); broadcast ``ceil(log2 n)(a + S / B)``. Wins on latency for small
  messages over many ranks.
- ``direct`` (one shot, fully_connected or switch topologies, ``S <= direct_max_bytes``): every
  rank sends its data straight to every peer: all_reduce ``a + S / B_inj``, all_gather /
  reduce_scatter ``a + S/(n B_inj)``, broadcast ``a + S / B_inj``, where ``B_inj`` is ``B`` on a
  fully connected topology (the n-1 links work in parallel) and ``B/(n-1)`` through a switch (one
  port per device). all_to_all and send/recv are always direct (point to point): all_to_all
  ``a + (n-1)/n * S / B_a2a``; send/recv ``hops * a + S / B``.

Assumptions (documented in docs/distributed.md): links are full duplex and each algorithm keeps
its links busy without contention from other traffic; on a ``ring`` topology, point-to-point traffic
between non-neighbours crosses ``min(d, n-d)`` links; a group that spans nodes runs flat
algorithms whose every step pays the node link (no hierarchical algorithms); reduction arithmetic
is free (it overlaps the transfers).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

KiB, MiB = 1 << 10, 1 << 20

OPS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier",
       "send", "recv", "gather", "scatter")


@dataclass(frozen=True)
class CollectiveParams:
    """Parameters of the collective model that the hardware description does not hold (yet)."""
    direct_max_bytes: int = field(default=256 * KiB, metadata={
        "unit": "B", "doc": "largest message for which the one-shot direct algorithm is a candidate "
                            "(its staging buffer size)"})
    step_overhead_ns: float = field(default=1000.0, metadata={
        "unit": "ns", "doc": "fixed cost of one algorithm step (synchronisation with the peer, "
                             "kernel work per chunk), added to the link latency"})
    launch_ns: float = field(default=5000.0, metadata={
        "unit": "ns", "doc": "fixed cost of one collective (launch and setup), once per op"})
    internode_bandwidth_gb_per_s: float = field(default=25.0, metadata={
        "unit": "GB/s", "doc": "bandwidth of each device's link to other nodes, per direction "
                               "(a 200 Gb/s NIC per device); not in the hardware description yet"})
    internode_latency_ns: float = field(default=5000.0, metadata={
        "unit": "ns", "doc": "one-way latency between nodes; not in the hardware description yet"})

    def __post_init__(self):
        for name in ("direct_max_bytes", "step_overhead_ns", "launch_ns", "internode_latency_ns"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"CollectiveParams.{name} must be >= 0, got {getattr(self, name)!r}")
        if not self.internode_bandwidth_gb_per_s > 0:
            raise ValueError("CollectiveParams.internode_bandwidth_gb_per_s must be > 0, got "
                             f"{self.internode_bandwidth_gb_per_s!r}")


@dataclass(frozen=True)
class Topology:
    """The links a group of ranks runs over."""
    link_bandwidth_gb_per_s: float    # one link (all parallel links of a pair), per direction
    link_latency_ns: float
    kind: str = "fully_connected"     # fully_connected, ring or switch (InterconnectConfig.topology)
    devices_per_node: int = 0         # 0: every rank on one node
    # The links between nodes: from the hardware description when it has them
    # (interconnect.internode_bandwidth_gb_per_s / internode_latency_ns), else CollectiveParams'.
    internode_bandwidth_gb_per_s: float | None = None
    internode_latency_ns: float | None = None

    @classmethod
    def from_config(cls, config, devices_per_node: int | None = None) -> "Topology":
        """From a system description (``emulator.config.SystemConfig``, as ``runtime`` loads it).
        ``devices_per_node``: ranks per node (default: the description's ``devices_per_node`` if it
        has one, else its ``num_devices``)."""
        ic = config.interconnect
        if devices_per_node is None:
            devices_per_node = int(getattr(ic, "devices_per_node", 0) or getattr(config, "devices_per_node", 0)
                                   or config.num_devices)
        net_bw, net_lat = getattr(ic, "internode_bandwidth_gb_per_s", None), getattr(ic, "internode_latency_ns", None)
        return cls(float(ic.bandwidth_gb_per_s) * int(getattr(ic, "links_per_pair", 1)), float(ic.latency_ns),
                   str(getattr(ic, "topology", "fully_connected")), int(devices_per_node),
                   None if net_bw is None else float(net_bw), None if net_lat is None else float(net_lat))

    def with_bandwidth(self, gb_per_s: float) -> "Topology":
        return replace(self, link_bandwidth_gb_per_s=float(gb_per_s))


@dataclass(frozen=True)
class CollectiveCost:
    op: str
    algorithm: str
    nbytes: int
    ranks: int
    time_ns: float
    candidates: dict  # algorithm -> ns

    @property
    def algbw_gb_per_s(self) -> float:
        return self.nbytes / self.time_ns if self.time_ns > 0 else 0.0

    @property
    def bus_factor(self) -> float:
        """NCCL-tests' bus factor of the op: all_reduce 2(n-1)/n; all_gather, reduce_scatter and
        all_to_all (n-1)/n; 1 otherwise."""
        n = self.ranks
        return {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
                "all_to_all": (n - 1) / n}.get(self.op, 1.0)

    @property
    def busbw_gb_per_s(self) -> float:
        """NCCL-tests' bus bandwidth: algbw times the op's bus factor."""
        return self.algbw_gb_per_s * self.bus_factor

    @property
    def link_bytes(self) -> int:
        """The bytes each of a rank's links carries per direction (the bus factor times the size;
        0 for a single rank): the emulated links' byte counters."""
        return 0 if self.ranks < 2 else int(round(self.nbytes * self.bus_factor))


def _link(topo: Topology, params: CollectiveParams, n: int) -> tuple[float, float, bool]:
    """(bandwidth, step latency, spans nodes) of the slowest link the group's algorithms use."""
    bw, lat = topo.link_bandwidth_gb_per_s, topo.link_latency_ns
    spans = topo.devices_per_node > 0 and n > topo.devices_per_node
    if spans:
        net_bw = topo.internode_bandwidth_gb_per_s or params.internode_bandwidth_gb_per_s
        net_lat = params.internode_latency_ns if topo.internode_latency_ns is None else topo.internode_latency_ns
        bw, lat = min(bw, net_bw), max(lat, net_lat)
    return bw, lat + params.step_overhead_ns, spans


def collective_cost(op: str, nbytes: int, ranks: int, topo: Topology,
                    params: CollectiveParams | None = None) -> CollectiveCost:
    """The modelled time of one collective; the fastest candidate algorithm wins."""
    params = params or CollectiveParams()
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r} (known: {', '.join(OPS)})")
    if not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks must be a positive int, got {ranks!r}")
    if not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError(f"nbytes must be a non-negative int, got {nbytes!r}")
    n, S = ranks, nbytes
    if n == 1:
        return CollectiveCost(op, "local", S, n, 0.0, {"local": 0.0})
    B, a, spans = _link(topo, params, n)
    kind = "switch" if spans else topo.kind
    inj = B if kind == "fully_connected" else B / (n - 1)
    logn = math.ceil(math.log2(n))
    direct_ok = kind != "ring" and S <= params.direct_max_bytes
    c: dict[str, float] = {}
    if op in ("all_reduce", "barrier"):
        c["ring"] = 2 * (n - 1) * (a + S / (n * B))
        if n > 2:
            c["tree"] = 2 * logn * a + 2 * S / B
        if direct_ok:
            c["direct"] = a + S / inj
    elif op in ("all_gather", "reduce_scatter", "gather", "scatter"):
        c["ring"] = (n - 1) * (a + S / (n * B))
        if direct_ok:
            c["direct"] = a + S / (n * inj)
    elif op in ("broadcast", "reduce"):
        c["ring"] = (n - 1) * a + S / B
        if n > 2:
            c["tree"] = logn * (a + S / B)
        if direct_ok:
            c["direct"] = a + S / inj
    elif op == "all_to_all":
        if kind == "ring":  # each chunk crosses ~n/4 links on average, two directions each way
            c["direct"] = (n // 2) * a + (n - 1) / n * S * max(1.0, n / 4) / (2 * B)
        else:
            a2a = B * (n - 1) if kind == "fully_connected" else B
            c["direct"] = a + (n - 1) / n * S / a2a
    else:  # send / recv between neighbours (p2p_cost knows the peers' distance)
        c["direct"] = a + S / B
    algorithm = min(c, key=c.get)
    return CollectiveCost(op, algorithm, S, n, params.launch_ns + c[algorithm], c)


def p2p_cost(nbytes: int, src: int, dst: int, ranks: int, topo: Topology,
             params: CollectiveParams | None = None) -> CollectiveCost:
    """send/recv between two ranks: on a ring topology a message crosses min(d, n-d) links."""
    params = params or CollectiveParams()
    per_node = topo.devices_per_node
    spans = bool(per_node) and src // per_node != dst // per_node
    B, a, _ = _link(topo, params, per_node + 1 if spans else 1)
    d = abs(src - dst)
    hops = min(d, ranks - d) if topo.kind == "ring" and not spans else 1
    t = hops * a + nbytes / B
    return CollectiveCost("send", "direct", nbytes, ranks, params.launch_ns + t, {"direct": t})


def ring_bound_ns(nbytes: int, ranks: int, link_bandwidth_gb_per_s: float) -> float:
    """The analytical ring all_reduce time 2(n-1)/n * S / B (no latency)."""
    return 2 * (ranks - 1) / ranks * nbytes / link_bandwidth_gb_per_s
