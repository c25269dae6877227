"""Copies between host and emu and between emu devices (``aten::_copy_from``).

Same-dtype copies are single DMA commands with any strides on both sides.
dtype conversion is a device kernel: host->device copies land in a staging
buffer of the source dtype and are converted on the device; device->host
copies convert on the device first. A copy waits for completion unless it is
``non_blocking`` and its host side is pinned (then it is ordered on the stream,
as with CUDA). Negated views (``torch._neg_view``) copy their stored values and
negate the destination afterwards; overlapping destinations are rejected with
ATen's rules.
Conjugated views (``x.conj()`` of a complex tensor) copy their stored values and
conjugate the destination afterwards (its imaginary part, negated on the device
for an emu destination), as CPU's copy_ resolves them. Every storable dtype
(``_dtypes.STORABLE``: the arithmetic ones plus uint16/32/64 and complex64/128)
is copied and converted on the device; complex -> real takes the real part
with CPU's warning.
"""
from __future__ import annotations

import warnings

import torch

import runtime
from torch_plugin._bridge import BRIDGE
from torch_plugin.ops._common import (check_storable, current_stream, device_ref, host_ref,
                                      non_overlapping_and_dense, rt)
from torch_plugin.ops._overloads import Overloads

OVERLOADS = Overloads(__name__)


def _staging(t: torch.Tensor, dtype, device: int) -> torch.Tensor:
    return torch.empty(t.shape, dtype=dtype, device=torch.device("emu", device))


def _convert_on_device(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst <- cast(src), both on the same emu device: the vector engine's copy kernel."""
    rt().launch("copy", (device_ref(dst), device_ref(src)), current_stream(dst.device.index))


def _without_neg(t: torch.Tensor) -> torch.Tensor:
    """An alias of t (same memory, same geometry) whose negative and conjugate bits are cleared."""
    alias = t.as_strided(t.shape, t.stride(), t.storage_offset())
    torch._C._set_neg(alias, False)
    torch._C._set_conj(alias, False)
    return alias


def _fix_signs(dst: torch.Tensor, negate: bool, conjugate: bool) -> None:
    """Negate and/or conjugate dst's memory in place (dst has neither bit set), on dst's device."""
    if not dst.is_complex():
        dst.mul_(-1)  # in the stored dtype (wraps for uint8, as CPU's neg does); on dst's stream
        return
    # On float32/float64 views of the parts (device kernels), in the order CPU's copy_ gives: neg
    # (0 - x on both parts, as CPU's vectorized complex neg: 0 - 0.0 is +0.0 and a NaN keeps its
    # sign; CPU's scalar loop for a handful of elements flips sign bits instead, so the two differ
    # only in the signs of zeros and NaNs), then conj (flips the imaginary part's sign bit).
    parts = torch.view_as_real(dst)
    if negate:
        parts.copy_(torch.rsub(parts, 0))
    if conjugate:
        parts[..., 1].neg_()


@OVERLOADS.implements("_copy_from")
def copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    check_storable("copy_", src, dst)
    if src.is_complex() and not dst.is_complex() and dst.dtype != torch.bool:
        # CPU's copy_ warns (TORCH_WARN_ONCE); Python's warning filters show it once per call site.
        warnings.warn("Casting complex values to real discards the imaginary part", UserWarning, stacklevel=3)
    if dst.numel() == 0:
        return dst
    # Negative bits (torch._neg_view) and conjugate bits (x.conj()) arrive here through the
    # Negative and Conjugate fallthroughs. Copy the stored values, then negate/conjugate the
    # destination's memory when exactly one side has the bit (what CPU's copy_ does): dst reads
    # back as src.
    negate = src.is_neg() != dst.is_neg()
    conjugate = src.is_conj() != dst.is_conj() and dst.is_complex()
    if negate and torch.bool in (src.dtype, dst.dtype):
        raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. If you are "
                           "trying to invert a mask, use the `~` or `logical_not()` operator instead.")
    if src.is_neg() or src.is_conj():
        src = _without_neg(src)
    user_dst = dst
    if dst.is_neg() or dst.is_conj():
        dst = _without_neg(dst)
    if negate or conjugate:
        non_blocking = False  # a host destination is fixed on the host once the copy has landed
    # The overlap checks CPU's copy_ does (TensorIterator: assert_no_internal_overlap(dst),
    # assert_no_partial_overlap(dst, src)); ATen skips them on the _copy_from path, so they
    # are ours. They apply to a host destination too, and run on the un-broadcast src.
    if torch._debug_has_internal_overlap(dst) == 1:
        raise RuntimeError("unsupported operation: more than one element of the written-to tensor refers "
                           "to a single memory location. Please clone() the tensor before performing the "
                           "operation.")
    if _partial_overlap(dst, src):
        # A DMA reading and writing the same bytes in a different order (e.g. x.copy_(x.t()))
        # would produce silently wrong values.
        raise RuntimeError("unsupported operation: some elements of the input tensor and the written-to "
                           "tensor refer to a single memory location. Please clone() the tensor before "
                           "performing the operation.")
    if src.shape != dst.shape:
        src = src.expand(dst.shape)
    if src.device.type == "cpu":
        _host_to_device(dst, src, non_blocking)
    elif dst.device.type == "cpu":
        _device_to_host(dst, src, non_blocking)
    else:
        _device_to_device(dst, src)
    if negate or conjugate:
        _fix_signs(dst, negate, conjugate)
    return user_dst


def _partial_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """ATen's get_overlap_status(a, b) == Partial (aten/src/ATen/MemoryOverlap.cpp): both dense,
    same storage, byte ranges intersecting but not the same elements. Non-dense pairs are
    "too hard" and, as on CPU, not rejected."""
    if a.device != b.device or a.numel() == 0 or b.numel() == 0:
        return False
    if not (non_overlapping_and_dense(a) and non_overlapping_and_dense(b)):
        return False
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    a_begin, b_begin = a.data_ptr(), b.data_ptr()
    a_end = a_begin + a.numel() * a.element_size()
    b_end = b_begin + b.numel() * b.element_size()
    if a_begin == b_begin and a_end == b_end:
        return a.stride() != b.stride()
    return a_begin < b_end and b_begin < a_end


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
    if rt().projection:  # refused before the staging conversion: nothing runs (errors.py names the op)
        raise runtime.ProjectionModeError(f"a copy of {src.numel()} elements from {src.device} to the host",
                                          op="memcpy_d2h")
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
    r = rt()
    src_stream, dst_stream = current_stream(src.device.index), current_stream(dst.device.index)
    # The runtime orders a peer copy against the peer's *default* stream only. As CUDA's copy_
    # does, also order it against the destination device's current stream: after the work
    # already queued there (else a pending write to dst lands after the copy), and before the
    # work queued there next (else it reads dst before the copy lands).
    other_stream = dst_stream.stream_id != 0
    if other_stream:
        ready = r.event_create(dst.device.index)
        r.event_record(ready, dst_stream)
        r.stream_wait_event(src_stream, ready)
    r.memcpy(device_ref(dst), device_ref(src), src_stream)
    if other_stream:
        done = r.event_create(src.device.index)
        r.event_record(done, src_stream)
        r.stream_wait_event(dst_stream, done)


@OVERLOADS.implements("_local_scalar_dense")
def local_scalar_dense(t: torch.Tensor):
    # The one element, whatever the tensor's shape (item() takes any 1-element tensor).
    host = torch.empty(t.shape, dtype=t.dtype)
    _device_to_host(host, t, False)
    return host.item()
