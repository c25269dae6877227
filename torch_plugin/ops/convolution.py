"""Convolution on the device, and the column kernels behind unfold / fold.

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
otherwise). Also ``im2col`` / ``col2im`` (nn.functional.unfold / fold) and channel_shuffle.
Left out: integer convolutions (the matrix engine has no integer GEMM).
"""
from __future__ import annotations

from math import prod

import torch

from torch_plugin._dtypes import FLOATING
from torch_plugin.errors import unsupported_dtype
from torch_plugin.ops._common import common_device, current_stream, device_ref, rt
from torch_plugin.ops._overloads import Overloads
from torch_plugin.ops._windows import _empty, _floating_input, _ints_k, _output, _ref, _suggest_format
import runtime


OVERLOADS = Overloads(__name__)


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


@OVERLOADS.implements("convolution_overrideable")
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


@OVERLOADS.implements("convolution_backward_overrideable")
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


@OVERLOADS.implements("im2col", "im2col.out")
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


@OVERLOADS.implements("col2im", "col2im.out")
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


# -- channel_shuffle: a composite of device views and one device copy

@OVERLOADS.implements("channel_shuffle")
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
