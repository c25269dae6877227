"""The modelled cost of a collective, as the emulated devices time it.

The model itself lives below the plugin, in the emulator (``emulator/collectives.py``): a
COLLECTIVE command carries the op, the message size, the group's shape and an algorithm hint, and
the firmware holds the device's links for the time that model gives on the hardware description's
``interconnect``. This module asks the same model through the runtime
(``runtime.runtime.collective_cost``), for the backend's records and for projections to group
sizes no process runs (``projection.project_data_parallel``).

``Topology`` is the interconnect a projection assumes: a hardware description's ``interconnect``,
optionally with another ``devices_per_node``. Where the ranks sit comes from the description
(``interconnect.devices_per_node``: global rank r is on node r // devices_per_node; 0: one node),
never from the launcher.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from runtime.runtime import collective_cost as _device_collective_cost

OPS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier",
       "send", "recv", "gather", "scatter")


@dataclass(frozen=True)
class Topology:
    """The interconnect a group runs over: ``interconnect`` is an
    ``emulator.config.InterconnectConfig`` (``SystemConfig.interconnect``)."""
    interconnect: object

    @classmethod
    def from_config(cls, config, devices_per_node: int | None = None) -> "Topology":
        """From a system description; ``devices_per_node`` replaces the description's own (a
        projection of nodes of another size)."""
        ic = config.interconnect
        if devices_per_node is not None:
            ic = dataclasses.replace(ic, devices_per_node=int(devices_per_node))
        return cls(ic)

    @property
    def devices_per_node(self) -> int:
        return self.interconnect.devices_per_node

    @property
    def kind(self) -> str:
        return self.interconnect.topology

    @property
    def link_bandwidth_gb_per_s(self) -> float:
        """One device's links to a peer (or its switch port), per direction, before the protocol's
        overhead."""
        return self.interconnect.bandwidth_gb_per_s * self.interconnect.links_per_pair

    @property
    def payload_bandwidth_gb_per_s(self) -> float:
        """What a collective's payload gets of it (``protocol_efficiency``)."""
        return self.link_bandwidth_gb_per_s * self.interconnect.protocol_efficiency

    def with_bandwidth(self, gb_per_s: float) -> "Topology":
        return Topology(dataclasses.replace(self.interconnect, bandwidth_gb_per_s=float(gb_per_s)))

    def nodes(self, global_ranks) -> int:
        """Nodes a group of global ranks spans."""
        per_node = self.devices_per_node
        return len({int(r) // per_node for r in global_ranks}) if per_node > 0 else 1

    def hops(self, src: int, dst: int, world: int) -> int:
        """Links a message between global ranks ``src`` and ``dst`` crosses inside a node: more than
        one only on a ``ring`` (the shorter way round a ring of the node's devices)."""
        if self.kind != "ring" or self.nodes((src, dst)) > 1:
            return 1
        size = self.devices_per_node or world
        d = abs(src - dst) % size
        return max(1, min(d, size - d))


def _contiguous_nodes(ranks: int, topo: Topology) -> int:
    per_node = topo.devices_per_node
    return 1 if per_node <= 0 else max(1, math.ceil(ranks / per_node))


def collective_cost(op: str, nbytes: int, ranks: int, topo: Topology, algorithm: str = "", nodes: int | None = None,
                    hops: int = 1):
    """The device's modelled time of one collective (an ``emulator.collectives.CollectiveCost``:
    ``algorithm``, ``time_ns``, ``candidates``, ``busbw_gb_per_s``, ``link_bytes``). ``nodes``:
    nodes the group spans (default: ranks 0..ranks-1, ``devices_per_node`` to a node);
    ``algorithm``: "" (the fastest candidate) or a name (``ring``, ``tree``, ``direct``, ``nvls``).
    Bad arguments: ValueError."""
    if nodes is None:
        nodes = _contiguous_nodes(ranks, topo) if type(ranks) is int and ranks >= 1 else 1
    try:
        return _device_collective_cost(topo.interconnect, op, nbytes, ranks, nodes, hops, algorithm)
    except Exception as err:  # runtime.InvalidValueError: the model's own message
        raise ValueError(str(err).replace("a collective's ", "", 1)) from err


def p2p_cost(nbytes: int, src: int, dst: int, ranks: int, topo: Topology):
    """send/recv between global ranks ``src`` and ``dst`` of a job of ``ranks``."""
    return collective_cost("send", nbytes, 2, topo, nodes=topo.nodes((src, dst)), hops=topo.hops(src, dst, ranks))


def ring_bound_ns(nbytes: int, ranks: int, link_bandwidth_gb_per_s: float) -> float:
    """The analytical ring all_reduce time 2(n-1)/n * S / B (no latency)."""
    return 2 * (ranks - 1) / ranks * nbytes / link_bandwidth_gb_per_s
