"""Convolution, pooling and upsampling on the device.

Convolutions (``aten::convolution_overrideable`` and ``aten::convolution_backward_overrideable``,
which is where ``aten::convolution`` sends a PrivateUse1 tensor; ATen has already turned 1-d
convolutions into 2-d ones and string paddings into numbers) are lowered per sample to:

* forward: ``im2col`` (vector engine) of the sample into a device scratch column matrix, then one
  matrix-engine ``matmul`` per group, ``out[n, g] = bias_g + W_g @ col_g``, the bias entering as
  the GEMM's C operand (stride 0 along the positions): fp32 accumulation for float16/bfloat16
  and one rounding. A 1x1 convolution with unit stride and no padding skips im2col.
* transposed forward: ``col_g = W_g^T @ x[n, g]`` then ``col2im`` (+ bias), accumulated in fp32
  (scratch columns are fp32 for float16/bfloat16) and rounded once.
* backward: the adjoint pairs (``matmul`` + ``col2im`` for grad_input of a convolution,
  ``im2col`` + ``matmul`` for a transposed one); grad_weight accumulates ``gout_g @ col_g^T``
  over the batch with beta = 1 in an fp32 scratch for float16/bfloat16 (one rounding at the end,
  by the copy kernel); grad_bias is the device ``sum`` over batch and positions.

The scratch column matrix holds one sample and is reused for the next one: the launches of a
stream run in order, so the next im2col cannot overwrite columns a GEMM still reads.
Layout: outputs are channels_last when the input (or weight) is, else contiguous, as CPU does.
dtypes: float32, float64, float16, bfloat16 (input, weight and bias of one dtype, CPU's error
otherwise); integer convolutions are rejected (the matrix engine has no integer GEMM).

Pooling (2-d; ATen sends 1-d max/avg pooling here through unsqueeze): ``max_pool2d_with_indices``
(+ backward; any dtype but bool), ``avg_pool2d`` (+ backward; count_include_pad, ceil_mode,
divisor_override), ``_adaptive_avg_pool2d`` (+ backward). Upsampling: ``upsample_nearest2d`` and
``upsample_bilinear2d`` (align_corners, explicit scales) and their backward passes.
Windowed kernels compute in float32 (float64 for float64) and round once.
Left out: 3-d pooling and upsampling, adaptive max pooling, bicubic/trilinear/nearest-exact.
"""
from __future__ import annotations

from math import prod

import torch

from torch_plugin._dtypes import FLOATING, SUPPORTED, TO_CODE
from torch_plugin.errors import unsupported_dtype
from torch_plugin.ops._common import (check_overlap, common_device, current_stream, device_ref, resize_out,
                                      rt)
import runtime

_TensorRef = runtime.TensorRef
_new_tuple = tuple.__new__
_NO_BIAS = None


def _ref(t: torch.Tensor, offset: int, shape, strides) -> runtime.TensorRef:
    """Descriptor of the region of ``t`` that starts ``offset`` elements after its first element."""
    return _new_tuple(_TensorRef, (False, t.get_device(), t.data_ptr() + offset * t.element_size(),
                                   TO_CODE[t.dtype], tuple(shape), tuple(strides)))


def _flat_stride(shape, strides):
    """The stride of ``shape`` collapsed to one dimension, or None if its dims do not collapse."""
    inner = None
    extent = 1
    for n, s in reversed(list(zip(shape, strides))):
        if n == 1:
            continue
        if inner is None:
            inner, extent = s, n * s
        elif s != extent:
            return None
        else:
            extent = n * s
    return 1 if inner is None else inner


def _flattenable(t: torch.Tensor, first: int) -> torch.Tensor:
    """``t`` itself if its dims from ``first`` on collapse to one stride, else a contiguous copy."""
    if _flat_stride(t.shape[first:], t.stride()[first:]) is None:
        return t.contiguous()
    return t


def _matrix(t: torch.Tensor, offset: int, rows: int, row_stride: int, first: int):
    """(rows, prod(shape[first:])) matrix of ``t`` starting at ``offset`` (dims from ``first`` on
    collapse to one stride: see _flattenable)."""
    cols = prod(t.shape[first:])
    return _ref(t, offset, (rows, cols), (row_stride, _flat_stride(t.shape[first:], t.stride()[first:])))


def _transposed(ref):
    return ref._replace(shape=ref.shape[::-1], strides=ref.strides[::-1])


def _pad3(values, k, fill):
    return (fill,) * (3 - k) + tuple(values)


def _sample_ref(t: torch.Tensor, n: int):
    """Sample n of an (N, C, *spatial) tensor as the kernel's (C, D, H, W) image."""
    k = t.dim() - 2
    shape = (t.shape[1],) + _pad3(t.shape[2:], k, 1)
    strides = (t.stride(1),) + _pad3(t.stride()[2:], k, 0)
    return _ref(t, n * t.stride(0), shape, strides)


def _col_ref(col: torch.Tensor, channels: int, kernel, grid):
    """The scratch column matrix (channels * K, L) as the kernel's 7-d (C, kD, kH, kW, oD, oH, oW)."""
    k = len(kernel)
    shape = (channels,) + _pad3(kernel, k, 1) + _pad3(grid, k, 1)
    strides = [0] * 7
    step = 1
    for d in range(6, -1, -1):
        strides[d] = step
        step *= shape[d]
    return _ref(col, 0, shape, strides)


def _expand(name: str, values, k: int) -> tuple:
    values = tuple(int(v) for v in values)
    if len(values) == 1:
        return values * k
    if len(values) != k:
        raise RuntimeError(f"{name}: expected {name.split('::')[-1]} parameter lists of length 1 or {k}, "
                           f"got {list(values)}")
    return values


def _suggest_format(*tensors):
    for t in tensors:
        if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous():
            return torch.channels_last
        if t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d) and not t.is_contiguous():
            return torch.channels_last_3d
    return torch.contiguous_format


def _empty(shape, dtype, device: int, memory_format=torch.contiguous_format):
    return torch.empty(shape, dtype=dtype, device=torch.device("emu", device), memory_format=memory_format)


def _acc_dtype(dtype):
    """Scratch dtype of partial sums: fp32 for float16/bfloat16 (one rounding at the end)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _gemm(device, out_ref, a_ref, b_ref, c_ref=None, beta=0.0):
    rt().launch("matmul", (out_ref, a_ref, b_ref, c_ref, float(beta), 1.0), current_stream(device))


# ---------------------------------------------------------------------------------------------
# convolution

class _Conv:
    """Checked arguments and derived geometry of one convolution."""

    def __init__(self, name, input, weight, bias, stride, padding, dilation, transposed, output_padding,
                 groups):
        self.name = name
        tensors = [input, weight] + ([bias] if bias is not None else [])
        self.device = common_device(name, *tensors)
        for t in tensors:
            if t.dtype not in FLOATING:
                raise unsupported_dtype(name, t.dtype, FLOATING)
        if weight.dim() not in (3, 4, 5):
            raise RuntimeError(f"{name}: expected a 3-d, 4-d or 5-d weight (1-3 spatial dims), got "
                               f"{weight.dim()}-d weight of size {list(weight.shape)}")
        if input.dim() != weight.dim():
            raise RuntimeError(f"Expected {weight.dim()}D (batched) input to conv, but got input of size: "
                               f"{list(input.shape)}")
        if input.dtype != weight.dtype:
            raise RuntimeError(f"Input type ({input.dtype}) and weight type ({weight.dtype}) should be the same")
        if bias is not None and bias.dtype != input.dtype:
            raise RuntimeError(f"Input type ({input.dtype}) and bias type ({bias.dtype}) should be the same")
        k = weight.dim() - 2
        self.k = k
        self.stride = _expand(f"{name} stride", stride, k)
        self.padding = _expand(f"{name} padding", padding, k)
        self.dilation = _expand(f"{name} dilation", dilation, k)
        self.output_padding = _expand(f"{name} output_padding", output_padding, k) if transposed else (0,) * k
        self.groups = groups = int(groups)
        self.transposed = bool(transposed)
        if groups <= 0:
            raise RuntimeError("non-positive groups is not supported")
        if any(s <= 0 for s in self.stride):
            raise RuntimeError("non-positive stride is not supported")
        if any(d <= 0 for d in self.dilation):
            raise RuntimeError("dilation should be greater than zero")
        if any(p < 0 for p in self.padding):
            raise RuntimeError("negative padding is not supported")
        if any(p < 0 for p in self.output_padding):
            raise RuntimeError("negative output_padding is not supported")
        self.kernel = tuple(weight.shape[2:])
        C = input.shape[1]
        if transposed:
            if weight.shape[0] != C:
                raise RuntimeError(f"Given transposed=1, weight of size {list(weight.shape)}, expected input"
                                   f"{list(input.shape)} to have {weight.shape[0]} channels, but got {C} "
                                   "channels instead")
            if C % groups:
                raise RuntimeError(f"{name}: input channels {C} are not divisible by groups {groups}")
            self.out_channels = weight.shape[1] * groups
            if any(op >= max(s, d) for op, s, d in zip(self.output_padding, self.stride, self.dilation)):
                raise RuntimeError("output padding must be smaller than either stride or dilation, but got "
                                   f"output_padding: {list(self.output_padding)}, stride: {list(self.stride)}, "
                                   f"dilation: {list(self.dilation)}")
            self.out_spatial = tuple((i - 1) * s - 2 * p + d * (kk - 1) + op + 1 for i, s, p, d, kk, op in zip(
                input.shape[2:], self.stride, self.padding, self.dilation, self.kernel, self.output_padding))
        else:
            if weight.shape[0] % groups:
                raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at "
                                   f"dimension 0, but got weight of size {list(weight.shape)} instead")
            if weight.shape[1] * groups != C:
                raise RuntimeError(f"Given groups={groups}, weight of size {list(weight.shape)}, expected "
                                   f"input{list(input.shape)} to have {weight.shape[1] * groups} channels, "
                                   f"but got {C} channels instead")
            self.out_channels = weight.shape[0]
            padded = tuple(i + 2 * p for i, p in zip(input.shape[2:], self.padding))
            effective = tuple(d * (kk - 1) + 1 for d, kk in zip(self.dilation, self.kernel))
            if any(p < e for p, e in zip(padded, effective)):
                raise RuntimeError(f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). "
                                   f"Kernel size: ({' x '.join(map(str, effective))}). Kernel size can't be "
                                   "greater than actual input size")
            self.out_spatial = tuple((p - e) // s + 1 for p, e, s in zip(padded, effective, self.stride))
        if any(o <= 0 for o in self.out_spatial):
            raise RuntimeError(f"{name}: computed output size {list(self.out_spatial)} is too small")
        if bias is not None and (bias.dim() != 1 or bias.shape[0] != self.out_channels):
            raise RuntimeError(f"Given weight of size {list(weight.shape)}, expected bias to be 1-dimensional "
                               f"with {self.out_channels} elements, but got bias of size {list(bias.shape)} "
                               "instead")
        self.batch = input.shape[0]
        self.in_spatial = tuple(input.shape[2:])
        self.K = prod(self.kernel)
        self.params = (_pad3(self.stride, k, 1) + _pad3(self.padding, k, 0) + _pad3(self.dilation, k, 1))
        self.pointwise = self.K == 1 and all(s == 1 for s in self.stride) and not any(self.padding) \
            and not self.transposed

    # The column matrix of a convolution is built from its input over the output grid; that of a
    # transposed convolution from its output (the gradient) over the input grid.
    def col_shape(self, channels, grid):
        return (channels * self.K, prod(grid))


def _im2col(conv: _Conv, col, image: torch.Tensor, n: int, grid):
    ref = _col_ref(col, image.shape[1], conv.kernel, grid)
    rt().launch("im2col", (ref, _sample_ref(image, n)) + conv.params, current_stream(conv.device))


def _col2im(conv: _Conv, image: torch.Tensor, n: int, col, grid, bias):
    ref = _col_ref(col, image.shape[1], conv.kernel, grid)
    bias_ref = None if bias is None else device_ref(bias)
    rt().launch("col2im", (_sample_ref(image, n), ref, bias_ref) + conv.params, current_stream(conv.device))


def _conv_forward(conv: _Conv, x, weight, bias, out):
    G = conv.groups
    Og, Cg = conv.out_channels // G, x.shape[1] // G
    device = conv.device
    if conv.transposed:
        # col (G*Og*K, L_in) = per group W_g^T (Og*K, Cg) @ x[n, g] (Cg, L_in); out[n] = col2im(col) + bias
        x = _flattenable(x, 2)
        weight = _flattenable(weight, 1)
        col = _empty(conv.col_shape(conv.out_channels, conv.in_spatial), _acc_dtype(x.dtype), device)
        rows = Og * conv.K
        for n in range(conv.batch):
            for g in range(G):
                w_g = _transposed(_matrix(weight, g * Cg * weight.stride(0), Cg, weight.stride(0), 1))
                x_g = _matrix(x, n * x.stride(0) + g * Cg * x.stride(1), Cg, x.stride(1), 2)
                _gemm(device, _ref(col, g * rows * col.shape[1], (rows, col.shape[1]), (col.shape[1], 1)), w_g, x_g)
            _col2im(conv, out, n, col, conv.in_spatial, bias)
        return out
    # out[n, g] (Og, L) = bias_g + W_g (Og, Cg*K) @ col_g (Cg*K, L)
    weight = _flattenable(weight, 1)
    L = prod(conv.out_spatial)
    if conv.pointwise:
        x = _flattenable(x, 2)
    else:
        col = _empty(conv.col_shape(x.shape[1], conv.out_spatial), x.dtype, device)
    rows = Cg * conv.K
    for n in range(conv.batch):
        if not conv.pointwise:
            _im2col(conv, col, x, n, conv.out_spatial)
        for g in range(G):
            w_g = _matrix(weight, g * Og * weight.stride(0), Og, weight.stride(0), 1)
            if conv.pointwise:
                b_g = _matrix(x, n * x.stride(0) + g * Cg * x.stride(1), Cg, x.stride(1), 2)
            else:
                b_g = _ref(col, g * rows * L, (rows, L), (L, 1))
            o_g = _matrix(out, n * out.stride(0) + g * Og * out.stride(1), Og, out.stride(1), 2)
            c_g = None if bias is None else _ref(bias, g * Og * bias.stride(0), (Og, L), (bias.stride(0), 0))
            _gemm(device, o_g, w_g, b_g, c_g, 0.0 if bias is None else 1.0)
    return out


def convolution_overrideable(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    name = "aten::convolution_overrideable"
    unbatched = input.dim() == weight.dim() - 1
    if unbatched:
        input = input.unsqueeze(0)
    conv = _Conv(name, input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    shape = (conv.batch, conv.out_channels) + conv.out_spatial
    out = _empty(shape, input.dtype, conv.device, _suggest_format(input, weight))
    if out.numel():
        _conv_forward(conv, input, weight, bias, out)
    return out.squeeze(0) if unbatched else out


def _grad_input(conv: _Conv, grad_output, weight, grad_input):
    G = conv.groups
    device = conv.device
    Cg = grad_input.shape[1] // G
    Og = conv.out_channels // G
    weight = _flattenable(weight, 1)
    if conv.transposed:
        # grad_input[n, g] (Cg, L_in) = W_g (Cg, Og*K) @ im2col(grad_output[n])_g (Og*K, L_in)
        col = _empty(conv.col_shape(conv.out_channels, conv.in_spatial), grad_output.dtype, device)
        rows, L = Og * conv.K, prod(conv.in_spatial)
        for n in range(conv.batch):
            _im2col(conv, col, grad_output, n, conv.in_spatial)
            for g in range(G):
                w_g = _matrix(weight, g * Cg * weight.stride(0), Cg, weight.stride(0), 1)
                o_g = _matrix(grad_input, n * grad_input.stride(0) + g * Cg * grad_input.stride(1), Cg,
                              grad_input.stride(1), 2)
                _gemm(device, o_g, w_g, _ref(col, g * rows * L, (rows, L), (L, 1)))
        return
    # col_g (Cg*K, L) = W_g^T (Cg*K, Og) @ grad_output[n, g] (Og, L); grad_input[n] = col2im(col)
    grad_output = _flattenable(grad_output, 2)
    rows, L = Cg * conv.K, prod(conv.out_spatial)
    if not conv.pointwise:
        col = _empty(conv.col_shape(grad_input.shape[1], conv.out_spatial), _acc_dtype(grad_input.dtype), device)
    for n in range(conv.batch):
        for g in range(G):
            w_g = _transposed(_matrix(weight, g * Og * weight.stride(0), Og, weight.stride(0), 1))
            go_g = _matrix(grad_output, n * grad_output.stride(0) + g * Og * grad_output.stride(1), Og,
                           grad_output.stride(1), 2)
            if conv.pointwise:
                o_g = _matrix(grad_input, n * grad_input.stride(0) + g * Cg * grad_input.stride(1), Cg,
                              grad_input.stride(1), 2)
            else:
                o_g = _ref(col, g * rows * L, (rows, L), (L, 1))
            _gemm(device, o_g, w_g, go_g)
        if not conv.pointwise:
            _col2im(conv, grad_input, n, col, conv.out_spatial, None)


def _grad_weight(conv: _Conv, grad_output, input, grad_weight):
    G = conv.groups
    device = conv.device
    acc = grad_weight if grad_weight.dtype == _acc_dtype(grad_weight.dtype) and grad_weight.is_contiguous() \
        else _empty(grad_weight.shape, _acc_dtype(grad_weight.dtype), device)
    if conv.transposed:
        # grad_weight[g] (Cg, Og*K) += x[n, g] (Cg, L_in) @ im2col(grad_output[n])_g^T (L_in, Og*K)
        Cg, Og = input.shape[1] // G, conv.out_channels // G
        image, other, grid, rows_ch = grad_output, _flattenable(input, 2), conv.in_spatial, Og
        lhs_rows, col_ch = Cg, conv.out_channels
    else:
        # grad_weight[g] (Og, Cg*K) += grad_output[n, g] (Og, L) @ im2col(x[n])_g^T (L, Cg*K)
        Cg, Og = input.shape[1] // G, conv.out_channels // G
        image, other, grid, rows_ch = input, _flattenable(grad_output, 2), conv.out_spatial, Cg
        lhs_rows, col_ch = Og, input.shape[1]
    L = prod(grid)
    rows = rows_ch * conv.K
    use_x_directly = conv.pointwise
    if use_x_directly:
        image = _flattenable(image, 2)
    else:
        col = _empty(conv.col_shape(col_ch, grid), image.dtype, device)
    for n in range(conv.batch):
        if not use_x_directly:
            _im2col(conv, col, image, n, grid)
        for g in range(G):
            lhs = _matrix(other, n * other.stride(0) + g * lhs_rows * other.stride(1), lhs_rows, other.stride(1), 2)
            if use_x_directly:
                rhs = _transposed(_matrix(image, n * image.stride(0) + g * rows * image.stride(1), rows,
                                          image.stride(1), 2))
            else:
                rhs = _transposed(_ref(col, g * rows * L, (rows, L), (L, 1)))
            out_g = _ref(acc, g * lhs_rows * rows, (lhs_rows, rows), (rows, 1))
            _gemm(device, out_g, lhs, rhs, out_g if n else None, 1.0 if n else 0.0)
    if acc is not grad_weight:
        grad_weight.copy_(acc)


def convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation, transposed,
                                      output_padding, groups, output_mask):
    name = "aten::convolution_backward_overrideable"
    unbatched = input.dim() == weight.dim() - 1
    if unbatched:
        input, grad_output = input.unsqueeze(0), grad_output.unsqueeze(0)
    conv = _Conv(name, input, weight, None, stride, padding, dilation, transposed, output_padding, groups)
    common_device(name, grad_output, input)
    expected = (conv.batch, conv.out_channels) + conv.out_spatial
    if tuple(grad_output.shape) != expected:
        raise RuntimeError(f"{name}: grad_output of size {list(grad_output.shape)} does not match the "
                           f"convolution's output size {list(expected)}")
    if grad_output.dtype != input.dtype:
        raise RuntimeError(f"{name}: grad_output type ({grad_output.dtype}) and input type ({input.dtype}) "
                           "should be the same")
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        grad_input = _empty(input.shape, input.dtype, conv.device, _suggest_format(input, weight))
        if grad_input.numel():
            if grad_output.numel() == 0 or weight.numel() == 0:
                grad_input.zero_()
            else:
                _grad_input(conv, grad_output, weight, grad_input)
        if unbatched:
            grad_input = grad_input.squeeze(0)
    if output_mask[1]:
        grad_weight = _empty(weight.shape, weight.dtype, conv.device)
        if grad_weight.numel():
            if grad_output.numel() == 0:
                grad_weight.zero_()
            else:
                _grad_weight(conv, grad_output, input, grad_weight)
    if output_mask[2]:
        grad_bias = grad_output.sum(dim=[0] + list(range(2, grad_output.dim())))
    return grad_input, grad_weight, grad_bias


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


def _pool_input(name: str, x) -> torch.Tensor:
    """The (N, C, H, W) view of a 3-d or 4-d pooling input (CPU's checks)."""
    if x.dim() not in (3, 4) or any(n == 0 for n in x.shape[-3:]) :
        raise RuntimeError(f"{name}: Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for "
                           f"input, but got: {list(x.shape)}" if x.dim() not in (3, 4) else
                           f"{name}: Expected input's non-batch dimensions to have positive length, but input "
                           f"has a shape of {list(x.shape)}")
    return x.unsqueeze(0) if x.dim() == 3 else x


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
    H, W = x.shape[-2:]
    oh = _pool_output(H, kh, ph, sh, dh, ceil_mode)
    ow = _pool_output(W, kw, pw, sw, dw, ceil_mode)
    if oh < 1 or ow < 1:
        raise RuntimeError(f"Given input size: ({x.shape[-3]}x{H}x{W}). Calculated output size: "
                           f"({x.shape[-3]}x{oh}x{ow}). Output size is too small")
    return (kh, kw, sh, sw, ph, pw, dh, dw), (oh, ow)


def _output(name, out, shape, dtype, device, x4, *inputs):
    """A new output in the input's memory format, or the checked (and resized) out= tensor."""
    if out is None:
        return _empty(shape, dtype, device, _suggest_format(x4))
    common_device(name, out, *inputs)
    if out.dtype != dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {dtype}, but got {out.dtype} instead")
    resize_out(out, shape)
    check_overlap(name, out, *inputs)
    return out


def _as4(t, batched: bool):
    return t if batched else t.unsqueeze(0)


def _max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode, out=None, indices=None):
    name = "aten::max_pool2d_with_indices"
    device = common_device(name, x)
    if x.dtype not in SUPPORTED or x.dtype == torch.bool:
        raise unsupported_dtype(name, x.dtype, SUPPORTED - {torch.bool})
    x4 = _pool_input(name, x)
    window, (oh, ow) = _pool_geometry(name, x4, kernel_size, stride, padding, dilation, ceil_mode)
    shape = tuple(x.shape[:-2]) + (oh, ow)
    if indices is not None and indices.dtype != torch.int64:
        raise RuntimeError(f"Expected out tensor to have dtype long int, but got {indices.dtype} instead")
    out = _output(name, out, shape, x.dtype, device, x4, x)
    indices = _output(name, indices, shape, torch.int64, device, x4, x, out)
    if out.numel():
        batched = x.dim() == 4
        rt().launch("max_pool2d", (device_ref(_as4(out, batched)), device_ref(_as4(indices, batched)),
                                   device_ref(x4)) + window, current_stream(device))
    return out, indices


def max_pool2d_with_indices(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool2d(self, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool2d_with_indices_out(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False, *, out,
                                indices):
    return _max_pool2d(self, kernel_size, stride, padding, dilation, ceil_mode, out, indices)


def _check_grad(name, grad_output, expected_shape, dtype):
    if tuple(grad_output.shape) != tuple(expected_shape):
        raise RuntimeError(f"{name}: grad_output of size {list(grad_output.shape)} does not match the pooling "
                           f"output size {list(expected_shape)}")
    if grad_output.dtype != dtype:
        raise RuntimeError(f"{name}: expected grad_output of dtype {dtype}, but got {grad_output.dtype}")


def _floating_input(name, x):
    if x.dtype not in FLOATING:
        raise unsupported_dtype(name, x.dtype, FLOATING)


def _max_pool2d_backward(grad_output, x, kernel_size, stride, padding, dilation, ceil_mode, indices,
                         grad_input=None):
    name = "aten::max_pool2d_with_indices_backward"
    device = common_device(name, grad_output, x, indices)
    _floating_input(name, x)
    x4 = _pool_input(name, x)
    _, (oh, ow) = _pool_geometry(name, x4, kernel_size, stride, padding, dilation, ceil_mode)
    expected = tuple(x.shape[:-2]) + (oh, ow)
    _check_grad(name, grad_output, expected, x.dtype)
    if indices.dtype != torch.int64 or tuple(indices.shape) != expected:
        raise RuntimeError(f"{name}: expected int64 indices of size {list(expected)}, got {indices.dtype} "
                           f"{list(indices.shape)}")
    grad_input = _output(name, grad_input, x.shape, x.dtype, device, x4, grad_output, x, indices)
    if grad_input.numel():
        batched = x.dim() == 4
        rt().launch("max_pool2d_backward", (device_ref(_as4(grad_input, batched)),
                                            device_ref(_as4(grad_output, batched)),
                                            device_ref(_as4(indices, batched))), current_stream(device))
    return grad_input


def max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode,
                                     indices):
    return _max_pool2d_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices)


def max_pool2d_with_indices_backward_grad_input(grad_output, self, kernel_size, stride, padding, dilation,
                                                ceil_mode, indices, *, grad_input):
    return _max_pool2d_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices,
                                grad_input)


def _avg_window(name, x4, kernel_size, stride, padding, ceil_mode, divisor_override):
    window, out_hw = _pool_geometry(name, x4, kernel_size, stride, padding, 1, ceil_mode)
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    return window[:6], out_hw, (0 if divisor_override is None else int(divisor_override))


def _avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, out=None):
    name = "aten::avg_pool2d"
    device = common_device(name, x)
    _floating_input(name, x)
    x4 = _pool_input(name, x)
    window, (oh, ow), divisor = _avg_window(name, x4, kernel_size, stride, padding, ceil_mode, divisor_override)
    out = _output(name, out, tuple(x.shape[:-2]) + (oh, ow), x.dtype, device, x4, x)
    if out.numel():
        rt().launch("avg_pool2d", (device_ref(_as4(out, x.dim() == 4)), device_ref(x4)) + window +
                    (bool(count_include_pad), divisor), current_stream(device))
    return out


def avg_pool2d(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def avg_pool2d_out(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                   divisor_override=None, *, out):
    return _avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, out)


def _avg_pool2d_backward(grad_output, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                         divisor_override, grad_input=None):
    name = "aten::avg_pool2d_backward"
    device = common_device(name, grad_output, x)
    _floating_input(name, x)
    x4 = _pool_input(name, x)
    window, (oh, ow), divisor = _avg_window(name, x4, kernel_size, stride, padding, ceil_mode, divisor_override)
    _check_grad(name, grad_output, tuple(x.shape[:-2]) + (oh, ow), x.dtype)
    grad_input = _output(name, grad_input, x.shape, x.dtype, device, x4, grad_output, x)
    if grad_input.numel():
        batched = x.dim() == 4
        rt().launch("avg_pool2d_backward", (device_ref(_as4(grad_input, batched)),
                                            device_ref(_as4(grad_output, batched))) + window +
                    (bool(count_include_pad), divisor), current_stream(device))
    return grad_input


def avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    return _avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                divisor_override)


def avg_pool2d_backward_grad_input(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                   divisor_override, *, grad_input):
    return _avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                divisor_override, grad_input)


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


def _adaptive_avg_pool2d(x, output_size, out=None):
    name = "aten::_adaptive_avg_pool2d"
    device = common_device(name, x)
    _floating_input(name, x)
    x4, size = _adaptive_input(name, x, output_size)
    out = _output(name, out, tuple(x.shape[:-2]) + size, x.dtype, device, x4, x)
    if out.numel():
        rt().launch("adaptive_avg_pool2d", (device_ref(_as4(out, x.dim() == 4)), device_ref(x4)),
                    current_stream(device))
    return out


def adaptive_avg_pool2d(self, output_size):
    return _adaptive_avg_pool2d(self, output_size)


def adaptive_avg_pool2d_out(self, output_size, *, out):
    return _adaptive_avg_pool2d(self, output_size, out)


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
        batched = self.dim() == 4
        rt().launch("adaptive_avg_pool2d_backward", (device_ref(_as4(grad_input, batched)),
                                                     device_ref(_as4(grad_output, batched))),
                    current_stream(device))
    return grad_input


# ---------------------------------------------------------------------------------------------
# upsampling

def _scale(s) -> float:
    return 0.0 if s is None else float(s)


def _upsample_check(name, input_size, output_size):
    output_size = tuple(int(s) for s in output_size)
    input_size = tuple(int(s) for s in input_size)
    if len(output_size) != 2:
        raise RuntimeError(f"It is expected output_size equals to 2, but got size {len(output_size)}")
    if len(input_size) != 4:
        raise RuntimeError(f"It is expected input_size equals to 4, but got size {len(input_size)}")
    if not all(s > 0 for s in input_size[2:]) or not all(s > 0 for s in output_size):
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input (H: {input_size[2]}, "
                           f"W: {input_size[3]}) output (H: {output_size[0]}, W: {output_size[1]})")
    return input_size, output_size


def _upsample_input(name, x, output_size):
    if x.dim() != 4:
        raise RuntimeError(f"Non-empty 4D data tensor expected but got a tensor with sizes {list(x.shape)}")
    return _upsample_check(name, x.shape, output_size)


def _upsample(kernel, name, x, output_size, extra, out, floating_only):
    device = common_device(name, x)
    if floating_only:
        _floating_input(name, x)
    elif x.dtype not in SUPPORTED:
        raise unsupported_dtype(name, x.dtype, SUPPORTED)
    _, size = _upsample_input(name, x, output_size)
    out = _output(name, out, tuple(x.shape[:2]) + size, x.dtype, device, x, x)
    if out.numel():
        rt().launch(kernel, (device_ref(out), device_ref(x)) + extra, current_stream(device))
    return out


def _upsample_backward(kernel, name, grad_output, output_size, input_size, extra, grad_input):
    device = common_device(name, grad_output)
    _floating_input(name, grad_output)
    input_size, output_size = _upsample_check(name, input_size, output_size)
    expected = tuple(input_size[:2]) + output_size
    if tuple(grad_output.shape) != expected:
        raise RuntimeError(f"Expected grad_output to have the same shape as output; output.size({len(expected)}) "
                           f"= {list(expected)} but got grad_output.size = {list(grad_output.shape)}")
    grad_input = _output(name, grad_input, input_size, grad_output.dtype, device, grad_output, grad_output)
    if grad_input.numel():
        rt().launch(kernel, (device_ref(grad_input), device_ref(grad_output)) + extra, current_stream(device))
    return grad_input


def upsample_nearest2d(self, output_size, scales_h=None, scales_w=None):
    return _upsample("upsample_nearest2d", "aten::upsample_nearest2d", self, output_size,
                     (_scale(scales_h), _scale(scales_w)), None, floating_only=False)


def upsample_nearest2d_out(self, output_size, scales_h=None, scales_w=None, *, out):
    return _upsample("upsample_nearest2d", "aten::upsample_nearest2d", self, output_size,
                     (_scale(scales_h), _scale(scales_w)), out, floating_only=False)


def upsample_nearest2d_backward(grad_output, output_size, input_size, scales_h=None, scales_w=None):
    return _upsample_backward("upsample_nearest2d_backward", "aten::upsample_nearest2d_backward", grad_output,
                              output_size, input_size, (_scale(scales_h), _scale(scales_w)), None)


def upsample_nearest2d_backward_grad_input(grad_output, output_size, input_size, scales_h=None, scales_w=None, *,
                                           grad_input):
    return _upsample_backward("upsample_nearest2d_backward", "aten::upsample_nearest2d_backward", grad_output,
                              output_size, input_size, (_scale(scales_h), _scale(scales_w)), grad_input)


def upsample_bilinear2d(self, output_size, align_corners, scales_h=None, scales_w=None):
    return _upsample("upsample_bilinear2d", "aten::upsample_bilinear2d", self, output_size,
                     (bool(align_corners), _scale(scales_h), _scale(scales_w)), None, floating_only=True)


def upsample_bilinear2d_out(self, output_size, align_corners, scales_h=None, scales_w=None, *, out):
    return _upsample("upsample_bilinear2d", "aten::upsample_bilinear2d", self, output_size,
                     (bool(align_corners), _scale(scales_h), _scale(scales_w)), out, floating_only=True)


def upsample_bilinear2d_backward(grad_output, output_size, input_size, align_corners, scales_h=None,
                                 scales_w=None):
    return _upsample_backward("upsample_bilinear2d_backward", "aten::upsample_bilinear2d_backward", grad_output,
                              output_size, input_size, (bool(align_corners), _scale(scales_h), _scale(scales_w)),
                              None)


def upsample_bilinear2d_backward_grad_input(grad_output, output_size, input_size, align_corners, scales_h=None,
                                            scales_w=None, *, grad_input):
    return _upsample_backward("upsample_bilinear2d_backward", "aten::upsample_bilinear2d_backward", grad_output,
                              output_size, input_size, (bool(align_corners), _scale(scales_h), _scale(scales_w)),
                              grad_input)
