"""CTC loss forward (_ctc_loss, _ctc_loss.Tensor): the alpha recursion on the device (losses.pyx),
float32/float64 log_probs as CPU. The backward pass (_ctc_loss_backward) is not native yet.
"""
from __future__ import annotations

import torch

from torch_plugin.errors import refuse_in_projection, unsupported_dtype
from torch_plugin.ops._common import common_device, current_stream, device_ref, rt
from torch_plugin.ops._overloads import Overloads

OVERLOADS = Overloads(__name__)

_CTC_DTYPES = frozenset({torch.float32, torch.float64})


def _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    name = "aten::_ctc_loss"
    device = common_device(name, log_probs, targets)
    if log_probs.dtype not in _CTC_DTYPES:
        raise unsupported_dtype(name, log_probs.dtype, _CTC_DTYPES)
    if targets.dtype not in (torch.int32, torch.int64):
        raise RuntimeError(f"{name}: targets must be int32 or int64, got {targets.dtype}")
    if log_probs.dim() != 3:
        raise RuntimeError(f"{name}: expected a 3-D (T, N, C) log_probs, got {list(log_probs.shape)}")
    T, N, C = log_probs.shape
    blank = int(blank)
    if not 0 <= blank < C:
        raise RuntimeError("blank must be in label range")
    input_lengths, target_lengths = [int(v) for v in input_lengths], [int(v) for v in target_lengths]
    if len(input_lengths) != N:
        raise RuntimeError("input_lengths must be of size batch_size")
    if len(target_lengths) != N:
        raise RuntimeError("target_lengths must be of size batch_size")
    if targets.dim() == 1:
        offsets, pos = [], 0
        for n in target_lengths:
            offsets.append(pos * targets.stride(0))
            pos += n
        stride = targets.stride(0) if targets.dim() else 1
    else:
        offsets = [b * targets.stride(0) for b in range(N)]
        stride = targets.stride(1)
        for n in target_lengths:
            if n > targets.shape[1]:
                raise RuntimeError(f"Expected tensor to have size at least {n} at dimension 1, but got size "
                                   f"{targets.shape[1]} for argument #2 'targets' (while checking arguments for "
                                   "ctc_loss_cpu)")
    for n in input_lengths:
        if n > T:
            raise RuntimeError(f"Expected input_lengths to have value at most {T}, but got value {n} (while checking "
                               "arguments for ctc_loss_cpu)")
    if any(n < 0 for n in input_lengths + target_lengths):
        raise RuntimeError(f"{name}: lengths must be non-negative")
    max_target = max(target_lengths, default=0)
    nll = torch.empty((N,), dtype=log_probs.dtype, device=log_probs.device)
    log_alpha = torch.empty((N, T, 2 * max_target + 1), dtype=log_probs.dtype, device=log_probs.device)
    if N:
        # the per-sample table travels as a small device tensor (a host-to-device copy)
        meta = torch.tensor([offsets, input_lengths, target_lengths], dtype=torch.int64).to(log_probs.device)
        rt().launch("ctc_loss", (device_ref(nll), device_ref(log_alpha), device_ref(log_probs), device_ref(targets),
                                 device_ref(meta), stride, blank, max_target), current_stream(device))
    return nll, log_alpha


@OVERLOADS.implements("_ctc_loss")
def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    return _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)


@OVERLOADS.implements("_ctc_loss.Tensor")
def ctc_loss_tensor(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    # lengths are host-side metadata of the recursion (CPU's kernel reads them on the host too)
    if input_lengths.device.type == "emu" or target_lengths.device.type == "emu":
        refuse_in_projection("aten::ctc_loss", "reads the lengths tensors on the host",
                             "pass input_lengths and target_lengths as Python lists or CPU tensors")
    return _ctc_loss(log_probs, targets, input_lengths.tolist(), target_lengths.tolist(), blank, zero_infinity)
