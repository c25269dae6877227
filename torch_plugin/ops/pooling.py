"""Pooling on the device: max (with indices), average, adaptive average / max, fractional max
pooling, max unpooling, and their backward passes.

2-d (ATen sends 1-d max/avg pooling here through unsqueeze): ``max_pool2d_with_indices``
(+ backward; any dtype but bool), ``avg_pool2d`` (+ backward; count_include_pad, ceil_mode,
divisor_override), ``_adaptive_avg_pool2d`` (+ backward). 3-d pooling, adaptive max pooling,
unpooling and fractional max pooling run 5-d (N, C, D, H, W) kernels on views padded with unit
spatial dims; plane indices are flat offsets d * H * W + h * W + w, which are CPU's 1-d/2-d
indices when the padded extents are 1. Windowed kernels compute in float32 (float64 for
float64) and round once.
Left out (a clear error, or the host path when nothing is registered): integer adaptive
pooling / unpooling (CPU rejects them too), float16/bfloat16 3-d average pooling.
"""
from __future__ import annotations

from math import prod

import torch

from torch_plugin._dtypes import SUPPORTED
from torch_plugin.errors import refuse_in_projection, unsupported_dtype
from torch_plugin.ops._common import common_device, device_ref
from torch_plugin.ops._overloads import Overloads
from torch_plugin.ops._windows import (_AXES, _FLOAT_ONLY, _check_dtype_in, _empty, _floating_input, _ints_k,
                                       _launch5, _output, _suggest_format)


OVERLOADS = Overloads(__name__)


# ---------------------------------------------------------------------------------------------
# pooling

def _pair(name: str, what: str, values, default=None) -> tuple:
    values = tuple(values) if isinstance(values, (list, tuple)) else (values,)
    if len(values) == 0 and default is not None:
        return default
    if len(values) == 1:
        return (int(values[0]),) * 2
    if len(values) != 2:
        raise RuntimeError(f"{name}: {what} must either be a single int, or a tuple of two ints")
    return int(values[0]), int(values[1])


def _pool_output(size, k, pad, stride, dilation, ceil_mode) -> int:
    """ATen's pooling_output_shape."""
    numerator = size + 2 * pad - dilation * (k - 1) - 1 + (stride - 1 if ceil_mode else 0)
    out = numerator // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _pool_geometry(name, x, kernel_size, stride, padding, dilation, ceil_mode):
    kh, kw = _pair(name, "kernel_size", kernel_size)
    sh, sw = _pair(name, "stride", stride, default=(kh, kw))
    ph, pw = _pair(name, "padding", padding)
    dh, dw = _pair(name, "dilation", dilation)
    if kh <= 0 or kw <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got kH: {kh} kW: {kw}")
    if sh <= 0 or sw <= 0:
        raise RuntimeError("stride should not be zero" if 0 in (sh, sw) else
                           f"stride should be greater than zero, but got dH: {sh} dW: {sw}")
    if dh <= 0 or dw <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got dilationH: {dh} dilationW: {dw}")
    for p, k, d in ((ph, kh, dh), (pw, kw, dw)):
        if p < 0:
            raise RuntimeError(f"pad must be non-negative, but got pad: {p}")
        if p > ((k - 1) * d + 1) // 2:
            raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={p}, "
                               f"kernel_size={k} and dilation={d}")
    # CPU's max_pool2d_with_indices then bounds the padding by half the kernel itself (not the
    # dilated window): a dilated window may otherwise hold no input element at all
    if ph > kh // 2 or pw > kw // 2:
        raise RuntimeError(f"pad should be smaller than or equal to half of kernel size, but got padW = {pw}, "
                           f"padH = {ph}, kW = {kw}, kH = {kh}")
    H, W = x.shape[-2:]
    oh = _pool_output(H, kh, ph, sh, dh, ceil_mode)
    ow = _pool_output(W, kw, pw, sw, dw, ceil_mode)
    if oh < 1 or ow < 1:
        raise RuntimeError(f"Given input size: ({x.shape[-3]}x{H}x{W}). Calculated output size: "
                           f"({x.shape[-3]}x{oh}x{ow}). Output size is too small")
    return (kh, kw, sh, sw, ph, pw, dh, dw), (oh, ow)


def _as4(t, batched: bool):
    return t if batched else t.unsqueeze(0)


def _window5(window) -> tuple:
    """The 5-d kernels' window (kernel, stride, padding[, dilation], each (d, h, w)) of a 2-d pooling's
    (kh, kw, sh, sw, ph, pw[, dh, dw]): a unit depth window, no depth padding."""
    fill = (1, 1, 0, 1)
    return tuple(v for i in range(len(window) // 2) for v in (fill[i],) + tuple(window[2 * i:2 * i + 2]))


def _max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode, out=None, indices=None):
    name = "aten::max_pool2d_with_indices"
    device = common_device(name, x)
    if x.dtype not in SUPPORTED or x.dtype == torch.bool:
        raise unsupported_dtype(name, x.dtype, SUPPORTED - {torch.bool})
    batched = _pool_input_k(name, x, 2)
    x4 = _as4(x, batched)
    window, (oh, ow) = _pool_geometry(name, x4, kernel_size, stride, padding, dilation, ceil_mode)
    shape = tuple(x.shape[:-2]) + (oh, ow)
    if indices is not None and indices.dtype != torch.int64:
        raise RuntimeError(f"Expected out tensor to have dtype long int, but got {indices.dtype} instead")
    out = _output(name, out, shape, x.dtype, device, x4, x)
    indices = _output(name, indices, shape, torch.int64, device, x4, x, out)
    if out.numel():
        _launch5("max_pool", device, 2, batched, (out, indices, x), _window5(window))
    return out, indices


@OVERLOADS.implements("max_pool2d_with_indices")
def max_pool2d_with_indices(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool2d(self, kernel_size, stride, padding, dilation, ceil_mode)


@OVERLOADS.implements("max_pool2d_with_indices.out")
def max_pool2d_with_indices_out(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False, *, out,
                                indices):
    return _max_pool2d(self, kernel_size, stride, padding, dilation, ceil_mode, out, indices)


def _check_grad(name, grad_output, expected_shape, dtype):
    if tuple(grad_output.shape) != tuple(expected_shape):
        raise RuntimeError(f"{name}: grad_output of size {list(grad_output.shape)} does not match the pooling "
                           f"output size {list(expected_shape)}")
    if grad_output.dtype != dtype:
        raise RuntimeError(f"{name}: expected grad_output of dtype {dtype}, but got {grad_output.dtype}")


@OVERLOADS.implements("max_pool2d_with_indices_backward", "max_pool2d_with_indices_backward.grad_input")
def _max_pool2d_backward(grad_output, x, kernel_size, stride, padding, dilation, ceil_mode, indices, grad_input=None):
    name = "aten::max_pool2d_with_indices_backward"
    device = common_device(name, grad_output, x, indices)
    _floating_input(name, x)
    batched = _pool_input_k(name, x, 2)
    x4 = _as4(x, batched)
    _, (oh, ow) = _pool_geometry(name, x4, kernel_size, stride, padding, dilation, ceil_mode)
    expected = tuple(x.shape[:-2]) + (oh, ow)
    _check_grad(name, grad_output, expected, x.dtype)
    if indices.dtype != torch.int64 or tuple(indices.shape) != expected:
        raise RuntimeError(f"{name}: expected int64 indices of size {list(expected)}, got {indices.dtype} "
                           f"{list(indices.shape)}")
    grad_input = _output(name, grad_input, x.shape, x.dtype, device, x4, grad_output, x, indices)
    if grad_input.numel():
        _launch5("pool_index_backward", device, 2, batched, (grad_input, grad_output, indices))
    return grad_input


def _divisor(divisor_override) -> int:
    """The kernels' divisor argument: 0 = none (the window's own count). Any other value divides
    the window's sum, negative ones too (CPU returns sum / divisor); zero is CPU's error."""
    if divisor_override is None:
        return 0
    divisor = int(divisor_override)
    if divisor == 0:
        raise RuntimeError("divisor must be not zero")
    return divisor


def _avg_window(name, x4, kernel_size, stride, padding, ceil_mode, divisor_override):
    window, out_hw = _pool_geometry(name, x4, kernel_size, stride, padding, 1, ceil_mode)
    return window[:6], out_hw, _divisor(divisor_override)


def _avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, out=None):
    name = "aten::avg_pool2d"
    device = common_device(name, x)
    _floating_input(name, x)
    batched = _pool_input_k(name, x, 2)
    x4 = _as4(x, batched)
    window, (oh, ow), divisor = _avg_window(name, x4, kernel_size, stride, padding, ceil_mode, divisor_override)
    out = _output(name, out, tuple(x.shape[:-2]) + (oh, ow), x.dtype, device, x4, x)
    if out.numel():
        _launch5("avg_pool", device, 2, batched, (out, x), _window5(window) + (bool(count_include_pad), divisor))
    return out


@OVERLOADS.implements("avg_pool2d")
def avg_pool2d(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@OVERLOADS.implements("avg_pool2d.out")
def avg_pool2d_out(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                   divisor_override=None, *, out):
    return _avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, out)


@OVERLOADS.implements("avg_pool2d_backward", "avg_pool2d_backward.grad_input")
def _avg_pool2d_backward(grad_output, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                         grad_input=None):
    name = "aten::avg_pool2d_backward"
    device = common_device(name, grad_output, x)
    _floating_input(name, x)
    batched = _pool_input_k(name, x, 2)
    x4 = _as4(x, batched)
    window, (oh, ow), divisor = _avg_window(name, x4, kernel_size, stride, padding, ceil_mode, divisor_override)
    _check_grad(name, grad_output, tuple(x.shape[:-2]) + (oh, ow), x.dtype)
    grad_input = _output(name, grad_input, x.shape, x.dtype, device, x4, grad_output, x)
    if grad_input.numel():
        _launch5("avg_pool_backward", device, 2, batched, (grad_input, grad_output),
                 _window5(window) + (bool(count_include_pad), divisor))
    return grad_input


def _adaptive_input(name, x, output_size):
    if x.dim() not in (3, 4):
        raise RuntimeError(f"adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got {list(x.shape)}")
    for d in range(1, x.dim()):
        if x.shape[d] == 0 and not (x.dim() == 3 and d == 0):
            raise RuntimeError(f"adaptive_avg_pool2d(): Expected input to have non-zero size for non-batch "
                               f"dimensions, but input has sizes {list(x.shape)} with dimension {d} being empty")
    size = tuple(int(s) for s in output_size)
    if len(size) != 2:
        raise RuntimeError("adaptive_avg_pool2d: output_size must be 2")
    if any(s < 0 for s in size):
        raise RuntimeError(f"adaptive_avg_pool2d: elements of output_size must be greater than or equal to 0 "
                           f"but received {{{size[0]}, {size[1]}}}")
    return (x.unsqueeze(0) if x.dim() == 3 else x), size


@OVERLOADS.implements("_adaptive_avg_pool2d", "adaptive_avg_pool2d.out")
def _adaptive_avg_pool2d(x, output_size, out=None):
    name = "aten::_adaptive_avg_pool2d"
    device = common_device(name, x)
    _floating_input(name, x)
    x4, size = _adaptive_input(name, x, output_size)
    out = _output(name, out, tuple(x.shape[:-2]) + size, x.dtype, device, x4, x)
    if out.numel():
        _launch5("adaptive_avg_pool", device, 2, x.dim() == 4, (out, x))
    return out


@OVERLOADS.implements("_adaptive_avg_pool2d_backward")
def adaptive_avg_pool2d_backward(grad_output, self):
    name = "aten::_adaptive_avg_pool2d_backward"
    device = common_device(name, grad_output, self)
    _floating_input(name, self)
    x4, _ = _adaptive_input(name, self, grad_output.shape[-2:])
    if grad_output.dim() != self.dim() or grad_output.shape[:-2] != self.shape[:-2]:
        raise RuntimeError(f"{name}: grad_output of size {list(grad_output.shape)} does not match the input "
                           f"of size {list(self.shape)}")
    _check_grad(name, grad_output, grad_output.shape, self.dtype)
    grad_input = _empty(self.shape, self.dtype, device, _suggest_format(x4))
    if grad_input.numel():
        _launch5("adaptive_avg_pool_backward", device, 2, self.dim() == 4, (grad_input, grad_output))
    return grad_input


def _pool_input_k(name: str, x, k: int) -> bool:
    """CPU's input checks of a k-d pooling; True when ``x`` has a batch dim."""
    if x.dim() not in (k + 1, k + 2):
        raise RuntimeError(f"{name}: Expected {k + 1}D or {k + 2}D (batch mode) tensor with optional 0 dim batch "
                           f"size for input, but got: {list(x.shape)}")
    if any(n == 0 for n in x.shape[-(k + 1):]):
        raise RuntimeError(f"{name}: Expected input's non-batch dimensions to have positive length, but input has "
                           f"a shape of {list(x.shape)}")
    return x.dim() == k + 2


def _window_k(name, x, k, kernel_size, stride, padding, dilation, ceil_mode):
    """Checked kernel, stride, padding, dilation (k ints each) and the output extents."""
    kernel = _ints_k(name, "kernel_size", kernel_size, k)
    stride = _ints_k(name, "stride", stride, k, default=kernel)
    padding = _ints_k(name, "padding", padding, k)
    dilation = _ints_k(name, "dilation", dilation, k)
    if any(v <= 0 for v in kernel):
        raise RuntimeError(f"kernel size should be greater than zero, but got {list(kernel)}")
    if any(v <= 0 for v in stride):
        raise RuntimeError(f"stride should be greater than zero, but got {list(stride)}")
    if any(v <= 0 for v in dilation):
        raise RuntimeError(f"dilation should be greater than zero, but got {list(dilation)}")
    for p, kk, d in zip(padding, kernel, dilation):
        if p < 0:
            raise RuntimeError(f"pad must be non-negative, but got pad: {p}")
        if p > ((kk - 1) * d + 1) // 2:
            raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={p}, "
                               f"kernel_size={kk} and dilation={d}")
    # then half the kernel itself, as CPU's max_pool3d_with_indices (see _pool_geometry)
    if any(p > kk // 2 for p, kk in zip(padding, kernel)):
        raise RuntimeError("pad should be smaller than or equal to half of kernel size, but got "
                           f"kT: {kernel[0]} kW: {kernel[2]} kH: {kernel[1]} padT: {padding[0]} padW: {padding[2]} "
                           f"padH: {padding[1]}")
    spatial = tuple(x.shape[-k:])
    out = tuple(_pool_output(n, kk, p, s, d, ceil_mode)
                for n, kk, p, s, d in zip(spatial, kernel, padding, stride, dilation))
    if any(o < 1 for o in out):
        raise RuntimeError(f"Given input size: ({'x'.join(map(str, x.shape[-(k + 1):]))}). Calculated output size: "
                           f"({'x'.join(map(str, (x.shape[-(k + 1)],) + out))}). Output size is too small")
    return kernel, stride, padding, dilation, out


def _indices_out(name, indices, shape, device, like, *inputs):
    if indices is not None and indices.dtype != torch.int64:
        raise RuntimeError(f"Expected out tensor to have dtype long int, but got {indices.dtype} instead")
    return _output(name, indices, shape, torch.int64, device, like, *inputs)


# -- max_pool3d_with_indices

def _max_pool3d(x, kernel_size, stride, padding, dilation, ceil_mode, out=None, indices=None):
    name = "aten::max_pool3d_with_indices"
    device = common_device(name, x)
    _check_dtype_in(name, x, SUPPORTED - {torch.bool})
    batched = _pool_input_k(name, x, 3)
    kernel, stride, padding, dilation, osz = _window_k(name, x, 3, kernel_size, stride, padding, dilation,
                                                       ceil_mode)
    shape = tuple(x.shape[:-3]) + osz
    out = _output(name, out, shape, x.dtype, device, x, x)
    indices = _indices_out(name, indices, shape, device, x, x, out)
    if out.numel():
        _launch5("max_pool", device, 3, batched, (out, indices, x), kernel + stride + padding + dilation)
    return out, indices


@OVERLOADS.implements("max_pool3d_with_indices")
def max_pool3d_with_indices(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool3d(self, kernel_size, stride, padding, dilation, ceil_mode)


@OVERLOADS.implements("max_pool3d_with_indices.out")
def max_pool3d_with_indices_out(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False, *, out,
                                indices):
    return _max_pool3d(self, kernel_size, stride, padding, dilation, ceil_mode, out, indices)


def _index_backward(name, grad_output, x, indices, expected, k, grad_input):
    """grad_input = scatter-add of grad_output at the (flat plane) indices of a k-d max pooling."""
    device = common_device(name, grad_output, x, indices)
    _floating_input(name, x)
    _check_grad(name, grad_output, expected, x.dtype)
    if indices.dtype != torch.int64 or tuple(indices.shape) != tuple(expected):
        raise RuntimeError(f"{name}: expected int64 indices of size {list(expected)}, got {indices.dtype} "
                           f"{list(indices.shape)}")
    grad_input = _output(name, grad_input, x.shape, x.dtype, device, x, grad_output, x, indices)
    if grad_input.numel():
        _launch5("pool_index_backward", device, k, x.dim() == k + 2, (grad_input, grad_output, indices))
    return grad_input


@OVERLOADS.implements("max_pool3d_with_indices_backward", "max_pool3d_with_indices_backward.grad_input")
def _max_pool3d_backward(grad_output, x, kernel_size, stride, padding, dilation, ceil_mode, indices, grad_input=None):
    name = "aten::max_pool3d_with_indices_backward"
    _pool_input_k(name, x, 3)
    *_, osz = _window_k(name, x, 3, kernel_size, stride, padding, dilation, ceil_mode)
    return _index_backward(name, grad_output, x, indices, tuple(x.shape[:-3]) + osz, 3, grad_input)


# -- adaptive max pooling (2-d and 3-d; 1-d reaches 2-d)

def _adaptive_size(name, x, output_size, k):
    fn = f"adaptive_max_pool{k}d()"
    if x.dim() not in (k + 1, k + 2):
        raise RuntimeError(f"{fn}: Expected {k + 1}D or {k + 2}D tensor, but got: {list(x.shape)}")
    for d in range(1, x.dim()):
        if x.shape[d] == 0:
            raise RuntimeError(f"{fn}: Expected input to have non-zero size for non-batch dimensions, but input "
                               f"has sizes {list(x.shape)} with dimension {d} being empty")
    size = tuple(int(s) for s in output_size)
    if len(size) != k:
        raise RuntimeError(f"{fn}: internal error: output_size.size() must be {k}")
    if any(s < 0 for s in size):
        raise RuntimeError(f"{fn}: elements of output_size must be greater than or equal to 0")
    return size


def _adaptive_max(k, x, output_size, out=None, indices=None):
    name = f"aten::adaptive_max_pool{k}d"
    device = common_device(name, x)
    _floating_input(name, x)
    size = _adaptive_size(name, x, output_size, k)
    shape = tuple(x.shape[:-k]) + size
    out = _output(name, out, shape, x.dtype, device, x, x)
    indices = _indices_out(name, indices, shape, device, x, x, out)
    if out.numel():
        _launch5("adaptive_max_pool", device, k, x.dim() == k + 2, (out, indices, x))
    return out, indices


@OVERLOADS.implements("adaptive_max_pool2d")
def adaptive_max_pool2d(self, output_size):
    return _adaptive_max(2, self, output_size)


@OVERLOADS.implements("adaptive_max_pool2d.out")
def adaptive_max_pool2d_out(self, output_size, *, out, indices):
    return _adaptive_max(2, self, output_size, out, indices)


@OVERLOADS.implements("adaptive_max_pool3d")
def adaptive_max_pool3d(self, output_size):
    return _adaptive_max(3, self, output_size)


@OVERLOADS.implements("adaptive_max_pool3d.out")
def adaptive_max_pool3d_out(self, output_size, *, out, indices):
    return _adaptive_max(3, self, output_size, out, indices)


def _adaptive_max_backward(k, grad_output, x, indices, grad_input=None):
    name = f"aten::adaptive_max_pool{k}d_backward"
    _adaptive_size(name, x, grad_output.shape[-k:], k)
    if grad_output.dim() != x.dim() or grad_output.shape[:-k] != x.shape[:-k]:
        raise RuntimeError(f"{name}: grad_output of size {list(grad_output.shape)} does not match the input of "
                           f"size {list(x.shape)}")
    return _index_backward(name, grad_output, x, indices, tuple(grad_output.shape), k, grad_input)


@OVERLOADS.implements("adaptive_max_pool2d_backward")
def adaptive_max_pool2d_backward(grad_output, self, indices):
    return _adaptive_max_backward(2, grad_output, self, indices)


@OVERLOADS.implements("adaptive_max_pool2d_backward.grad_input")
def adaptive_max_pool2d_backward_grad_input(grad_output, self, indices, *, grad_input):
    return _adaptive_max_backward(2, grad_output, self, indices, grad_input)


@OVERLOADS.implements("adaptive_max_pool3d_backward")
def adaptive_max_pool3d_backward(grad_output, self, indices):
    return _adaptive_max_backward(3, grad_output, self, indices)


@OVERLOADS.implements("adaptive_max_pool3d_backward.grad_input")
def adaptive_max_pool3d_backward_grad_input(grad_output, self, indices, *, grad_input):
    return _adaptive_max_backward(3, grad_output, self, indices, grad_input)


# -- max unpooling

def _check_unpool_indices(name, indices, plane, size):
    """CPU's "invalid max index" error, raised before the launch (a kernel fault would poison the
    context): the index range comes from a device reduction, read with one synchronisation."""
    if indices.numel() == 0:
        return
    refuse_in_projection(name, "checks device values on the host before it launches (the indices' range)")
    lo, hi = torch.stack((indices.min(), indices.max())).tolist()
    if lo < 0 or hi >= plane:
        bad = lo if lo < 0 else hi
        raise RuntimeError(f"Found an invalid max index: {bad} (output volumes are of size "
                           f"{'x'.join(map(str, size))}")


def _max_unpool(k, x, indices, output_size, out=None):
    name = f"aten::max_unpool{k}d"
    device = common_device(name, x, indices)
    _floating_input(name, x)
    if indices.dtype != torch.int64:
        raise RuntimeError(f"elements in indices should be type int64 but got: {indices.dtype}")
    size = tuple(int(s) for s in output_size)
    if len(size) != k:
        raise RuntimeError(f"There should be exactly {k} elements (depth, height, width) in output_size, but got "
                           f"{len(size)} elements." if k == 3 else
                           f"There should be exactly two elements (height, width) in output_size, but got "
                           f"{len(size)} elements.")
    if x.dim() not in (k + 1, k + 2):
        raise RuntimeError(f"Input to max_unpooling{k}d should be a {k + 1}d or {k + 2}d Tensor, but got a tensor "
                           f"with {x.dim()} dimensions.")
    if tuple(x.shape) != tuple(indices.shape):
        raise RuntimeError(f"Expected shape of indices to be same as that of the input tensor ({list(x.shape)}) "
                           f"but got indices tensor with shape: {list(indices.shape)}")
    for d in range(1, x.dim()):
        if x.shape[d] <= 0:
            raise RuntimeError(f"max_unpooling{k}d(): Expected input to have non-zero size for non-batch "
                               f"dimensions, but got {list(x.shape)} with dimension {d} being empty.")
    shape = tuple(x.shape[:-k]) + size
    _check_unpool_indices(name, indices, prod(size), size)
    out = _output(name, out, shape, x.dtype, device, x, x, indices)
    if out.numel():
        _launch5("max_unpool", device, k, x.dim() == k + 2, (out, x, indices))
    return out


@OVERLOADS.implements("max_unpool2d")
def max_unpool2d(self, indices, output_size):
    return _max_unpool(2, self, indices, output_size)


@OVERLOADS.implements("max_unpool2d.out")
def max_unpool2d_out(self, indices, output_size, *, out):
    return _max_unpool(2, self, indices, output_size, out)


def _unpool3d_args(stride, padding):
    stride, padding = tuple(int(s) for s in stride), tuple(int(p) for p in padding)
    if len(stride) != 3 or len(padding) != 3:
        raise RuntimeError("max_unpool3d: stride and padding must have 3 elements")
    if any(s <= 0 for s in stride):
        raise RuntimeError(f"strides should be greater than zero, but got stride: {list(stride)}")


@OVERLOADS.implements("max_unpool3d")
def max_unpool3d(self, indices, output_size, stride, padding):
    _unpool3d_args(stride, padding)
    return _max_unpool(3, self, indices, output_size)


@OVERLOADS.implements("max_unpool3d.out")
def max_unpool3d_out(self, indices, output_size, stride, padding, *, out):
    _unpool3d_args(stride, padding)
    return _max_unpool(3, self, indices, output_size, out)


# -- avg_pool3d

def _avg3_args(name, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    """Checks x and the window; returns batched, the output extents and the kernels' window arguments."""
    _check_dtype_in(name, x, _FLOAT_ONLY)
    batched = _pool_input_k(name, x, 3)
    kernel, stride, padding, _, osz = _window_k(name, x, 3, kernel_size, stride, padding, 1, ceil_mode)
    divisor = _divisor(divisor_override)
    return batched, osz, kernel + stride + padding + (bool(count_include_pad), divisor)


def _avg_pool3d(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, out=None):
    name = "aten::avg_pool3d"
    device = common_device(name, x)
    batched, osz, window = _avg3_args(name, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                      divisor_override)
    out = _output(name, out, tuple(x.shape[:-3]) + osz, x.dtype, device, x, x)
    if out.numel():
        _launch5("avg_pool", device, 3, batched, (out, x), window)
    return out


@OVERLOADS.implements("avg_pool3d")
def avg_pool3d(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool3d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@OVERLOADS.implements("avg_pool3d.out")
def avg_pool3d_out(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                   divisor_override=None, *, out):
    return _avg_pool3d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, out)


@OVERLOADS.implements("avg_pool3d_backward", "avg_pool3d_backward.grad_input")
def _avg_pool3d_backward(grad_output, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                         grad_input=None):
    name = "aten::avg_pool3d_backward"
    device = common_device(name, grad_output, x)
    batched, osz, window = _avg3_args(name, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                      divisor_override)
    _check_grad(name, grad_output, tuple(x.shape[:-3]) + osz, x.dtype)
    grad_input = _output(name, grad_input, x.shape, x.dtype, device, x, grad_output, x)
    if grad_input.numel():
        _launch5("avg_pool_backward", device, 3, batched, (grad_input, grad_output), window)
    return grad_input


# -- adaptive_avg_pool3d

@OVERLOADS.implements("_adaptive_avg_pool3d", "adaptive_avg_pool3d.out")
def _adaptive_avg_pool3d(x, output_size, out=None):
    name = "aten::_adaptive_avg_pool3d"
    device = common_device(name, x)
    _floating_input(name, x)
    if x.dim() not in (4, 5):
        raise RuntimeError(f"adaptive_avg_pool3d(): Expected 4D or 5D tensor, but got {list(x.shape)}")
    for d in range(1, x.dim()):
        if x.shape[d] == 0:
            raise RuntimeError(f"adaptive_avg_pool3d(): Expected input to have non-zero size for non-batch "
                               f"dimensions, but input has sizes {list(x.shape)} with dimension {d} being empty")
    size = tuple(int(s) for s in output_size)
    if len(size) != 3:
        raise RuntimeError("adaptive_avg_pool3d: internal error: output_size.size() must be 3")
    if any(s < 0 for s in size):
        raise RuntimeError("adaptive_avg_pool3d: elements of output_size must be greater than or equal to 0")
    out = _output(name, out, tuple(x.shape[:-3]) + size, x.dtype, device, x, x)
    if out.numel():
        _launch5("adaptive_avg_pool", device, 3, x.dim() == 5, (out, x))
    return out


@OVERLOADS.implements("_adaptive_avg_pool3d_backward")
def adaptive_avg_pool3d_backward(grad_output, self):
    name = "aten::_adaptive_avg_pool3d_backward"
    device = common_device(name, grad_output, self)
    _floating_input(name, self)
    if grad_output.dim() != self.dim() or grad_output.shape[:-3] != self.shape[:-3] or self.dim() not in (4, 5):
        raise RuntimeError(f"{name}: grad_output of size {list(grad_output.shape)} does not match the input of "
                           f"size {list(self.shape)}")
    _check_grad(name, grad_output, grad_output.shape, self.dtype)
    grad_input = _empty(self.shape, self.dtype, device, _suggest_format(self))
    if grad_input.numel():
        _launch5("adaptive_avg_pool_backward", device, 3, self.dim() == 5, (grad_input, grad_output))
    return grad_input


# -- fractional max pooling (the random samples come in as a tensor)

def _fractional(k, x, kernel_size, output_size, random_samples, out=None, indices=None):
    name = f"aten::fractional_max_pool{k}d"
    device = common_device(name, x, random_samples)
    _floating_input(name, x)
    pool = _ints_k(name, "kernel_size", kernel_size, k)
    size = _ints_k(name, "output_size", output_size, k)
    if x.dim() not in (k + 1, k + 2) or any(n == 0 for n in x.shape[1:]):
        raise RuntimeError(f"fractional_max_pool{k}d(): Expected {k + 1}D or {k + 2}D tensor, but got: "
                           f"{list(x.shape)}" if x.dim() not in (k + 1, k + 2) else
                           f"fractional_max_pool{k}d(): Expected input to have non-zero size for non-batch "
                           f"dimensions, but got {list(x.shape)}")
    if any(p <= 0 for p in pool) or any(o <= 0 for o in size):
        raise RuntimeError(f"fractional_max_pool{k}d(): kernel_size and output_size must be greater than zero, "
                           f"but got {list(pool)} and {list(size)}")
    for axis, o, p, n in zip(_AXES[3 - k:], size, pool, x.shape[-k:]):
        if o + p - 1 > n:
            raise RuntimeError(f"fractional_max_pool{k}d(): pool {axis} {p} too large relative to input {axis} {n}"
                               f" (output {axis} {o})")
    batched = x.dim() == k + 2
    planes = (x.shape[0] if batched else 1, x.shape[-(k + 1)])
    if random_samples.dim() != 3 or random_samples.shape[0] < planes[0] or \
            tuple(random_samples.shape[1:]) != (planes[1], k) or random_samples.dtype != x.dtype:
        raise RuntimeError(f"{name}: expected random_samples of size {list(planes + (k,))} and dtype {x.dtype}, "
                           f"got {list(random_samples.shape)} {random_samples.dtype}")
    shape = tuple(x.shape[:-k]) + size
    out = _output(name, out, shape, x.dtype, device, x, x)
    indices = _indices_out(name, indices, shape, device, x, x, out)
    if out.numel():
        _launch5("fractional_max_pool", device, k, batched, (out, indices, x),
                 (device_ref(random_samples), k) + (1,) * (3 - k) + pool)
    return out, indices


@OVERLOADS.implements("fractional_max_pool2d")
def fractional_max_pool2d(self, kernel_size, output_size, random_samples):
    return _fractional(2, self, kernel_size, output_size, random_samples)


@OVERLOADS.implements("fractional_max_pool2d.output")
def fractional_max_pool2d_out(self, kernel_size, output_size, random_samples, *, output, indices):
    return _fractional(2, self, kernel_size, output_size, random_samples, output, indices)


@OVERLOADS.implements("fractional_max_pool3d")
def fractional_max_pool3d(self, kernel_size, output_size, random_samples):
    return _fractional(3, self, kernel_size, output_size, random_samples)


@OVERLOADS.implements("fractional_max_pool3d.output")
def fractional_max_pool3d_out(self, kernel_size, output_size, random_samples, *, output, indices):
    return _fractional(3, self, kernel_size, output_size, random_samples, output, indices)


def _fractional_backward(k, grad_output, x, kernel_size, output_size, indices, grad_input=None):
    name = f"aten::fractional_max_pool{k}d_backward"
    size = _ints_k(name, "output_size", output_size, k)
    if x.dim() not in (k + 1, k + 2):
        raise RuntimeError(f"{name}: expected a {k + 1}D or {k + 2}D input, got {list(x.shape)}")
    return _index_backward(name, grad_output, x, indices, tuple(x.shape[:-k]) + size, k, grad_input)


@OVERLOADS.implements("fractional_max_pool2d_backward")
def fractional_max_pool2d_backward(grad_output, self, kernel_size, output_size, indices):
    return _fractional_backward(2, grad_output, self, kernel_size, output_size, indices)


@OVERLOADS.implements("fractional_max_pool2d_backward.grad_input")
def fractional_max_pool2d_backward_grad_input(grad_output, self, kernel_size, output_size, indices, *, grad_input):
    return _fractional_backward(2, grad_output, self, kernel_size, output_size, indices, grad_input)


@OVERLOADS.implements("fractional_max_pool3d_backward")
def fractional_max_pool3d_backward(grad_output, self, kernel_size, output_size, indices):
    return _fractional_backward(3, grad_output, self, kernel_size, output_size, indices)


@OVERLOADS.implements("fractional_max_pool3d_backward.grad_input")
def fractional_max_pool3d_backward_grad_input(grad_output, self, kernel_size, output_size, indices, *, grad_input):
    return _fractional_backward(3, grad_output, self, kernel_size, output_size, indices, grad_input)
