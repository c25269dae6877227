"""Host fallback: an op without a device kernel runs on the CPU, correctly but slowly.

Every emu tensor argument is copied to the host (a synchronising copy), the CPU
kernel runs, and results are copied back: outputs into new emu tensors,
mutated arguments (``Tensor(a!)``) back into the original emu tensors. Each op
instance is counted (``torch.emu.op_stats()``) and each op warns once. Ops that
return views of their inputs cannot be emulated this way and are rejected.
"""
from __future__ import annotations

import warnings

import torch
from torch.utils._pytree import tree_map

from torch_plugin.ops import registry

_warned: set[str] = set()


class HostFallbackDisabled(RuntimeError):
    pass


def _device_of(args, kwargs):
    for value in list(args) + list(kwargs.values()):
        for t in (value if isinstance(value, (list, tuple)) else [value]):
            if isinstance(t, torch.Tensor) and t.device.type == "emu":
                return t.device
    return torch.device("emu", torch.emu.current_device())


def run_on_host(op, *args, **kwargs):
    name = str(op.name()) if hasattr(op, "name") else str(op)
    schema = op._schema
    if any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
        raise RuntimeError(f"{name} returns a view of its input; it has no emu kernel and a view "
                           f"cannot be emulated through the host fallback")
    if not registry.host_fallback_allowed():
        raise HostFallbackDisabled(f"{name} has no emu kernel and host fallback is disabled "
                                   f"(torch.emu.set_host_fallback(True) to allow it)")
    registry.count(name, registry.HOST_FALLBACK)
    if name not in _warned:
        _warned.add(name)
        warnings.warn(f"{name} has no emu kernel: it ran on the host (counted in torch.emu.op_stats())",
                      stacklevel=3)
    device = _device_of(args, kwargs)
    to_host = lambda x: x.cpu() if isinstance(x, torch.Tensor) and x.device.type == "emu" else x  # noqa: E731
    cpu_args, cpu_kwargs = tree_map(to_host, args), tree_map(to_host, kwargs)
    with torch.device("cpu"):
        result = op(*cpu_args, **cpu_kwargs)

    # Write mutated arguments back to their emu originals.
    mutated = {}
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            original = kwargs.get(arg.name) if arg.kwarg_only or i >= len(args) else args[i]
            host = cpu_kwargs.get(arg.name) if arg.kwarg_only or i >= len(args) else cpu_args[i]
            if isinstance(original, torch.Tensor) and original.device.type == "emu":
                if original.shape != host.shape:
                    original.resize_(host.shape)
                original.copy_(host)
                mutated[id(host)] = original

    def to_device(x):
        if isinstance(x, torch.Tensor):
            if id(x) in mutated:
                return mutated[id(x)]
            return x.to(device)
        return x
    result = tree_map(to_device, result)
    registry.mark_fell_back()
    return result


def boxed_fallback(op, *args, **kwargs):
    return run_on_host(op, *args, **kwargs)
