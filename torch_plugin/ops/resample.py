"""Resampling on the device: upsampling (nearest, nearest-exact, linear / bilinear / trilinear,
bicubic, antialiased bilinear / bicubic) and its backward, and grid sampling (forward).

Every rank runs one kernel per family (resample.pyx's ``upsample_nearest`` and
``upsample_separable``) on (N, C, D, H, W) views padded with unit spatial dims.
Computation: float32 (float64 for float64), one rounding.
Left out (a clear error, or the host path when nothing is registered): uint8 interpolation but
nearest, grid_sample's backward, float16/bfloat16 grid sampling and antialiased modes.
"""
from __future__ import annotations

import torch

from torch_plugin._dtypes import FLOATING, SUPPORTED
from torch_plugin.ops._common import common_device, current_stream, device_ref, rt
from torch_plugin.ops._overloads import Overloads
from torch_plugin.ops._windows import (_AXES, _FLOAT_ONLY, _as5, _check_dtype_in, _empty, _floating_input, _launch5,
                                       _output, _suggest_format)


OVERLOADS = Overloads(__name__)


# ---------------------------------------------------------------------------------------------
# upsampling

def _scale(s) -> float:
    return 0.0 if s is None else float(s)


_NEAREST_DTYPES = FLOATING | {torch.uint8}


def _upsample_check(k, input_size, output_size):
    output_size = tuple(int(s) for s in output_size)
    input_size = tuple(int(s) for s in input_size)
    if len(output_size) != k:
        raise RuntimeError(f"It is expected output_size equals to {k}, but got size {len(output_size)}")
    if len(input_size) != k + 2:
        raise RuntimeError(f"It is expected input_size equals to {k + 2}, but got size {len(input_size)}")
    if not all(s > 0 for s in input_size[2:]) or not all(s > 0 for s in output_size):
        axes = _AXES[3 - k:]
        ins = ", ".join(f"{a}: {s}" for a, s in zip(axes, input_size[2:]))
        outs = ", ".join(f"{a}: {s}" for a, s in zip(axes, output_size))
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input ({ins}) output ({outs})")
    return input_size, output_size


def _scales3(k, scales):
    """The (d, h, w) scales of a launch: 0 (none given) for the padded and the unspecified dims."""
    scales = tuple(scales) + (None,) * (k - len(scales))   # the dispatcher drops trailing defaults
    return (0.0,) * (3 - k) + tuple(_scale(s) for s in scales)


def _upsample(kernel, name, k, x, output_size, extra, out, allowed):
    device = common_device(name, x)
    _check_dtype_in(name, x, allowed)
    if x.dim() != k + 2 or x.numel() == 0 and any(n == 0 for n in x.shape[1:]):
        raise RuntimeError(f"Non-empty {k + 2}D data tensor expected but got a tensor with sizes {list(x.shape)}")
    _, size = _upsample_check(k, x.shape, output_size)
    out = _output(name, out, tuple(x.shape[:2]) + size, x.dtype, device, x, x)
    if out.numel():
        _launch5(kernel, device, k, True, (out, x), extra)
    return out


def _upsample_backward(kernel, name, k, grad_output, output_size, input_size, extra, grad_input):
    device = common_device(name, grad_output)
    _floating_input(name, grad_output)
    input_size, output_size = _upsample_check(k, input_size, output_size)
    expected = tuple(input_size[:2]) + output_size
    if tuple(grad_output.shape) != expected:
        raise RuntimeError(f"Expected grad_output to have the same shape as output; output.size({len(expected)}) "
                           f"= {list(expected)} but got grad_output.size = {list(grad_output.shape)}")
    grad_input = _output(name, grad_input, input_size, grad_output.dtype, device, grad_output, grad_output)
    if grad_input.numel():
        _launch5(kernel, device, k, True, (grad_input, grad_output), extra)
    return grad_input


def _nearest_ops(k, exact, allowed=_NEAREST_DTYPES):
    """Forward, .out, backward and .grad_input kernels of upsample_nearest{k}d / _upsample_nearest_exact{k}d."""
    op = f"_upsample_nearest_exact{k}d" if exact else f"upsample_nearest{k}d"

    def forward(self, output_size, *scales, out=None):
        return _upsample("upsample_nearest", f"aten::{op}", k, self, output_size,
                         (bool(exact),) + _scales3(k, scales), out, allowed)

    def backward(grad_output, output_size, input_size, *scales, grad_input=None):
        return _upsample_backward("upsample_nearest_backward", f"aten::{op}_backward", k, grad_output,
                                  output_size, input_size, (bool(exact),) + _scales3(k, scales), grad_input)
    forward.__name__, backward.__name__ = op, f"{op}_backward"
    return forward, backward


upsample_nearest1d, upsample_nearest1d_backward = _nearest_ops(1, False)
upsample_nearest2d, upsample_nearest2d_backward = _nearest_ops(2, False, SUPPORTED)   # 2-d: any dtype, as before
upsample_nearest3d, upsample_nearest3d_backward = _nearest_ops(3, False)
upsample_nearest_exact1d, upsample_nearest_exact1d_backward = _nearest_ops(1, True)
upsample_nearest_exact2d, upsample_nearest_exact2d_backward = _nearest_ops(2, True)
upsample_nearest_exact3d, upsample_nearest_exact3d_backward = _nearest_ops(3, True)
OVERLOADS.update({
    "upsample_nearest1d": upsample_nearest1d,
    "upsample_nearest1d.out": upsample_nearest1d,
    "upsample_nearest1d_backward": upsample_nearest1d_backward,
    "upsample_nearest1d_backward.grad_input": upsample_nearest1d_backward,
    "upsample_nearest2d": upsample_nearest2d,
    "upsample_nearest2d.out": upsample_nearest2d,
    "upsample_nearest2d_backward": upsample_nearest2d_backward,
    "upsample_nearest2d_backward.grad_input": upsample_nearest2d_backward,
    "upsample_nearest3d": upsample_nearest3d,
    "upsample_nearest3d.out": upsample_nearest3d,
    "upsample_nearest3d_backward": upsample_nearest3d_backward,
    "upsample_nearest3d_backward.grad_input": upsample_nearest3d_backward,
    "_upsample_nearest_exact1d": upsample_nearest_exact1d,
    "_upsample_nearest_exact1d.out": upsample_nearest_exact1d,
    "_upsample_nearest_exact1d_backward": upsample_nearest_exact1d_backward,
    "_upsample_nearest_exact1d_backward.grad_input": upsample_nearest_exact1d_backward,
    "_upsample_nearest_exact2d": upsample_nearest_exact2d,
    "_upsample_nearest_exact2d.out": upsample_nearest_exact2d,
    "_upsample_nearest_exact2d_backward": upsample_nearest_exact2d_backward,
    "_upsample_nearest_exact2d_backward.grad_input": upsample_nearest_exact2d_backward,
    "_upsample_nearest_exact3d": upsample_nearest_exact3d,
    "_upsample_nearest_exact3d.out": upsample_nearest_exact3d,
    "_upsample_nearest_exact3d_backward": upsample_nearest_exact3d_backward,
    "_upsample_nearest_exact3d_backward.grad_input": upsample_nearest_exact3d_backward,
})

# upsample_separable filter modes (resample.pyx)
_LINEAR, _CUBIC, _AA_LINEAR, _AA_CUBIC = 0, 1, 2, 3


def _separable_ops(op, k, mode, allowed):
    """Forward and backward kernels (out= / grad_input= as keywords) of a linear-family upsampling."""

    def forward(self, output_size, align_corners, *scales, out=None):
        return _upsample("upsample_separable", f"aten::{op}", k, self, output_size,
                         (k, mode, bool(align_corners)) + _scales3(k, scales), out, allowed)

    def backward(grad_output, output_size, input_size, align_corners, *scales, grad_input=None):
        return _upsample_backward("upsample_separable_backward", f"aten::{op}_backward", k, grad_output,
                                  output_size, input_size, (k, mode, bool(align_corners)) + _scales3(k, scales),
                                  grad_input)
    forward.__name__, backward.__name__ = op, f"{op}_backward"
    return forward, backward


upsample_linear1d, upsample_linear1d_backward = _separable_ops("upsample_linear1d", 1, _LINEAR, FLOATING)
upsample_bilinear2d, upsample_bilinear2d_backward = _separable_ops("upsample_bilinear2d", 2, _LINEAR, FLOATING)
upsample_trilinear3d, upsample_trilinear3d_backward = _separable_ops("upsample_trilinear3d", 3, _LINEAR, FLOATING)
upsample_bicubic2d, upsample_bicubic2d_backward = _separable_ops("upsample_bicubic2d", 2, _CUBIC, FLOATING)
upsample_bilinear2d_aa, upsample_bilinear2d_aa_backward = _separable_ops("_upsample_bilinear2d_aa", 2, _AA_LINEAR,
                                                                         _FLOAT_ONLY)
upsample_bicubic2d_aa, upsample_bicubic2d_aa_backward = _separable_ops("_upsample_bicubic2d_aa", 2, _AA_CUBIC,
                                                                       _FLOAT_ONLY)
OVERLOADS.update({
    "upsample_linear1d": upsample_linear1d,
    "upsample_linear1d.out": upsample_linear1d,
    "upsample_linear1d_backward": upsample_linear1d_backward,
    "upsample_linear1d_backward.grad_input": upsample_linear1d_backward,
    "upsample_bilinear2d": upsample_bilinear2d,
    "upsample_bilinear2d.out": upsample_bilinear2d,
    "upsample_bilinear2d_backward": upsample_bilinear2d_backward,
    "upsample_bilinear2d_backward.grad_input": upsample_bilinear2d_backward,
    "upsample_trilinear3d": upsample_trilinear3d,
    "upsample_trilinear3d.out": upsample_trilinear3d,
    "upsample_trilinear3d_backward": upsample_trilinear3d_backward,
    "upsample_trilinear3d_backward.grad_input": upsample_trilinear3d_backward,
    "upsample_bicubic2d": upsample_bicubic2d,
    "upsample_bicubic2d.out": upsample_bicubic2d,
    "upsample_bicubic2d_backward": upsample_bicubic2d_backward,
    "upsample_bicubic2d_backward.grad_input": upsample_bicubic2d_backward,
    "_upsample_bilinear2d_aa": upsample_bilinear2d_aa,
    "_upsample_bilinear2d_aa.out": upsample_bilinear2d_aa,
    "_upsample_bilinear2d_aa_backward": upsample_bilinear2d_aa_backward,
    "_upsample_bilinear2d_aa_backward.grad_input": upsample_bilinear2d_aa_backward,
    "_upsample_bicubic2d_aa": upsample_bicubic2d_aa,
    "_upsample_bicubic2d_aa.out": upsample_bicubic2d_aa,
    "_upsample_bicubic2d_aa_backward": upsample_bicubic2d_aa_backward,
    "_upsample_bicubic2d_aa_backward.grad_input": upsample_bicubic2d_aa_backward,
})


# -- grid_sampler_2d / grid_sampler_3d (forward; the backward passes are not native yet)

_GRID_MODES = {0: "bilinear", 1: "nearest", 2: "bicubic"}


def _grid_sampler(k, input, grid, interpolation_mode, padding_mode, align_corners):
    name = f"aten::grid_sampler_{k}d"
    device = common_device(name, input, grid)
    # CPU computes float16/bfloat16 sampling coordinates in the reduced dtype itself, rounding at
    # every step; the device's float32 coordinates would pick other neighbours: rejected instead.
    _check_dtype_in(name, input, _FLOAT_ONLY)
    if grid.dtype != input.dtype:
        raise RuntimeError(f"grid_sampler(): expected input and grid to have same dtype, but input has "
                           f"{input.dtype} and grid has {grid.dtype}")
    if input.dim() != k + 2 or grid.dim() != k + 2:
        raise RuntimeError(f"grid_sampler(): expected {k + 2}D input and grid with same number of dimensions, but "
                           f"got input with sizes {list(input.shape)} and grid with sizes {list(grid.shape)}")
    if input.shape[0] != grid.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch size, but got input with "
                           f"sizes {list(input.shape)} and grid with sizes {list(grid.shape)}")
    if grid.shape[-1] != k:
        raise RuntimeError(f"grid_sampler(): expected grid to have size {k} in last dimension, but got grid with "
                           f"sizes {list(grid.shape)}")
    if any(n == 0 for n in input.shape[2:]):
        raise RuntimeError(f"grid_sampler(): expected input to have non-empty spatial dimensions, but input has "
                           f"sizes {list(input.shape)} with dimension {2 + list(input.shape[2:]).index(0)} being empty")
    mode, padding = int(interpolation_mode), int(padding_mode)
    if mode not in _GRID_MODES or padding not in (0, 1, 2) or (mode == 2 and k != 2):
        raise RuntimeError(f"{name}: interpolation mode {mode} with padding mode {padding} is not supported "
                           "(bilinear 0, nearest 1, bicubic 2 for 2-d; padding zeros 0, border 1, reflection 2)")
    out = _empty((input.shape[0], input.shape[1]) + tuple(grid.shape[1:-1]), input.dtype, device,
                 _suggest_format(input))
    if out.numel():
        g5 = grid if k == 3 else grid.unsqueeze(1)
        rt().launch("grid_sample", (device_ref(_as5(out, k)), device_ref(_as5(input, k)), device_ref(g5), k, mode,
                                    padding, bool(align_corners)), current_stream(device))
    return out


@OVERLOADS.implements("grid_sampler_2d")
def grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners):
    return _grid_sampler(2, input, grid, interpolation_mode, padding_mode, align_corners)


@OVERLOADS.implements("grid_sampler_3d")
def grid_sampler_3d(input, grid, interpolation_mode, padding_mode, align_corners):
    return _grid_sampler(3, input, grid, interpolation_mode, padding_mode, align_corners)
