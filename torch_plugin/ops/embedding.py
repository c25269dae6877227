"""Embedding bags on the device: ``_embedding_bag`` and ``_embedding_bag_forward_only`` (sum /
mean / max per bag), with CPU's auxiliary outputs so that its backward formulas read what they
expect. The offsets are read to the host (bag boundaries are launch metadata); index ranges
come from one device reduction.
Left out: the backward kernels (the host's formulas run), include_last_offset with indices past
the last offset (the host runs that case), projection mode (the host reads device values).
"""
from __future__ import annotations

import torch

from torch_plugin.errors import refuse_in_projection, unsupported_dtype
from torch_plugin.ops._common import common_device, current_stream, device_ref, rt
from torch_plugin.ops._overloads import Overloads
from torch_plugin.ops._windows import _floating_input


OVERLOADS = Overloads(__name__)


# -- embedding bags (_embedding_bag, _embedding_bag_forward_only): sum / mean / max per bag, with
# CPU's auxiliary outputs so that its backward formulas read what they expect. The offsets are
# read to the host (bag boundaries are launch metadata); index ranges come from one device reduction.

_BAG_FAST = frozenset({torch.float32, torch.float16, torch.bfloat16})


def _embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                   per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    name = "aten::_embedding_bag"
    tensors = [weight, indices, offsets] + ([per_sample_weights] if per_sample_weights is not None else [])
    device = common_device(name, *tensors)
    _floating_input(name, weight)
    for t in (indices, offsets):
        if t.dtype != torch.int64:
            raise unsupported_dtype(name, t.dtype, {torch.int64})
    mode = int(mode)
    if indices.dim() != 1 or offsets.dim() != 1 or weight.dim() != 2:
        raise RuntimeError(f"{name}: expected 1-D indices and offsets and a 2-D weight, got {list(indices.shape)}, "
                           f"{list(offsets.shape)}, {list(weight.shape)}")
    if per_sample_weights is not None:
        if mode != 0:
            raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                      f"supported for mode='sum' (got mode='{('sum', 'mean', 'max')[mode]}'). Please "
                                      "open a feature request on GitHub.")
        if per_sample_weights.dtype != weight.dtype or tuple(per_sample_weights.shape) != tuple(indices.shape):
            raise RuntimeError(f"{name}: per_sample_weights must have the indices' shape and weight's dtype")
    n, (V, D) = indices.numel(), weight.shape
    if offsets.device.type == "emu":
        refuse_in_projection(None, "reads the offsets (which decide the bags) and the indices' range on the host")
    bounds = [int(v) for v in offsets.tolist()]
    if include_last_offset and not bounds:
        raise RuntimeError("include_last_offset: number of offset should be at least 1")
    if bounds and bounds[0] != 0:
        raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from "
                           f"position 0. However, got {bounds[0]}")
    if bounds and bounds[-1] > n:
        raise RuntimeError(f"offsets[-1] can not be greater than input's length {n}, but got offsets[-1] of "
                           f"{bounds[-1]}")
    B = len(bounds) - 1 if include_last_offset else len(bounds)
    if include_last_offset and bounds[-1] != n:
        # CPU's own paths disagree on indices past offsets[-1] (sum stops there, mean/max run on):
        # the host runs that case (counted), as for an unsupported dtype
        from torch_plugin.errors import UnsupportedDtypeError
        raise UnsupportedDtypeError(f"{name}: include_last_offset with offsets[-1] = {bounds[-1]} short of the {n} "
                                    "indices is not supported on emu")
    bounds = bounds[:B] + [n]
    if n:
        lo, hi = torch.stack((indices.min(), indices.max())).tolist()
        if lo < 0 or hi >= V:
            raise IndexError("index out of range in self")
    padding_idx = int(padding_idx)
    fast = mode == 0 and weight.dtype in _BAG_FAST and weight.stride(1) == 1 and padding_idx < 0 and \
        (per_sample_weights is None or per_sample_weights.stride(0) == 1)
    dev = weight.device
    out = torch.empty((B, D), dtype=weight.dtype, device=dev)
    offset2bag = torch.empty((0,) if fast else (n,), dtype=torch.int64, device=dev)
    bag_size = torch.empty((B,), dtype=torch.int64, device=dev)
    max_indices = torch.empty((B, D) if mode == 2 else (B,), dtype=torch.int64, device=dev)
    if B:
        table = torch.tensor(bounds, dtype=torch.int64).to(dev)     # a host-to-device copy of the metadata
        rt().launch("embedding_bag", (device_ref(out), device_ref(weight), device_ref(indices), device_ref(table),
                                      None if per_sample_weights is None else device_ref(per_sample_weights),
                                      mode, padding_idx, None if fast or n == 0 else device_ref(offset2bag),
                                      device_ref(bag_size), device_ref(max_indices)), current_stream(device))
    return out, offset2bag, bag_size, max_indices


@OVERLOADS.implements("_embedding_bag", "_embedding_bag_forward_only")
def embedding_bag_forward_only(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                               per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    return _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                          include_last_offset, padding_idx)
