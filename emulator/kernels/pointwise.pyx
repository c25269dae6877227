# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The vector engine's table-driven pointwise kernels: unary, binary and ternary op codes.

One entry point per arity (``unary_op``, ``binary_op``, ``ternary_op``) takes an op
name, the operands (host address, dtype code, element strides), the shape, the
compute dtype (the operands' common dtype) and up to four scalar parameters. Every
operand is loaded and cast to the compute dtype (an int16 operand of a bfloat16 op is
rounded to bfloat16 first, as TensorIterator casts it), computed, and cast to the
output dtype on store, so comparisons write bool and float ops on integers write the
promoted dtype. float16/bfloat16 results are rounded to float32 first, then to their
dtype, as PyTorch's float32 "opmath" does.

Floating compute runs in double and rounds to the compute dtype before the store:
transcendental results are then within about one ulp of PyTorch's (SLEEF) ones, and
exact ops (comparisons, rounding, min/max, abs, neg) are bit-exact. Integer compute
runs in int64 with the wrapping of the compute dtype; bool compute is 0/1.

Integer division and modulo by zero raise KernelArgumentError ("ZeroDivisionError",
as CPU raises), which the firmware reports as a kernel fault.

The special functions (digamma, polygamma, erfinv, the Bessel family, incomplete gamma,
zeta, the orthogonal polynomials, ...) are in _special_math.pxi.

Left out: complex numbers.
"""

from libc.math cimport (exp, exp2, expm1, log, log2, log10, log1p, sqrt, sin, cos, tan, asin, acos, atan,
                        sinh, cosh, tanh, asinh, acosh, atanh, erf, erfc, lgamma, fabs, floor, ceil, trunc,
                        nearbyint, pow, atan2, hypot, copysign, fmod, fmax, fmin, isnan, isinf, signbit,
                        nextafter, nextafterf, NAN, INFINITY, M_PI, M_LN2)

include "_common.pxi"
include "_isa.pxi"
include "_vecmath.pxi"
include "_special_math.pxi"
include "_pool.pxi"

from libc.stdlib cimport malloc, free

cdef enum:
    # unary, floating (integers promote to float before they reach the kernel)
    U_EXP, U_EXP2, U_EXPM1, U_LOG, U_LOG2, U_LOG10, U_LOG1P, U_SQRT, U_RSQRT, U_SIN, U_COS, U_TAN,
    U_ASIN, U_ACOS, U_ATAN, U_SINH, U_COSH, U_TANH, U_ASINH, U_ACOSH, U_ATANH, U_SIGMOID, U_ERF,
    U_ERFC, U_LGAMMA, U_RECIPROCAL, U_SILU, U_GELU, U_GELU_TANH, U_MISH, U_SOFTPLUS, U_ELU,
    U_HARDSWISH, U_HARDSIGMOID, U_SINC, U_FRAC, U_LOGIT, U_DEG2RAD, U_RAD2DEG,
    U_DIGAMMA, U_POLYGAMMA, U_ERFINV, U_I0, U_I0E, U_I1, U_I1E, U_NDTRI, U_LOG_NDTR, U_ERFCX, U_ENTR,
    U_AIRY_AI, U_BESSEL_J0, U_BESSEL_J1, U_BESSEL_Y0, U_BESSEL_Y1, U_MODIFIED_BESSEL_K0,
    U_MODIFIED_BESSEL_K1, U_SCALED_MODIFIED_BESSEL_K0, U_SCALED_MODIFIED_BESSEL_K1, U_SPHERICAL_BESSEL_J0,
    U_HARDSHRINK, U_SOFTSHRINK, U_LOG_SIGMOID, U_ANGLE, U_FREXP_MANTISSA, U_FREXP_EXPONENT,
    # unary, any real dtype
    U_NEG, U_ABS, U_RELU, U_SIGN, U_FLOOR, U_CEIL, U_ROUND, U_TRUNC, U_LEAKY_RELU, U_CLAMP,
    U_THRESHOLD, U_NAN_TO_NUM, U_IDENTITY, U_SQUARE,
    # unary, bool result
    U_ISNAN, U_ISINF, U_ISFINITE, U_ISPOSINF, U_ISNEGINF, U_SIGNBIT, U_LOGICAL_NOT,
    # unary, integral
    U_BITWISE_NOT

cdef enum:
    B_POW, B_ATAN2, B_HYPOT, B_COPYSIGN, B_FMOD, B_REMAINDER, B_DIV_TRUNC, B_DIV_FLOOR, B_FMAX, B_FMIN,
    B_MAXIMUM, B_MINIMUM, B_EQ, B_NE, B_LT, B_LE, B_GT, B_GE, B_LOGICAL_AND, B_LOGICAL_OR,
    B_LOGICAL_XOR, B_BITWISE_AND, B_BITWISE_OR, B_BITWISE_XOR, B_LSHIFT, B_RSHIFT, B_XLOGY, B_XLOG1PY,
    B_LOGADDEXP, B_LOGADDEXP2, B_NEXTAFTER, B_HEAVISIDE,
    B_IGAMMA, B_IGAMMAC, B_ZETA, B_CHEB_T, B_CHEB_U, B_CHEB_V, B_CHEB_W, B_SCHEB_T, B_SCHEB_U, B_SCHEB_V,
    B_SCHEB_W, B_HERMITE_H, B_HERMITE_HE, B_LAGUERRE_L, B_LEGENDRE_P, B_PRELU,
    # backward ops: (grad, x-or-result)
    B_SIGMOID_BWD, B_TANH_BWD, B_SILU_BWD, B_GELU_BWD, B_GELU_TANH_BWD, B_LEAKY_RELU_BWD, B_ELU_BWD,
    B_HARDSWISH_BWD, B_HARDSIGMOID_BWD, B_SOFTPLUS_BWD, B_HARDTANH_BWD, B_MISH_BWD, B_LOGIT_BWD,
    B_HARDSHRINK_BWD, B_SOFTSHRINK_BWD, B_LOG_SIGMOID_BWD, B_PRELU_GRAD_WEIGHT

cdef enum:
    T_LERP, T_ADDCMUL, T_ADDCDIV, T_CLAMP, T_PRELU_GRAD_INPUT

UNARY_OPS = {n: i for i, n in enumerate((
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
    "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sigmoid", "erf",
    "erfc", "lgamma", "reciprocal", "silu", "gelu", "gelu_tanh", "mish", "softplus", "elu",
    "hardswish", "hardsigmoid", "sinc", "frac", "logit", "deg2rad", "rad2deg",
    "digamma", "polygamma", "erfinv", "i0", "i0e", "i1", "i1e", "ndtri", "log_ndtr", "erfcx", "entr",
    "airy_ai", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_k0",
    "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "spherical_bessel_j0",
    "hardshrink", "softshrink", "log_sigmoid", "angle", "frexp_mantissa", "frexp_exponent",
    "neg", "abs", "relu", "sign", "floor", "ceil", "round", "trunc", "leaky_relu", "clamp",
    "threshold", "nan_to_num", "identity", "square",
    "isnan", "isinf", "isfinite", "isposinf", "isneginf", "signbit", "logical_not",
    "bitwise_not"))}
BINARY_OPS = {n: i for i, n in enumerate((
    "pow", "atan2", "hypot", "copysign", "fmod", "remainder", "div_trunc", "div_floor", "fmax", "fmin",
    "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
    "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "lshift", "rshift", "xlogy", "xlog1py",
    "logaddexp", "logaddexp2", "nextafter", "heaviside",
    "igamma", "igammac", "zeta", "chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
    "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "hermite_polynomial_h",
    "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p", "prelu",
    "sigmoid_backward", "tanh_backward", "silu_backward", "gelu_backward", "gelu_tanh_backward",
    "leaky_relu_backward", "elu_backward", "hardswish_backward", "hardsigmoid_backward",
    "softplus_backward", "hardtanh_backward", "mish_backward", "logit_backward",
    "hardshrink_backward", "softshrink_backward", "log_sigmoid_backward", "prelu_grad_weight"))}
TERNARY_OPS = {n: i for i, n in enumerate(("lerp", "addcmul", "addcdiv", "clamp", "prelu_grad_input"))}

# Ops that need a floating compute dtype (the caller promotes integers first).
_FLOAT_ONLY_UNARY = frozenset(range(U_EXP, U_FREXP_EXPONENT + 1))
_INTEGRAL_UNARY = frozenset({U_BITWISE_NOT})
_FLOAT_ONLY_BINARY = frozenset({B_ATAN2, B_HYPOT, B_COPYSIGN, B_XLOGY, B_XLOG1PY, B_LOGADDEXP,
                                B_LOGADDEXP2, B_NEXTAFTER, B_SIGMOID_BWD, B_TANH_BWD, B_SILU_BWD,
                                B_GELU_BWD, B_GELU_TANH_BWD, B_ELU_BWD, B_HARDSWISH_BWD, B_HARDSIGMOID_BWD,
                                B_SOFTPLUS_BWD, B_MISH_BWD, B_LOGIT_BWD, B_LEAKY_RELU_BWD,
                                *range(B_IGAMMA, B_PRELU + 1), B_HARDSHRINK_BWD, B_SOFTSHRINK_BWD,
                                B_LOG_SIGMOID_BWD, B_PRELU_GRAD_WEIGHT})
_INTEGRAL_BINARY = frozenset({B_BITWISE_AND, B_BITWISE_OR, B_BITWISE_XOR, B_LSHIFT, B_RSHIFT})
_FLOAT_ONLY_TERNARY = frozenset({T_LERP, T_ADDCDIV, T_PRELU_GRAD_INPUT})

cdef struct Params:
    double d[4]
    int64_t i[4]
    int cdt          # the compute dtype (special functions evaluate in float below float64, as CPU)

cdef double SQRT1_2 = 0.70710678118654752440
cdef double SQRT_2_OVER_PI = 0.79788456080286535588


# ----------------------------------------------------------------- floating scalar ops
cdef inline double _softplus(double x, double beta, double threshold) noexcept nogil:
    return x if x * beta > threshold else log1p(exp(x * beta)) / beta


cdef inline double _f_unary(int op, double x, Params* p) noexcept nogil:
    cdef double t, lo, hi
    if op == U_EXP: return exp(x)
    if op == U_EXP2: return exp2(x)
    if op == U_EXPM1: return expm1(x)
    if op == U_LOG: return log(x)
    if op == U_LOG2: return log2(x)
    if op == U_LOG10: return log10(x)
    if op == U_LOG1P: return log1p(x)
    if op == U_SQRT: return sqrt(x)
    if op == U_RSQRT: return 1.0 / sqrt(x)
    if op == U_SIN: return sin(x)
    if op == U_COS: return cos(x)
    if op == U_TAN: return tan(x)
    if op == U_ASIN: return asin(x)
    if op == U_ACOS: return acos(x)
    if op == U_ATAN: return atan(x)
    if op == U_SINH: return sinh(x)
    if op == U_COSH: return cosh(x)
    if op == U_TANH: return tanh(x)
    if op == U_ASINH: return asinh(x)
    if op == U_ACOSH: return acosh(x)
    if op == U_ATANH: return atanh(x)
    if op == U_SIGMOID: return 1.0 / (1.0 + exp(-x))
    if op == U_ERF: return erf(x)
    if op == U_ERFC: return erfc(x)
    if op == U_LGAMMA: return lgamma(x)
    if op == U_RECIPROCAL: return 1.0 / x
    if op == U_SILU: return x / (1.0 + exp(-x))
    if op == U_GELU: return 0.5 * x * (1.0 + erf(x * SQRT1_2))
    if op == U_GELU_TANH: return 0.5 * x * (1.0 + tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
    if op == U_MISH: return x * tanh(log1p(exp(x)))
    if op == U_SOFTPLUS: return _softplus(x, p.d[0], p.d[1])
    if op == U_ELU:      # alpha, scale, input_scale: x <= 0 ? (exp(x*input_scale) - 1)*alpha*scale : x*scale
        return (exp(x * p.d[2]) - 1.0) * p.d[0] * p.d[1] if x <= 0 else x * p.d[1]
    if op == U_HARDSWISH: return x * fmin(fmax(x + 3.0, 0.0), 6.0) / 6.0
    if op == U_HARDSIGMOID: return fmin(fmax(x + 3.0, 0.0), 6.0) / 6.0
    if op == U_SINC:
        if x == 0: return 1.0
        t = M_PI * x
        return sin(t) / t
    if op == U_FRAC: return x - trunc(x)
    if op == U_LOGIT:    # params (eps, given): d[0] = eps, i[1] = 1 when given
        if p.i[1]:
            lo = p.d[0]
            hi = 1.0 - lo
            x = lo if x < lo else (hi if x > hi else x)
        return log(x / (1.0 - x))
    if op == U_DEG2RAD: return x * (M_PI / 180.0)
    if op == U_RAD2DEG: return x * (180.0 / M_PI)
    if op == U_NEG: return -x
    if op == U_ABS: return fabs(x)
    if op == U_RELU: return 0.0 if x < 0 else x           # NaN and -0.0 pass through
    if op == U_SIGN:
        if isnan(x): return 0.0
        return <double>((0 < x) - (x < 0))
    if op == U_FLOOR: return floor(x)
    if op == U_CEIL: return ceil(x)
    if op == U_ROUND:    # params (10**|decimals|, flags): flags & 1 = decimals given, & 2 = negative
        if not (p.i[1] & 1):
            return nearbyint(x)
        if p.i[1] & 2:
            return nearbyint(x / p.d[0]) * p.d[0]
        return nearbyint(x * p.d[0]) / p.d[0]
    if op == U_TRUNC: return trunc(x)
    if op == U_LEAKY_RELU: return x if x > 0 else x * p.d[0]
    if op == U_CLAMP:    # params (min, max, flags): flags & 1 = has min, & 2 = has max; NaN propagates
        if isnan(x): return x
        if p.i[2] & 1:
            if isnan(p.d[0]): return p.d[0]
            if x < p.d[0]: x = p.d[0]
        if p.i[2] & 2:
            if isnan(p.d[1]): return p.d[1]
            if x > p.d[1]: x = p.d[1]
        return x
    if op == U_THRESHOLD: return p.d[1] if x <= p.d[0] else x
    if op == U_NAN_TO_NUM:
        if isnan(x): return p.d[0]
        if isinf(x): return p.d[1] if x > 0 else p.d[2]
        return x
    if op == U_IDENTITY: return x
    if op == U_SQUARE: return x * x
    if op == U_ISNAN: return isnan(x) != 0
    if op == U_ISINF: return isinf(x) != 0
    if op == U_ISFINITE: return not (isnan(x) or isinf(x))
    if op == U_ISPOSINF: return x == INFINITY
    if op == U_ISNEGINF: return x == -INFINITY
    if op == U_SIGNBIT: return signbit(x) != 0
    if op == U_LOGICAL_NOT: return x == 0
    return _f_special_unary(op, x, p, p.cdt != DT_FLOAT64)


cdef double _f_special_unary(int op, double x, Params* p, bint single) noexcept nogil:
    """The special functions and the remaining activations (_special_math.pxi)."""
    cdef double t
    cdef int e
    if op == U_DIGAMMA: return _polygamma(0, x, single)
    if op == U_POLYGAMMA: return _polygamma(p.i[0], x, single)
    if op == U_ERFINV: return _erfinv(x)
    if op == U_I0: return _i0(x)
    if op == U_I0E: return _i0e(x)
    if op == U_I1: return _i1(x)
    if op == U_I1E: return _i1e(x)
    if op == U_NDTRI: return _ndtri(x)
    if op == U_LOG_NDTR: return _log_ndtr(x)
    if op == U_ERFCX: return _erfcx(x, single)
    if op == U_ENTR: return _entr(x)
    if op == U_AIRY_AI: return _airy_ai(x)
    if op == U_BESSEL_J0: return _bessel_j0(x)
    if op == U_BESSEL_J1: return _bessel_j1(x)
    if op == U_BESSEL_Y0: return _bessel_y0(x)
    if op == U_BESSEL_Y1: return _bessel_y1(x)
    if op == U_MODIFIED_BESSEL_K0: return _k0(x)
    if op == U_MODIFIED_BESSEL_K1: return _k1(x)
    if op == U_SCALED_MODIFIED_BESSEL_K0: return _k0e(x)
    if op == U_SCALED_MODIFIED_BESSEL_K1: return _k1e(x)
    if op == U_SPHERICAL_BESSEL_J0: return _spherical_j0(x)
    if op == U_HARDSHRINK:      # lambd = d[0]; NaN passes through
        return 0.0 if (x >= -p.d[0] and x <= p.d[0]) else x
    if op == U_SOFTSHRINK:
        if isnan(x): return x
        if x > p.d[0]: return x - p.d[0]
        if x < -p.d[0]: return x + p.d[0]
        return x * 0.0
    if op == U_LOG_SIGMOID:     # min(x, 0) - log1p(exp(-|x|))
        return (x if x < 0 else 0.0) - log1p(exp(-fabs(x)))
    if op == U_ANGLE:           # real inputs: pi for negative numbers, NaN propagates
        if isnan(x): return x
        return M_PI if x < 0 else 0.0
    if op == U_FREXP_MANTISSA:
        return _frexp(x, &e)
    if op == U_FREXP_EXPONENT:
        if isnan(x) or isinf(x): return 0.0
        _frexp(x, &e)
        return <double>e
    return NAN


cdef inline double _div_floor(double a, double b) noexcept nogil:
    # PyTorch's div_floor_floating (c10/util/generic_math.h): Python's floor division.
    cdef double mod, div, floordiv
    if b == 0:
        return a / b
    mod = fmod(a, b)
    div = (a - mod) / b
    if mod != 0 and (b < 0) != (mod < 0):
        div -= 1.0
    if div != 0:
        floordiv = floor(div)
        if div - floordiv > 0.5:
            floordiv += 1.0
        return floordiv
    return copysign(0.0, a / b)


cdef inline double _f_binary(int op, double a, double b, Params* p, int cdt) noexcept nogil:
    cdef double m, t, s
    if op == B_POW: return pow(a, b)
    if op == B_ATAN2: return atan2(a, b)
    if op == B_HYPOT: return hypot(a, b)
    if op == B_COPYSIGN: return copysign(a, b)
    if op == B_FMOD: return fmod(a, b)
    if op == B_REMAINDER:
        m = fmod(a, b)
        if m != 0 and (b < 0) != (m < 0):
            m += b
        return m
    if op == B_DIV_TRUNC: return trunc(a / b)
    if op == B_DIV_FLOOR: return _div_floor(a, b)
    if op == B_FMAX: return fmax(a, b)
    if op == B_FMIN: return fmin(a, b)
    if op == B_MAXIMUM:
        if isnan(a) or isnan(b): return NAN
        return a if a > b else b
    if op == B_MINIMUM:
        if isnan(a) or isnan(b): return NAN
        return a if a < b else b
    if op == B_EQ: return a == b
    if op == B_NE: return a != b
    if op == B_LT: return a < b
    if op == B_LE: return a <= b
    if op == B_GT: return a > b
    if op == B_GE: return a >= b
    if op == B_LOGICAL_AND: return (a != 0) and (b != 0)
    if op == B_LOGICAL_OR: return (a != 0) or (b != 0)
    if op == B_LOGICAL_XOR: return (a != 0) != (b != 0)
    if op == B_XLOGY:
        if isnan(b): return NAN
        if a == 0: return 0.0
        return a * log(b)
    if op == B_XLOG1PY:
        if isnan(b): return NAN
        if a == 0: return 0.0
        return a * log1p(b)
    if op == B_LOGADDEXP:
        if isinf(a) and a == b: return a
        m = a if a > b else b
        return m + log1p(exp(-fabs(a - b)))
    if op == B_LOGADDEXP2:
        if isinf(a) and a == b: return a
        m = a if a > b else b
        return m + log1p(exp2(-fabs(a - b))) / M_LN2
    if op == B_NEXTAFTER:
        if cdt == DT_FLOAT32:
            return nextafterf(<float>a, <float>b)
        if cdt == DT_FLOAT16 or cdt == DT_BFLOAT16:
            return _nextafter_16(a, b, cdt == DT_FLOAT16)
        return nextafter(a, b)
    if op == B_IGAMMA: return _igamma(a, b)
    if op == B_IGAMMAC: return _igammac(a, b)
    if op == B_ZETA: return _zeta(a, b)
    if B_CHEB_T <= op <= B_LEGENDRE_P:
        return _polynomial(op - B_CHEB_T, a, b, cdt != DT_FLOAT64)
    if op == B_PRELU: return a if a > 0 else b * a
    if op == B_HEAVISIDE: return b if a == 0 else <double>(a > 0)
    # backward ops: a = grad, b = the forward input (or result, as named)
    if op == B_SIGMOID_BWD: return a * (1.0 - b) * b            # b = result
    if op == B_TANH_BWD: return a * (1.0 - b * b)               # b = result
    if op == B_SILU_BWD:
        s = 1.0 / (1.0 + exp(-b))
        return a * s * (1.0 + b * (1.0 - s))
    if op == B_GELU_BWD:
        return a * (0.5 * (1.0 + erf(b * SQRT1_2)) + b * exp(-0.5 * b * b) * (SQRT1_2 / sqrt(M_PI)))
    if op == B_GELU_TANH_BWD:
        t = tanh(SQRT_2_OVER_PI * (b + 0.044715 * b * b * b))
        return a * (0.5 * (1.0 + t) + 0.5 * b * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * b * b))
    if op == B_LEAKY_RELU_BWD: return a if b > 0 else a * p.d[0]
    if op == B_ELU_BWD:      # params (alpha, scale, input_scale, is_result): i[3] = b is the result
        if p.i[3]:
            return a * p.d[2] * (b + p.d[0] * p.d[1]) if b <= 0 else a * p.d[1]
        return a * p.d[2] * p.d[0] * p.d[1] * exp(b * p.d[2]) if b <= 0 else a * p.d[1]
    if op == B_HARDSWISH_BWD:
        if b < -3.0: return 0.0
        if b <= 3.0: return a * (b / 3.0 + 0.5)
        return a
    if op == B_HARDSIGMOID_BWD: return a / 6.0 if -3.0 < b < 3.0 else 0.0
    if op == B_SOFTPLUS_BWD:  # d: beta, threshold
        if b * p.d[0] > p.d[1]: return a
        t = exp(b * p.d[0])
        return a * t / (t + 1.0)
    if op == B_HARDTANH_BWD: return 0.0 if (b <= p.d[0] or b >= p.d[1]) else a
    if op == B_MISH_BWD:
        s = 1.0 / (1.0 + exp(-b))
        t = tanh(log1p(exp(b)))
        return a * (t + b * s * (1.0 - t * t))
    if op == B_HARDSHRINK_BWD:          # (grad, x; lambd)
        return 0.0 if (b >= -p.d[0] and b <= p.d[0]) else a
    if op == B_SOFTSHRINK_BWD:
        return 0.0 if (b >= -p.d[0] and b <= p.d[0]) else a
    if op == B_LOG_SIGMOID_BWD:         # (grad, x): grad * sigmoid(-x), from z = exp(-|x|)
        t = exp(-fabs(b))
        return a * (1.0 - t / (1.0 + t)) if b < 0 else a * (t / (1.0 + t))
    if op == B_PRELU_GRAD_WEIGHT:       # (grad, x)
        return 0.0 if b > 0 else b * a
    if op == B_LOGIT_BWD:     # params (eps, given): d[0] = eps, i[1] = 1 when given
        if p.i[1] and (b < p.d[0] or b > 1.0 - p.d[0]): return 0.0
        return a / (b * (1.0 - b))
    return NAN


cdef inline double _f_ternary(int op, double a, double b, double c, Params* p) noexcept nogil:
    if op == T_LERP:          # a + c * (b - a), PyTorch's two-sided form
        return a + c * (b - a) if fabs(c) < 0.5 else b - (b - a) * (1.0 - c)
    if op == T_ADDCMUL: return a + p.d[0] * b * c
    if op == T_ADDCDIV: return a + p.d[0] * (b / c)
    if op == T_CLAMP:         # params (flags,): flags & 1 = has min (b), & 2 = has max (c)
        if isnan(a): return a
        if p.i[0] & 1:
            if isnan(b): return b
            if a < b: a = b
        if p.i[0] & 2:
            if isnan(c): return c
            if a > c: a = c
        return a
    if op == T_PRELU_GRAD_INPUT:   # (grad, x, weight)
        return a if b > 0 else c * a
    return NAN


cdef double _nextafter_16(double a, double b, bint half) noexcept nogil:
    """nextafter in float16 (half) or bfloat16 steps: a and b hold values of that dtype."""
    cdef uint16_t bits
    if isnan(a) or isnan(b):
        return NAN
    if a == b:
        return b
    if a == 0:                     # the smallest subnormal, towards b
        return copysign(<double>(ek_f16_to_f32(1) if half else ek_bf16_to_f32(1)), b)
    bits = ek_f16_from_f32(<float>a) if half else ek_bf16_from_f32(<float>a)
    if (a < b) == (a > 0):         # away from zero: the magnitude grows
        bits += 1
    else:
        bits -= 1
    return <double>(ek_f16_to_f32(bits) if half else ek_bf16_to_f32(bits))


# ----------------------------------------------------------------- integral scalar ops
cdef inline int _bits(int cdt) noexcept nogil:
    if cdt == DT_INT64: return 64
    if cdt == DT_INT32: return 32
    if cdt == DT_INT16: return 16
    if cdt == DT_BOOL: return 1
    return 8


cdef inline int64_t _ipow(int64_t a, int64_t b) noexcept nogil:
    # PyTorch's powi: wrapping; negative exponents give 0 except for bases 1 and -1.
    cdef uint64_t result = 1, base = <uint64_t>a
    if b < 0:
        if a == 1: return 1
        if a == -1: return -1 if (b & 1) else 1
        return 0
    while b:
        if b & 1:
            result *= base
        b >>= 1
        base *= base
    return <int64_t>result


cdef inline int64_t _i_unary(int op, int64_t x, Params* p, int cdt) noexcept nogil:
    if op == U_NEG: return <int64_t>(0 - <uint64_t>x)
    if op == U_ABS: return <int64_t>(0 - <uint64_t>x) if x < 0 else x
    if op == U_RELU: return 0 if x < 0 else x
    if op == U_SIGN: return (0 < x) - (x < 0)
    if op == U_FLOOR or op == U_CEIL or op == U_ROUND or op == U_TRUNC or op == U_IDENTITY: return x
    if op == U_SQUARE: return <int64_t>(<uint64_t>x * <uint64_t>x)
    if op == U_CLAMP:
        if p.i[2] & 1 and x < p.i[0]: x = p.i[0]
        if p.i[2] & 2 and x > p.i[1]: x = p.i[1]
        return x
    if op == U_THRESHOLD: return p.i[1] if x <= p.i[0] else x
    if op == U_NAN_TO_NUM: return x
    if op == U_ISNAN or op == U_ISINF or op == U_ISPOSINF or op == U_ISNEGINF: return 0
    if op == U_ISFINITE: return 1
    if op == U_SIGNBIT: return x < 0
    if op == U_LOGICAL_NOT: return x == 0
    if op == U_BITWISE_NOT: return (x == 0) if cdt == DT_BOOL else ~x
    return 0


cdef inline int _i_binary(int op, int64_t a, int64_t b, int cdt, int64_t* r) noexcept nogil:
    """r = a (op) b; returns 1 for a division by zero."""
    cdef int64_t q, m
    cdef int bits
    if op == B_POW: r[0] = _ipow(a, b)
    elif op == B_FMOD:
        if b == 0: return 1
        r[0] = 0 if b == -1 else a % b       # C's remainder; -1 would trap on INT64_MIN
    elif op == B_REMAINDER:
        if b == 0: return 1
        m = 0 if b == -1 else a % b
        if m != 0 and (b < 0) != (m < 0):
            m += b
        r[0] = m
    elif op == B_DIV_TRUNC or op == B_DIV_FLOOR:
        if b == 0: return 1
        if b == -1:
            q = <int64_t>(0 - <uint64_t>a)
        else:
            q = a // b                 # C division (cdivision): truncates
            if op == B_DIV_FLOOR and (a % b != 0) and ((a < 0) != (b < 0)):
                q -= 1
        r[0] = q
    elif op == B_MAXIMUM or op == B_FMAX: r[0] = a if a > b else b
    elif op == B_MINIMUM or op == B_FMIN: r[0] = a if a < b else b
    elif op == B_EQ: r[0] = a == b
    elif op == B_NE: r[0] = a != b
    elif op == B_LT: r[0] = a < b
    elif op == B_LE: r[0] = a <= b
    elif op == B_GT: r[0] = a > b
    elif op == B_GE: r[0] = a >= b
    elif op == B_LOGICAL_AND: r[0] = (a != 0) and (b != 0)
    elif op == B_LOGICAL_OR: r[0] = (a != 0) or (b != 0)
    elif op == B_LOGICAL_XOR: r[0] = (a != 0) != (b != 0)
    elif op == B_BITWISE_AND: r[0] = a & b
    elif op == B_BITWISE_OR: r[0] = a | b
    elif op == B_BITWISE_XOR: r[0] = a ^ b
    elif op == B_LSHIFT:       # PyTorch: shifting by >= the width or by a negative amount gives 0
        bits = _bits(cdt)
        r[0] = <int64_t>(<uint64_t>a << b) if 0 <= b < bits else 0
    elif op == B_RSHIFT:       # ... and fills with the sign bit
        bits = _bits(cdt)
        if cdt == DT_UINT8:
            r[0] = a >> b if 0 <= b < bits else 0
        else:
            r[0] = a >> b if 0 <= b < bits else a >> (bits - 1 if bits < 64 else 63)
    elif op == B_HEAVISIDE:
        r[0] = b if a == 0 else (a > 0)
    else:
        r[0] = 0
    return 0


cdef inline int64_t _i_ternary(int op, int64_t a, int64_t b, int64_t c, Params* p) noexcept nogil:
    if op == T_ADDCMUL: return <int64_t>(<uint64_t>a + <uint64_t>p.i[0] * <uint64_t>b * <uint64_t>c)
    if op == T_CLAMP:
        if p.i[0] & 1 and a < b: a = b
        if p.i[0] & 2 and a > c: a = c
        return a
    return 0


# ----------------------------------------------------------------- vector-math fast path
# Speed only; the results are bit-identical to the scalar path. For the hot transcendental
# ops (exp, tanh, sigmoid, silu, gelu, gelu_tanh) whose double result is rounded to float32
# (float32, and float16/bfloat16 through their float32 opmath), a block is computed with
# glibc's vector libm (libmvec, found at run time with dlopen: no build dependency; its
# functions are within 4 ulp in double). A value is kept only when it is so far from a
# float32 rounding boundary that the scalar result (within a few ulp of the same value)
# rounds to the same float32; a value near a boundary, a non-finite or float32-subnormal
# result, and gelu's cancelling tail (1 + erf < 2**-8) are recomputed by the scalar path.
# Without libmvec (or AVX2, or with EMU_CPU_ISA=baseline) the scalar path runs alone.

cdef extern from *:
    """
    #include <dlfcn.h>
    #include <immintrin.h>
    enum { EK_VEXP = 0, EK_VTANH = 1, EK_VERF = 2, EK_VFUNCS = 3 };
    typedef __m512d (*ek_v8_fn)(__m512d);
    typedef __m256d (*ek_v4_fn)(__m256d);
    static void *ek_vfn[EK_VFUNCS];
    static int ek_vwidth = -1;          /* -1: not probed yet, 0: unavailable, 4 or 8 doubles */

    static int ek_vec_probe(void) {
        static const char *n8[EK_VFUNCS] = {"_ZGVeN8v_exp", "_ZGVeN8v_tanh", "_ZGVeN8v_erf"};
        static const char *n4[EK_VFUNCS] = {"_ZGVdN4v_exp", "_ZGVdN4v_tanh", "_ZGVdN4v_erf"};
        const char **names = NULL;
        int width = 0, k;
        void *lib;
        /* The module's instruction-set cap (_isa.pxi, EMU_CPU_ISA) picks the width. */
        if (ek_isa_cap >= EK_ISA_AVX512) { names = n8; width = 8; }
        else if (ek_isa_cap >= EK_ISA_AVX2) { names = n4; width = 4; }
        lib = names ? dlopen("libmvec.so.1", RTLD_NOW | RTLD_LOCAL) : NULL;
        for (k = 0; lib && k < EK_VFUNCS; k++) {
            ek_vfn[k] = dlsym(lib, names[k]);
            if (!ek_vfn[k]) width = 0;
        }
        return lib ? width : 0;
    }

    __attribute__((target("avx512f")))
    static void ek_vec_apply8(ek_v8_fn f, const double *in, double *out, Py_ssize_t n) {
        for (Py_ssize_t i = 0; i < n; i += 8) _mm512_storeu_pd(out + i, f(_mm512_loadu_pd(in + i)));
    }

    __attribute__((target("avx2")))
    static void ek_vec_apply4(ek_v4_fn f, const double *in, double *out, Py_ssize_t n) {
        for (Py_ssize_t i = 0; i < n; i += 4) _mm256_storeu_pd(out + i, f(_mm256_loadu_pd(in + i)));
    }

    /* out[:n] = fn(in[:n]), n a multiple of 8; 0 if libmvec is unavailable (nothing written).
       The first call probes (the GIL is held then: every launch holds it before its loops). */
    static int ek_vec_apply(int fn, const double *in, double *out, Py_ssize_t n) {
        if (ek_vwidth < 0) ek_vwidth = ek_vec_probe();
        if (ek_vwidth == 8) ek_vec_apply8((ek_v8_fn)ek_vfn[fn], in, out, n);
        else if (ek_vwidth == 4) ek_vec_apply4((ek_v4_fn)ek_vfn[fn], in, out, n);
        else return 0;
        return 1;
    }
    static int ek_vec_available(void) {
        if (ek_vwidth < 0) ek_vwidth = ek_vec_probe();
        return ek_vwidth > 0;
    }
    """
    int EK_VEXP, EK_VTANH, EK_VERF
    int ek_vec_apply(int fn, const double* inp, double* out, Py_ssize_t n) noexcept nogil
    int ek_vec_available() noexcept nogil

# Distance (in double ulps, of 2**29 per float32 ulp) a vector result must keep from a float32
# rounding midpoint: 2**16 covers the 4 + 4 ulp of the two libm results amplified 2**8 times.
cdef int64_t _VEC_MARGIN = 1 << 16
cdef double _VEC_GELU_TAIL = 1.0 / 256


cdef bint _vector_unary(int op, double* x, Py_ssize_t m, Params* p) noexcept nogil:
    """x[:m] = _f_unary(op, x[:m]) as it rounds to float32 (m <= BLOCK); False: not handled."""
    cdef double a[BLOCK]
    cdef double v[BLOCK]
    cdef Py_ssize_t i, padded = (m + 7) & ~7
    cdef int fn
    cdef double r, t
    if op == U_GELU:
        fn = EK_VERF
        ek_vec_prep(EK_PREP_SCALE, x, a, m, SQRT1_2)
    elif op == U_GELU_TANH:
        fn = EK_VTANH
        ek_vec_prep(EK_PREP_GELU_TANH, x, a, m, SQRT_2_OVER_PI)
    elif op == U_TANH or op == U_EXP:
        fn = EK_VTANH if op == U_TANH else EK_VEXP
        ek_vec_prep(EK_PREP_SCALE, x, a, m, 1.0)
    elif op == U_SIGMOID or op == U_SILU:
        fn = EK_VEXP
        ek_vec_prep(EK_PREP_SCALE, x, a, m, -1.0)
    else:
        return False
    for i in range(m, padded):
        a[i] = 0.0
    if not ek_vec_apply(fn, a, v, padded):
        return False
    # The same expressions as _f_unary, with the vector result in place of the libm call.
    if op == U_GELU or op == U_GELU_TANH:
        ek_vec_post(EK_POST_GELU, x, v, a, m, _VEC_GELU_TAIL)
    elif op == U_SIGMOID:
        ek_vec_post(EK_POST_SIGMOID, x, v, a, m, 0.0)
    elif op == U_SILU:
        ek_vec_post(EK_POST_SILU, x, v, a, m, 0.0)
    else:
        ek_vec_post(EK_POST_COPY, x, v, a, m, 0.0)
    # Flags first (a branch-free loop the compiler vectorises), then the copy; the rare value
    # near a rounding midpoint is recomputed by the scalar path.
    cdef unsigned char keep[BLOCK]
    cdef Py_ssize_t kept = 0
    kept = ek_rounds_like_f32(a, keep, m, _VEC_MARGIN)
    if kept == m:
        memcpy(x, a, m * sizeof(double))
    else:
        for i in range(m):
            x[i] = a[i] if keep[i] else _f_unary(op, x[i], p)
    return True


_vector_enabled = True   # tests switch it off to compare the fast path with the scalar one


def set_vector_math(bint enabled):
    """Turns the vector-math fast path on or off (results are the same; for tests); returns the old
    setting. It is on by default where libmvec is found."""
    global _vector_enabled
    old = _vector_enabled
    _vector_enabled = enabled
    return old


def vector_math_available():
    return bool(ek_vec_available())


cdef bint _vector_op(int arity, int op, int odt, int cdt) noexcept:
    """The fast path applies: a hot unary op whose result is rounded to float32 first."""
    return (arity == 1 and (op == U_GELU or op == U_GELU_TANH or op == U_TANH or op == U_EXP
                            or op == U_SIGMOID or op == U_SILU)
            and (cdt == DT_FLOAT32 or cdt == DT_FLOAT16 or cdt == DT_BFLOAT16) and odt != DT_BOOL
            and ek_vec_available())


# ----------------------------------------------------------------- drivers
cdef int _load_params(Params* p, object params, bint integral) except -1:
    cdef int k
    for k in range(4):
        p.d[k] = 0.0
        p.i[k] = 0
    if len(params) > 4:
        raise KernelArgumentError(f"pointwise: at most 4 parameters, got {len(params)}")
    for k in range(len(params)):
        value = params[k]
        if isinstance(value, bool) or isinstance(value, int):
            p.i[k] = int(value)
            p.d[k] = float(value)
        elif isinstance(value, float):
            p.d[k] = value
            if integral:
                if value != value or value in (float("inf"), float("-inf")):
                    p.i[k] = 0
                else:
                    p.i[k] = <int64_t>value
        else:
            raise KernelArgumentError(f"pointwise: parameter {value!r} is not a number")
    return 0


cdef bint _pow_scalar(double* x, double* y, Py_ssize_t m, double e, int cdt) noexcept nogil:
    """x[:m] = pow(x[:m], e) for an exponent CPU special-cases, with CPU's arithmetic (its
    pow_tensor_scalar kernel: base * base, base * base * base, 1 / (base * base), 1 / base; its
    exponent 0.5 goes to its vectorised sqrt, which is not correctly rounded, so 0.5 stays on pow):
    in float64 for float64, in float32 for float32 and float16 (opmath), and with the intermediate
    product rounded to bfloat16 for bfloat16 (CPU multiplies bfloat16 values there). y: scratch.
    False for any other exponent or dtype (the libm pow path)."""
    cdef Py_ssize_t i
    cdef float t
    cdef bint single = cdt == DT_FLOAT32 or cdt == DT_FLOAT16
    if not (single or cdt == DT_FLOAT64 or cdt == DT_BFLOAT16):
        return False
    if e == 2.0:
        for i in range(m):
            x[i] = x[i] * x[i]              # exact in double below float64; rounded once at the store
    elif e == 3.0 or e == -2.0:
        if cdt == DT_FLOAT64:
            for i in range(m):
                y[i] = x[i] * x[i]
        elif single:
            for i in range(m):
                t = <float>(x[i] * x[i])
                y[i] = t
        else:
            for i in range(m):
                y[i] = x[i] * x[i]
            round_block_to(y, m, DT_BFLOAT16)
        if e == 3.0:
            for i in range(m):
                x[i] = y[i] * x[i]
        else:
            for i in range(m):
                x[i] = 1.0 / y[i]
    elif e == -1.0:
        for i in range(m):
            x[i] = 1.0 / x[i]
    else:
        return False
    return True


# The hot ops' loops with the op fixed outside them (the generic loops call _f_unary/_f_binary/
# _f_ternary per element, whose op dispatch costs more than the arithmetic). Speed only: the same
# double expressions, evaluated in the same order (the build targets baseline x86-64, so nothing is
# contracted to a fused multiply-add); sqrt is IEEE's correctly rounded square root either way.
cdef extern from *:
    """
    #include <emmintrin.h>
    /* x[:m] = sqrt(x[:m]) (SSE2 sqrtpd: correctly rounded, as libm's sqrt; the negative and NaN
       inputs give the same default or propagated NaN as its sqrtsd) */
    static void ek_sqrt_block(double *x, Py_ssize_t m) {
        Py_ssize_t i = 0;
        for (; i + 2 <= m; i += 2) _mm_storeu_pd(x + i, _mm_sqrt_pd(_mm_loadu_pd(x + i)));
        for (; i < m; i++) x[i] = _mm_cvtsd_f64(_mm_sqrt_sd(_mm_setzero_pd(), _mm_set_sd(x[i])));
    }
    """
    void ek_sqrt_block(double* x, Py_ssize_t m) noexcept nogil


cdef bint _fast_unary(int op, double* x, Py_ssize_t m) noexcept nogil:
    cdef Py_ssize_t i
    if op == U_SQRT:
        ek_sqrt_block(x, m)
    elif op == U_RSQRT:
        ek_sqrt_block(x, m)
        for i in range(m):
            x[i] = 1.0 / x[i]
    elif op == U_RECIPROCAL:
        for i in range(m):
            x[i] = 1.0 / x[i]
    elif op == U_NEG:
        for i in range(m):
            x[i] = -x[i]
    elif op == U_SQUARE:
        for i in range(m):
            x[i] = x[i] * x[i]
    else:
        return False
    return True


cdef bint _fast_binary(int op, double* x, const double* y, Py_ssize_t m) noexcept nogil:
    cdef Py_ssize_t i
    if op == B_TANH_BWD:
        for i in range(m):
            x[i] = x[i] * (1.0 - y[i] * y[i])
    elif op == B_SIGMOID_BWD:
        for i in range(m):
            x[i] = x[i] * (1.0 - y[i]) * y[i]
    else:
        return False
    return True


cdef bint _fast_ternary(int op, double* x, const double* y, const double* z, Py_ssize_t m,
                        Params* p, bint weight_scalar) noexcept nogil:
    cdef Py_ssize_t i
    cdef double v = p.d[0], a, b, c
    if op == T_ADDCMUL:
        for i in range(m):
            x[i] = x[i] + v * y[i] * z[i]
    elif op == T_ADDCDIV:
        for i in range(m):
            x[i] = x[i] + v * (y[i] / z[i])
    elif op == T_LERP and weight_scalar:   # one weight: one branch of the two-sided form
        c = z[0]
        if fabs(c) < 0.5:
            for i in range(m):
                x[i] = x[i] + c * (y[i] - x[i])
        else:
            for i in range(m):
                x[i] = y[i] - (y[i] - x[i]) * (1.0 - c)
    elif op == T_LERP:
        for i in range(m):
            a, b, c = x[i], y[i], z[i]
            x[i] = a + c * (b - a) if fabs(c) < 0.5 else b - (b - a) * (1.0 - c)
    else:
        return False
    return True


_fast_loops = True   # tests switch them off to compare them with the generic loops
include "_split.pxi"


def set_fast_loops(bint enabled):
    """Turns the op-specialised loops (_fast_unary/_fast_binary/_fast_ternary) on or off (results
    are the same; for tests); returns the old setting."""
    global _fast_loops
    old = _fast_loops
    _fast_loops = enabled
    return old


cdef void _run_float(NdIter* it, char** ptrs, int arity, int op, int odt, int* dts, int cdt, Params* p,
                     double* x, double* y, double* z, bint vector, bint fast) noexcept nogil:
    cdef Py_ssize_t n = iter_row_len(it)
    cdef Py_ssize_t j, m, i
    cdef Py_ssize_t so = iter_row_stride(it, 0)
    cdef Py_ssize_t s1 = iter_row_stride(it, 1)
    cdef Py_ssize_t s2 = iter_row_stride(it, 2) if arity > 1 else 0
    cdef Py_ssize_t s3 = iter_row_stride(it, 3) if arity > 2 else 0
    while True:
        j = 0
        while j < n:
            m = n - j if n - j < BLOCK else BLOCK
            load_block(ptrs[1] + j * s1, s1, dts[0], m, x)
            if dts[0] != cdt:
                round_block_to(x, m, cdt)
            if arity == 1:
                if not (vector and _vector_unary(op, x, m, p)) and not (fast and _fast_unary(op, x, m)):
                    for i in range(m):
                        x[i] = _f_unary(op, x[i], p)
            else:
                load_block(ptrs[2] + j * s2, s2, dts[1], m, y)
                if dts[1] != cdt:
                    round_block_to(y, m, cdt)
                if arity == 2:
                    # pow with a Scalar exponent (parameter 1): CPU's special cases.
                    if not (op == B_POW and p.i[0] == 1 and s2 == 0 and _pow_scalar(x, y, m, y[0], cdt)) \
                            and not (fast and _fast_binary(op, x, y, m)):
                        for i in range(m):
                            x[i] = _f_binary(op, x[i], y[i], p, cdt)
                else:
                    load_block(ptrs[3] + j * s3, s3, dts[2], m, z)
                    if dts[2] != cdt:
                        round_block_to(z, m, cdt)
                    if not (fast and _fast_ternary(op, x, y, z, m, p, s3 == 0)):
                        for i in range(m):
                            x[i] = _f_ternary(op, x[i], y[i], z[i], p)
            if odt != cdt and odt != DT_BOOL:
                if cdt == DT_FLOAT16 or cdt == DT_BFLOAT16:
                    round_block_to(x, m, DT_FLOAT32)   # opmath: the float32 result, then ...
                round_block_to(x, m, cdt)          # ... the result has the compute dtype first
            store_block(x, m, odt, ptrs[0] + j * so, so)
            j += m
        if not iter_next_row(it, ptrs):
            break


# Large floating launches of these ops (pure functions of each element: libm, arithmetic) run in
# two halves of the iteration's outer dimension, on this thread and the pool's helper (_pool.pxi):
# each element is computed by the same loops either way.
cdef enum:
    _SPLIT_ELEMENTS = 1 << 17

_SPLIT_UNARY = frozenset({U_SQRT, U_RSQRT, U_RECIPROCAL, U_NEG, U_SQUARE, U_ABS, U_RELU, U_EXP, U_TANH,
                          U_SIGMOID, U_SILU, U_GELU, U_GELU_TANH, U_LOG, U_SIN, U_COS})
_SPLIT_BINARY = frozenset({B_POW, B_TANH_BWD, B_SIGMOID_BWD, B_SILU_BWD, B_GELU_BWD, B_GELU_TANH_BWD,
                           B_MAXIMUM, B_MINIMUM})
_SPLIT_TERNARY = frozenset({T_LERP, T_ADDCMUL, T_ADDCDIV, T_CLAMP})


ctypedef struct _FloatJob:
    NdIter it
    char* ptrs[4]
    int arity, op, odt, cdt
    int dts[3]
    Params p
    bint vector, fast
    double x[BLOCK]
    double y[BLOCK]
    double z[BLOCK]


cdef void _float_job(void* arg) noexcept nogil:
    cdef _FloatJob* j = <_FloatJob*>arg
    _run_float(&j.it, j.ptrs, j.arity, j.op, j.odt, j.dts, j.cdt, &j.p, j.x, j.y, j.z, j.vector, j.fast)


cdef bint _splittable(NdIter* it, char** ptrs, int arity, int odt, int* dts) noexcept nogil:
    """The output overlaps no input, or is exactly one of them (in place, same strides). Each
    operand's extent ends with its own last element (adjacent buffers do not overlap)."""
    cdef Py_ssize_t lo[4]
    cdef Py_ssize_t hi[4]
    cdef int k, d
    cdef bint same
    for k in range(arity + 1):
        lo[k] = hi[k] = <Py_ssize_t>ptrs[k]
        for d in range(it.ndim):
            if it.strides[k * MAX_RANK + d] > 0:
                hi[k] += it.strides[k * MAX_RANK + d] * (it.shape[d] - 1)
            else:
                lo[k] += it.strides[k * MAX_RANK + d] * (it.shape[d] - 1)
        hi[k] += itemsize_of(odt if k == 0 else dts[k - 1])
    for k in range(1, arity + 1):
        if lo[k] < hi[0] and lo[0] < hi[k]:
            same = ptrs[k] == ptrs[0]
            for d in range(it.ndim):
                same = same and it.strides[k * MAX_RANK + d] == it.strides[d]
            if not same:
                return False
    return True


cdef void _run_float_split(NdIter* it, char** ptrs, int arity, int op, int odt, int* dts, int cdt,
                           Params* p, bint vector, bint fast, _FloatJob* jobs) noexcept nogil:
    """_run_float over the two halves of dimension 0 of ``it``, as two pool chunks."""
    cdef Py_ssize_t half = it.shape[0] // 2, start
    cdef int h, k
    for h in range(2):
        jobs[h].it = it[0]
        jobs[h].it.shape[0] = half if h == 0 else it.shape[0] - half
        start = 0 if h == 0 else half
        for k in range(arity + 1):
            jobs[h].ptrs[k] = ptrs[k] + start * it.strides[k * MAX_RANK]
        jobs[h].arity, jobs[h].op, jobs[h].odt, jobs[h].cdt = arity, op, odt, cdt
        for k in range(arity):
            jobs[h].dts[k] = dts[k]
        jobs[h].p = p[0]
        jobs[h].vector, jobs[h].fast = vector, fast
    ek_pool_run(_float_job, <void*>jobs, sizeof(_FloatJob), 2)


cdef int _run_int(NdIter* it, char** ptrs, int arity, int op, int odt, int* dts, int cdt, Params* p,
                  int64_t* x, int64_t* y, int64_t* z) noexcept nogil:
    """Returns 1 on an integer division by zero (the rest of the output is then unspecified)."""
    cdef Py_ssize_t n = iter_row_len(it)
    cdef Py_ssize_t j, m, i
    cdef Py_ssize_t so = iter_row_stride(it, 0)
    cdef Py_ssize_t s1 = iter_row_stride(it, 1)
    cdef Py_ssize_t s2 = iter_row_stride(it, 2) if arity > 1 else 0
    cdef Py_ssize_t s3 = iter_row_stride(it, 3) if arity > 2 else 0
    cdef int64_t r
    while True:
        j = 0
        while j < n:
            m = n - j if n - j < BLOCK else BLOCK
            load_block(ptrs[1] + j * s1, s1, dts[0], m, x)
            if dts[0] != cdt:
                round_block_to(x, m, cdt)
            if arity == 1:
                for i in range(m):
                    x[i] = _i_unary(op, x[i], p, cdt)
            else:
                load_block(ptrs[2] + j * s2, s2, dts[1], m, y)
                if dts[1] != cdt:
                    round_block_to(y, m, cdt)
                if arity == 2:
                    for i in range(m):
                        if _i_binary(op, x[i], y[i], cdt, &r):
                            return 1
                        x[i] = r
                else:
                    load_block(ptrs[3] + j * s3, s3, dts[2], m, z)
                    if dts[2] != cdt:
                        round_block_to(z, m, cdt)
                    for i in range(m):
                        x[i] = _i_ternary(op, x[i], y[i], z[i], p)
            if odt != cdt and odt != DT_BOOL:
                round_block_to(x, m, cdt)
            store_block(x, m, odt, ptrs[0] + j * so, so)
            j += m
        if not iter_next_row(it, ptrs):
            break
    return 0


cdef _pointwise(str kind, int arity, int code, bint float_only, bint integral_only, out, operands, shape,
                compute_dtype, params):
    cdef NdIter it
    cdef char* ptrs[4]
    cdef int dts[3]
    cdef int odt, cdt, k, failed = 0
    cdef bint vector, fast, split
    cdef _FloatJob* jobs = NULL
    cdef Params p
    cdef double dx[BLOCK]
    cdef double dy[BLOCK]
    cdef double dz[BLOCK]
    cdef int64_t ix[BLOCK]
    cdef int64_t iy[BLOCK]
    cdef int64_t iz[BLOCK]
    odt = check_dtype(out[1], f"{kind} out_dtype")
    cdt = check_dtype(compute_dtype, f"{kind} compute_dtype")
    if float_only and not is_floating(cdt):
        raise KernelArgumentError(f"{kind}: this op needs a floating compute dtype, got {_DTYPE_NAMES[cdt]}")
    if integral_only and is_floating(cdt):
        raise KernelArgumentError(f"{kind}: this op needs an integral or bool compute dtype, got {_DTYPE_NAMES[cdt]}")
    strides = [out[2]]
    sizes = [itemsize_of(odt)]
    for k in range(arity):
        dts[k] = check_dtype(operands[k][1], f"{kind} operand dtype")
        strides.append(operands[k][2])
        sizes.append(itemsize_of(dts[k]))
    _load_params(&p, params, not is_floating(cdt))
    p.cdt = cdt
    iter_init(&it, shape, strides, sizes, kind)
    if it.size == 0:
        return
    ptrs[0] = as_ptr(out[0], f"{kind} out_addr")
    for k in range(arity):
        ptrs[k + 1] = as_ptr(operands[k][0], f"{kind} operand address")
    vector = _vector_op(arity, code, odt, cdt) and _vector_enabled
    fast = _fast_loops
    split = (_split_enabled and is_floating(cdt) and it.size >= _SPLIT_ELEMENTS and it.shape[0] >= 2
             and code in (_SPLIT_UNARY, _SPLIT_BINARY, _SPLIT_TERNARY)[arity - 1]
             and _splittable(&it, ptrs, arity, odt, dts))
    if split:
        jobs = <_FloatJob*>malloc(2 * sizeof(_FloatJob))
        if jobs == NULL:
            split = False
    with nogil:
        if split:
            _run_float_split(&it, ptrs, arity, code, odt, dts, cdt, &p, vector, fast, jobs)
            free(jobs)
        elif is_floating(cdt):
            _run_float(&it, ptrs, arity, code, odt, dts, cdt, &p, dx, dy, dz, vector, fast)
        else:
            failed = _run_int(&it, ptrs, arity, code, odt, dts, cdt, &p, ix, iy, iz)
    if failed:
        raise KernelArgumentError("ZeroDivisionError")


def unary_op(op, out, a, shape, compute_dtype, params=()):
    """out = op(a) over ``shape``; ``out``/``a`` are (address, dtype code, element strides)."""
    code = UNARY_OPS.get(op)
    if code is None:
        raise KernelArgumentError(f"unary_op: unknown op {op!r} (expected one of {tuple(UNARY_OPS)})")
    _pointwise("unary_op", 1, code, code in _FLOAT_ONLY_UNARY, code in _INTEGRAL_UNARY, out, (a,), shape,
               compute_dtype, params)


def binary_op(op, out, a, b, shape, compute_dtype, params=()):
    """out = a (op) b over ``shape`` (broadcast operands have 0 strides)."""
    code = BINARY_OPS.get(op)
    if code is None:
        raise KernelArgumentError(f"binary_op: unknown op {op!r} (expected one of {tuple(BINARY_OPS)})")
    _pointwise("binary_op", 2, code, code in _FLOAT_ONLY_BINARY, code in _INTEGRAL_BINARY, out, (a, b), shape,
               compute_dtype, params)


def ternary_op(op, out, a, b, c, shape, compute_dtype, params=()):
    """out = op(a, b, c) over ``shape``: lerp(a, b, weight c), addcmul/addcdiv(a, b, c; value),
    clamp(a, min b, max c; which bounds are given)."""
    code = TERNARY_OPS.get(op)
    if code is None:
        raise KernelArgumentError(f"ternary_op: unknown op {op!r} (expected one of {tuple(TERNARY_OPS)})")
    _pointwise("ternary_op", 3, code, code in _FLOAT_ONLY_TERNARY, False, out, (a, b, c), shape, compute_dtype,
               params)
