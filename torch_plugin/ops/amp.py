"""GradScaler's device ops: ``_amp_foreach_non_finite_check_and_unscale_`` and ``_amp_update_scale_``.

Both are device kernels (emulator/kernels/foreach.pyx) that read the scale, ``found_inf`` and the
growth tracker from device memory when they run: ``torch.amp.GradScaler("emu")`` never waits for
the device, and an inf/nan step is skipped as on CUDA (the optimizer's step reads ``found_inf``).
Argument checks and messages are CUDA's (aten/src/ATen/native/cuda/AmpKernels.cu).
"""
from __future__ import annotations

import torch

from torch_plugin.ops._common import common_device, current_stream, device_ref, rt
from torch_plugin.ops._overloads import Overloads

OVERLOADS = Overloads(__name__)

_GRAD_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_scalar_float(op: str, name: str, t: torch.Tensor, device: int) -> None:
    if t.numel() != 1:
        raise RuntimeError(f"{name} must be a 1-element tensor.")
    if t.dtype != torch.float32:
        raise RuntimeError(f"{name} must be a float tensor.")
    if t.device.type != "emu" or t.device.index != device:
        raise RuntimeError(f"{op}: {name} must be on the grads' device (emu:{device}), got {t.device}")


@OVERLOADS.implements("_amp_foreach_non_finite_check_and_unscale_")
def amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale):
    op = "_amp_foreach_non_finite_check_and_unscale_"
    if not grads:
        return
    device = common_device(op, found_inf, inv_scale, *grads)
    _check_scalar_float(op, "found_inf", found_inf, device)
    _check_scalar_float(op, "inv_scale", inv_scale, device)
    for g in grads:  # every check before the first launch: a bad list changes nothing
        if g.device != found_inf.device:
            raise RuntimeError("Expected all tensors to be on the same device, but found at least two devices, "
                               f"{g.device} and {found_inf.device}!")
        if g.layout != torch.strided:
            raise RuntimeError("One of the supplied tensors has a non-strided layout.")
        if g.dtype not in _GRAD_DTYPES:  # CPU and CUDA have no such kernel either
            raise RuntimeError(f"{op}: not implemented for {g.dtype} (gradients are "
                               f"{', '.join(map(str, _GRAD_DTYPES))})")
    stream = current_stream(device)
    launch = rt().launch
    found, inv = device_ref(found_inf, (), ()), device_ref(inv_scale, (), ())
    for g in grads:
        if g.numel():
            launch("amp_unscale", (device_ref(g), found, inv), stream)


@OVERLOADS.implements("_amp_update_scale_")
def amp_update_scale_(self, growth_tracker, found_inf, scale_growth_factor, scale_backoff_factor, growth_interval):
    op = "_amp_update_scale_"
    device = common_device(op, self, growth_tracker, found_inf)
    if growth_tracker.numel() != 1 or growth_tracker.dtype != torch.int32:
        raise RuntimeError("growth_tracker must be a one-element int tensor." if growth_tracker.numel() != 1
                           else "growth_tracker must be an int tensor.")
    if self.numel() != 1:
        raise RuntimeError("current_scale must be a one-element float tensor.")
    if self.dtype != torch.float32:
        raise RuntimeError("current_scale must be a float tensor.")
    if found_inf.numel() != 1:
        raise RuntimeError("found_inf must be a one-element float tensor.")
    if found_inf.dtype != torch.float32:
        raise RuntimeError("found_inf must be a float tensor.")
    for t in (self, growth_tracker, found_inf):
        if t.device.type != "emu" or t.device.index != device:
            raise RuntimeError(f"{op}: expected all tensors on emu:{device}, got {t.device}")
    rt().launch("amp_update_scale", (device_ref(self, (), ()), device_ref(growth_tracker, (), ()),
                                     device_ref(found_inf, (), ()), float(scale_growth_factor),
                                     float(scale_backoff_factor), int(growth_interval)), current_stream(device))
    return self
