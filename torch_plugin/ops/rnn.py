"""The fused RNN cells that ``nn.LSTM``, ``nn.GRU``, ``nn.LSTMCell`` and ``nn.GRUCell`` reach on a
non-CPU device, lowered to the vector engine (emulator/kernels/rnn.pyx).

ATen's RNN code (aten/src/ATen/native/RNN.cpp) runs each time step of a layer off the CPU as two
gate matmuls (``linear``: the matrix engine) and one fused cell op. Native overloads:

* ``_thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?, hidden_bias?)`` ->
  ``(hy, cy, workspace)``; workspace (B, 4H) holds the activated gates i, f, g, o.
* ``_thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace, has_bias)`` ->
  ``(grad_gates, grad_cx, grad_bias)`` (``_thnn_fused_lstm_cell_backward`` is
  CompositeImplicitAutograd and reaches it).
* ``_thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias?, hidden_bias?)`` ->
  ``(hy, workspace)``; workspace (B, 5H) holds r, z, n, hx, hn + b_hn.
* ``_thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias)`` ->
  ``(grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias)``.

The math, argument checks and workspace layouts are CUDA's (aten/src/ATen/native/cuda/RNN.cu),
so ATen's autograd formulas pair our forward with our backward. The bias gradients are the
gate gradients summed over the batch (the device's ``sum``). dtypes: float32, float64, float16,
bfloat16 (float32 arithmetic for the half types, as CUDA); all operands of one call share the
dtype. Operands may have any strides; outputs are contiguous. Left out: nothing of these ops
(double backward goes through ATen's ``_thnn_differentiable_*`` composites of device ops).
"""
from __future__ import annotations

import torch

from torch_plugin._dtypes import FLOATING, SUPPORTED
from torch_plugin.errors import unsupported_dtype
from torch_plugin.ops._common import common_device, current_stream, device_ref, rt
from torch_plugin.ops._overloads import Overloads

OVERLOADS = Overloads(__name__)

_CUDA_NAME = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16"}


def _check_dtypes(op: str, *tensors) -> torch.dtype:
    """All defined operands floating and of one dtype (CUDA's TensorInfo<scalar_t> demands it)."""
    defined = [t for t in tensors if t is not None]
    dtype = defined[0].dtype
    if dtype not in FLOATING:
        if dtype not in SUPPORTED:
            raise unsupported_dtype(f"aten::{op}", dtype, FLOATING)
        raise RuntimeError(f"\"{op}\" not implemented for '{str(dtype).replace('torch.', '')}' "
                           "(float16, bfloat16, float32, float64 only)")
    for t in defined[1:]:
        if t.dtype != dtype:
            raise RuntimeError(f"{op}: expected scalar type {_CUDA_NAME[dtype]} but found "
                               f"{_CUDA_NAME.get(t.dtype, str(t.dtype).replace('torch.', ''))}")
    return dtype


def _arg(name: str, pos: int) -> str:
    return f"argument #{pos} '{name}'"


def _check_dim(op: str, t, name: str, pos: int, dim: int) -> None:
    if t.dim() != dim:
        raise RuntimeError(f"Expected {dim}-dimensional tensor, but got {t.dim()}-dimensional tensor for "
                           f"{_arg(name, pos)} (while checking arguments for {op})")


def _check_numel(op: str, t, name: str, pos: int, numel: int) -> None:
    if t.numel() != numel:
        raise RuntimeError(f"Expected tensor for {_arg(name, pos)} to have {numel} elements; but it actually "
                           f"has {t.numel()} elements (while checking arguments for {op})")


def _check_same_size(op: str, a, an: str, ap: int, b, bn: str, bp: int) -> None:
    if a.shape != b.shape:
        raise RuntimeError(f"Expected tensor for {_arg(an, ap)} to have same size as tensor for "
                           f"{_arg(bn, bp)}; but {list(a.shape)} does not equal {list(b.shape)} "
                           f"(while checking arguments for {op})")


def _check_size(op: str, t, name: str, pos: int, shape) -> None:
    if tuple(t.shape) != tuple(shape):
        raise RuntimeError(f"Expected tensor for {_arg(name, pos)} to have size {list(shape)}; but got "
                           f"{list(t.shape)} (while checking arguments for {op})")


def _check_cell(op: str, input_gates, hidden_gates, prev, input_bias, hidden_bias, factor: int) -> None:
    """ATen's checkSizes for the fused cells (factor 4: LSTM, 3: GRU)."""
    _check_dim(op, input_gates, "input_gates", 1, 2)
    _check_same_size(op, input_gates, "input_gates", 1, hidden_gates, "hidden_gates", 2)
    gates = input_gates.shape[1]
    if (input_bias is None) != (hidden_bias is None):
        raise RuntimeError(f"{op}: input_bias and hidden_bias must both be given or both be None")
    if input_bias is not None:
        _check_dim(op, input_bias, "input_bias", 3, 1)
        _check_numel(op, input_bias, "input_bias", 3, gates)
        _check_same_size(op, input_bias, "input_bias", 3, hidden_bias, "hidden_bias", 4)
    _check_dim(op, prev, "prev_hidden", 5, 2)
    _check_numel(op, prev, "prev_hidden", 5, input_gates.shape[0] * gates // factor)
    if gates % factor:
        raise RuntimeError(f"{op}: gate size {gates} is not a multiple of {factor}")
    if prev.shape[0] != input_gates.shape[0]:
        raise RuntimeError(f"{op}: prev_hidden has batch size {prev.shape[0]}, the gates have "
                           f"{input_gates.shape[0]}")


def _ref(t):
    return None if t is None else device_ref(t)


def _empty(shape, dtype, device: int) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=torch.device("emu", device))


# ---------------------------------------------------------------------------------------------
# LSTM

@OVERLOADS.implements("_thnn_fused_lstm_cell")
def fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    op = "_thnn_fused_lstm_cell"
    device = common_device(f"aten::{op}", input_gates, hidden_gates, cx, input_bias, hidden_bias)
    dtype = _check_dtypes(op, input_gates, hidden_gates, cx, input_bias, hidden_bias)
    _check_cell(op, input_gates, hidden_gates, cx, input_bias, hidden_bias, 4)
    workspace = _empty(input_gates.shape, dtype, device)
    hy = _empty(cx.shape, dtype, device)
    cy = _empty(cx.shape, dtype, device)
    if cx.numel():
        rt().launch("lstm_cell", (device_ref(hy), device_ref(cy), device_ref(workspace), device_ref(input_gates),
                                  device_ref(hidden_gates), device_ref(cx), _ref(input_bias), _ref(hidden_bias)),
                    current_stream(device))
    return hy, cy, workspace


@OVERLOADS.implements("_thnn_fused_lstm_cell_backward_impl")
def fused_lstm_cell_backward_impl(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    op = "fused_lstm_cell_backward"
    if grad_hy is None and grad_cy is None:
        return None, None, None  # ATen returns three undefined tensors
    device = common_device(f"aten::_thnn_{op}_impl", grad_hy, grad_cy, cx, cy, workspace)
    dtype = _check_dtypes(op, workspace, grad_hy, grad_cy, cx, cy)
    defined, name, pos = (grad_hy, "grad_hy", 1) if grad_hy is not None else (grad_cy, "grad_cy", 2)
    _check_dim(op, defined, name, pos, 2)
    shape = tuple(defined.shape)
    for t, n, p in ((grad_hy, "grad_hy", 1), (grad_cy, "grad_cy", 2), (cx, "cx", 3), (cy, "cy", 4)):
        if t is not None:
            _check_size(op, t, n, p, shape)
    _check_dim(op, workspace, "workspace", 5, 2)
    _check_numel(op, workspace, "workspace", 5, shape[0] * shape[1] * 4)
    if workspace.shape[0] != shape[0]:
        raise RuntimeError(f"{op}: workspace has batch size {workspace.shape[0]}, the gradients have {shape[0]}")
    grad_gates = _empty(workspace.shape, dtype, device)
    grad_cx = _empty(cx.shape, dtype, device)
    if cx.numel():
        rt().launch("lstm_cell_backward", (device_ref(grad_gates), device_ref(grad_cx), _ref(grad_hy), _ref(grad_cy),
                                           device_ref(cx), device_ref(cy), device_ref(workspace)),
                    current_stream(device))
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_cx, grad_bias


# ---------------------------------------------------------------------------------------------
# GRU

_GRU_WORKSPACE_MULTIPLIER = 5


@OVERLOADS.implements("_thnn_fused_gru_cell")
def fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    op = "_thnn_fused_gru_cell"
    device = common_device(f"aten::{op}", input_gates, hidden_gates, hx, input_bias, hidden_bias)
    dtype = _check_dtypes(op, input_gates, hidden_gates, hx, input_bias, hidden_bias)
    _check_cell(op, input_gates, hidden_gates, hx, input_bias, hidden_bias, 3)
    workspace = _empty((hx.shape[0], hx.shape[1] * _GRU_WORKSPACE_MULTIPLIER), dtype, device)
    hy = _empty(hx.shape, dtype, device)
    if hx.numel():
        rt().launch("gru_cell", (device_ref(hy), device_ref(workspace), device_ref(input_gates),
                                 device_ref(hidden_gates), device_ref(hx), _ref(input_bias), _ref(hidden_bias)),
                    current_stream(device))
    return hy, workspace


@OVERLOADS.implements("_thnn_fused_gru_cell_backward")
def fused_gru_cell_backward(grad_hy, workspace, has_bias):
    op = "fused_gru_cell_backward"
    device = common_device(f"aten::_thnn_{op}", grad_hy, workspace)
    dtype = _check_dtypes(op, grad_hy, workspace)
    _check_dim(op, grad_hy, "grad_hy", 1, 2)
    batch, hidden = grad_hy.shape
    _check_size(op, workspace, "workspace", 2, (batch, hidden * _GRU_WORKSPACE_MULTIPLIER))
    grad_input_gates = _empty((batch, hidden * 3), dtype, device)
    grad_hidden_gates = _empty((batch, hidden * 3), dtype, device)
    grad_hx = _empty(grad_hy.shape, dtype, device)
    if grad_hy.numel():
        rt().launch("gru_cell_backward", (device_ref(grad_input_gates), device_ref(grad_hidden_gates),
                                          device_ref(grad_hx), device_ref(grad_hy), device_ref(workspace)),
                    current_stream(device))
    if not has_bias:
        return grad_input_gates, grad_hidden_gates, grad_hx, None, None
    return grad_input_gates, grad_hidden_gates, grad_hx, grad_input_gates.sum(0), grad_hidden_gates.sum(0)
