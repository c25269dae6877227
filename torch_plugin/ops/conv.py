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
3-d pooling, adaptive max pooling, unpooling and the other interpolation modes: the second block below.
"""
from __future__ import annotations

from math import prod

import torch

from torch_plugin._dtypes import FLOATING, SUPPORTED, TO_CODE
from torch_plugin.errors import refuse_in_projection, unsupported_dtype
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


def _col_ref(col: torch.Tensor, channels: int, kernel, grid, column: int = 0, row_stride: int | None = None):
    """The scratch column matrix (channels * K, L) as the kernel's 7-d (C, kD, kH, kW, oD, oH, oW).
    ``column``/``row_stride``: the L columns of one sample inside a wider (channels * K, N * L)
    matrix of the whole batch, starting at that column."""
    k = len(kernel)
    shape = (channels,) + _pad3(kernel, k, 1) + _pad3(grid, k, 1)
    strides = [0] * 7
    step = 1
    for d in range(6, -1, -1):
        if d == 3 and row_stride is not None:
            step = row_stride
        strides[d] = step
        step *= shape[d]
    return _ref(col, column, shape, strides)


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


def _gemm_groups(device, groups: int, refs):
    """The GEMMs of a convolution's groups: ``refs(g)`` gives group g's (out, a, b, c, beta). One
    ``matmul`` for one group; else ONE batched ``bmm`` over the groups, each operand's batch stride
    the step from group 0 to group 1 (the groups lie at equal steps in every operand), instead of
    one launch per group."""
    first = refs(0)
    if groups == 1:
        _gemm(device, *first)
        return
    second = refs(1)

    def batched(r0, r1):
        if r0 is None:
            return None
        step = (r1.address - r0.address) // runtime.ELEMENT_SIZE[r0.dtype]
        return r0._replace(shape=(groups,) + tuple(r0.shape), strides=(step,) + tuple(r0.strides))
    o, a, b, c = (batched(r0, r1) for r0, r1 in zip(first[:4], second[:4]))
    rt().launch("bmm", (o, a, b, c, float(first[4]), 1.0), current_stream(device))


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
        # One input channel per group: the direct depthwise kernels (one launch for the batch)
        self.depthwise = groups > 1 and groups == C and not self.transposed

    # The column matrix of a convolution is built from its input over the output grid; that of a
    # transposed convolution from its output (the gradient) over the input grid.
    def col_shape(self, channels, grid):
        return (channels * self.K, prod(grid))


def _im2col(conv: _Conv, col, image: torch.Tensor, n: int, grid, column: int = 0, row_stride=None):
    ref = _col_ref(col, image.shape[1], conv.kernel, grid, column, row_stride)
    rt().launch("im2col", (ref, _sample_ref(image, n)) + conv.params, current_stream(conv.device))


def _im2col_samples(conv: _Conv, col, image: torch.Tensor, first: int, count: int, row_stride: int):
    """One im2col of samples first..first+count of a 1-d/2-d convolution into the (C * K, count * L)
    columns of a batch (row stride ``row_stride``): the samples stand in the kernel's depth, a
    depth-1 window with unit stride and no padding, so output depth d is sample first + d."""
    k = image.dim() - 2
    C = image.shape[1]
    x = _ref(image, first * image.stride(0), (C, count) + _pad3(image.shape[2:], k, 1)[1:],
             (image.stride(1), image.stride(0)) + _pad3(image.stride()[2:], k, 0)[1:])
    grid = _pad3(conv.out_spatial, k, 1)[1:]
    kernel = _pad3(conv.kernel, k, 1)[1:]
    L = prod(grid)
    shape = (C, 1) + kernel + (count,) + grid
    strides = (kernel[0] * kernel[1] * row_stride, row_stride, kernel[1] * row_stride, row_stride, L, grid[1], 1)
    rt().launch("im2col", (_ref(col, 0, shape, strides), x) + conv.params, current_stream(conv.device))


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
            def refs(g):
                w_g = _transposed(_matrix(weight, g * Cg * weight.stride(0), Cg, weight.stride(0), 1))
                x_g = _matrix(x, n * x.stride(0) + g * Cg * x.stride(1), Cg, x.stride(1), 2)
                return (_ref(col, g * rows * col.shape[1], (rows, col.shape[1]), (col.shape[1], 1)), w_g, x_g,
                        None, 0.0)
            _gemm_groups(device, G, refs)
            _col2im(conv, out, n, col, conv.in_spatial, bias)
        return out
    if conv.depthwise:
        rt().launch("depthwise_conv", (_image5(out), _image5(x), _taps4(weight),
                                       None if bias is None else device_ref(bias)) + conv.params,
                    current_stream(device))
        return out
    # out[n, g] (Og, L) = bias_g + W_g (Og, Cg*K) @ col_g (Cg*K, L)
    weight = _flattenable(weight, 1)
    L = prod(conv.out_spatial)
    if G == 1 and not conv.pointwise and conv.batch > 1 and L < _BATCHED_COLUMNS:
        return _conv_forward_batched(conv, x, weight, bias, out, L)
    if G == 1 and conv.pointwise and conv.batch > 1:
        return _pointwise_forward_batched(conv, _flattenable(x, 2), weight, bias, out, L)
    if conv.pointwise:
        x = _flattenable(x, 2)
    else:
        col = _empty(conv.col_shape(x.shape[1], conv.out_spatial), x.dtype, device)
    rows = Cg * conv.K
    for n in range(conv.batch):
        if not conv.pointwise:
            _im2col(conv, col, x, n, conv.out_spatial)
        def refs(g):
            w_g = _matrix(weight, g * Og * weight.stride(0), Og, weight.stride(0), 1)
            if conv.pointwise:
                b_g = _matrix(x, n * x.stride(0) + g * Cg * x.stride(1), Cg, x.stride(1), 2)
            else:
                b_g = _ref(col, g * rows * L, (rows, L), (L, 1))
            o_g = _matrix(out, n * out.stride(0) + g * Og * out.stride(1), Og, out.stride(1), 2)
            c_g = None if bias is None else _ref(bias, g * Og * bias.stride(0), (Og, L), (bias.stride(0), 0))
            return o_g, w_g, b_g, c_g, 0.0 if bias is None else 1.0
        _gemm_groups(device, G, refs)
    return out


def _image5(t: torch.Tensor):
    """An (N, C, *spatial) tensor as the depthwise kernels' 5-d (N, C, D, H, W) operand."""
    k = t.dim() - 2
    return _ref(t, 0, (t.shape[0], t.shape[1]) + _pad3(t.shape[2:], k, 1),
                (t.stride(0), t.stride(1)) + _pad3(t.stride()[2:], k, 0))


def _taps4(w: torch.Tensor):
    """A depthwise (O, 1, *kernel) weight as the kernels' 4-d (O, kD, kH, kW) operand."""
    k = w.dim() - 2
    return _ref(w, 0, (w.shape[0],) + _pad3(w.shape[2:], k, 1), (w.stride(0),) + _pad3(w.stride()[2:], k, 0))


def _pointwise_forward_batched(conv: _Conv, x, weight, bias, out, L):
    """An ungrouped 1x1 convolution (unit stride, no padding) of a batch as ONE launch:
    ``out[n] (O, L) = bias + W (O, C) @ x[n] (C, L)``, a batched GEMM whose weight operand has batch
    stride 0 (one GEMM ``(O, N) = W @ x^T`` when each sample has a single position, as in a
    squeeze-excite block). Same GEMMs, same sums, as one launch per sample."""
    device = conv.device
    C, O, N = x.shape[1], conv.out_channels, conv.batch
    w = _matrix(weight, 0, O, weight.stride(0), 1)
    xs, os_ = _flat_stride(x.shape[2:], x.stride()[2:]), _flat_stride(out.shape[2:], out.stride()[2:])
    b = _ref(x, 0, (N, C, L), (x.stride(0), x.stride(1), xs))
    o = _ref(out, 0, (N, O, L), (out.stride(0), out.stride(1), os_))
    a = w._replace(shape=(N,) + w.shape, strides=(0,) + w.strides)
    c = None if bias is None else _ref(bias, 0, (N, O, L), (0, bias.stride(0), 0))
    rt().launch("bmm", (o, a, b, c, 0.0 if bias is None else 1.0, 1.0), current_stream(device))
    return out


# Below this many output positions per sample, one GEMM per sample is too narrow for the matrix
# engine (and the host BLAS behind it): the samples' columns go side by side into one GEMM.
_BATCHED_COLUMNS = 1024
_BATCHED_SCRATCH = 1 << 24   # elements of the batch's column matrix (larger batches go in chunks)


def _conv_forward_batched(conv: _Conv, x, weight, bias, out, L):
    """Ungrouped convolution with few output positions: im2col of a chunk of samples into one
    (C*K, n*L) column matrix (one launch for a 1-d/2-d convolution, the samples in the kernel's
    depth; one per sample for a 3-d one), ONE GEMM ``(Og, n*L) = bias + W @ col`` into a scratch, then one
    strided copy of that scratch into the chunk's (n, Og, L) outputs (its only rounding when the
    scratch has the output's dtype)."""
    device = conv.device
    rows = x.shape[1] * conv.K
    Og = conv.out_channels
    chunk = max(1, min(conv.batch, _BATCHED_SCRATCH // max(1, rows * L)))
    col = _empty((rows, chunk * L), x.dtype, device)
    tmp = _empty((Og, chunk * L), out.dtype, device)
    w = _matrix(weight, 0, Og, weight.stride(0), 1)
    for first in range(0, conv.batch, chunk):
        n_here = min(chunk, conv.batch - first)
        width = n_here * L
        if len(conv.kernel) <= 2:
            _im2col_samples(conv, col, x, first, n_here, chunk * L)
        else:
            for i in range(n_here):
                _im2col(conv, col, x, first + i, conv.out_spatial, column=i * L, row_stride=chunk * L)
        b = _ref(col, 0, (rows, width), (chunk * L, 1))
        o = _ref(tmp, 0, (Og, width), (chunk * L, 1))
        c = None if bias is None else _ref(bias, 0, (Og, width), (bias.stride(0), 0))
        _gemm(device, o, w, b, c, 0.0 if bias is None else 1.0)
        # tmp (Og, n, L) -> out[first:first + n] (n, Og, L)
        src = tmp[:, :width].view(Og, n_here, *conv.out_spatial).transpose(0, 1)
        out[first:first + n_here].copy_(src)
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
            def refs(g):
                w_g = _matrix(weight, g * Cg * weight.stride(0), Cg, weight.stride(0), 1)
                o_g = _matrix(grad_input, n * grad_input.stride(0) + g * Cg * grad_input.stride(1), Cg,
                              grad_input.stride(1), 2)
                return o_g, w_g, _ref(col, g * rows * L, (rows, L), (L, 1)), None, 0.0
            _gemm_groups(device, G, refs)
        return
    if conv.depthwise:
        rt().launch("depthwise_conv_input_grad", (_image5(grad_input), _image5(grad_output), _taps4(weight))
                    + conv.params, current_stream(device))
        return
    # col_g (Cg*K, L) = W_g^T (Cg*K, Og) @ grad_output[n, g] (Og, L); grad_input[n] = col2im(col)
    grad_output = _flattenable(grad_output, 2)
    rows, L = Cg * conv.K, prod(conv.out_spatial)
    if not conv.pointwise:
        col = _empty(conv.col_shape(grad_input.shape[1], conv.out_spatial), _acc_dtype(grad_input.dtype), device)
    for n in range(conv.batch):
        def refs(g):
            w_g = _transposed(_matrix(weight, g * Og * weight.stride(0), Og, weight.stride(0), 1))
            go_g = _matrix(grad_output, n * grad_output.stride(0) + g * Og * grad_output.stride(1), Og,
                           grad_output.stride(1), 2)
            if conv.pointwise:
                o_g = _matrix(grad_input, n * grad_input.stride(0) + g * Cg * grad_input.stride(1), Cg,
                              grad_input.stride(1), 2)
            else:
                o_g = _ref(col, g * rows * L, (rows, L), (L, 1))
            return o_g, w_g, go_g, None, 0.0
        _gemm_groups(device, G, refs)
        if not conv.pointwise:
            _col2im(conv, grad_input, n, col, conv.out_spatial, None)


def _grad_weight(conv: _Conv, grad_output, input, grad_weight):
    G = conv.groups
    device = conv.device
    if conv.depthwise:
        rt().launch("depthwise_conv_weight_grad", (_taps4(grad_weight), _image5(grad_output), _image5(input))
                    + conv.params, current_stream(device))
        return
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
        def refs(g):
            lhs = _matrix(other, n * other.stride(0) + g * lhs_rows * other.stride(1), lhs_rows, other.stride(1), 2)
            if use_x_directly:
                rhs = _transposed(_matrix(image, n * image.stride(0) + g * rows * image.stride(1), rows,
                                          image.stride(1), 2))
            else:
                rhs = _transposed(_ref(col, g * rows * L, (rows, L), (L, 1)))
            out_g = _ref(acc, g * lhs_rows * rows, (lhs_rows, rows), (rows, 1))
            return out_g, lhs, rhs, out_g if n else None, 1.0 if n else 0.0
        _gemm_groups(device, G, refs)
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


# =============================================================================================
# Second block: 3-d pooling, adaptive max pooling, unpooling and N-d interpolation.
#
# The kernels of this block (conv.pyx, second block) take 5-d (N, C, D, H, W) operands: 1-d
# and 2-d tensors are padded with unit spatial dims by views here, so one kernel serves every
# rank; plane indices are flat offsets d * H * W + h * W + w, which are CPU's 1-d/2-d indices
# when the padded extents are 1. Computation: float32 (float64 for float64), one rounding.
# Left out (a clear error, or the host path when nothing is registered): integer adaptive
# pooling/unpooling (CPU rejects them too), uint8 interpolation but nearest.

_FLOAT_ONLY = frozenset({torch.float32, torch.float64})
_NEAREST_DTYPES = FLOATING | {torch.uint8}


def _as5(t: torch.Tensor, k: int, batched: bool = True) -> torch.Tensor:
    """The (N, C, D, H, W) view of an (N, C, *k spatial) tensor ((C, *spatial) when not batched)."""
    if not batched:
        t = t.unsqueeze(0)
    for _ in range(3 - k):
        t = t.unsqueeze(2)
    return t


def _ints_k(name: str, what: str, values, k: int, default=None) -> tuple:
    values = tuple(values) if isinstance(values, (list, tuple)) else (values,)
    if len(values) == 0 and default is not None:
        return tuple(default)
    if len(values) == 1:
        return (int(values[0]),) * k
    if len(values) != k:
        raise RuntimeError(f"{name}: {what} must either be a single int, or a tuple of {k} ints")
    return tuple(int(v) for v in values)


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


def _launch5(kernel, device, k, batched, tensors, args=()):
    """Launch a kernel of this block on the (N, C, D, H, W) views of ``tensors``, then ``args``."""
    rt().launch(kernel, tuple(device_ref(_as5(t, k, batched)) for t in tensors) + tuple(args),
                current_stream(device))


def _check_dtype_in(name, x, allowed):
    if x.dtype not in allowed:
        raise unsupported_dtype(name, x.dtype, allowed)


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
        _launch5("max_pool3d", device, 3, batched, (out, indices, x), kernel + stride + padding + dilation)
    return out, indices


def max_pool3d_with_indices(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool3d(self, kernel_size, stride, padding, dilation, ceil_mode)


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


def _max_pool3d_backward(grad_output, x, kernel_size, stride, padding, dilation, ceil_mode, indices,
                         grad_input=None):
    name = "aten::max_pool3d_with_indices_backward"
    _pool_input_k(name, x, 3)
    *_, osz = _window_k(name, x, 3, kernel_size, stride, padding, dilation, ceil_mode)
    return _index_backward(name, grad_output, x, indices, tuple(x.shape[:-3]) + osz, 3, grad_input)


def max_pool3d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode,
                                     indices):
    return _max_pool3d_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices)


def max_pool3d_with_indices_backward_grad_input(grad_output, self, kernel_size, stride, padding, dilation,
                                                ceil_mode, indices, *, grad_input):
    return _max_pool3d_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices,
                                grad_input)


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
        _launch5("adaptive_max_pool3d", device, k, x.dim() == k + 2, (out, indices, x))
    return out, indices


def adaptive_max_pool2d(self, output_size):
    return _adaptive_max(2, self, output_size)


def adaptive_max_pool2d_out(self, output_size, *, out, indices):
    return _adaptive_max(2, self, output_size, out, indices)


def adaptive_max_pool3d(self, output_size):
    return _adaptive_max(3, self, output_size)


def adaptive_max_pool3d_out(self, output_size, *, out, indices):
    return _adaptive_max(3, self, output_size, out, indices)


def _adaptive_max_backward(k, grad_output, x, indices, grad_input=None):
    name = f"aten::adaptive_max_pool{k}d_backward"
    _adaptive_size(name, x, grad_output.shape[-k:], k)
    if grad_output.dim() != x.dim() or grad_output.shape[:-k] != x.shape[:-k]:
        raise RuntimeError(f"{name}: grad_output of size {list(grad_output.shape)} does not match the input of "
                           f"size {list(x.shape)}")
    return _index_backward(name, grad_output, x, indices, tuple(grad_output.shape), k, grad_input)


def adaptive_max_pool2d_backward(grad_output, self, indices):
    return _adaptive_max_backward(2, grad_output, self, indices)


def adaptive_max_pool2d_backward_grad_input(grad_output, self, indices, *, grad_input):
    return _adaptive_max_backward(2, grad_output, self, indices, grad_input)


def adaptive_max_pool3d_backward(grad_output, self, indices):
    return _adaptive_max_backward(3, grad_output, self, indices)


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


def max_unpool2d(self, indices, output_size):
    return _max_unpool(2, self, indices, output_size)


def max_unpool2d_out(self, indices, output_size, *, out):
    return _max_unpool(2, self, indices, output_size, out)


def _unpool3d_args(stride, padding):
    stride, padding = tuple(int(s) for s in stride), tuple(int(p) for p in padding)
    if len(stride) != 3 or len(padding) != 3:
        raise RuntimeError("max_unpool3d: stride and padding must have 3 elements")
    if any(s <= 0 for s in stride):
        raise RuntimeError(f"strides should be greater than zero, but got stride: {list(stride)}")


def max_unpool3d(self, indices, output_size, stride, padding):
    _unpool3d_args(stride, padding)
    return _max_unpool(3, self, indices, output_size)


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
        _launch5("avg_pool3d", device, 3, batched, (out, x), window)
    return out


def avg_pool3d(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool3d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def avg_pool3d_out(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                   divisor_override=None, *, out):
    return _avg_pool3d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, out)


def _avg_pool3d_backward(grad_output, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                         divisor_override, grad_input=None):
    name = "aten::avg_pool3d_backward"
    device = common_device(name, grad_output, x)
    batched, osz, window = _avg3_args(name, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                      divisor_override)
    _check_grad(name, grad_output, tuple(x.shape[:-3]) + osz, x.dtype)
    grad_input = _output(name, grad_input, x.shape, x.dtype, device, x, grad_output, x)
    if grad_input.numel():
        _launch5("avg_pool3d_backward", device, 3, batched, (grad_input, grad_output), window)
    return grad_input


def avg_pool3d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    return _avg_pool3d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                divisor_override)


def avg_pool3d_backward_grad_input(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                   divisor_override, *, grad_input):
    return _avg_pool3d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                divisor_override, grad_input)


# -- adaptive_avg_pool3d

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
        _launch5("adaptive_avg_pool3d", device, 3, x.dim() == 5, (out, x))
    return out


def adaptive_avg_pool3d(self, output_size):
    return _adaptive_avg_pool3d(self, output_size)


def adaptive_avg_pool3d_out(self, output_size, *, out):
    return _adaptive_avg_pool3d(self, output_size, out)


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
        _launch5("adaptive_avg_pool3d_backward", device, 3, self.dim() == 5, (grad_input, grad_output))
    return grad_input


# -- interpolation over 1-3 spatial dims

_AXES = ("D", "H", "W")


def _upsample_check_k(k, input_size, output_size):
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


def _upsample_k(kernel, name, k, x, output_size, extra, out, allowed):
    device = common_device(name, x)
    _check_dtype_in(name, x, allowed)
    if x.dim() != k + 2 or x.numel() == 0 and any(n == 0 for n in x.shape[1:]):
        raise RuntimeError(f"Non-empty {k + 2}D data tensor expected but got a tensor with sizes {list(x.shape)}")
    _, size = _upsample_check_k(k, x.shape, output_size)
    out = _output(name, out, tuple(x.shape[:2]) + size, x.dtype, device, x, x)
    if out.numel():
        _launch5(kernel, device, k, True, (out, x), extra)
    return out


def _upsample_backward_k(kernel, name, k, grad_output, output_size, input_size, extra, grad_input):
    device = common_device(name, grad_output)
    _floating_input(name, grad_output)
    input_size, output_size = _upsample_check_k(k, input_size, output_size)
    expected = tuple(input_size[:2]) + output_size
    if tuple(grad_output.shape) != expected:
        raise RuntimeError(f"Expected grad_output to have the same shape as output; output.size({len(expected)}) "
                           f"= {list(expected)} but got grad_output.size = {list(grad_output.shape)}")
    grad_input = _output(name, grad_input, input_size, grad_output.dtype, device, grad_output, grad_output)
    if grad_input.numel():
        _launch5(kernel, device, k, True, (grad_input, grad_output), extra)
    return grad_input


def _nearest_ops(k, exact):
    """Forward, .out, backward and .grad_input kernels of upsample_nearest{k}d / _upsample_nearest_exact{k}d."""
    op = f"_upsample_nearest_exact{k}d" if exact else f"upsample_nearest{k}d"

    def forward(self, output_size, *scales, out=None):
        return _upsample_k("upsample_nearest3d", f"aten::{op}", k, self, output_size,
                           (bool(exact),) + _scales3(k, scales), out, _NEAREST_DTYPES)

    def backward(grad_output, output_size, input_size, *scales, grad_input=None):
        return _upsample_backward_k("upsample_nearest3d_backward", f"aten::{op}_backward", k, grad_output,
                                    output_size, input_size, (bool(exact),) + _scales3(k, scales), grad_input)
    forward.__name__, backward.__name__ = op, f"{op}_backward"
    return forward, backward


upsample_nearest1d, upsample_nearest1d_backward = _nearest_ops(1, False)
upsample_nearest3d, upsample_nearest3d_backward = _nearest_ops(3, False)
upsample_nearest_exact1d, upsample_nearest_exact1d_backward = _nearest_ops(1, True)
upsample_nearest_exact2d, upsample_nearest_exact2d_backward = _nearest_ops(2, True)
upsample_nearest_exact3d, upsample_nearest_exact3d_backward = _nearest_ops(3, True)

# upsample_separable filter modes (conv.pyx)
_LINEAR, _CUBIC, _AA_LINEAR, _AA_CUBIC = 0, 1, 2, 3


def _separable_ops(op, k, mode, allowed):
    """Forward and backward kernels (out= / grad_input= as keywords) of a linear-family upsampling."""

    def forward(self, output_size, align_corners, *scales, out=None):
        return _upsample_k("upsample_separable", f"aten::{op}", k, self, output_size,
                           (k, mode, bool(align_corners)) + _scales3(k, scales), out, allowed)

    def backward(grad_output, output_size, input_size, align_corners, *scales, grad_input=None):
        return _upsample_backward_k("upsample_separable_backward", f"aten::{op}_backward", k, grad_output,
                                    output_size, input_size, (k, mode, bool(align_corners)) + _scales3(k, scales),
                                    grad_input)
    forward.__name__, backward.__name__ = op, f"{op}_backward"
    return forward, backward


upsample_linear1d, upsample_linear1d_backward = _separable_ops("upsample_linear1d", 1, _LINEAR, FLOATING)
upsample_trilinear3d, upsample_trilinear3d_backward = _separable_ops("upsample_trilinear3d", 3, _LINEAR, FLOATING)
upsample_bicubic2d, upsample_bicubic2d_backward = _separable_ops("upsample_bicubic2d", 2, _CUBIC, FLOATING)
upsample_bilinear2d_aa, upsample_bilinear2d_aa_backward = _separable_ops("_upsample_bilinear2d_aa", 2, _AA_LINEAR,
                                                                         _FLOAT_ONLY)
upsample_bicubic2d_aa, upsample_bicubic2d_aa_backward = _separable_ops("_upsample_bicubic2d_aa", 2, _AA_CUBIC,
                                                                       _FLOAT_ONLY)


# -- im2col / col2im (nn.functional.unfold / fold): the convolution's column kernels, per sample

def _unfold_args(name, kernel_size, dilation, padding, stride):
    kernel = _ints_k(name, "kernel_size", kernel_size, 2)
    dilation = _ints_k(name, "dilation", dilation, 2)
    padding = _ints_k(name, "padding", padding, 2)
    stride = _ints_k(name, "stride", stride, 2)
    if any(v <= 0 for v in kernel):
        raise RuntimeError(f"kernel size should be greater than zero, but got kernel_height: {kernel[0]} "
                           f"kernel_width: {kernel[1]}")
    if any(v <= 0 for v in dilation):
        raise RuntimeError(f"dilation should be greater than zero, but got dilation_height: {dilation[0]} "
                           f"dilation_width: {dilation[1]}")
    if any(v < 0 for v in padding):
        raise RuntimeError(f"padding should be non-negative, but got pad_height: {padding[0]} "
                           f"pad_width: {padding[1]}")
    if any(v <= 0 for v in stride):
        raise RuntimeError(f"stride should be greater than zero, but got stride_height: {stride[0]} "
                           f"stride_width: {stride[1]}")
    params = _pad3(stride, 2, 1) + _pad3(padding, 2, 0) + _pad3(dilation, 2, 1)
    return kernel, dilation, padding, stride, params


def _blocks(size, kernel, dilation, padding, stride):
    return tuple((n + 2 * p - (d * (k - 1) + 1)) // s + 1
                 for n, k, d, p, s in zip(size, kernel, dilation, padding, stride))


def _col7(col: torch.Tensor, n: int, channels: int, kernel, grid):
    """Sample n of an (N, C*kh*kw, L) column tensor as the kernel's 7-d (C, 1, kh, kw, 1, oh, ow)."""
    s1, s2 = col.stride(1), col.stride(2)
    shape = (channels, 1) + tuple(kernel) + (1,) + tuple(grid)
    strides = (s1 * kernel[0] * kernel[1], 0, s1 * kernel[1], s1, 0, s2 * grid[1], s2)
    return _ref(col, n * col.stride(0), shape, strides)


def _im2col_op(x, kernel_size, dilation, padding, stride, out=None):
    name = "aten::im2col"
    device = common_device(name, x)
    _floating_input(name, x)
    kernel, dilation, padding, stride, params = _unfold_args(name, kernel_size, dilation, padding, stride)
    if x.dim() not in (3, 4) or any(n == 0 for n in x.shape[-3:]):
        raise RuntimeError(f"Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other non-zero "
                           f"dimensions for input, but got: {list(x.shape)}")
    batched = x.dim() == 4
    x4 = x if batched else x.unsqueeze(0)
    C, H, W = x4.shape[1:]
    grid = _blocks((H, W), kernel, dilation, padding, stride)
    if any(g < 1 for g in grid):
        raise RuntimeError(f"Given input with spatial size ({H}, {W}), kernel_size=({kernel[0]}, {kernel[1]}), "
                           f"dilation=({dilation[0]}, {dilation[1]}), padding=({padding[0]}, {padding[1]}), "
                           f"calculated shape of the array of sliding blocks as ({grid[0]}, {grid[1]}), but its "
                           "components must be at least one.")
    shape = (x4.shape[0], C * kernel[0] * kernel[1], grid[0] * grid[1])
    out = _output(name, out, shape if batched else shape[1:], x.dtype, device, x, x)
    o3 = out if batched else out.unsqueeze(0)
    for n in range(x4.shape[0]):
        rt().launch("im2col", (_col7(o3, n, C, kernel, grid), _sample_ref(x4, n)) + params, current_stream(device))
    return out


def im2col(self, kernel_size, dilation, padding, stride):
    return _im2col_op(self, kernel_size, dilation, padding, stride)


def im2col_out(self, kernel_size, dilation, padding, stride, *, out):
    return _im2col_op(self, kernel_size, dilation, padding, stride, out)


def _col2im_op(col, output_size, kernel_size, dilation, padding, stride, out=None):
    name = "aten::col2im"
    device = common_device(name, col)
    _floating_input(name, col)
    kernel, dilation, padding, stride, params = _unfold_args(name, kernel_size, dilation, padding, stride)
    size = _ints_k(name, "output_size", output_size, 2)
    if col.dim() not in (2, 3) or any(n == 0 for n in col.shape[-2:]):
        raise RuntimeError(f"Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and "
                           f"non-zero dimensions for input, but got: {list(col.shape)}")
    batched = col.dim() == 3
    c3 = col if batched else col.unsqueeze(0)
    K = kernel[0] * kernel[1]
    if c3.shape[1] % K:
        raise RuntimeError(f"Expected size of input's dimension 1 to be divisible by the product of kernel_size, "
                           f"but got input.size(1)={c3.shape[1]} and kernel_size=({kernel[0]}, {kernel[1]})")
    grid = _blocks(size, kernel, dilation, padding, stride)
    if grid[0] * grid[1] != c3.shape[2] or any(g < 1 for g in grid):
        raise RuntimeError(f"Given output_size=({size[0]}, {size[1]}), kernel_size=({kernel[0]}, {kernel[1]}), "
                           f"dilation=({dilation[0]}, {dilation[1]}), padding=({padding[0]}, {padding[1]}), "
                           f"stride=({stride[0]}, {stride[1]}), expected size of input's dimension 2 to match the "
                           f"calculated number of sliding blocks {grid[0]} * {grid[1]} = {grid[0] * grid[1]}, but "
                           f"got input.size(2)={c3.shape[2]}.")
    C = c3.shape[1] // K
    shape = (c3.shape[0], C) + size
    out = _output(name, out, shape if batched else shape[1:], col.dtype, device, col, col)
    o4 = out if batched else out.unsqueeze(0)
    for n in range(c3.shape[0]):
        rt().launch("col2im", (_sample_ref(o4, n), _col7(c3, n, C, kernel, grid), None) + params,
                    current_stream(device))
    return out


def col2im(self, output_size, kernel_size, dilation, padding, stride):
    return _col2im_op(self, output_size, kernel_size, dilation, padding, stride)


def col2im_out(self, output_size, kernel_size, dilation, padding, stride, *, out):
    return _col2im_op(self, output_size, kernel_size, dilation, padding, stride, out)


# -- channel_shuffle: a composite of device views and one device copy

def channel_shuffle(self, groups):
    name = "aten::channel_shuffle"
    common_device(name, self)
    groups = int(groups)
    if groups <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of groups:{groups}")
    if self.dim() <= 2:
        raise RuntimeError(f"channel_shuffle expects input to have at least 3 dimensions, but got input with "
                           f"sizes {list(self.shape)}")
    n, c = self.shape[:2]
    if c % groups:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels and {groups} groups.")
    rest = tuple(self.shape[2:])
    out = torch.empty_like(self, memory_format=_suggest_format(self))
    if out.numel():
        # out[:, j * g + i] = self[:, i * (C / g) + j]
        out.view((n, c // groups, groups) + rest).copy_(
            self.reshape((n, groups, c // groups) + rest).transpose(1, 2))
    return out


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


def grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners):
    return _grid_sampler(2, input, grid, interpolation_mode, padding_mode, align_corners)


def grid_sampler_3d(input, grid, interpolation_mode, padding_mode, align_corners):
    return _grid_sampler(3, input, grid, interpolation_mode, padding_mode, align_corners)


# -- pairwise distances: _cdist_forward / _cdist_backward, _pdist_forward / _pdist_backward

def _check_p(what, p):
    p = float(p)
    if not p >= 0:
        raise RuntimeError(f"{what} only supports non-negative p values")
    return p


def _batch3(t, batch):
    """``t`` (..., R, M) expanded to the batch dims and viewed (or copied) as (B, R, M)."""
    return t.expand(tuple(batch) + tuple(t.shape[-2:])).reshape((prod(batch), t.shape[-2], t.shape[-1]))


def _cdist_inputs(name, x1, x2):
    device = common_device(name, x1, x2)
    for t in (x1, x2):
        if t.dtype not in FLOATING:
            raise RuntimeError(f"cdist only supports floating-point dtypes, X{1 if t is x1 else 2} got: {t.dtype}")
    if x1.dim() < 2 or x2.dim() < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1.dim()}D X2 got: {x2.dim()}D")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}")
    if x1.dtype != x2.dtype:
        raise RuntimeError(f"cdist: X1 and X2 must have the same dtype, got {x1.dtype} and {x2.dtype}")
    return device, tuple(torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]))


def cdist_forward(x1, x2, p, compute_mode=None):
    name = "aten::_cdist_forward"
    device, batch = _cdist_inputs(name, x1, x2)
    p = _check_p("cdist", p)
    out = _empty(batch + (x1.shape[-2], x2.shape[-2]), x1.dtype, device)
    if out.numel():
        a, b = _batch3(x1, batch), _batch3(x2, batch)
        rt().launch("pairwise_distance", (device_ref(out.view((prod(batch),) + tuple(out.shape[-2:]))),
                                          device_ref(a), device_ref(b), p, False), current_stream(device))
    return out


def cdist_backward(grad, x1, x2, p, cdist):
    name = "aten::_cdist_backward"
    device, batch = _cdist_inputs(name, x1, x2)
    common_device(name, grad, cdist, x1)
    p = _check_p("cdist", p)
    shape = batch + (x1.shape[-2], x2.shape[-2])
    if tuple(grad.shape) != shape or tuple(cdist.shape) != shape:
        raise RuntimeError(f"{name}: grad {list(grad.shape)} and cdist {list(cdist.shape)} must have the "
                           f"distances' size {list(shape)}")
    B = prod(batch)
    grad_x1 = _empty((B,) + tuple(x1.shape[-2:]), x1.dtype, device)
    if grad_x1.numel():
        if x2.shape[-2] == 0:
            grad_x1.zero_()
        else:
            g = grad.to(x1.dtype).reshape((B,) + shape[-2:]).contiguous()
            d = cdist.to(x1.dtype).reshape((B,) + shape[-2:]).contiguous()
            # Both operands are bound to names: a copy made by _batch3 (a channels-last input) must
            # stay alive until the launch is queued, or the second copy takes the first one's freed
            # block and overwrites it before the kernel reads it (a silent wrong gradient).
            a, b = _batch3(x1, batch), _batch3(x2, batch)
            rt().launch("pairwise_distance_backward", (device_ref(grad_x1), device_ref(g), device_ref(d),
                                                       device_ref(a), device_ref(b), p, False), current_stream(device))
    grad_x1 = grad_x1.view(batch + tuple(x1.shape[-2:]))
    return grad_x1.sum_to_size(x1.shape) if tuple(grad_x1.shape) != tuple(x1.shape) else grad_x1


def _pdist_input(name, x, p):
    device = common_device(name, x)
    if x.dim() != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {x.dim()}D")
    if x.dtype not in FLOATING:
        raise RuntimeError(f"pdist only supports floating-point dtypes")
    return device, _check_p("pdist", p)


def pdist_forward(self, p=2):
    name = "aten::_pdist_forward"
    device, p = _pdist_input(name, self, p)
    n = self.shape[0]
    out = _empty((n * (n - 1) // 2,), self.dtype, device)
    if out.numel():
        a = self.unsqueeze(0)
        rt().launch("pairwise_distance", (_ref(out, 0, (1, 1, out.numel()), (0, 0, out.stride(0))), device_ref(a),
                                          device_ref(a), p, True), current_stream(device))
    return out


def pdist_backward(grad, self, p, pdist):
    name = "aten::_pdist_backward"
    device, p = _pdist_input(name, self, p)
    common_device(name, grad, self, pdist)
    n = self.shape[0]
    pairs = n * (n - 1) // 2
    if tuple(grad.shape) != (pairs,) or tuple(pdist.shape) != (pairs,):
        raise RuntimeError(f"{name}: grad {list(grad.shape)} and pdist {list(pdist.shape)} must have {pairs} entries")
    grad_x = _empty(self.shape, self.dtype, device)
    if grad_x.numel():
        if pairs == 0:
            grad_x.zero_()
        else:
            g, d = grad.to(self.dtype).contiguous(), pdist.to(self.dtype).contiguous()
            a = self.unsqueeze(0)
            rt().launch("pairwise_distance_backward", (device_ref(grad_x.unsqueeze(0)),
                                                       _ref(g, 0, (1, 1, pairs), (0, 0, 1)),
                                                       _ref(d, 0, (1, 1, pairs), (0, 0, 1)), device_ref(a),
                                                       device_ref(a), p, True), current_stream(device))
    return grad_x


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


def fractional_max_pool2d(self, kernel_size, output_size, random_samples):
    return _fractional(2, self, kernel_size, output_size, random_samples)


def fractional_max_pool2d_out(self, kernel_size, output_size, random_samples, *, output, indices):
    return _fractional(2, self, kernel_size, output_size, random_samples, output, indices)


def fractional_max_pool3d(self, kernel_size, output_size, random_samples):
    return _fractional(3, self, kernel_size, output_size, random_samples)


def fractional_max_pool3d_out(self, kernel_size, output_size, random_samples, *, output, indices):
    return _fractional(3, self, kernel_size, output_size, random_samples, output, indices)


def _fractional_backward(k, grad_output, x, kernel_size, output_size, indices, grad_input=None):
    name = f"aten::fractional_max_pool{k}d_backward"
    size = _ints_k(name, "output_size", output_size, k)
    if x.dim() not in (k + 1, k + 2):
        raise RuntimeError(f"{name}: expected a {k + 1}D or {k + 2}D input, got {list(x.shape)}")
    return _index_backward(name, grad_output, x, indices, tuple(x.shape[:-k]) + size, k, grad_input)


def fractional_max_pool2d_backward(grad_output, self, kernel_size, output_size, indices):
    return _fractional_backward(2, grad_output, self, kernel_size, output_size, indices)


def fractional_max_pool2d_backward_grad_input(grad_output, self, kernel_size, output_size, indices, *, grad_input):
    return _fractional_backward(2, grad_output, self, kernel_size, output_size, indices, grad_input)


def fractional_max_pool3d_backward(grad_output, self, kernel_size, output_size, indices):
    return _fractional_backward(3, grad_output, self, kernel_size, output_size, indices)


def fractional_max_pool3d_backward_grad_input(grad_output, self, kernel_size, output_size, indices, *, grad_input):
    return _fractional_backward(3, grad_output, self, kernel_size, output_size, indices, grad_input)


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


def embedding_bag_forward_only(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                               per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    return _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                          include_last_offset, padding_idx)
