"""Copies between host and emu and between emu devices (``aten::_copy_from``).

Same-dtype copies are single DMA commands with any strides on both sides.
dtype conversion is a device kernel: host->device copies land in a staging
buffer of the source dtype and are converted on the device; device->host
copies convert on the device first. A copy waits for completion unless it is
``non_blocking`` and its host side is pinned (then it is ordered on the stream,
as with CUDA).
"""
from __future__ import annotations

import torch

from torch_plugin._bridge import BRIDGE
from torch_plugin.ops._common import check_dtype, current_stream, device_ref, host_ref, rt


def _staging(t: torch.Tensor, dtype, device: int) -> torch.Tensor:
    return torch.empty(t.shape, dtype=dtype, device=torch.device("emu", device))


def _convert_on_device(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst <- cast(src), both on the same emu device: the vector engine's copy kernel."""
    rt().launch("copy", (device_ref(dst), device_ref(src)), current_stream(dst.device.index))


def copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    if src.is_neg() or src.is_conj() or dst.is_neg() or dst.is_conj():
        raise RuntimeError("copy_: conjugated or negated views are not supported on emu (complex and "
                           "_neg_view tensors have no device kernels yet); call .resolve_neg() on the CPU")
    check_dtype("copy_", src, dst)
    if src.shape != dst.shape:
        src = src.expand(dst.shape)
    if dst.numel() == 0:
        return dst
    if dst.device.type == "emu" and torch._debug_has_internal_overlap(dst) == 1:
        raise RuntimeError("unsupported operation: more than one element of the written-to tensor refers "
                           "to a single memory location. Please clone() the tensor before performing the "
                           "operation.")
    if src.device.type == "cpu":
        _host_to_device(dst, src, non_blocking)
    elif dst.device.type == "cpu":
        _device_to_host(dst, src, non_blocking)
    else:
        _device_to_device(dst, src)
    return dst


def _host_to_device(dst, src, non_blocking):
    device = dst.device.index
    stream = current_stream(device)
    asynchronous = non_blocking and src.is_pinned()
    if src.dtype == dst.dtype:
        rt().memcpy(device_ref(dst), host_ref(src), stream, blocking=not asynchronous)
    else:
        staged = _staging(src, src.dtype, device)
        rt().memcpy(device_ref(staged), host_ref(src), stream)
        _convert_on_device(dst, staged)
        if not asynchronous:
            stream.synchronize()
    if asynchronous:
        BRIDGE.async_host_streams.add(stream)


def _device_to_host(dst, src, non_blocking):
    device = src.device.index
    stream = current_stream(device)
    asynchronous = non_blocking and dst.is_pinned()
    if src.dtype != dst.dtype:
        converted = _staging(src, dst.dtype, device)
        _convert_on_device(converted, src)
        src = converted
    rt().memcpy(host_ref(dst), device_ref(src), stream, blocking=not asynchronous)
    if asynchronous:
        BRIDGE.async_host_streams.add(stream)


def _device_to_device(dst, src):
    if src.device.index == dst.device.index:
        if src.dtype == dst.dtype:
            rt().memcpy(device_ref(dst), device_ref(src), current_stream(src.device.index))
        else:
            _convert_on_device(dst, src)
        return
    if src.dtype != dst.dtype:
        converted = _staging(src, dst.dtype, src.device.index)
        _convert_on_device(converted, src)
        src = converted
    rt().memcpy(device_ref(dst), device_ref(src), current_stream(src.device.index))


def local_scalar_dense(t: torch.Tensor):
    host = torch.empty((), dtype=t.dtype)
    _device_to_host(host, t, False)
    return host.item()
