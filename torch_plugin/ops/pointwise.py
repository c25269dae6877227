"""The pointwise op table: one declarative row per elementwise op, and the registrations it makes.

Each row names the aten op, the device kernel (``unary_op``, ``binary_op`` or ``ternary_op``
of the vector engine, emulator/kernels/pointwise.pyx) and its op code, the type
promotion (TensorIterator's kinds, as in ``torch._prims_common``), which dtypes the op is
defined for, the aten overloads it registers (functional, in-place, out=), and how the
overload's extra arguments become the kernel's scalar parameters. The rows' kernels are
generated into ``GENERATED_OVERLOADS`` (a hand-written kernel any op module declares for the same
overload wins over a row's, see ops/_overloads.py); the hand-written kernels beyond one row at the
end are in ``OVERLOADS``. ``registrations()`` is both.
The vector engine's cost per op (cycles per element group, higher for transcendental
functions) is the kernel library's (emulator/kernels/library.py, ``pointwise_cycles``).

Every generated kernel follows CPU's contracts: ``torch.result_type`` promotion (Python
scalars and CPU 0-dim tensors are immediates cast to the common dtype, as CPU casts a
scalar operand); float16/bfloat16 compute in float32 and round once; out= resizes an
empty out, checks the cast, rejects partial overlap; an in-place op needs the result to
cast to ``self`` and the broadcast shape to be ``self``'s.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from torch_plugin._dtypes import SUPPORTED, TO_CODE, scalar_type_name
from torch_plugin.errors import unsupported_dtype
from torch_plugin.ops._common import (broadcast_shape, broadcast_strides, check_overlap, common_device,
                                      current_stream, device_ref, empty_like_layout, prepare_out, resize_out,
                                      rt)
from torch_plugin.ops._overloads import Overloads

GENERATED_OVERLOADS = Overloads(__name__, generated=True)
OVERLOADS = Overloads(__name__)

_REDUCED = (torch.float16, torch.bfloat16)
_INTEGRAL = frozenset({torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64})


def _no_params(extra, kwargs, dtype):
    return ()


@dataclass(frozen=True)
class Pointwise:
    name: str                      # aten base name, e.g. "exp"
    code: str                      # the kernel's op code, e.g. "exp"
    arity: int                     # tensor (or scalar) inputs
    overloads: tuple               # aten overloads this row registers
    promotion: str = "default"     # default | int_to_float | always_bool | bool_to_long | same_as_first
    dtypes: str = "all"            # all | float | integral | integral_no_bool | no_bool
    params: Callable = _no_params  # (extra args, kwargs, result dtype) -> kernel parameters
    inputs: tuple | None = None    # positions of the inputs among the arguments (default: the first ones)

    @property
    def device_kernel(self) -> str:
        return ("unary_op", "binary_op", "ternary_op")[self.arity - 1]


def _uni(name, promotion="int_to_float", dtypes="float", code=None, params=_no_params, out="out"):
    return Pointwise(name, code or name, 1, (name, f"{name}_", f"{name}.{out}"), promotion, dtypes, params)


def _bin(name, code=None, promotion="default", dtypes="all", scalar=True, inplace=True, params=_no_params,
         tensor="Tensor", out="out"):
    overloads = [f"{name}.{tensor}", f"{name}.{out}"]
    if inplace:
        overloads.append(f"{name}_.{tensor}")
    if scalar:
        overloads += [f"{name}.Scalar"] + ([f"{name}_.Scalar"] if inplace else [])
    return Pointwise(name, code or name, 2, tuple(overloads), promotion, dtypes, params)


def _bwd(name, code=None, params=_no_params, inputs=None):
    return Pointwise(name, code or name, 2, (name, f"{name}.grad_input"), "default", "float", params, inputs)


def _get(extra, kwargs, i, key, default):
    if len(extra) > i:
        return extra[i]
    return kwargs.get(key, default)


def _number(value):
    return value.item() if isinstance(value, torch.Tensor) else value


def _round_params(extra, kwargs, dtype):
    decimals = _get(extra, kwargs, 0, "decimals", 0)
    if decimals == 0:
        return ()
    # 10 ** 2**40 as a Python int would take forever; past float64's range the power is inf (CPU's
    # float power overflows too: every element becomes NaN).
    ten = math.inf if abs(decimals) > 308 else float(10 ** abs(decimals))
    return (ten, 1 | (2 if decimals < 0 else 0))


def _clamp_params(extra, kwargs, dtype):
    lo, hi = _get(extra, kwargs, 0, "min", None), _get(extra, kwargs, 1, "max", None)
    lo, hi = _number(lo), _number(hi)
    flags = (1 if lo is not None else 0) | (2 if hi is not None else 0)
    return (0 if lo is None else lo, 0 if hi is None else hi, flags)


_FLOAT32_MAX = 3.4028234663852886e38


def _float_scalar(value, dtype):
    """A Scalar parameter of a float32/float16/bfloat16 op, checked as CPU converts it to float
    (a finite value past float32's range is an error there, not an inf)."""
    value = _number(value)
    if dtype in (torch.float32, torch.float16, torch.bfloat16) and math.isfinite(value) \
            and abs(value) > _FLOAT32_MAX:
        raise RuntimeError("value cannot be converted to type float without overflow")
    return value


def _wrap_dim(dim, ndim):
    """``dim`` in [0, ndim), or CPU's IndexError."""
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n


def _hardtanh_params(extra, kwargs, dtype):
    return (_float_scalar(_get(extra, kwargs, 0, "min_val", -1.0), dtype),
            _float_scalar(_get(extra, kwargs, 1, "max_val", 1.0), dtype), 3)


def _nan_to_num_params(extra, kwargs, dtype):
    if not dtype.is_floating_point:
        return (0.0, 0.0, 0.0)
    info = torch.finfo(dtype)
    nan = _get(extra, kwargs, 0, "nan", None)
    posinf = _get(extra, kwargs, 1, "posinf", None)
    neginf = _get(extra, kwargs, 2, "neginf", None)
    return (0.0 if nan is None else float(nan), info.max if posinf is None else float(posinf),
            info.min if neginf is None else float(neginf))


def _logit_params(extra, kwargs, dtype):
    eps = _get(extra, kwargs, 0, "eps", None)
    return (0.0, 0) if eps is None else (float(eps), 1)


def _value_param(extra, kwargs, dtype):
    return (_number(kwargs.get("value", extra[0] if extra else 1)),)


def _polygamma_order(n):
    n = _number(n)
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    return (int(n),)


def _in_dtype(value, dtype):
    """A scalar parameter as CPU's kernel sees it: converted to the op's dtype first."""
    value = float(_number(value))
    return torch.tensor(value, dtype=dtype).item() if dtype.is_floating_point else value


def _softshrink_lambd(value, dtype):
    if float(_number(value)) < 0:
        raise RuntimeError(f"lambda must be greater or equal to 0, but found to be {float(_number(value))}.")
    if dtype == torch.float32 and float(_number(value)) > _FLOAT32_MAX:  # CPU's range check of lambd
        raise RuntimeError(f"lambda must be in range [0, 3.40282e+38] for input dtype Float, but found "
                           f"{float(_number(value)):g}")
    # CPU's softshrink keeps lambd in float32 for float16/bfloat16 (its opmath), unlike hardshrink
    return _in_dtype(value, torch.float32 if dtype in _REDUCED else dtype)


# The rows. Overloads that this torch does not define are skipped (registrations() checks).
# CompositeImplicitAutograd aliases (arcsin, negative, greater, max.other, ...) have no rows:
# they decompose into the rows' ops by themselves, and a PrivateUse1 kernel for them would lose
# their autograd formula (the gradient would silently be zero).
TABLE: tuple[Pointwise, ...] = (
    # unary, floating (integers promote to the default float dtype)
    *(_uni(n) for n in ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos",
                        "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
                        "sigmoid", "erf", "erfc", "lgamma", "reciprocal", "sinc", "deg2rad", "rad2deg")),
    Pointwise("silu", "silu", 1, ("silu", "silu_", "silu.out"), "same_as_first", "float"),
    Pointwise("mish", "mish", 1, ("mish", "mish_", "mish.out"), "same_as_first", "float"),
    Pointwise("hardswish", "hardswish", 1, ("hardswish", "hardswish_", "hardswish.out"), "same_as_first", "float"),
    Pointwise("hardsigmoid", "hardsigmoid", 1, ("hardsigmoid", "hardsigmoid_", "hardsigmoid.out"),
              "same_as_first", "float"),
    Pointwise("gelu", "gelu", 1, ("gelu", "gelu_", "gelu.out"), "same_as_first", "float"),
    Pointwise("softplus", "softplus", 1, ("softplus", "softplus.out"), "same_as_first", "float",
              lambda e, k, d: (float(_number(_get(e, k, 0, "beta", 1))), float(_float_scalar(_get(e, k, 1, "threshold", 20), d)))),
    Pointwise("elu", "elu", 1, ("elu", "elu_", "elu.out"), "same_as_first", "float",
              lambda e, k, d: (float(_number(_get(e, k, 0, "alpha", 1))), float(_number(_get(e, k, 1, "scale", 1))),
                               float(_number(_get(e, k, 2, "input_scale", 1))))),
    Pointwise("leaky_relu", "leaky_relu", 1, ("leaky_relu", "leaky_relu_", "leaky_relu.out"), "same_as_first",
              "float", lambda e, k, d: (float(_number(_get(e, k, 0, "negative_slope", 0.01))),)),
    Pointwise("hardtanh", "clamp", 1, ("hardtanh", "hardtanh_", "hardtanh.out"), "same_as_first", "float",
              _hardtanh_params),
    Pointwise("logit", "logit", 1, ("logit", "logit_", "logit.out"), "int_to_float", "float", _logit_params),
    Pointwise("frac", "frac", 1, ("frac", "frac_", "frac.out"), "same_as_first", "float"),
    # unary, any real dtype
    Pointwise("neg", "neg", 1, ("neg", "neg_", "neg.out"), "same_as_first", "no_bool"),
    Pointwise("abs", "abs", 1, ("abs", "abs_", "abs.out"), "same_as_first", "no_bool"),
    Pointwise("sign", "sign", 1, ("sign", "sign_", "sign.out"), "same_as_first", "no_bool"),
    Pointwise("sgn", "sign", 1, ("sgn", "sgn_", "sgn.out"), "same_as_first", "no_bool"),
    *(Pointwise(n, n, 1, (n, f"{n}_", f"{n}.out"), "same_as_first", "no_bool") for n in ("floor", "ceil", "trunc")),
    Pointwise("round", "round", 1, ("round", "round_", "round.out", "round.decimals", "round_.decimals",
                                    "round.decimals_out"), "same_as_first", "no_bool", _round_params),
    Pointwise("clamp", "clamp", 1, ("clamp", "clamp_", "clamp.out"), "clamp", "no_bool", _clamp_params),
    Pointwise("clamp_min", "clamp", 1, ("clamp_min", "clamp_min_", "clamp_min.out"), "clamp", "no_bool",
              lambda e, k, d: (_number(e[0] if e else k["min"]), 0, 1)),
    Pointwise("clamp_max", "clamp", 1, ("clamp_max", "clamp_max_", "clamp_max.out"), "clamp", "no_bool",
              lambda e, k, d: (0, _number(e[0] if e else k["max"]), 2)),
    Pointwise("threshold", "threshold", 1, ("threshold", "threshold_", "threshold.out"), "same_as_first",
              "no_bool", lambda e, k, d: (_float_scalar(_get(e, k, 0, "threshold", 0), d),
                                          _float_scalar(_get(e, k, 1, "value", 0), d))),
    Pointwise("nan_to_num", "nan_to_num", 1, ("nan_to_num", "nan_to_num_", "nan_to_num.out"), "same_as_first",
              "all", _nan_to_num_params),
    # unary, bool result
    Pointwise("isnan", "isnan", 1, ("isnan",), "always_bool"),
    Pointwise("isinf", "isinf", 1, ("isinf",), "always_bool"),
    Pointwise("isposinf", "isposinf", 1, ("isposinf", "isposinf.out"), "always_bool"),
    Pointwise("isneginf", "isneginf", 1, ("isneginf", "isneginf.out"), "always_bool"),
    Pointwise("signbit", "signbit", 1, ("signbit", "signbit.out"), "always_bool"),
    Pointwise("logical_not", "logical_not", 1, ("logical_not", "logical_not_", "logical_not.out"), "always_bool"),
    Pointwise("bitwise_not", "bitwise_not", 1, ("bitwise_not", "bitwise_not_", "bitwise_not.out"),
              "same_as_first", "integral"),
    # binary
    Pointwise("pow", "pow", 2, ("pow.Tensor_Tensor", "pow.Tensor_Tensor_out"), "default", "all"),
    Pointwise("pow", "pow", 2, ("pow.Tensor_Scalar", "pow_.Scalar", "pow.Tensor_Scalar_out", "pow.Scalar",
                                "pow.Scalar_out", "pow_.Tensor"), "default", "all"),
    Pointwise("atan2", "atan2", 2, ("atan2", "atan2_", "atan2.out"), "int_to_float", "float"),
    Pointwise("hypot", "hypot", 2, ("hypot", "hypot_", "hypot.out"), "default", "float"),
    _bin("copysign", promotion="int_to_float", dtypes="float"),
    _bin("fmod", dtypes="no_bool", out="Tensor_out"),
    Pointwise("fmod", "fmod", 2, ("fmod.Scalar_out",), "default", "no_bool"),
    _bin("remainder", dtypes="no_bool", out="Tensor_out"),
    Pointwise("remainder", "remainder", 2, ("remainder.Scalar_out",), "default", "no_bool"),
    Pointwise("remainder", "remainder", 2, ("remainder.Scalar_Tensor",), "default", "no_bool"),
    Pointwise("floor_divide", "div_floor", 2, ("floor_divide", "floor_divide_.Tensor", "floor_divide.out",
                                               "floor_divide.Scalar", "floor_divide_.Scalar"), "default", "no_bool"),
    Pointwise("fmax", "fmax", 2, ("fmax", "fmax.out"), "default", "all"),
    Pointwise("fmin", "fmin", 2, ("fmin", "fmin.out"), "default", "all"),
    Pointwise("maximum", "maximum", 2, ("maximum", "maximum.out"), "default", "all"),
    Pointwise("minimum", "minimum", 2, ("minimum", "minimum.out"), "default", "all"),
    *(_bin(n, promotion="always_bool", tensor="Tensor", out="Tensor_out") for n in ("eq", "ne", "lt", "le", "gt", "ge")),
    *(Pointwise(n, n, 2, (f"{n}.Scalar_out",), "always_bool") for n in ("eq", "ne", "lt", "le", "gt", "ge")),
    *(Pointwise(n, n, 2, (n, f"{n}_", f"{n}.out"), "always_bool") for n in ("logical_and", "logical_or", "logical_xor")),
    *(_bin(n, dtypes="integral", out="Tensor_out") for n in ("bitwise_and", "bitwise_or", "bitwise_xor")),
    *(Pointwise(n, n, 2, (f"{n}.Scalar_out",), "default", "integral") for n in ("bitwise_and", "bitwise_or", "bitwise_xor")),
    Pointwise("bitwise_left_shift", "lshift", 2, ("bitwise_left_shift.Tensor", "bitwise_left_shift_.Tensor",
                                                  "bitwise_left_shift.Tensor_out", "bitwise_left_shift.Tensor_Scalar",
                                                  "bitwise_left_shift_.Tensor_Scalar",
                                                  "bitwise_left_shift.Tensor_Scalar_out", "__lshift__.Tensor",
                                                  "__lshift__.Scalar", "__ilshift__.Tensor", "__ilshift__.Scalar"),
              "default", "integral_no_bool"),
    Pointwise("bitwise_right_shift", "rshift", 2, ("bitwise_right_shift.Tensor", "bitwise_right_shift_.Tensor",
                                                   "bitwise_right_shift.Tensor_out",
                                                   "bitwise_right_shift.Tensor_Scalar",
                                                   "bitwise_right_shift_.Tensor_Scalar",
                                                   "bitwise_right_shift.Tensor_Scalar_out", "__rshift__.Tensor",
                                                   "__rshift__.Scalar", "__irshift__.Tensor", "__irshift__.Scalar"),
              "default", "integral_no_bool"),
    Pointwise("xlogy", "xlogy", 2, ("xlogy.Tensor", "xlogy_.Tensor", "xlogy.OutTensor", "xlogy.Scalar_Other",
                                    "xlogy_.Scalar_Other", "xlogy.OutScalar_Other", "xlogy.Scalar_Self",
                                    "xlogy.OutScalar_Self"), "int_to_float", "float"),
    Pointwise("special_xlog1py", "xlog1py", 2, ("special_xlog1py", "special_xlog1py.out"), "int_to_float", "float"),
    Pointwise("logaddexp", "logaddexp", 2, ("logaddexp", "logaddexp.out"), "default", "float"),
    Pointwise("logaddexp2", "logaddexp2", 2, ("logaddexp2", "logaddexp2.out"), "default", "float"),
    Pointwise("nextafter", "nextafter", 2, ("nextafter", "nextafter_", "nextafter.out"), "default", "float"),
    Pointwise("heaviside", "heaviside", 2, ("heaviside", "heaviside_", "heaviside.out"), "default", "all"),
    # div with rounding_mode="trunc" | "floor" (rounding_mode=None is true division: ops/elementwise.py)
    Pointwise("div", "div_trunc", 2, ("div.Tensor_mode", "div_.Tensor_mode", "div.out_mode", "div.Scalar_mode",
                                      "div_.Scalar_mode", "div.Scalar_mode_out"), "default", "all"),
    # backward ops of the activations: (grad_output, input or result)
    _bwd("sigmoid_backward"), _bwd("tanh_backward"), _bwd("silu_backward"), _bwd("hardsigmoid_backward"),
    Pointwise("hardswish_backward", "hardswish_backward", 2, ("hardswish_backward",), "default", "float"),
    Pointwise("mish_backward", "mish_backward", 2, ("mish_backward",), "default", "float"),
    _bwd("gelu_backward", params=lambda e, k, d: ()),
    _bwd("leaky_relu_backward", params=lambda e, k, d: (float(_number(e[0])),)),
    _bwd("softplus_backward", params=lambda e, k, d: (float(_number(e[0])), float(_number(e[1])))),
    _bwd("hardtanh_backward", params=lambda e, k, d: (float(_number(e[0])), float(_number(e[1])))),
    _bwd("logit_backward", params=lambda e, k, d: _logit_params(e, k, d)),
    # elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result)
    _bwd("elu_backward", inputs=(0, 5),
         params=lambda e, k, d: (float(_number(e[0])), float(_number(e[1])), float(_number(e[2])), int(bool(e[3])))),
    # special functions (emulator/kernels/_special_math.pxi): CPU's algorithms, in double
    *(_uni(n) for n in ("digamma", "erfinv", "i0")),
    *(Pointwise(f"special_{n}", n, 1, (f"special_{n}", f"special_{n}.out"), "int_to_float", "float")
      for n in ("i0e", "i1", "i1e", "entr")),
    *(Pointwise(f"special_{n}", c, 1, (f"special_{n}", f"special_{n}.out"), "int_to_float", "float32_64")
      for n, c in (("ndtri", "ndtri"), ("log_ndtr", "log_ndtr"), ("erfcx", "erfcx"), ("airy_ai", "airy_ai"),
                   ("bessel_j0", "bessel_j0"), ("bessel_j1", "bessel_j1"), ("bessel_y0", "bessel_y0"),
                   ("bessel_y1", "bessel_y1"), ("modified_bessel_i0", "i0"), ("modified_bessel_i1", "i1"),
                   ("modified_bessel_k0", "modified_bessel_k0"), ("modified_bessel_k1", "modified_bessel_k1"),
                   ("scaled_modified_bessel_k0", "scaled_modified_bessel_k0"),
                   ("scaled_modified_bessel_k1", "scaled_modified_bessel_k1"),
                   ("spherical_bessel_j0", "spherical_bessel_j0"))),
    # polygamma(int n, Tensor self) and polygamma_(self, int n)
    Pointwise("polygamma", "polygamma", 1, ("polygamma", "polygamma.out"), "int_to_float", "float",
              lambda e, k, d: _polygamma_order(e[0]), inputs=(1,)),
    Pointwise("polygamma", "polygamma", 1, ("polygamma_",), "int_to_float", "float",
              lambda e, k, d: _polygamma_order(e[0])),
    *(Pointwise(n, n, 2, (n, f"{n}_", f"{n}.out"), "default", "float") for n in ("igamma", "igammac")),
    Pointwise("special_zeta", "zeta", 2, ("special_zeta", "special_zeta.out", "special_zeta.self_scalar",
                                          "special_zeta.self_scalar_out", "special_zeta.other_scalar",
                                          "special_zeta.other_scalar_out"), "int_to_float", "float32_64"),
    *(Pointwise(f"special_{n}", n, 2, (f"special_{n}", f"special_{n}.out", f"special_{n}.x_scalar",
                                       f"special_{n}.x_scalar_out", f"special_{n}.n_scalar",
                                       f"special_{n}.n_scalar_out"), "int_to_float", "float32_64")
      for n in ("chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
                "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
                "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "hermite_polynomial_h",
                "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p")),
    # the remaining activations
    Pointwise("hardshrink", "hardshrink", 1, ("hardshrink", "hardshrink.out"), "same_as_first", "float",
              lambda e, k, d: (_in_dtype(_get(e, k, 0, "lambd", 0.5), d),)),
    Pointwise("softshrink", "softshrink", 1, ("softshrink", "softshrink.out"), "same_as_first", "float",
              lambda e, k, d: (_softshrink_lambd(_get(e, k, 0, "lambd", 0.5), d),)),
    _bwd("hardshrink_backward", params=lambda e, k, d: (_in_dtype(e[0], d),)),
    _bwd("softshrink_backward", params=lambda e, k, d: (_in_dtype(e[0], d),)),
    _bwd("log_sigmoid_backward", inputs=(0, 1)),   # the CPU buffer argument is not needed
    Pointwise("angle", "angle", 1, ("angle", "angle.out"), "int_to_float", "float"),
    Pointwise("_prelu_kernel", "prelu", 2, ("_prelu_kernel",), "default", "float"),
    # ternary
    Pointwise("lerp", "lerp", 3, ("lerp.Tensor", "lerp_.Tensor", "lerp.Tensor_out", "lerp.Scalar", "lerp_.Scalar",
                                  "lerp.Scalar_out"), "lerp", "float"),
    Pointwise("addcmul", "addcmul", 3, ("addcmul", "addcmul_", "addcmul.out"), "default", "no_bool", _value_param),
    Pointwise("addcdiv", "addcdiv", 3, ("addcdiv", "addcdiv_", "addcdiv.out"), "default", "float", _value_param),
    Pointwise("clamp", "clamp", 3, ("clamp.Tensor", "clamp_.Tensor", "clamp.Tensor_out"), "clamp_tensor", "no_bool",
              lambda e, k, d: ()),
    Pointwise("clamp_min", "clamp", 3, ("clamp_min.Tensor", "clamp_min_.Tensor", "clamp_min.Tensor_out"),
              "clamp_tensor", "no_bool", lambda e, k, d: ()),
    Pointwise("clamp_max", "clamp", 3, ("clamp_max.Tensor", "clamp_max_.Tensor", "clamp_max.Tensor_out"),
              "clamp_tensor", "no_bool", lambda e, k, d: ()),
)


# CPU's kernels that build their TensorIterator with every operand of one dtype (no promotion, no
# cast into out). SAME_DTYPE_OUT: overloads whose out= must have the result's dtype;
# SAME_DTYPE_INPUTS: rows whose tensor inputs must share one dtype too (lerp's `end`/`weight`,
# heaviside, log_sigmoid_backward). tests/torch_plugin/test_out_contract.py checks both against
# CPU for every row of the table, so a row that forgets is caught.
SAME_DTYPE_OUT = frozenset(
    [f"{n}.out" for n in ("mish", "hardswish", "hardsigmoid", "gelu", "softplus", "elu", "leaky_relu", "hardtanh",
                          "neg", "round", "clamp_min", "clamp_max", "nan_to_num", "bitwise_not", "hardshrink",
                          "softshrink", "heaviside")]
    + ["round.decimals_out", "lerp.Tensor_out", "log_sigmoid_backward.grad_input"])
SAME_DTYPE_INPUTS = frozenset(("lerp", "heaviside", "log_sigmoid_backward"))


def _check_same_dtype(row: Pointwise, name: str, inputs, out, result) -> None:
    """CPU's check_all_same_dtype for the overloads of SAME_DTYPE_OUT and the rows of SAME_DTYPE_INPUTS."""
    if row.name in SAME_DTYPE_INPUTS:
        tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
        first = tensors[0].dtype
        for x in tensors[1:]:
            if x.dtype == first:
                continue
            if row.name == "lerp":
                which = "weight" if len(tensors) == 3 and x is tensors[2] else "end"
                raise RuntimeError(f"expected dtype {scalar_type_name(first).lower()} for `{which}` but got dtype "
                                   f"{scalar_type_name(x.dtype).lower()}")
            if row.name == "heaviside":
                raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")
            raise RuntimeError(f"Found dtype {scalar_type_name(x.dtype)} but expected {scalar_type_name(first)}")
    if out is not None and out.dtype != result and name[6:] in SAME_DTYPE_OUT:
        if row.name == "nan_to_num":
            raise RuntimeError(f"nan_to_num: dtype of out: {scalar_type_name(out.dtype)} should be same as input: "
                               f"{scalar_type_name(result)}")
        if row.name == "heaviside":
            raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")
        raise RuntimeError(f"Found dtype {scalar_type_name(out.dtype)} but expected {scalar_type_name(result)}")


# -- type promotion --------------------------------------------------------------------
def _result_type(args) -> torch.dtype:
    """torch.result_type folded over the inputs (Python scalars and CPU 0-dim tensors count as
    scalars, as in TensorIterator)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if len(args) == 1:
        return args[0].dtype if isinstance(args[0], torch.Tensor) else torch.result_type(torch.empty(0), args[0])
    dtype = torch.result_type(args[0], args[1])
    for extra in args[2:]:
        if extra is None:
            continue
        # Keep the category rules: dimensioned tensors outrank 0-dim ones, which outrank scalars.
        probe = [t for t in tensors if t.dim() > 0] or tensors
        witness = torch.empty((1,) if probe and probe[0].dim() > 0 else (), dtype=dtype)
        dtype = torch.result_type(witness, extra)
    return dtype


def _dtypes(row: Pointwise, inputs, extra, kwargs):
    """(result dtype, compute dtype, common dtype of the inputs) for one call of ``row``."""
    kind = row.promotion
    if kind == "same_as_first":
        common = inputs[0].dtype
    elif kind == "clamp":  # scalar bounds take part in the promotion (an int tensor clamped to 0.5 is float)
        if row.name == "clamp":
            lo, hi = _number(_get(extra, kwargs, 0, "min", None)), _number(_get(extra, kwargs, 1, "max", None))
            if lo is None and hi is None:
                raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
        else:
            lo, hi = _number(extra[0] if extra else kwargs.get("min", kwargs.get("max"))), None
        common = _result_type([inputs[0]] + [b for b in (lo, hi) if b is not None])
    elif kind in ("clamp_tensor", "lerp"):
        common = _result_type([x for x in inputs if x is not None])
    else:
        common = _result_type(list(inputs))
    result = common
    if kind == "int_to_float" and not (common.is_floating_point or common.is_complex):
        result = common = torch.get_default_dtype()
    elif kind == "always_bool":
        result = torch.bool
    elif kind == "bool_to_long" and common == torch.bool:
        result = common = torch.int64
    # The kernel casts every operand to the common dtype and computes in double (float16/bfloat16
    # results pass through float32, PyTorch's opmath): so the compute dtype is the common dtype.
    return result, common, common


def _check_dtypes(row: Pointwise, name: str, common: torch.dtype, inputs) -> None:
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.dtype not in SUPPORTED:
            raise unsupported_dtype(name, x.dtype, SUPPORTED)
    if common not in SUPPORTED:
        raise unsupported_dtype(name, common, SUPPORTED)
    allowed = row.dtypes
    if allowed == "float" and not common.is_floating_point:
        raise RuntimeError(f'"{row.name}" not implemented for \'{scalar_type_name(common)}\' (emu supports floating dtypes)')
    if allowed == "float32_64" and common not in (torch.float32, torch.float64):
        raise RuntimeError(f'"{row.name}" not implemented for \'{scalar_type_name(common)}\' (emu supports float32 and float64)')
    if allowed in ("integral", "integral_no_bool") and common.is_floating_point:
        raise RuntimeError(f'"{row.name}_cpu" not implemented for \'{scalar_type_name(common)}\'')
    if allowed in ("no_bool", "integral_no_bool") and common == torch.bool:
        if row.code == "neg":
            raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. If you are trying "
                               "to invert a mask, use the `~` or `logical_not()` operator instead.")
        raise RuntimeError(f'"{row.name}_cpu" not implemented for \'Bool\'')


# -- the generated kernels -----------------------------------------------------------------
def _operand(x, shape):
    """A device operand, or an immediate (a Python number) for a scalar / CPU 0-dim operand."""
    if isinstance(x, torch.Tensor):
        if x.get_device() >= 0:
            return device_ref(x, shape, broadcast_strides(x, shape))
        return x.item()
    if isinstance(x, (bool, int, float)):
        return x
    raise TypeError(f"unsupported operand {type(x).__name__}")


def _launch(row: Pointwise, name: str, inputs, extra, kwargs, out, inplace: bool, promote=None, params=None):
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    device = common_device(name, *tensors, *([out] if out is not None else []))
    result, compute, common = _dtypes(row, promote if promote is not None else inputs, extra, kwargs)
    _check_dtypes(row, name, common, inputs)
    _check_same_dtype(row, name, inputs, out if not inplace else None, result)
    if row.name == "pow" and common == torch.bool and isinstance(inputs[1], torch.Tensor):
        raise RuntimeError('"pow_cpu" not implemented for \'Bool\'')
    if row.name == "pow" and not common.is_floating_point and common != torch.bool:
        exponent = inputs[1]
        if isinstance(exponent, (int, float)) and not isinstance(exponent, bool) and exponent < 0:
            raise RuntimeError("Integers to negative integer powers are not allowed.")
    if row.name == "addcdiv" and not common.is_floating_point:
        raise RuntimeError("Integer division with addcdiv is no longer supported, and in a future release addcdiv "
                           "will perform a true division of tensor1 and tensor2.")
    shape = broadcast_shape(*[tuple(x.shape) if isinstance(x, torch.Tensor) else () for x in inputs])
    if params is None:
        params = row.params(extra, kwargs, compute if compute != torch.bool else result)
        if row.name == "pow" and not isinstance(inputs[1], torch.Tensor):
            params = (1,)  # a Scalar exponent: CPU's pow_tensor_scalar special cases (x*x, sqrt, ...)
    if inplace:
        if tuple(out.shape) != tuple(shape):
            raise RuntimeError(f"output with shape {list(out.shape)} doesn't match the broadcast shape {list(shape)}")
        if out.dtype != result and not torch.can_cast(result, out.dtype):
            raise RuntimeError(f"result type {scalar_type_name(result)} can't be cast to the desired output type "
                               f"{scalar_type_name(out.dtype)}")
        check_overlap(name, out, *tensors)
    elif out is not None:
        if out.dtype not in SUPPORTED:
            raise unsupported_dtype(name, out.dtype, SUPPORTED)
        prepare_out(name, out, shape, result, *tensors)
        check_overlap(name, out, *tensors)
    else:
        out = empty_like_layout(shape, result, device, *tensors)
    if out.numel() == 0:
        return out
    code = row.code
    if row.name == "div":
        code = {"trunc": "div_trunc", "floor": "div_floor"}[kwargs.get("rounding_mode")]
    if row.name in ("gelu", "gelu_backward") and kwargs.get("approximate", "none") == "tanh":
        code = "gelu_tanh" if row.name == "gelu" else "gelu_tanh_backward"
    args = (code, device_ref(out), *(_operand(x, shape) for x in inputs), TO_CODE[compute], TO_CODE[common],
            *params)
    rt().launch(row.device_kernel, args, current_stream(device))
    return out


def _split(row: Pointwise, args):
    if row.inputs is not None:
        inputs = [args[i] for i in row.inputs]
        extra = tuple(a for i, a in enumerate(args) if i not in row.inputs)
    else:
        inputs, extra = list(args[:row.arity]), tuple(args[row.arity:])
    return inputs, extra


def _clamp_bounds(row: Pointwise, args, kwargs):
    """clamp.Tensor(self, min=None, max=None), clamp_min/max.Tensor(self, bound): the bounds given,
    with the missing one as an immediate 0 and the flags parameter saying which are real."""
    x = args[0]
    if row.name == "clamp":
        lo = args[1] if len(args) > 1 else kwargs.get("min")
        hi = args[2] if len(args) > 2 else kwargs.get("max")
    elif row.name == "clamp_min":
        lo, hi = args[1], None
    else:
        lo, hi = None, args[1]
    if lo is None and hi is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    flags = (1 if lo is not None else 0) | (2 if hi is not None else 0)
    given = [x] + [b for b in (lo, hi) if b is not None]
    return [x, 0 if lo is None else lo, 0 if hi is None else hi], given, (flags,)


def _make_kernel(row: Pointwise, overload: str, out_name: str | None):
    base = overload.split(".")[0]
    inplace = (base.endswith("_") and not base.startswith("__")) or base.startswith("__i")
    name = f"aten::{overload}"

    def kernel(*args, **kwargs):
        out = kwargs.pop(out_name, None) if out_name else None
        if inplace:
            out = args[0]
        if row.promotion == "clamp_tensor":
            inputs, given, params = _clamp_bounds(row, args, kwargs)
            return _launch(row, name, inputs, (), {}, out, inplace, promote=given, params=params)
        inputs, extra = _split(row, args)
        if row.name == "div" and kwargs.get("rounding_mode") is None:  # true division
            from torch_plugin.ops import elementwise
            return elementwise.true_divide(inputs[0], inputs[1], out=out)
        if row.name == "lerp" and len(inputs) < 3:  # lerp.Scalar: the weight is a Python number
            inputs, extra = list(inputs) + [extra[0] if extra else kwargs.pop("weight")], ()
        return _launch(row, name, inputs, extra, kwargs, out, inplace)
    kernel.__name__ = f"emu_pointwise_{overload.replace('.', '_')}"
    return kernel


def _out_argument(schema) -> str | None:
    for arg in schema.arguments:
        if arg.kwarg_only and arg.alias_info is not None and arg.alias_info.is_write:
            return arg.name
    return None


def _overload_packet(overload: str):
    base, _, name = overload.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    if packet is None:
        return None
    try:
        return getattr(packet, name or "default")
    except AttributeError:
        return None


def _row_kernels():
    """(aten overload, kernel) for every row's overloads that this torch defines."""
    for row in TABLE:
        for overload in row.overloads:
            op = _overload_packet(overload)
            if op is None:
                continue
            yield overload, _make_kernel(row, overload, _out_argument(op._schema))


GENERATED_OVERLOADS.update(_row_kernels())


def registrations() -> dict:
    """{aten overload: kernel}: the rows' generated kernels and this module's hand-written ones."""
    return {**GENERATED_OVERLOADS.table(), **OVERLOADS.table()}


def table_overloads_missing() -> list[str]:
    """Overloads the table names that this torch does not define (tests keep it short)."""
    return [o for row in TABLE for o in row.overloads if _overload_packet(o) is None]


# -- ops beyond one row: several outputs, composites of device ops ------------------------------
def _row(name: str) -> Pointwise:
    return next(r for r in TABLE if r.name == name)


_LOG_SIGMOID = Pointwise("log_sigmoid_forward", "log_sigmoid", 1, (), "same_as_first", "float")
_FREXP_MANTISSA = Pointwise("frexp", "frexp_mantissa", 1, (), "same_as_first", "float")
_PRELU_GRAD_INPUT = Pointwise("_prelu_kernel_backward", "prelu_grad_input", 3, (), "default", "float")
_PRELU_GRAD_WEIGHT = Pointwise("_prelu_kernel_backward", "prelu_grad_weight", 2, (), "default", "float")


@OVERLOADS.implements("log_sigmoid_forward")
def log_sigmoid_forward(self):
    """(output, buffer): the buffer is empty, as CUDA's (log_sigmoid_backward does not read it)."""
    out = _launch(_LOG_SIGMOID, "aten::log_sigmoid_forward", [self], (), {}, None, False)
    return out, torch.empty((0,), dtype=self.dtype, device=self.device)


@OVERLOADS.implements("log_sigmoid_forward.output")
def log_sigmoid_forward_output(self, *, output, buffer):
    _launch(_LOG_SIGMOID, "aten::log_sigmoid_forward.output", [self], (), {}, output, False)
    return output, buffer


@OVERLOADS.implements("frexp.Tensor_out")
def frexp_out(self, *, mantissa, exponent):
    name = "aten::frexp.Tensor_out"
    if not self.dtype.is_floating_point:
        raise RuntimeError(f"torch.frexp() only supports floating-point dtypes, but got {self.dtype}")
    if mantissa.dtype != self.dtype:
        raise RuntimeError(f"torch.frexp() expects mantissa to have dtype {self.dtype} but got {mantissa.dtype}")
    if exponent.dtype != torch.int32:
        raise RuntimeError(f"torch.frexp() expects exponent to have int dtype but got {exponent.dtype}")
    device = common_device(name, self, mantissa, exponent)
    prepare_out(name, exponent, tuple(self.shape), torch.int32, self)
    check_overlap(name, exponent, self, mantissa)
    _launch(_FREXP_MANTISSA, name, [self], (), {}, mantissa, False)
    if exponent.numel():
        rt().launch("unary_op", ("frexp_exponent", device_ref(exponent), device_ref(self), TO_CODE[self.dtype],
                                 TO_CODE[self.dtype]), current_stream(device))
    return mantissa, exponent


@OVERLOADS.implements("frexp.Tensor")
def frexp(self):
    if not self.dtype.is_floating_point:
        raise RuntimeError(f"torch.frexp() only supports floating-point dtypes, but got {self.dtype}")
    mantissa = torch.empty_like(self)
    exponent = torch.empty(self.shape, dtype=torch.int32, device=self.device)
    return frexp_out(self, mantissa=mantissa, exponent=exponent)


def _glu_halves(self, dim):
    if self.dim() == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    dim = _wrap_dim(dim, self.dim())
    size = self.shape[dim]
    if size % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim} is size {size}")
    return self.narrow(dim, 0, size // 2), self.narrow(dim, size // 2, size // 2), dim


@OVERLOADS.implements("glu")
def glu(self, dim=-1):
    # A composite of device ops: a * sigmoid(b) for the two halves along dim.
    a, b = _glu_halves(self, dim)[:2]
    return torch.mul(a, torch.sigmoid(b))


@OVERLOADS.implements("glu.out")
def glu_out(self, dim=-1, *, out):
    a, b = _glu_halves(self, dim)[:2]
    return torch.mul(a, torch.sigmoid(b), out=out)


@OVERLOADS.implements("glu_backward")
def glu_backward(grad_output, self, dim):
    a, b, dim = _glu_halves(self, dim)
    gate = torch.sigmoid(b)
    grad_a = grad_output * gate
    grad_b = grad_a * a * (1 - gate)
    return torch.cat([grad_a, grad_b], dim)


@OVERLOADS.implements("glu_backward.grad_input")
def glu_backward_grad_input(grad_output, self, dim, *, grad_input):
    result = glu_backward(grad_output, self, dim)
    resize_out(grad_input, result.shape)
    return grad_input.copy_(result)


@OVERLOADS.implements("_prelu_kernel_backward")
def prelu_kernel_backward(grad_output, self, weight):
    """(grad_self, grad_weight), both of the broadcast shape (autograd sums grad_weight to weight's)."""
    name = "aten::_prelu_kernel_backward"
    grad_self = _launch(_PRELU_GRAD_INPUT, name, [grad_output, self, weight], (), {}, None, False)
    grad_weight = _launch(_PRELU_GRAD_WEIGHT, name, [grad_output, self], (), {}, None, False)
    if tuple(grad_weight.shape) != tuple(grad_self.shape):
        grad_weight = grad_weight.expand(grad_self.shape).contiguous()
    return grad_self, grad_weight


def _rrelu_check(lower, upper):
    lower, upper = float(_number(lower)), float(_number(upper))
    if lower > upper:
        raise RuntimeError(f"Lower bound should be less than or equal to the upper bound")
    return lower, upper


@OVERLOADS.implements("rrelu_with_noise.out")
def rrelu_with_noise_out(self, noise, lower=0.125, upper=1.0 / 3, training=False, generator=None, *, out):
    """training: a slope drawn uniformly from [lower, upper] (the device generator) for each negative
    element, recorded in noise (1 elsewhere); otherwise leaky_relu with slope (lower + upper) / 2."""
    lower, upper = _rrelu_check(lower, upper)
    if not self.dtype.is_floating_point:
        raise RuntimeError(f'"rrelu_with_noise" not implemented for \'{scalar_type_name(self.dtype)}\'')
    if not training:
        return torch.nn.functional.leaky_relu(self, (lower + upper) / 2) if out is None else \
            torch.ops.aten.leaky_relu.out(self, (lower + upper) / 2, out=out)
    if tuple(noise.shape) != tuple(self.shape):
        raise RuntimeError(f"rrelu_with_noise: noise of shape {list(noise.shape)} does not match the input's "
                           f"{list(self.shape)}")
    slopes = torch.empty_like(self).uniform_(lower, upper, generator=generator)
    negative = self <= 0
    noise.copy_(torch.where(negative, slopes, torch.ones_like(slopes)))
    result = torch.where(negative, self * slopes, self)
    if out is None:
        return result
    resize_out(out, result.shape)
    return out.copy_(result)


@OVERLOADS.implements("rrelu_with_noise")
def rrelu_with_noise(self, noise, lower=0.125, upper=1.0 / 3, training=False, generator=None):
    return rrelu_with_noise_out(self, noise, lower, upper, training, generator, out=None)


@OVERLOADS.implements("rrelu_with_noise_")
def rrelu_with_noise_(self, noise, lower=0.125, upper=1.0 / 3, training=False, generator=None):
    return rrelu_with_noise_out(self, noise, lower, upper, training, generator, out=self)


def _renorm_factor(self, p, dim, maxnorm):
    p, maxnorm = float(_number(p)), float(_number(maxnorm))
    if self.dim() <= 1:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {self.dim()} dimensions")
    if not p > 0:
        raise RuntimeError(f"renorm: non-positive-norm not supported")
    if not maxnorm >= 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}")
    if not self.dtype.is_floating_point:
        raise RuntimeError(f'"renorm_out" not implemented for \'{scalar_type_name(self.dtype)}\'')
    dim = _wrap_dim(dim, self.dim())
    # A composite of device ops, as CPU's renorm: the norm of each slice along dim, then a scale of
    # maxnorm / (norm + 1e-7) where the norm exceeds maxnorm.
    reduce = [d for d in range(self.dim()) if d != dim]
    acc = torch.float32 if self.dtype in _REDUCED else self.dtype
    norm = torch.linalg.vector_norm(self, p, reduce, keepdim=True, dtype=acc)
    factor = torch.where(norm > maxnorm, maxnorm / (norm + 1e-7), torch.ones_like(norm))
    return factor.to(self.dtype) if self.dtype in _REDUCED else factor


@OVERLOADS.implements("renorm")
def renorm(self, p, dim, maxnorm):
    return torch.mul(self, _renorm_factor(self, p, dim, maxnorm))


@OVERLOADS.implements("renorm.out")
def renorm_out(self, p, dim, maxnorm, *, out):
    return torch.mul(self, _renorm_factor(self, p, dim, maxnorm), out=out)


@OVERLOADS.implements("renorm_")
def renorm_(self, p, dim, maxnorm):
    return self.mul_(_renorm_factor(self, p, dim, maxnorm))
