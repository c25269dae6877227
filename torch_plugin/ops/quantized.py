"""Quantized and low-precision matrix products on the matrix engine (emulator/kernels/quantized.pyx).

* ``_int_mm`` (and ``.out``): int8/uint8 x int8 -> int32, exact (int32 wrap-around accumulation).
* ``_weight_int8pack_mm``: activations (float32/bfloat16/float16) times an int8 weight (N x K) with a
  per-output-channel scale; float32 accumulation, rounded once to the activation dtype.
* ``_convert_weight_to_int4pack_for_cpu`` / ``_weight_int4pack_mm_for_cpu``: torch CPU's int4
  weight layout (byte for byte) and the grouped-dequantization matmul reading it.
* ``_scaled_mm`` (and ``.out``): float8 x float8 with tensor-wise or row-wise float32 scales, an
  optional bias, float32/bfloat16/float16/float8 output; ``use_fast_accum`` is accepted and
  changes nothing (the device always accumulates in float32).

Argument checks run before anything is allocated or launched and raise CPU's errors. Operand
conversions the kernels do not take (a float64 scale, say) are device copies, never host work.

PyTorch's own quantized tensors (``torch.quantize_per_tensor``, ``torch.ao`` dynamic quantization:
``quantized::linear_dynamic``) are refused here before any host work, naming the supported route:
torchao's tensor subclasses, which reach the kernels above.
"""
from __future__ import annotations

import torch

from torch_plugin._dtypes import FLOAT8, FLOATING, scalar_type_name
from torch_plugin.ops._common import check_overlap, common_device, current_stream, device_ref, resize_out, rt
from torch_plugin.ops._overloads import Overloads

OVERLOADS = Overloads(__name__)

_HALF_OR_FLOAT = (torch.float32, torch.bfloat16, torch.float16)
_CPP = {torch.float32: "float", torch.int32: "int", torch.int8: "signed char", torch.uint8: "unsigned char",
        torch.bfloat16: "c10::BFloat16", torch.float16: "c10::Half", torch.float64: "double"}


def _cpp(dtype) -> str:
    return _CPP.get(dtype, str(dtype).replace("torch.", ""))


def _emu(device: int) -> torch.device:
    return torch.device("emu", device)


def _matrix_ref(t, shape=None):
    return device_ref(t, shape) if shape is not None else device_ref(t)


# ---------------------------------------------------------------------------------------------
# _int_mm

def _check_int_mm(a, b):
    if a.dim() != 2:
        raise RuntimeError(f"int_mm_out_cpu: Expected self to be of dimension 2 but got {a.dim()}")
    if b.dim() != 2:
        raise RuntimeError(f"int_mm_out_cpu: Expected mat2 to be of dimension 2 but got {b.dim()}")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(f"int_mm_out_cpu: self.size(1) needs to match mat2.size(0) but got "
                           f"{a.shape[1]} and {b.shape[0]}")
    if a.dtype not in (torch.int8, torch.uint8):
        raise RuntimeError(f"int_mm_out_cpu: Expected self dtype to be int8 or uint8 but got {_cpp(a.dtype)}")
    if b.dtype != torch.int8:
        raise RuntimeError(f"int_mm_out_cpu: Expected mat2 dtype to be of type int8 but got {_cpp(b.dtype)}")


def _int_mm_into(op, out, a, b):
    device = common_device(op, a, b)
    if out.numel():
        rt().launch("int_mm", (device_ref(out), device_ref(a), device_ref(b)), current_stream(device))
    return out


@OVERLOADS.implements("_int_mm")
def int_mm(a, b):
    _check_int_mm(a, b)
    device = common_device("aten::_int_mm", a, b)
    out = torch.empty((a.shape[0], b.shape[1]), dtype=torch.int32, device=_emu(device))
    return _int_mm_into("aten::_int_mm", out, a, b)


@OVERLOADS.implements("_int_mm.out")
def int_mm_out(a, b, *, out):
    _check_int_mm(a, b)
    common_device("aten::_int_mm.out", out, a, b)
    if out.dtype != torch.int32:
        raise RuntimeError(f"int_mm_out_cpu: Expected result dtype to be of type kInt but got {_cpp(out.dtype)}")
    resize_out(out, (a.shape[0], b.shape[1]))
    check_overlap("aten::_int_mm.out", out, a, b)
    return _int_mm_into("aten::_int_mm.out", out, a, b)


# ---------------------------------------------------------------------------------------------
# _weight_int8pack_mm

@OVERLOADS.implements("_weight_int8pack_mm")
def weight_int8pack_mm(a, b, scales):
    op = "_weight_int8pack_mm_cpu"
    device = common_device("aten::_weight_int8pack_mm", a, b, scales)
    if a.dtype not in _HALF_OR_FLOAT:
        raise RuntimeError(f"{op} : expect A to be either 32-bit or 16-bit float tensor.")
    if a.dim() != 2:
        raise RuntimeError(f"{op} : expect A to be 2D tensor.")
    if not a.is_contiguous():
        raise RuntimeError(f"{op} : expect A to be contiguous.")
    if b.dtype != torch.int8:
        raise RuntimeError(f"{op} : expect B to be int8 tensor.")
    if not b.is_contiguous():
        raise RuntimeError(f"{op} : expect B to be contiguous.")
    if b.dim() != 2 or b.shape[1] != a.shape[1]:
        raise RuntimeError(f"{op} : expect B.size(1) == {a.shape[1]}")
    if scales.dim() != 1 or scales.shape[0] != b.shape[0]:
        raise RuntimeError(f"{op} : expect scales to be 1d tensor with size {b.shape[0]}")
    if scales.dtype != a.dtype:
        raise RuntimeError(f"expected scalar type {scalar_type_name(a.dtype)} but found {scalar_type_name(scales.dtype)}")
    out = torch.empty((a.shape[0], b.shape[0]), dtype=a.dtype, device=_emu(device))
    if out.numel():
        rt().launch("weight_int8pack_mm", (device_ref(out), device_ref(a), device_ref(b), device_ref(scales)),
                    current_stream(device))
    return out


# ---------------------------------------------------------------------------------------------
# int4: torch CPU's packed layout

def int4_layout() -> tuple[int, int]:
    """(block, split) of the int4 layout torch CPU packs and reads in this process.

    The layout follows CPU's vector width (its ATen CPU capability, which ATEN_CPU_CAPABILITY can
    lower): rows in blocks of 64 on AVX-512, of 32 otherwise; AVX-512 and AVX2 put the two halves
    of a full block in the two nibbles of a byte (split), other builds pair neighbouring rows. The
    device follows it too, so a weight packed on either side reads the same on the other."""
    capability = torch.backends.cpu.get_cpu_capability()
    block = 64 if capability.startswith("AVX512") else 32
    return block, int(capability.startswith(("AVX512", "AVX2")))


@OVERLOADS.implements("_convert_weight_to_int4pack_for_cpu")
def convert_weight_to_int4pack_for_cpu(w, inner_k_tiles):
    device = common_device("aten::_convert_weight_to_int4pack_for_cpu", w)
    if w.dtype != torch.int32:
        raise RuntimeError("_convert_weight_to_int4pack_cpu : expect weight to be kInt.")
    if w.dim() != 2:
        raise RuntimeError("_convert_weight_to_int4pack_cpu : expect weight to be 2D tensor.")
    N, K = w.shape
    if K % 2:
        raise RuntimeError("_convert_weight_to_int4pack: expect K to be dividable by 2")
    if N % 16:
        raise RuntimeError("_convert_weight_to_int4pack_cpu : expect N to be dividable by 16")
    out = torch.zeros((N, K // 2), dtype=torch.uint8, device=_emu(device))
    if out.numel():
        rt().launch("int4_pack", (device_ref(out), device_ref(w), *int4_layout()), current_stream(device))
    return out


@OVERLOADS.implements("_weight_int4pack_mm_for_cpu")
def weight_int4pack_mm_for_cpu(a, w, group_size, scales_zeros):
    op = "_weight_int4pack_mm_cpu"
    device = common_device("aten::_weight_int4pack_mm_for_cpu", a, w, scales_zeros)
    if a.dtype not in _HALF_OR_FLOAT:
        raise RuntimeError(f"{op} : expect A to be either 32-bit or 16-bit float tensor.")
    if a.dim() != 2 or not a.is_contiguous():
        raise RuntimeError(f"{op} : expect A to be 2D contiguous tensor.")
    if w.dtype != torch.uint8 or w.dim() != 2 or not w.is_contiguous():
        raise RuntimeError(f"{op} : expect B to be uint8 2D contiguous tensor.")
    if group_size not in (32, 64, 128, 256):
        raise RuntimeError(f"{op}: expect qGroupSize to be 32, 64, 128 or 256, got {group_size}")
    N, K = w.shape[0], w.shape[1] * 2
    if a.shape[1] != K:
        raise RuntimeError(f"{op} : expect A.size(1) == {K}")
    if scales_zeros.dim() != 3 or tuple(scales_zeros.shape[1:]) != (N, 2) or scales_zeros.shape[0] * group_size < K:
        raise RuntimeError(f"{op}: expect qScaleAndZeros to be 3d tensor with sizes [{-(-K // group_size)}, {N}, 2]")
    if scales_zeros.dtype != a.dtype:
        raise RuntimeError(f"expected scalar type {scalar_type_name(a.dtype)} but found "
                           f"{scalar_type_name(scales_zeros.dtype)}")
    out = torch.empty((a.shape[0], N), dtype=a.dtype, device=_emu(device))
    if out.numel():
        rt().launch("int4pack_mm", (device_ref(out), device_ref(a), device_ref(w), int(group_size),
                                    device_ref(scales_zeros), *int4_layout()), current_stream(device))
    return out


# ---------------------------------------------------------------------------------------------
# _scaled_mm

_SCALE_ERROR = ("Invalid scaling configuration.\n"
                "- For TensorWise scaling, a and b should be float8, scales should be float and singletons.\n"
                "- For RowWise scaling, a and b should be float8, scales should be float, scale_a should be "
                "({M}, 1) and scale_b should be (1, {N}), and both should be contiguous.\n"
                "Got mat_a.dtype()={a}, scale_a.dtype()={sa}, scale_a.size()={sas}, scale_a.stride()={sast}, "
                "mat_b.dtype()={b}, scale_b.dtype()={sb}, scale_b.size()={sbs} and scale_b.stride()={sbst}")


def _scale_mode(a, b, sa, sb):
    """"tensor" or "row" (both operands alike), or CPU's ValueError."""
    f8 = a.dtype in FLOAT8 and b.dtype in FLOAT8
    f32 = sa.dtype == torch.float32 and sb.dtype == torch.float32
    if f8 and f32 and sa.numel() == 1 and sb.numel() == 1:
        return "tensor"
    # row-wise: scale_a (M, 1) and scale_b^T (N, 1), each contiguous
    sbt = sb.t() if sb.dim() == 2 else sb
    if (f8 and f32 and sa.dim() == 2 and sb.dim() == 2 and tuple(sa.shape) == (a.shape[0], 1)
            and tuple(sbt.shape) == (b.shape[1], 1) and sa.is_contiguous() and sbt.is_contiguous()):
        return "row"
    raise ValueError(_SCALE_ERROR.format(M=a.shape[0], N=b.shape[-1], a=scalar_type_name(a.dtype),
                                         sa=scalar_type_name(sa.dtype), sas=list(sa.shape), sast=list(sa.stride()),
                                         b=scalar_type_name(b.dtype), sb=scalar_type_name(sb.dtype),
                                         sbs=list(sb.shape), sbst=list(sb.stride())))


def _check_scaled_mm(a, b, sa, sb, bias, scale_result, out_dtype):
    """torch's reference _scaled_mm checks, in its order (the path CPU takes without oneDNN's AMX
    kernel, and CUDA's wording): operand ranks, the joint scaling, the shapes, row-wise scale
    strides, scale_result, the bias."""
    if a.dim() != 2:
        raise RuntimeError("mat1 must be a matrix")
    if b.dim() != 2:
        raise RuntimeError("mat2 must be a matrix")
    mode = _scale_mode(a, b, sa, sb)
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(f"mat_a and mat_b shapes cannot be multiplied ({a.shape[0]}x{a.shape[1]} and "
                           f"{b.shape[0]}x{b.shape[1]})")
    if mode == "row":
        for name, s in (("scale_a", sa), ("scale_b", sb)):
            if s.stride(1) != 1:
                raise ValueError(f"expected {name}.stride(1) to be 1, but got {s.stride(1)}")
    if scale_result is not None and (scale_result.numel() != 1 or scale_result.dtype != torch.float32):
        raise RuntimeError("scale_result must be a float scalar")
    if bias is not None:
        if bias.numel() != b.shape[1]:
            raise RuntimeError(f"Bias must be size {b.shape[1]} but got {bias.numel()}")
        if bias.dim() == 0 or any(d != 1 for d in bias.shape[:-1]):
            raise RuntimeError(f"_scaled_mm: a bias of shape {list(bias.shape)} is not supported on emu "
                               f"(a row of {b.shape[1]}, one per output column)")
        if bias.dtype not in FLOATING:
            raise RuntimeError(f"_scaled_mm: bias dtype {bias.dtype} is not supported on emu (a floating dtype)")
    if out_dtype not in FLOATING and out_dtype not in FLOAT8:
        raise RuntimeError(f"_scaled_mm: out_dtype {out_dtype} is not supported on emu (float32, float64, "
                           "bfloat16, float16, float8)")
    return mode


def _float32(t):
    """A device float32 copy where the kernel needs one (a device conversion; no host work)."""
    return t if t.dtype == torch.float32 else t.to(torch.float32)


def _scaled_mm_into(op, out, a, b, sa, sb, bias, scale_result, mode):
    device = common_device(op, a, b, sa, sb, *[t for t in (bias, scale_result) if t is not None])
    if not out.numel():
        return out
    sa, sb = _float32(sa), _float32(sb)
    M, N = a.shape[0], b.shape[1]
    if mode == "tensor":
        sa_ref, sb_ref = device_ref(sa, (M,), (0,)), device_ref(sb, (N,), (0,))
    else:
        sa_ref, sb_ref = device_ref(sa, (M,), (sa.stride(0),)), device_ref(sb, (N,), (sb.stride(1),))
    # scale_result divides an e4m3fn or e5m2 output only (the reference ignores it for the others).
    rs = (device_ref(scale_result.reshape(1)) if scale_result is not None
          and out.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) else None)
    bias_ref = device_ref(bias.reshape(N)) if bias is not None else None
    rt().launch("scaled_mm", (device_ref(out), device_ref(a), device_ref(b), sa_ref, sb_ref, bias_ref, rs),
                current_stream(device))
    return out


@OVERLOADS.implements("_scaled_mm")
def scaled_mm(a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False):
    out_dtype = a.dtype if out_dtype is None else out_dtype
    mode = _check_scaled_mm(a, b, scale_a, scale_b, bias, scale_result, out_dtype)
    device = common_device("aten::_scaled_mm", a, b, scale_a, scale_b)
    out = torch.empty((a.shape[0], b.shape[1]), dtype=out_dtype, device=_emu(device))
    return _scaled_mm_into("aten::_scaled_mm", out, a, b, scale_a, scale_b, bias, scale_result, mode)


@OVERLOADS.implements("_scaled_mm.out")
def scaled_mm_out(a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False,
                  *, out):
    if out_dtype is not None and out_dtype != out.dtype:
        raise ValueError("out_dtype must match output matrix type")
    mode = _check_scaled_mm(a, b, scale_a, scale_b, bias, scale_result, out.dtype)
    common_device("aten::_scaled_mm.out", out, a, b)
    resize_out(out, (a.shape[0], b.shape[1]))
    check_overlap("aten::_scaled_mm.out", out, a, b, scale_a, scale_b)
    return _scaled_mm_into("aten::_scaled_mm.out", out, a, b, scale_a, scale_b, bias, scale_result, mode)


# ---------------------------------------------------------------------------------------------
# PyTorch's quantized tensors: refused before any host work

_ROUTE = ("PyTorch's quantized tensors (torch.quantize_per_tensor, torch.ao.quantization) are not supported on "
          "emu; quantize with torchao's tensor subclasses instead (e.g. torchao.quantization.quantize_(model, "
          "Int8WeightOnlyConfig())), whose matmuls run on the device as _int_mm, _weight_int8pack_mm and "
          "_scaled_mm kernels (docs/inference.md)")


class QuantizedTensorError(NotImplementedError):
    """A PyTorch quantized-tensor op reached emu (refused before any work)."""


def _refuse(op: str):
    def refuse(*args, **kwargs):
        raise QuantizedTensorError(f"{op}: {_ROUTE}")
    return refuse


def refuse_ao(op: str):
    """The kernel registered for a torch.ao dynamic op on emu (ops/registry.py)."""
    return _refuse(op)


# Overloads of aten's quantizing ops: each produces a quantized tensor (the layout emu refuses).
QUANTIZING_OPS = ("quantize_per_tensor", "quantize_per_tensor.tensor_qparams", "quantize_per_tensor.tensors",
                  "quantize_per_tensor_dynamic", "quantize_per_channel", "_empty_affine_quantized",
                  "_empty_per_channel_affine_quantized")
OVERLOADS.update({name: _refuse(f"aten::{name}") for name in QUANTIZING_OPS})
# The torch.ao dynamic-quantization kernels a quantize_dynamic model calls with a (dense) emu
# input: they would otherwise run on the host fallback.
AO_DYNAMIC_OPS = ("quantized::linear_dynamic", "quantized::linear_dynamic_fp16",
                  "quantized::linear_relu_dynamic", "quantized::linear_relu_dynamic_fp16")


def register_out_dtype() -> None:
    """torch's ``out_dtype`` higher-order op (torchao's int8 x int8 -> int32 matmul) takes
    ``_int_mm`` only for CUDA/XPU tensors and otherwise upcasts to an int32 mm; on emu the same
    int8 product is ``_int_mm`` too (the int8 rate, exact either way)."""
    from torch._C import DispatchKey
    from torch._higher_order_ops.out_dtype import out_dtype, out_dtype_fallback

    @out_dtype.py_impl(DispatchKey.PrivateUse1)
    def out_dtype_emu(op, output_dtype, *args):
        if (op is torch.ops.aten.mm.default and output_dtype == torch.int32 and len(args) == 2
                and all(isinstance(t, torch.Tensor) and t.dtype == torch.int8 for t in args)):
            return torch._int_mm(*args)
        return out_dtype_fallback(op, output_dtype, *args)
