"""torch.distributed on emu: the c10d backend ``emu``, the collective cost model, the scaling
projection and the trace-merging tool (docs/distributed.md).

``import torch_plugin.distributed`` (``import torch_plugin`` does it) registers the backend, so
``dist.init_process_group("emu")`` or ``"cpu:gloo,emu:emu"`` works in processes that ``torchrun``
launched. Each rank uses ``emu:<local_rank>`` of its own emulated system.
"""
from __future__ import annotations

from torch_plugin.distributed import cost_model
from torch_plugin.distributed.backend import (EmuProcessGroup, collective_records, collective_summary, register,
                                              reset_collective_records, topology)
from torch_plugin.distributed.cost_model import Topology, collective_cost
from torch_plugin.distributed.projection import exposed_collective_ns, format_projection, project_data_parallel

register()

__all__ = ["EmuProcessGroup", "Topology", "collective_cost", "collective_records", "collective_summary", "cost_model",
           "exposed_collective_ns", "format_projection", "project_data_parallel", "register", "reset_collective_records",
           "topology"]
