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
BIG = (384, 401)           # above the two-thread split threshold
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


def test_relu_select_keeps_nan_and_negative_zero():
    from emulator.kernels import elementwise
    for dt in (D.FLOAT32, D.FLOAT64):
        x = _data(5, dt)
        out = np.full(SHAPE, 7, NP[dt])
        elementwise.unary("relu", out.ctypes.data, dt, _st(out), x.ctypes.data, dt, _st(x), SHAPE, dt)
        want = np.where(x < 0, np.zeros_like(x), x)          # NaN and -0.0 pass through
        assert out.tobytes() == want.tobytes()
    xi = np.arange(-50, 50, dtype=np.int64).reshape(10, 10)
    out = np.zeros_like(xi)
    elementwise.unary("relu", out.ctypes.data, D.INT64, _st(out), xi.ctypes.data, D.INT64, _st(xi), xi.shape, D.INT64)
    assert np.array_equal(out, np.maximum(xi, 0))


def _max_pool2d(pooling, y, ind, x, code, k, s, p):
    """pooling.max_pool over the 5-d (N, C, 1, H, W) views of 2-d operands, a k x k window."""
    y5, ind5, x5 = y[:, :, None], ind[:, :, None], x[:, :, None]
    pooling.max_pool(y5.ctypes.data, code, _st(y5), y5.shape, ind5.ctypes.data, _st(ind5), x5.ctypes.data, code,
                     _st(x5), x5.shape, (1, k, k, 1, s, s, 0, p, p, 1, 1, 1))


def _pool_reference(x, k, s, p):
    n, c, h, w = x.shape
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    y = np.zeros((n, c, oh, ow), x.dtype)
    ind = np.zeros((n, c, oh, ow), np.int64)
    for i, j, a, b in np.ndindex(n, c, oh, ow):
        best, idx = -np.inf, None
        for u in range(max(0, a * s - p), min(h, a * s - p + k)):
            for v in range(max(0, b * s - p), min(w, b * s - p + k)):
                val = x[i, j, u, v]
                if idx is None:
                    idx = u * w + v
                if val > best or np.isnan(val):            # the last NaN wins, as CPU's kernel
                    best, idx = val, u * w + v
        y[i, j, a, b], ind[i, j, a, b] = best, idx
    return y, ind


def test_max_pool_selects_match_the_reference_with_nan_and_ties():
    from emulator.kernels import pooling
    rng = np.random.default_rng(3)
    x = np.round(rng.standard_normal((2, 3, 9, 11)) * 2).astype(np.float32)   # many ties
    x.flat[::17] = np.nan
    x.flat[::13] = -0.0
    for k, s, p in ((3, 2, 1), (2, 2, 0), (3, 1, 1)):
        want_y, want_i = _pool_reference(x, k, s, p)
        y, ind = np.zeros_like(want_y), np.zeros_like(want_i)
        _max_pool2d(pooling, y, ind, x, D.FLOAT32, k, s, p)
        assert np.array_equal(y, want_y, equal_nan=True) and np.array_equal(ind, want_i), (k, s, p)


def _im2col_reference(x, kh, kw, sh, sw, ph, pw, dh, dw):
    c, h, w = x.shape
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    col = np.zeros((c, 1, kh, kw, 1, oh, ow), x.dtype)
    for ci, u, v, a, b in np.ndindex(c, kh, kw, oh, ow):
        ih, iw = a * sh - ph + u * dh, b * sw - pw + v * dw
        if 0 <= ih < h and 0 <= iw < w:
            col[ci, 0, u, v, 0, a, b] = x[ci, ih, iw]
    return col


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_im2col_2d_fast_path_matches_the_reference(dtype):
    from emulator.kernels import convolution
    code = D.FLOAT32 if dtype == np.float32 else D.FLOAT64
    rng = np.random.default_rng(4)
    for (c, h, w), (kh, kw, sh, sw, ph, pw, dh, dw) in [((3, 7, 9), (3, 3, 1, 1, 1, 1, 1, 1)),
                                                         ((2, 2, 2), (3, 3, 1, 1, 1, 1, 1, 1)),
                                                         ((4, 8, 5), (2, 3, 2, 1, 0, 2, 1, 2)),
                                                         ((2, 5, 6), (1, 1, 1, 1, 0, 0, 1, 1)),
                                                         ((2, 9, 9), (3, 3, 2, 2, 1, 1, 1, 1))]:   # strided: generic
        x = rng.standard_normal((c, h, w)).astype(dtype)
        x.flat[::5] = -0.0
        want = _im2col_reference(x, kh, kw, sh, sw, ph, pw, dh, dw)
        # the column matrix inside a wider one (a batch's columns), pre-filled with garbage
        wide = np.full(want.shape[:-1] + (2 * want.shape[-1],), 9, dtype)
        col = wide[..., :want.shape[-1]]
        convolution.im2col(col.ctypes.data, code, _st(col), col.shape, x.ctypes.data, code, _st(x[:, None]),
                    (c, 1, h, w), (1, sh, sw, 0, ph, pw, 1, dh, dw))
        assert col.tobytes() == want.tobytes()
        assert np.all(wide[..., want.shape[-1]:] == 9)


@pytest.fixture
def split_restored():
    yield
    P.set_split(True)


@pytest.mark.parametrize("arity,op,params", [(1, "sqrt", ()), (1, "tanh", ()), (1, "exp", ()), (1, "gelu", ()),
                                             (2, "pow", (1,)), (2, "tanh_backward", ()), (3, "addcmul", (0.9,)),
                                             (3, "lerp", ()), (3, "addcdiv", (-0.001,))])
@pytest.mark.parametrize("dt,odt,cdt", [(D.FLOAT32, D.FLOAT32, D.FLOAT32), (D.BFLOAT16, D.BFLOAT16, D.FLOAT32),
                                        (D.FLOAT64, D.FLOAT64, D.FLOAT64)])
@pytest.mark.parametrize("layout", ["C", "T", "inplace"])
def test_large_pointwise_launches_split_over_two_threads_equal_one_thread(arity, op, params, dt, odt, cdt, layout,
                                                                           split_restored):
    rng = np.random.default_rng(7)
    n = BIG[0] * BIG[1]

    def operand(k):
        x = rng.standard_normal(n) * np.exp(rng.uniform(-3, 3, n))
        if op == "lerp" and k == 2:
            x = rng.uniform(-1, 2, n)
        if op == "pow" and k == 1:
            x = np.full(n, 3.0)
        x[:len(SPECIAL)] = SPECIAL
        x = x.astype(NP[dt]).reshape(BIG)
        return np.ascontiguousarray(x.T).T if layout == "T" else x

    ins = [operand(k) for k in range(arity)]
    if op == "pow":
        ins[1] = np.broadcast_to(ins[1][0, 0], BIG)
    fn = (P.unary_op, P.binary_op, P.ternary_op)[arity - 1]
    got = []
    for split in (False, True):
        P.set_split(split)
        if layout == "inplace" and odt == dt:
            first = ins[0].copy()
            fn(op, _op(first), _op(first), *[_op(a) for a in ins[1:]], BIG, cdt, params)
            got.append(first)
        else:
            out = np.zeros(BIG, NP[odt])
            fn(op, _op(out), *[_op(a) for a in ins], BIG, cdt, params)
            got.append(out)
    assert got[0].tobytes() == got[1].tobytes()


@pytest.mark.parametrize("op,alpha", [("add", 1), ("add", 0.3), ("sub", 1), ("mul", 1), ("div", 1)])
@pytest.mark.parametrize("case", ["tensors", "scalar_b", "scalar_a", "inplace", "shifted"])
def test_large_float32_binary_split_over_two_threads_equals_one_thread(op, alpha, case):
    f32 = D.FLOAT32
    rng = np.random.default_rng(8)
    n = BIG[0] * BIG[1]
    got = []
    try:
        for split in (False, True):
            E.set_split(split)
            buf = rng.standard_normal(2 * n + 64).astype(np.float32) if not got else base.copy()
            if not got:
                base = buf.copy()
            a, b = buf[:n], buf[n + 64:2 * n + 64]
            out = np.zeros(n, np.float32)
            if case == "scalar_b":
                b = np.broadcast_to(b[:1], (n,))
            elif case == "scalar_a":
                a = np.broadcast_to(a[:1], (n,))
            elif case == "inplace":
                out = a
            elif case == "shifted":    # the output overlaps an input half a row along: never split
                out = buf[7:7 + n]
            E.binary(op, out.ctypes.data, f32, _st(out), a.ctypes.data, f32, _st(a), b.ctypes.data, f32, _st(b),
                     (n,), f32, alpha)
            got.append(buf.copy() if case in ("inplace", "shifted") else out.copy())
    finally:
        E.set_split(True)
    assert got[0].tobytes() == got[1].tobytes()


def test_softmax_exp_below_its_range_is_zero_and_subnormals_are_kept():
    # The vector exp sets lanes below -104 (a masked row's -inf) to +0 without computing them;
    # values just above keep their float32 subnormal results.
    from emulator.kernels import norm
    row = np.array([0.0, -88.0, -95.0, -103.0, -103.97, -104.0, -104.5, -150.0, -1e30, -np.inf, -np.inf, -np.inf,
                    -120.0, -90.0, -np.inf, -104.01, -200.0], np.float32)
    x = np.tile(row, (3, 1))
    out = np.full_like(x, 7)
    norm.softmax(out.ctypes.data, D.FLOAT32, _st(out), x.ctypes.data, D.FLOAT32, _st(x), x.shape, 1, False)
    want = np.exp(row.astype(np.float64))
    want = (want / want.sum()).astype(np.float32)
    below = row < -104
    assert np.all(out[:, below].view(np.uint32) == 0)            # +0.0, not -0.0
    assert np.all(out[:, 1:4] > 0) and np.all(out[:, 1:4] < np.finfo(np.float32).tiny * 2 ** 23)
    np.testing.assert_allclose(out[0, ~below], want[~below], rtol=3e-7, atol=2e-45)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("batch", [8, 1])
def test_large_max_pool_split_over_two_threads_equals_one_thread(dtype, batch):
    from emulator.kernels import pooling
    code = {np.float32: D.FLOAT32, np.float64: D.FLOAT64, np.int64: D.INT64}[dtype]
    rng = np.random.default_rng(9)
    x = np.round(rng.standard_normal((batch, 64 // batch * 8, 32, 33)) * 4).astype(dtype)
    if dtype != np.int64:
        x.flat[::29] = np.nan
    got = []
    try:
        for split in (False, True):
            pooling.set_split(split)
            y = np.zeros((x.shape[0], x.shape[1], 16, 17), dtype)
            ind = np.zeros(y.shape, np.int64)
            _max_pool2d(pooling, y, ind, x, code, 3, 2, 1)
            got.append((y.tobytes(), ind.tobytes()))
    finally:
        pooling.set_split(True)
    assert got[0] == got[1]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geometry", [(3, 3, 1, 1, 1, 1, 1, 1), (3, 3, 2, 2, 1, 1, 1, 1), (2, 2, 1, 1, 0, 0, 2, 2)])
def test_large_im2col_split_over_two_threads_equals_one_thread_and_the_reference(dtype, geometry):
    from emulator.kernels import convolution
    code = D.FLOAT32 if dtype == np.float32 else D.FLOAT64
    kh, kw, sh, sw, ph, pw, dh, dw = geometry
    rng = np.random.default_rng(10)
    c, h, w = 130, 16, 17
    x = rng.standard_normal((c, h, w)).astype(dtype)
    want = _im2col_reference(x, kh, kw, sh, sw, ph, pw, dh, dw)
    got = []
    try:
        for split in (False, True):
            convolution.set_split(split)
            col = np.full(want.shape, 9, dtype)
            convolution.im2col(col.ctypes.data, code, _st(col), col.shape, x.ctypes.data, code, _st(x[:, None]),
                        (c, 1, h, w), (1, sh, sw, 0, ph, pw, 1, dh, dw))
            got.append(col.tobytes())
    finally:
        convolution.set_split(True)
    assert got[0] == got[1] == want.tobytes()


@pytest.mark.parametrize("kind", ["layer", "batch_train", "batch_eval", "rms", "inplace"])
def test_large_norm_forward_split_over_two_threads_equals_one_thread(kind):
    from emulator.kernels import norm
    rng = np.random.default_rng(12)
    f32 = D.FLOAT32
    shape = (256, 384) if kind in ("layer", "rms", "inplace") else (64, 8, 300)
    outer = shape[0]

    def op(a, strides=None):
        return (a.ctypes.data, f32, strides if strides is not None else _st(a))

    results = []
    try:
        for split in (False, True):
            norm.set_split(split)
            r = np.random.default_rng(0)
            x = (r.standard_normal(shape) * 3 + 1).astype(np.float32)
            y = x if kind == "inplace" else np.zeros(shape, np.float32)
            inner = shape[1:]
            if kind in ("layer", "rms", "inplace"):
                w = r.standard_normal(inner).astype(np.float32)
                b = r.standard_normal(inner).astype(np.float32)
                wop, bop = op(w, (0, 1)), op(b, (0, 1))
            else:   # per channel: constant over the inner dims
                w = r.standard_normal(outer).astype(np.float32)
                b = r.standard_normal(outer).astype(np.float32)
                wop, bop = op(w, (1, 0, 0)), op(b, (1, 0, 0))
            mean_out, rstd_out = np.zeros(outer, np.float32), np.zeros(outer, np.float32)
            run_mean, run_var = r.standard_normal(outer).astype(np.float32), r.uniform(1, 2, outer).astype(np.float32)
            stats_in = (None, None)
            stats_out = (op(mean_out), op(rstd_out))
            running = (None, None)
            if kind == "batch_train":
                running = (op(run_mean), op(run_var))
            if kind == "batch_eval":
                stats_in, stats_out = (op(run_mean), op(run_var)), (None, None)
            norm.norm_forward(op(y), op(x), wop, bop, *stats_out, *stats_in, *running, shape, 1, 1e-5, 0.1,
                              kind != "rms", kind.startswith("batch"))
            results.append(b"".join(v.tobytes() for v in (y, mean_out, rstd_out, run_mean, run_var)))
    finally:
        norm.set_split(True)
    assert results[0] == results[1]


@pytest.mark.parametrize("dt", [D.FLOAT32, D.BFLOAT16, D.FLOAT64])
def test_an_output_right_after_its_input_still_splits(dt):
    # Adjacent buffers (the caching allocator hands out neighbouring blocks) do not overlap: a
    # large launch whose output starts where its input ends splits over the helper, and computes
    # what one thread computes.
    from emulator.kernels import norm
    n = BIG[0] * BIG[1]
    rng = np.random.default_rng(4)
    buf = np.zeros(2 * n, NP[dt])
    x, y = buf[:n].reshape(BIG), buf[n:].reshape(BIG)
    x[...] = rng.standard_normal(BIG).astype(NP[dt])
    got = []
    for split in (False, True):
        P.set_split(split)
        before = P.split_jobs()
        try:
            P.unary_op("tanh", _op(y), _op(x), BIG, D.FLOAT64 if dt == D.FLOAT64 else D.FLOAT32)
        finally:
            P.set_split(True)
        assert P.split_jobs() - before == (1 if split else 0)
        got.append(y.tobytes())
    assert got[0] == got[1]
    w = np.ones(BIG[1], NP[dt])
    wop = (w.ctypes.data, _op(w)[1], (0, 1))
    for split in (False, True):
        norm.set_split(split)
        before = norm.split_jobs()
        try:
            norm.norm_forward(_op(y), _op(x), wop, wop, None, None, None, None, None, None, BIG, 1, 1e-5,
                              0.1, True, False)
        finally:
            norm.set_split(True)
        assert norm.split_jobs() - before == (1 if split else 0)
        got.append(y.tobytes())
    assert got[2] == got[3]


def test_a_max_pool_output_right_after_its_input_still_splits():
    # As above, for pooling.pyx's overlap check (_spatial.pxi's _apart, which im2col shares).
    from emulator.kernels import pooling
    shape, out_shape = (4, 64, 32, 32), (4, 64, 16, 16)
    n, m = int(np.prod(shape)), int(np.prod(out_shape))
    buf = np.zeros(n + m, np.float32)
    x, y = buf[:n].reshape(shape), buf[n:].reshape(out_shape)
    ind = np.zeros(out_shape, np.int64)
    x[...] = np.random.default_rng(2).standard_normal(shape)
    got = []
    for split in (False, True):
        pooling.set_split(split)
        before = pooling.split_jobs()
        try:
            _max_pool2d(pooling, y, ind, x, D.FLOAT32, 3, 2, 1)
        finally:
            pooling.set_split(True)
        assert pooling.split_jobs() - before == (1 if split else 0)
        got.append(y.tobytes() + ind.tobytes())
    assert got[0] == got[1]


@pytest.mark.parametrize("dt", [D.FLOAT32, D.FLOAT64])
@pytest.mark.parametrize("stride,pad", [(1, 1), (2, 0), (2, 3)])
def test_im2col_over_samples_in_depth_equals_one_im2col_per_sample(dt, stride, pad):
    # The convolution lowering puts a batch's samples in im2col's depth (a depth-1 window, unit
    # stride, no padding): one launch must write what one launch per sample writes.
    from emulator.kernels import convolution
    N, C, H, W, k = 5, 7, 13, 11, 3
    oh, ow = (H + 2 * pad - k) // stride + 1, (W + 2 * pad - k) // stride + 1
    L, R = oh * ow, 5 * oh * ow
    x = np.random.default_rng(8).standard_normal((N, C, H, W)).astype(NP[dt])
    isz = x.itemsize
    params = (1, stride, stride, 0, pad, pad, 1, 1, 1)
    cstr = (k * k * R, R, k * R, R, L, ow, 1)
    cols = []
    for batched in (False, True):
        col = np.full((C * k * k, R), np.nan, NP[dt])
        if batched:
            convolution.im2col(col.ctypes.data, dt, cstr, (C, 1, k, k, N, oh, ow), x.ctypes.data, dt,
                        (H * W, C * H * W, W, 1), (C, N, H, W), params)
        else:
            for n in range(N):
                convolution.im2col(col.ctypes.data + n * L * isz, dt, cstr, (C, 1, k, k, 1, oh, ow),
                            x.ctypes.data + n * C * H * W * isz, dt, (H * W, 0, W, 1), (C, 1, H, W), params)
        cols.append(col.tobytes())
    assert cols[0] == cols[1]
    assert not np.isnan(np.frombuffer(cols[1], NP[dt])).any()
