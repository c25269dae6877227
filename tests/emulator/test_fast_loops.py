"""The op-specialised loops of the pointwise kernels (pointwise.pyx: sqrt, rsqrt, reciprocal, neg,
square, tanh/sigmoid backward, addcmul, addcdiv, lerp) and the float32 scalar-operand and
fused-multiply-add paths of elementwise.binary are speed only: bit for bit the generic loops'
results, for finite, special (NaN, inf, -0, subnormal) and large values, every float dtype, and
contiguous, transposed and broadcast (scalar) operands."""
import ml_dtypes
import numpy as np
import pytest

from emulator.kernels import dtypes as D
from emulator.kernels import elementwise as E
from emulator.kernels import pointwise as P

NP = {D.FLOAT32: np.float32, D.FLOAT64: np.float64, D.FLOAT16: np.float16, D.BFLOAT16: ml_dtypes.bfloat16}
SHAPE = (37, 101)
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 1e-310, 0.5, -0.5, 0.49999997, 1.0, 3.0, -7.0]


def _data(seed, dt, kind="any"):
    rng = np.random.default_rng(seed)
    n = SHAPE[0] * SHAPE[1]
    x = rng.standard_normal(n) * np.exp(rng.uniform(-10, 10, n))
    if kind == "weight":
        x = rng.uniform(-1, 2, n)
    x[:len(SPECIAL)] = SPECIAL
    rng.shuffle(x)
    return x.astype(NP[dt]).reshape(SHAPE)


def _layout(x, how):
    if how == "T":
        return np.ascontiguousarray(x.T).T
    if how == "S":
        return np.broadcast_to(x[3, 5], SHAPE)
    return x


def _st(a):
    return tuple(s // a.itemsize for s in a.strides)


def _op(a):
    return a.ctypes.data, int({np.dtype(v): k for k, v in NP.items()}[a.dtype]), _st(a)


FLOATS = [(D.FLOAT32, D.FLOAT32, D.FLOAT32), (D.FLOAT64, D.FLOAT64, D.FLOAT64), (D.FLOAT16, D.FLOAT16, D.FLOAT32),
          (D.BFLOAT16, D.BFLOAT16, D.FLOAT32), (D.FLOAT32, D.FLOAT64, D.FLOAT32)]
CASES = ([(1, op, ()) for op in ("sqrt", "rsqrt", "reciprocal", "neg", "square")]
         + [(2, op, ()) for op in ("tanh_backward", "sigmoid_backward")]
         + [(3, "addcmul", (v,)) for v in (1.0, 0.9, -3.0)] + [(3, "addcdiv", (v,)) for v in (1.0, -0.001)]
         + [(3, "lerp", ())])


@pytest.fixture
def fast_loops_restored():
    yield
    P.set_fast_loops(True)


@pytest.mark.parametrize("arity,op,params", CASES)
@pytest.mark.parametrize("dt,odt,cdt", FLOATS)
def test_pointwise_fast_loops_equal_the_generic_loops(arity, op, params, dt, odt, cdt, fast_loops_restored):
    fn = (P.unary_op, P.binary_op, P.ternary_op)[arity - 1]
    for layouts in (("C",) * arity, ("T",) + ("C",) * (arity - 1), ("C",) * (arity - 1) + ("S",)):
        ins = [_layout(_data(10 * k + arity, dt, "weight" if op == "lerp" and k == 2 else "any"), how)
               for k, how in enumerate(layouts)]
        got = []
        for fast in (False, True):
            P.set_fast_loops(fast)
            out = np.zeros(SHAPE, NP[odt])
            fn(op, _op(out), *[_op(a) for a in ins], SHAPE, cdt, params)
            got.append(out)
        assert got[0].tobytes() == got[1].tobytes(), layouts
    assert P.set_fast_loops(True) is True


@pytest.mark.parametrize("op,alpha", [("add", 1), ("add", 0.3), ("add", -2.0), ("sub", 1), ("sub", 0.7),
                                      ("mul", 1), ("div", 1)])
@pytest.mark.parametrize("scalar", ["none", "a", "b"])
def test_elementwise_float32_fast_paths_equal_the_strided_path(op, alpha, scalar):
    # The fast paths take contiguous float32 operands (one may be a stride-0 scalar); the same
    # values through every-other-element views take the generic blocked loops.
    f32 = D.FLOAT32
    a, b = _data(1, f32), _data(2, f32)
    if scalar == "a":
        a = np.broadcast_to(a[3, 5], SHAPE)
    elif scalar == "b":
        b = np.broadcast_to(b[3, 5], SHAPE)

    def run(x, y, spread):
        if spread:  # the same values, every other element of a wider buffer
            def wide(v):
                w = np.zeros((SHAPE[0], 2 * SHAPE[1]), np.float32)
                w[:, ::2] = v
                return w[:, ::2]
            x = x if x.strides == (0, 0) else wide(x)
            y = y if y.strides == (0, 0) else wide(y)
            out_full = np.zeros((SHAPE[0], 2 * SHAPE[1]), np.float32)
            out = out_full[:, ::2]
        else:
            out = np.zeros(SHAPE, np.float32)
        E.binary(op, out.ctypes.data, f32, _st(out), x.ctypes.data, f32, _st(x), y.ctypes.data, f32, _st(y),
                 SHAPE, f32, alpha)
        return np.ascontiguousarray(out)

    fast, generic = run(a, b, False), run(a, b, True)
    assert fast.tobytes() == generic.tobytes()
    # And it is the right value: one float32 rounding of the exact result (alpha is float32 too).
    alpha32 = float(np.float32(alpha))
    with np.errstate(all="ignore"):
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        want = {"add": a64 + alpha32 * b64, "sub": a64 - alpha32 * b64, "mul": a64 * b64, "div": a64 / b64}[op]
        scale = np.abs(want) if op in ("mul", "div") else np.abs(a64) + np.abs(alpha32 * b64)
    finite = np.isfinite(want) & (scale < 1e30) & (scale > 1e-30)
    assert np.all(np.abs(fast[finite] - want[finite]) <= 2.0 ** -23 * scale[finite])
