"""The time of a collective on the interconnect of the hardware description (NCCL-style).

A COLLECTIVE command (firmware/abi.py) carries the op, the message size, the group's shape (ranks,
the nodes it spans, the hops of a point-to-point message) and an algorithm hint; the firmware
asks this model how long the device's network port and links are held. Like NCCL's tuner
(``ncclTopoGetAlgoTime``) the model computes every candidate algorithm's time and picks the
fastest, unless the hint names one.

Terms (times in ns, sizes in bytes, bandwidths in GB/s = bytes per ns):

- ``S``: the message size (all_reduce/broadcast: the tensor; all_gather: the gathered output;
  reduce_scatter: the input; all_to_all: one rank's input).
- ``n``: ranks in the group.
- ``B``: the payload bandwidth of one device's link, per direction:
  ``bandwidth_gb_per_s * links_per_pair * protocol_efficiency`` (the protocol's flags and
  synchronisation take the rest: NCCL's Simple protocol); across nodes the slower of that and the
  node link.
- ``a``: one step's latency: ``latency_ns`` (or the node link's) plus ``collective_step_ns``.

Algorithms:

- ``ring``: all_reduce ``2(n-1)(a + S/(nB))``; all_gather / reduce_scatter ``(n-1)(a + S/(nB))``;
  broadcast / reduce, pipelined along a chain, ``(n-1)a + S/B``.
- ``tree`` (n > 2): all_reduce ``2 ceil(log2 n) a + 2S/B``; broadcast ``ceil(log2 n)(a + S/B)``.
- ``direct`` (one shot, fully_connected or switch, ``S <= direct_max_bytes``): all_reduce
  ``a + S/B_inj``, all_gather / reduce_scatter ``a + S/(n B_inj)``, broadcast ``a + S/B_inj``;
  ``B_inj`` is ``B`` fully connected (n-1 links in parallel) and ``B/(n-1)`` through a switch.
  all_to_all and send/recv are always direct: ``a + (n-1)/n S/B_a2a``; ``hops a + S/B``.
- ``nvls`` (all_reduce inside one node on a ``switch`` with ``in_switch_reduction``, NVLink
  SHARP): each device sends its whole buffer into the switch, which reduces it, and receives its
  reduced share (reduce-scatter by the switch), then sends that share once and the switch
  multicasts it to every device (all-gather): each port direction carries ``S + S/n``, the two
  phases pipelined by chunks: ``2a + S(n+1)/(n B_sw)``, with ``B_sw = bandwidth_gb_per_s *
  links_per_pair * in_switch_efficiency`` (the switch's reduction and multicast rate per port).

Left out: contention with other traffic on the links (the firmware holds them, so a device's
collectives take turns), hierarchical algorithms across nodes (flat algorithms pay the node link
on every step), NCCL's LL/LL128 protocols for small messages (one protocol efficiency), and the
reduction arithmetic (it overlaps the transfers).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

OPS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier",
       "send", "recv", "gather", "scatter")
ALGORITHMS = ("ring", "tree", "direct", "nvls", "local")


@dataclass(frozen=True)
class CollectiveCost:
    op: str
    algorithm: str
    nbytes: int
    ranks: int
    time_ns: float
    candidates: dict  # algorithm -> ns (the launch cost excluded)

    @property
    def algbw_gb_per_s(self) -> float:
        return self.nbytes / self.time_ns if self.time_ns > 0 else 0.0

    @property
    def bus_factor(self) -> float:
        """nccl-tests' bus factor: all_reduce 2(n-1)/n; all_gather, reduce_scatter and all_to_all
        (n-1)/n; 1 otherwise."""
        return bus_factor(self.op, self.ranks)

    @property
    def busbw_gb_per_s(self) -> float:
        """nccl-tests' bus bandwidth: algbw times the op's bus factor."""
        return self.algbw_gb_per_s * self.bus_factor

    @property
    def link_bytes(self) -> int:
        """The bytes each held link direction carries (the bus factor times the size; 0 for one
        rank): the emulated links' byte counters."""
        return 0 if self.ranks < 2 else int(round(self.nbytes * self.bus_factor))


def bus_factor(op: str, ranks: int) -> float:
    n = ranks
    return {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
            "all_to_all": (n - 1) / n}.get(op, 1.0)


def nodes_spanned(global_ranks, devices_per_node: int) -> int:
    """Nodes a group of global ranks covers (rank r sits on node r // devices_per_node; 0 devices
    per node: one node holds every rank)."""
    if devices_per_node <= 0:
        return 1
    return len({int(r) // devices_per_node for r in global_ranks}) or 1


def _check(op, nbytes, ranks, nodes, hops, algorithm):
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r} (known: {', '.join(OPS)})")
    if type(ranks) is not int or ranks < 1:
        raise ValueError(f"ranks must be a positive int, got {ranks!r}")
    if type(nbytes) is not int or nbytes < 0:
        raise ValueError(f"nbytes must be a non-negative int, got {nbytes!r}")
    if type(nodes) is not int or not 1 <= nodes <= ranks:
        raise ValueError(f"nodes must be an int in [1, ranks={ranks}], got {nodes!r}")
    if type(hops) is not int or hops < 1:
        raise ValueError(f"hops must be a positive int, got {hops!r}")
    if algorithm and algorithm not in ALGORITHMS:
        raise ValueError(f"unknown collective algorithm {algorithm!r} (known: {', '.join(ALGORITHMS)})")


def _link(ic, spans: bool) -> tuple[float, float]:
    """(payload bandwidth, step latency) of the slowest link the group's algorithms use."""
    bw = ic.bandwidth_gb_per_s * ic.links_per_pair * ic.protocol_efficiency
    lat = ic.latency_ns
    if spans:
        bw, lat = min(bw, ic.internode_bandwidth_gb_per_s * ic.protocol_efficiency), max(lat, ic.internode_latency_ns)
    return bw, lat + ic.collective_step_ns


def candidates(op: str, nbytes: int, ranks: int, ic, nodes: int = 1, hops: int = 1) -> dict:
    """Every candidate algorithm's time (ns, without the per-collective launch cost)."""
    n, S = ranks, nbytes
    if n == 1:
        return {"local": 0.0}
    spans = nodes > 1
    B, a = _link(ic, spans)
    kind = "switch" if spans else ic.topology
    inj = B if kind == "fully_connected" else B / (n - 1)
    logn = math.ceil(math.log2(n))
    direct_ok = kind != "ring" and S <= ic.direct_max_bytes
    c: dict[str, float] = {}
    if op in ("all_reduce", "barrier"):
        c["ring"] = 2 * (n - 1) * (a + S / (n * B))
        if n > 2:
            c["tree"] = 2 * logn * a + 2 * S / B
        if direct_ok:
            c["direct"] = a + S / inj
        if op == "all_reduce" and not spans and ic.topology == "switch" and ic.in_switch_reduction:
            switch_bw = ic.bandwidth_gb_per_s * ic.links_per_pair * ic.in_switch_efficiency
            c["nvls"] = 2 * a + S * (n + 1) / (n * switch_bw)
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
    else:  # send / recv: hops links on the way (more than one only on a ring inside a node)
        c["direct"] = hops * a + S / B
    return c


def collective_cost(op: str, nbytes: int, ranks: int, interconnect, nodes: int = 1, hops: int = 1,
                    algorithm: str = "") -> CollectiveCost:
    """The modelled time of one collective on ``interconnect`` (``emulator.config.InterconnectConfig``):
    the fastest candidate, or ``algorithm`` when it names one (ValueError if that algorithm does not
    apply to the op, the size or the topology), plus ``collective_launch_ns``."""
    _check(op, nbytes, ranks, nodes, hops, algorithm)
    c = candidates(op, nbytes, ranks, interconnect, nodes, hops)
    if ranks == 1:
        return CollectiveCost(op, "local", nbytes, ranks, 0.0, c)
    if algorithm:
        if algorithm not in c:
            raise ValueError(f"algorithm {algorithm!r} does not apply to {op} of {nbytes} bytes over {ranks} "
                             f"ranks on this interconnect (candidates: {', '.join(c)})")
        chosen = algorithm
    else:
        chosen = min(c, key=c.get)
    return CollectiveCost(op, chosen, nbytes, ranks, interconnect.collective_launch_ns + c[chosen], c)


def ring_bound_ns(nbytes: int, ranks: int, link_bandwidth_gb_per_s: float) -> float:
    """The analytical ring all_reduce time 2(n-1)/n * S / B (no latency)."""
    return 2 * (ranks - 1) / ranks * nbytes / link_bandwidth_gb_per_s
