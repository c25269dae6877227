# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Fused RNN cell kernels of the device's vector engine: the LSTM and GRU gate updates that
``nn.LSTM`` / ``nn.GRU`` / ``nn.LSTMCell`` / ``nn.GRUCell`` reach off the CPU
(``aten::_thnn_fused_lstm_cell``, ``_thnn_fused_gru_cell`` and their backward ops).

One pass over a (B, H) cell: every output element reads its gate pre-activations (input and
hidden projections, already computed by the matrix engine), the biases and the previous cell
state, and writes the new state plus the workspace the backward reads. The math and the
workspace layouts are ATen's (aten/src/ATen/native/cuda/RNN.cu):

  LSTM  gates (B, 4H) in the order i, f, g, o; workspace (B, 4H) = sigmoid(i), sigmoid(f),
        tanh(g), sigmoid(o); cy = f * cx + i * g; hy = o * tanh(cy).
  GRU   gates (B, 3H) in the order r, z, n; workspace (B, 5H) = r, z, n, hx, hn + b_hn;
        n = tanh(in + b_in + r * (hn + b_hn)); hy = n + z * (hx - n).

Every 2-D operand is (addr, dtype, (s0, s1)) in elements with any strides; biases are 1-D
(4H or 3H,) or None. Numerics as CUDA's kernels: loads are widened to the accumulation type
(float32 for float16/bfloat16/float32, float64 for float64), the arithmetic is done there
with sigmoid(x) = 1 / (1 + exp(-x)), and each stored value is rounded once (so the workspace
holds gate values rounded to the tensor dtype, as ATen's does). NaN propagates.
Deliberately left out: nothing of the cell math; the gate matmuls are separate launches.
"""

from libc.math cimport exp, expf, tanh, tanhf

include "_common.pxi"

ctypedef fused real:
    float
    double


cdef struct Op2:
    char* p           # NULL: operand absent
    int dt
    Py_ssize_t s0     # bytes
    Py_ssize_t s1     # bytes


cdef int _operand(object desc, str what, Op2* op, bint optional, int ndim) except -1:
    """Unpack (addr, dtype, strides) into ``op``; None is an absent operand where allowed."""
    op.p = NULL
    op.dt = DT_FLOAT32
    op.s0 = 0
    op.s1 = 0
    if desc is None:
        if not optional:
            raise KernelArgumentError(f"{what}: operand is required")
        return 0
    try:
        addr, dtype, strides = desc
        strides = tuple(strides)
    except (TypeError, ValueError):
        raise KernelArgumentError(f"{what}: expected (addr, dtype, strides), got {desc!r}") from None
    op.dt = check_dtype(dtype, what)
    if not is_floating(op.dt):
        raise KernelArgumentError(f"{what}: {_DTYPE_NAMES[op.dt]} is not a floating dtype "
                                  "(float16, bfloat16, float32, float64)")
    if len(strides) != ndim:
        raise KernelArgumentError(f"{what}: expected {ndim} strides, got {strides!r}")
    cdef Py_ssize_t isz = itemsize_of(op.dt)
    op.s0 = <Py_ssize_t>strides[0] * isz
    if ndim == 2:
        op.s1 = <Py_ssize_t>strides[1] * isz
    op.p = as_ptr(addr, what)
    return 0


cdef inline double _ld(const char* p, int dt) noexcept nogil:
    cdef double v
    load_block(p, 0, dt, 1, &v)
    return v


cdef inline void _st(char* p, int dt, double v) noexcept nogil:
    store_block(&v, 1, dt, p, 0)


cdef inline real _at(Op2* op, Py_ssize_t b, Py_ssize_t j, real zero) noexcept nogil:
    """Element (b, j) widened to the accumulation type (``zero`` selects it); an absent operand reads 0."""
    if op.p == NULL:
        return zero
    return <real>_ld(op.p + b * op.s0 + j * op.s1, op.dt)


cdef inline void _put(Op2* op, Py_ssize_t b, Py_ssize_t j, real v) noexcept nogil:
    _st(op.p + b * op.s0 + j * op.s1, op.dt, <double>v)


cdef inline real _exp(real x) noexcept nogil:
    if real is float:
        return expf(x)
    else:
        return exp(x)


cdef inline real _tanh(real x) noexcept nogil:
    if real is float:
        return tanhf(x)
    else:
        return tanh(x)


cdef inline real _sigmoid(real x) noexcept nogil:
    cdef real one = 1
    return one / (one + _exp(-x))


cdef inline real _bias(Op2* op, Py_ssize_t j, real zero) noexcept nogil:
    if op.p == NULL:
        return zero
    return <real>_ld(op.p + j * op.s0, op.dt)


cdef int _check_shape(object B, object H, str what) except -1:
    if B < 0 or H < 0:
        raise KernelArgumentError(f"{what}: bad cell shape ({B!r}, {H!r})")
    return 0


# ---------------------------------------------------------------------------------------------
# LSTM

cdef void _lstm_forward(real zero, Op2* hy, Op2* cy, Op2* ws, Op2* ig, Op2* hg, Op2* cx, Op2* b1, Op2* b2,
                        Py_ssize_t B, Py_ssize_t H) noexcept nogil:
    cdef Py_ssize_t b, j, k
    cdef real g[4]
    cdef real c
    for b in range(B):
        for j in range(H):
            for k in range(4):
                g[k] = _at(ig, b, k * H + j, zero) + _at(hg, b, k * H + j, zero) + \
                    _bias(b1, k * H + j, zero) + _bias(b2, k * H + j, zero)
            g[0] = _sigmoid(g[0])
            g[1] = _sigmoid(g[1])
            g[2] = _tanh(g[2])
            g[3] = _sigmoid(g[3])
            c = g[1] * _at(cx, b, j, zero) + g[0] * g[2]
            _put(hy, b, j, g[3] * _tanh(c))
            _put(cy, b, j, c)
            for k in range(4):
                _put(ws, b, k * H + j, g[k])


def lstm_cell_forward(hy, cy, workspace, input_gates, hidden_gates, cx, input_bias, hidden_bias, B, H):
    """hy, cy (B, H); workspace, gates (B, 4H); cx (B, H); biases (4H,) or None."""
    cdef Op2 o_hy, o_cy, o_ws, o_ig, o_hg, o_cx, o_b1, o_b2
    _check_shape(B, H, "lstm_cell_forward")
    cdef Py_ssize_t nb = B, nh = H
    if nb * nh == 0:
        return
    _operand(hy, "lstm_cell_forward hy", &o_hy, False, 2)
    _operand(cy, "lstm_cell_forward cy", &o_cy, False, 2)
    _operand(workspace, "lstm_cell_forward workspace", &o_ws, False, 2)
    _operand(input_gates, "lstm_cell_forward input_gates", &o_ig, False, 2)
    _operand(hidden_gates, "lstm_cell_forward hidden_gates", &o_hg, False, 2)
    _operand(cx, "lstm_cell_forward cx", &o_cx, False, 2)
    _operand(input_bias, "lstm_cell_forward input_bias", &o_b1, True, 1)
    _operand(hidden_bias, "lstm_cell_forward hidden_bias", &o_b2, True, 1)
    with nogil:
        if o_hy.dt == DT_FLOAT64:
            _lstm_forward(<double>0, &o_hy, &o_cy, &o_ws, &o_ig, &o_hg, &o_cx, &o_b1, &o_b2, nb, nh)
        else:
            _lstm_forward(<float>0, &o_hy, &o_cy, &o_ws, &o_ig, &o_hg, &o_cx, &o_b1, &o_b2, nb, nh)


cdef void _lstm_backward(real zero, Op2* gg, Op2* gcx_out, Op2* ghy, Op2* gcy, Op2* cx, Op2* cy, Op2* ws,
                         Py_ssize_t B, Py_ssize_t H) noexcept nogil:
    cdef Py_ssize_t b, j
    cdef real one = 1
    cdef real i, f, c, o, go, goc, t, gog, gcx, gig, gfg, gcg
    for b in range(B):
        for j in range(H):
            i = _at(ws, b, j, zero)
            f = _at(ws, b, H + j, zero)
            c = _at(ws, b, 2 * H + j, zero)
            o = _at(ws, b, 3 * H + j, zero)
            go = _at(ghy, b, j, zero)
            goc = _at(gcy, b, j, zero)
            t = _tanh(_at(cy, b, j, zero))
            gog = go * t
            gcx = go * o * (one - t * t) + goc
            gig = gcx * c
            gfg = gcx * _at(cx, b, j, zero)
            gcg = gcx * i
            gcx = gcx * f
            gig = gig * (one - i) * i
            gfg = gfg * (one - f) * f
            gcg = gcg * (one - c * c)
            gog = gog * (one - o) * o
            _put(gg, b, j, gig)
            _put(gg, b, H + j, gfg)
            _put(gg, b, 2 * H + j, gcg)
            _put(gg, b, 3 * H + j, gog)
            _put(gcx_out, b, j, gcx)


def lstm_cell_backward(grad_gates, grad_cx, grad_hy, grad_cy, cx, cy, workspace, B, H):
    """grad_gates (B, 4H), grad_cx (B, H); grad_hy / grad_cy (B, H) or None (reads as zero)."""
    cdef Op2 o_gg, o_gcx, o_ghy, o_gcy, o_cx, o_cy, o_ws
    _check_shape(B, H, "lstm_cell_backward")
    cdef Py_ssize_t nb = B, nh = H
    if nb * nh == 0:
        return
    _operand(grad_gates, "lstm_cell_backward grad_gates", &o_gg, False, 2)
    _operand(grad_cx, "lstm_cell_backward grad_cx", &o_gcx, False, 2)
    _operand(grad_hy, "lstm_cell_backward grad_hy", &o_ghy, True, 2)
    _operand(grad_cy, "lstm_cell_backward grad_cy", &o_gcy, True, 2)
    _operand(cx, "lstm_cell_backward cx", &o_cx, False, 2)
    _operand(cy, "lstm_cell_backward cy", &o_cy, False, 2)
    _operand(workspace, "lstm_cell_backward workspace", &o_ws, False, 2)
    with nogil:
        if o_gg.dt == DT_FLOAT64:
            _lstm_backward(<double>0, &o_gg, &o_gcx, &o_ghy, &o_gcy, &o_cx, &o_cy, &o_ws, nb, nh)
        else:
            _lstm_backward(<float>0, &o_gg, &o_gcx, &o_ghy, &o_gcy, &o_cx, &o_cy, &o_ws, nb, nh)


# ---------------------------------------------------------------------------------------------
# GRU

cdef void _gru_forward(real zero, Op2* hy, Op2* ws, Op2* ig, Op2* hg, Op2* hx, Op2* b1, Op2* b2,
                       Py_ssize_t B, Py_ssize_t H) noexcept nogil:
    cdef Py_ssize_t b, j
    cdef real r, z, n, h, hn
    for b in range(B):
        for j in range(H):
            r = _sigmoid(_at(ig, b, j, zero) + _at(hg, b, j, zero) + _bias(b1, j, zero) + _bias(b2, j, zero))
            z = _sigmoid(_at(ig, b, H + j, zero) + _at(hg, b, H + j, zero) + _bias(b1, H + j, zero) +
                         _bias(b2, H + j, zero))
            hn = _at(hg, b, 2 * H + j, zero) + _bias(b2, 2 * H + j, zero)
            n = _tanh(_at(ig, b, 2 * H + j, zero) + _bias(b1, 2 * H + j, zero) + r * hn)
            h = _at(hx, b, j, zero)
            _put(hy, b, j, n + z * (h - n))
            _put(ws, b, j, r)
            _put(ws, b, H + j, z)
            _put(ws, b, 2 * H + j, n)
            _put(ws, b, 3 * H + j, h)
            _put(ws, b, 4 * H + j, hn)


def gru_cell_forward(hy, workspace, input_gates, hidden_gates, hx, input_bias, hidden_bias, B, H):
    """hy (B, H); workspace (B, 5H); gates (B, 3H); hx (B, H); biases (3H,) or None."""
    cdef Op2 o_hy, o_ws, o_ig, o_hg, o_hx, o_b1, o_b2
    _check_shape(B, H, "gru_cell_forward")
    cdef Py_ssize_t nb = B, nh = H
    if nb * nh == 0:
        return
    _operand(hy, "gru_cell_forward hy", &o_hy, False, 2)
    _operand(workspace, "gru_cell_forward workspace", &o_ws, False, 2)
    _operand(input_gates, "gru_cell_forward input_gates", &o_ig, False, 2)
    _operand(hidden_gates, "gru_cell_forward hidden_gates", &o_hg, False, 2)
    _operand(hx, "gru_cell_forward hx", &o_hx, False, 2)
    _operand(input_bias, "gru_cell_forward input_bias", &o_b1, True, 1)
    _operand(hidden_bias, "gru_cell_forward hidden_bias", &o_b2, True, 1)
    with nogil:
        if o_hy.dt == DT_FLOAT64:
            _gru_forward(<double>0, &o_hy, &o_ws, &o_ig, &o_hg, &o_hx, &o_b1, &o_b2, nb, nh)
        else:
            _gru_forward(<float>0, &o_hy, &o_ws, &o_ig, &o_hg, &o_hx, &o_b1, &o_b2, nb, nh)


cdef void _gru_backward(real zero, Op2* gig_out, Op2* ghg_out, Op2* ghx_out, Op2* ghy, Op2* ws,
                        Py_ssize_t B, Py_ssize_t H) noexcept nogil:
    cdef Py_ssize_t b, j
    cdef real one = 1
    cdef real r, z, n, h, hn, go, gz, ghx, gn, ghn, gr
    for b in range(B):
        for j in range(H):
            r = _at(ws, b, j, zero)
            z = _at(ws, b, H + j, zero)
            n = _at(ws, b, 2 * H + j, zero)
            h = _at(ws, b, 3 * H + j, zero)
            hn = _at(ws, b, 4 * H + j, zero)
            go = _at(ghy, b, j, zero)
            gz = go * (h - n) * (one - z) * z
            ghx = go * z
            gn = go * (one - z) * (one - n * n)
            ghn = gn * r
            gr = gn * hn * (one - r) * r
            _put(gig_out, b, j, gr)
            _put(gig_out, b, H + j, gz)
            _put(gig_out, b, 2 * H + j, gn)
            _put(ghg_out, b, j, gr)
            _put(ghg_out, b, H + j, gz)
            _put(ghg_out, b, 2 * H + j, ghn)
            _put(ghx_out, b, j, ghx)


def gru_cell_backward(grad_input_gates, grad_hidden_gates, grad_hx, grad_hy, workspace, B, H):
    """grad_*_gates (B, 3H), grad_hx and grad_hy (B, H), workspace (B, 5H)."""
    cdef Op2 o_gig, o_ghg, o_ghx, o_ghy, o_ws
    _check_shape(B, H, "gru_cell_backward")
    cdef Py_ssize_t nb = B, nh = H
    if nb * nh == 0:
        return
    _operand(grad_input_gates, "gru_cell_backward grad_input_gates", &o_gig, False, 2)
    _operand(grad_hidden_gates, "gru_cell_backward grad_hidden_gates", &o_ghg, False, 2)
    _operand(grad_hx, "gru_cell_backward grad_hx", &o_ghx, False, 2)
    _operand(grad_hy, "gru_cell_backward grad_hy", &o_ghy, False, 2)
    _operand(workspace, "gru_cell_backward workspace", &o_ws, False, 2)
    with nogil:
        if o_gig.dt == DT_FLOAT64:
            _gru_backward(<double>0, &o_gig, &o_ghg, &o_ghx, &o_ghy, &o_ws, nb, nh)
        else:
            _gru_backward(<float>0, &o_gig, &o_ghg, &o_ghx, &o_ghy, &o_ws, nb, nh)
