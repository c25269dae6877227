# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Loss kernels of the device's vector engine: negative log likelihood (nll_loss) forward and
backward for an (N, C) input (a (C,) input is passed as N = 1 with stride 0).

``mode``: 0 = one loss per sample (reduction none on a 2-D input), 1 = mean, 2 = sum (also
used for reduction none on a 1-D input, which CPU treats as a scalar sum).

Numerics, as PyTorch CPU:
  * per-sample loss ``-x[i, t] * w[t]`` with one rounding to the output dtype;
  * the reduced loss and the total weight are accumulated in float64 and rounded once to the
    output dtype (CPU uses a cascade sum in the output dtype: float32/float64 agree to a few
    ulps; float16/bfloat16 may differ by more, since CPU rounds its partial sums);
  * mean divides the rounded loss by the rounded total weight (in float32, float64 for
    float64); an all-ignored batch gives 0 / 0 = NaN like CPU;
  * a target equal to ``ignore_index`` contributes nothing; any other target outside [0, C)
    raises KernelArgumentError("Target T is out of bounds.") inside the kernel, which the firmware
    turns into a KERNEL_FAULT (sticky for the context, reported at the next sync).
"""

include "_common.pxi"


cdef inline double _ld(const char* p, int dt) noexcept nogil:
    cdef double v
    load_block(p, 0, dt, 1, &v)
    return v


cdef inline void _st(char* p, int dt, double v) noexcept nogil:
    store_block(&v, 1, dt, p, 0)


cdef inline double _div(double a, double b, int dt) noexcept nogil:
    # a / b in the compute type of dt (float32 unless float64), then rounded to dt
    if dt == DT_FLOAT64:
        return a / b
    return round_to(<float>a / <float>b, dt)


def nll_loss_forward(out_addr, out_dtype, out_stride, tw_addr, tw_dtype,
                     in_addr, in_dtype, in_s0, in_s1, tgt_addr, tgt_s0,
                     w_addr, w_dtype, w_s, N, C, mode, ignore_index):
    """Forward nll_loss; target is int64; ``w_addr`` 0 means no weight."""
    cdef int odt = check_dtype(out_dtype, "nll_loss out_dtype")
    cdef int twdt = check_dtype(tw_dtype, "nll_loss tw_dtype")
    cdef int idt = check_dtype(in_dtype, "nll_loss in_dtype")
    cdef int wdt = check_dtype(w_dtype, "nll_loss w_dtype")
    cdef Py_ssize_t n = N, c = C, i
    cdef Py_ssize_t isz = itemsize_of(idt), osz = itemsize_of(odt), wsz = itemsize_of(wdt)
    cdef Py_ssize_t s0 = <Py_ssize_t>in_s0 * isz, s1 = <Py_ssize_t>in_s1 * isz
    cdef Py_ssize_t so = <Py_ssize_t>out_stride * osz, st = <Py_ssize_t>tgt_s0 * 8
    cdef Py_ssize_t sw = <Py_ssize_t>w_s * wsz
    cdef int m = mode
    cdef int64_t ign = ignore_index, t, bad = 0
    cdef bint has_bad = False, has_w = w_addr != 0
    cdef char* out
    cdef char* tw
    cdef char* inp
    cdef char* tgt
    cdef char* w = NULL
    cdef double loss = 0, wsum = 0, wv, x, lr, twr
    cdef int64_t count = 0
    if m not in (0, 1, 2) or n < 0 or c < 0:
        raise KernelArgumentError(f"nll_loss: bad mode/shape {mode!r} {N!r} {C!r}")
    out = as_ptr(out_addr, "nll_loss out_addr")
    inp = as_ptr(in_addr, "nll_loss in_addr") if n else NULL
    tgt = as_ptr(tgt_addr, "nll_loss tgt_addr") if n else NULL
    if has_w:
        w = as_ptr(w_addr, "nll_loss w_addr")
    tw = as_ptr(tw_addr, "nll_loss tw_addr")
    with nogil:
        for i in range(n):
            t = ek_ld_i64(tgt + i * st)
            if t == ign:
                if m == 0:
                    _st(out + i * so, odt, 0.0)
                continue
            if t < 0 or t >= c:
                has_bad, bad = True, t
                break
            x = _ld(inp + i * s0 + t * s1, idt)
            wv = _ld(w + t * sw, wdt) if has_w else 1.0
            if m == 0:
                _st(out + i * so, odt, -x * wv)
            else:
                loss -= x * wv
                wsum += wv
                count += 1
        if not has_bad:
            if m == 0:
                _st(tw, twdt, 0.0)
            else:
                twr = round_to(wsum if has_w else <double>count, twdt)
                lr = round_to(loss, odt)
                if m == 1:
                    lr = _div(lr, twr, odt)
                _st(out, odt, lr)
                _st(tw, twdt, twr)
    if has_bad:
        raise KernelArgumentError(f"Target {bad} is out of bounds.")


def nll_loss_backward(gi_addr, gi_dtype, gi_s0, gi_s1, go_addr, go_dtype, go_s0,
                      tgt_addr, tgt_s0, w_addr, w_dtype, w_s, tw_addr, tw_dtype,
                      N, C, mode, ignore_index):
    """grad_input (N, C) = 0 except grad_input[i, t_i] = -w[t_i] * g_i, with g_i = grad_output[i]
    (mode 0), grad_output / total_weight (mean) or grad_output (sum)."""
    cdef int gidt = check_dtype(gi_dtype, "nll_loss_backward gi_dtype")
    cdef int godt = check_dtype(go_dtype, "nll_loss_backward go_dtype")
    cdef int wdt = check_dtype(w_dtype, "nll_loss_backward w_dtype")
    cdef int twdt = check_dtype(tw_dtype, "nll_loss_backward tw_dtype")
    cdef Py_ssize_t n = N, c = C, i, k
    cdef Py_ssize_t gsz = itemsize_of(gidt)
    cdef Py_ssize_t s0 = <Py_ssize_t>gi_s0 * gsz, s1 = <Py_ssize_t>gi_s1 * gsz
    cdef Py_ssize_t sgo = <Py_ssize_t>go_s0 * itemsize_of(godt), st = <Py_ssize_t>tgt_s0 * 8
    cdef Py_ssize_t sw = <Py_ssize_t>w_s * itemsize_of(wdt)
    cdef int m = mode
    cdef int64_t ign = ignore_index, t, bad = 0
    cdef bint has_bad = False, has_w = w_addr != 0
    cdef char* gi
    cdef char* go
    cdef char* tgt
    cdef char* w = NULL
    cdef double g = 0, wv, v
    if m not in (0, 1, 2) or n < 0 or c < 0:
        raise KernelArgumentError(f"nll_loss_backward: bad mode/shape {mode!r} {N!r} {C!r}")
    if n == 0 or c == 0:
        return
    gi = as_ptr(gi_addr, "nll_loss_backward gi_addr")
    go = as_ptr(go_addr, "nll_loss_backward go_addr")
    tgt = as_ptr(tgt_addr, "nll_loss_backward tgt_addr")
    if has_w:
        w = as_ptr(w_addr, "nll_loss_backward w_addr")
    if m != 0:
        g = round_to(_ld(go, godt), gidt)
        if m == 1:
            g = _div(g, round_to(_ld(as_ptr(tw_addr, "nll_loss_backward tw_addr"), twdt), gidt), gidt)
        g = -g
    with nogil:
        for i in range(n):
            for k in range(c):
                _st(gi + i * s0 + k * s1, gidt, 0.0)
        for i in range(n):
            t = ek_ld_i64(tgt + i * st)
            if t == ign:
                continue
            if t < 0 or t >= c:
                has_bad, bad = True, t
                break
            wv = round_to(_ld(w + t * sw, wdt), gidt) if has_w else 1.0
            if m == 0:
                v = -wv * round_to(_ld(go + i * sgo, godt), gidt)
            else:
                v = wv * g
            _st(gi + i * s0 + t * s1, gidt, v)
    if has_bad:
        raise KernelArgumentError(f"Target {bad} is out of bounds.")


# ---------------------------------------------------------------------------------------------
# nll_loss2d: an (N, C, H, W) input, an (N, H, W) int64 target (nll_loss of any rank reaches it).

def nll_loss2d_forward(out_addr, out_dtype, out_strides3, tw_addr, tw_dtype, in_addr, in_dtype, in_strides4,
                       tgt_addr, tgt_strides3, w_addr, w_dtype, w_s, N, C, H, W, mode, ignore_index):
    """Forward nll_loss2d (strides in elements). mode 0: ``out`` is (N, H, W) and total_weight 0;
    mode 1 (mean) / 2 (sum): ``out`` is a scalar. ``w_addr`` 0 means no weight."""
    cdef int odt = check_dtype(out_dtype, "nll_loss2d out_dtype")
    cdef int twdt = check_dtype(tw_dtype, "nll_loss2d tw_dtype")
    cdef int idt = check_dtype(in_dtype, "nll_loss2d in_dtype")
    cdef int wdt = check_dtype(w_dtype, "nll_loss2d w_dtype")
    cdef Py_ssize_t n = N, c = C, hh = H, ww = W, i, y, x
    cdef Py_ssize_t isz = itemsize_of(idt), osz = itemsize_of(odt)
    cdef Py_ssize_t is0, is1, is2, is3, os0 = 0, os1 = 0, os2 = 0, ts0, ts1, ts2
    cdef Py_ssize_t sw = <Py_ssize_t>w_s * itemsize_of(wdt)
    cdef int m = mode
    cdef int64_t ign = ignore_index, t, bad = 0
    cdef bint has_bad = False, has_w = w_addr != 0
    cdef char* out
    cdef char* tw
    cdef char* inp = NULL
    cdef char* tgt = NULL
    cdef char* w = NULL
    cdef double loss = 0, wsum = 0, wv, v, lr, twr
    if m not in (0, 1, 2) or n < 0 or c < 0 or hh < 0 or ww < 0:
        raise KernelArgumentError(f"nll_loss2d: bad mode/shape {mode!r} {(N, C, H, W)!r}")
    is0, is1, is2, is3 = (<Py_ssize_t>s * isz for s in in_strides4)
    ts0, ts1, ts2 = (<Py_ssize_t>s * 8 for s in tgt_strides3)
    if m == 0:
        os0, os1, os2 = (<Py_ssize_t>s * osz for s in out_strides3)
    out = as_ptr(out_addr, "nll_loss2d out_addr")
    tw = as_ptr(tw_addr, "nll_loss2d tw_addr")
    if n * hh * ww:
        inp = as_ptr(in_addr, "nll_loss2d in_addr")
        tgt = as_ptr(tgt_addr, "nll_loss2d tgt_addr")
    if has_w:
        w = as_ptr(w_addr, "nll_loss2d w_addr")
    with nogil:
        for i in range(n):
            for y in range(hh):
                for x in range(ww):
                    t = ek_ld_i64(tgt + i * ts0 + y * ts1 + x * ts2)
                    if t == ign:
                        if m == 0:
                            _st(out + i * os0 + y * os1 + x * os2, odt, 0.0)
                        continue
                    if t < 0 or t >= c:
                        has_bad, bad = True, t
                        break
                    v = _ld(inp + i * is0 + t * is1 + y * is2 + x * is3, idt)
                    wv = _ld(w + t * sw, wdt) if has_w else 1.0
                    if m == 0:
                        _st(out + i * os0 + y * os1 + x * os2, odt, -v * wv)
                    else:
                        loss -= v * wv
                        wsum += wv
                if has_bad:
                    break
            if has_bad:
                break
        if not has_bad:
            if m == 0:
                _st(tw, twdt, 0.0)
            else:
                twr = round_to(wsum, twdt)
                lr = round_to(loss, odt)
                if m == 1:
                    lr = _div(lr, twr, odt)
                _st(out, odt, lr)
                _st(tw, twdt, twr)
    if has_bad:
        raise KernelArgumentError(f"Target {bad} is out of bounds.")


def nll_loss2d_backward(gi_addr, gi_dtype, gi_strides4, go_addr, go_dtype, go_strides3, tgt_addr, tgt_strides3,
                        w_addr, w_dtype, w_s, tw_addr, tw_dtype, N, C, H, W, mode, ignore_index):
    """grad_input (N, C, H, W) = 0 except at each target class: -w[t] * g, with g = grad_output[i, y, x]
    (mode 0), grad_output / total_weight (mean) or grad_output (sum)."""
    cdef int gidt = check_dtype(gi_dtype, "nll_loss2d_backward gi_dtype")
    cdef int godt = check_dtype(go_dtype, "nll_loss2d_backward go_dtype")
    cdef int wdt = check_dtype(w_dtype, "nll_loss2d_backward w_dtype")
    cdef int twdt = check_dtype(tw_dtype, "nll_loss2d_backward tw_dtype")
    cdef Py_ssize_t n = N, c = C, hh = H, ww = W, i, y, x, k
    cdef Py_ssize_t gsz = itemsize_of(gidt), gosz = itemsize_of(godt)
    cdef Py_ssize_t gs0, gs1, gs2, gs3, os0 = 0, os1 = 0, os2 = 0, ts0, ts1, ts2
    cdef Py_ssize_t sw = <Py_ssize_t>w_s * itemsize_of(wdt)
    cdef int m = mode
    cdef int64_t ign = ignore_index, t, bad = 0
    cdef bint has_bad = False, has_w = w_addr != 0
    cdef char* gi
    cdef char* go
    cdef char* tgt
    cdef char* w = NULL
    cdef double g = 0, wv, v
    if m not in (0, 1, 2) or n < 0 or c < 0 or hh < 0 or ww < 0:
        raise KernelArgumentError(f"nll_loss2d_backward: bad mode/shape {mode!r} {(N, C, H, W)!r}")
    gs0, gs1, gs2, gs3 = (<Py_ssize_t>s * gsz for s in gi_strides4)
    ts0, ts1, ts2 = (<Py_ssize_t>s * 8 for s in tgt_strides3)
    if m == 0:
        os0, os1, os2 = (<Py_ssize_t>s * gosz for s in go_strides3)
    if n * c * hh * ww == 0:
        return
    gi = as_ptr(gi_addr, "nll_loss2d_backward gi_addr")
    go = as_ptr(go_addr, "nll_loss2d_backward go_addr")
    tgt = as_ptr(tgt_addr, "nll_loss2d_backward tgt_addr")
    if has_w:
        w = as_ptr(w_addr, "nll_loss2d_backward w_addr")
    if m != 0:
        g = round_to(_ld(go, godt), gidt)
        if m == 1:
            g = _div(g, round_to(_ld(as_ptr(tw_addr, "nll_loss2d_backward tw_addr"), twdt), gidt), gidt)
        g = -g
    with nogil:
        for i in range(n):
            for k in range(c):
                for y in range(hh):
                    for x in range(ww):
                        _st(gi + i * gs0 + k * gs1 + y * gs2 + x * gs3, gidt, 0.0)
        for i in range(n):
            for y in range(hh):
                for x in range(ww):
                    t = ek_ld_i64(tgt + i * ts0 + y * ts1 + x * ts2)
                    if t == ign:
                        continue
                    if t < 0 or t >= c:
                        has_bad, bad = True, t
                        break
                    wv = round_to(_ld(w + t * sw, wdt), gidt) if has_w else 1.0
                    if m == 0:
                        v = -wv * round_to(_ld(go + i * os0 + y * os1 + x * os2, godt), gidt)
                    else:
                        v = wv * g
                    _st(gi + i * gs0 + t * gs1 + y * gs2 + x * gs3, gidt, v)
                if has_bad:
                    break
            if has_bad:
                break
    if has_bad:
        raise KernelArgumentError(f"Target {bad} is out of bounds.")


# ---------------------------------------------------------------------------------------------
# Pointwise losses: mse, smooth_l1, huber, binary_cross_entropy (+ with_logits), forward and backward.
#
# Operands are described at the loss's shape (broadcast operands with stride 0). Each element is
# computed in float64 from operands widened exactly, and rounded once to the output dtype (CPU
# computes in the dtype itself -- float32, or float16/bfloat16 op by op -- so the last bit may
# differ). mean/sum accumulate in float64 and round once; mean of nothing is NaN, as on CPU.

from libc.math cimport log, log1p, exp, fabs, isnan

cdef enum:
    LOSS_MSE = 0
    LOSS_SMOOTH_L1 = 1
    LOSS_HUBER = 2
    LOSS_BCE = 3
    LOSS_BCE_LOGITS = 4
    LOSS_OPS = 6             # operands of one pointwise-loss walk: out/grad, grad_output, x, y, w, pos_weight
    LOSS_CHUNK = 128

_LOSS_NAMES = ("mse_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
               "binary_cross_entropy_with_logits")


cdef struct LossWalk:
    int ndim
    Py_ssize_t shape[MAX_RANK]
    Py_ssize_t strides[LOSS_OPS][MAX_RANK]   # bytes
    Py_ssize_t index[MAX_RANK]
    char* ptr[LOSS_OPS]
    int dtype[LOSS_OPS]
    bint present[LOSS_OPS]


cdef int walk_init(LossWalk* wk, object shape, list operands, str what) except -1:
    """operands: LOSS_OPS entries, each None or (addr, dtype, strides in elements)."""
    cdef int k, d, ndim
    shape = tuple(shape)
    ndim = len(shape)
    if ndim > MAX_RANK:
        raise KernelArgumentError(f"{what}: rank {ndim} exceeds the maximum of {MAX_RANK}")
    for d in range(ndim):
        if shape[d] < 0:
            raise KernelArgumentError(f"{what}: negative extent in shape {shape!r}")
        wk.shape[d] = shape[d]
        wk.index[d] = 0
    wk.ndim = ndim
    for k in range(LOSS_OPS):
        op = operands[k]
        wk.present[k] = op is not None
        wk.ptr[k] = NULL
        wk.dtype[k] = DT_FLOAT32
        for d in range(ndim):
            wk.strides[k][d] = 0
        if op is None:
            continue
        addr, dt, strides = op
        wk.dtype[k] = check_dtype(dt, what)
        strides = tuple(strides)
        if len(strides) != ndim:
            raise KernelArgumentError(f"{what}: strides {strides!r} do not match shape {shape!r}")
        for d in range(ndim):
            wk.strides[k][d] = <Py_ssize_t>strides[d] * itemsize_of(wk.dtype[k])
    return 0


cdef int walk_addresses(LossWalk* wk, list operands, str what) except -1:
    cdef int k
    for k in range(LOSS_OPS):
        if wk.present[k]:
            wk.ptr[k] = as_ptr(operands[k][0], what)
    return 0


cdef inline bint walk_next_row(LossWalk* wk) noexcept nogil:
    """Advance every operand to the next row (all but the innermost dim); False when done."""
    cdef int d = wk.ndim - 2, k
    while d >= 0:
        wk.index[d] += 1
        for k in range(LOSS_OPS):
            wk.ptr[k] += wk.strides[k][d]
        if wk.index[d] < wk.shape[d]:
            return True
        for k in range(LOSS_OPS):
            wk.ptr[k] -= wk.strides[k][d] * wk.shape[d]
        wk.index[d] = 0
        d -= 1
    return False


cdef inline double _log_sigmoid(double x) noexcept nogil:
    return (x if x < 0 else 0.0) - log1p(exp(-fabs(x)))


cdef inline double _loss_value(int op, double x, double y, double pw, bint has_pw, double param,
                               int* bad) noexcept nogil:
    cdef double z, lw
    if op == LOSS_MSE:
        return (x - y) * (x - y)
    if op == LOSS_SMOOTH_L1:
        z = fabs(x - y)
        return 0.5 * z * z / param if z < param else z - 0.5 * param
    if op == LOSS_HUBER:
        z = fabs(x - y)
        return 0.5 * z * z if z < param else param * (z - 0.5 * param)
    if op == LOSS_BCE:
        if not (x >= 0 and x <= 1):
            bad[0] = 1
            return 0
        if not (y >= 0 and y <= 1):
            bad[0] = 2
            return 0
        # CPU's clamp of each log at -100 (so 0 * log(0) is 0, not NaN)
        z = log1p(-x)
        lw = log(x)
        return (y - 1) * (z if z > -100 else -100.0) - y * (lw if lw > -100 else -100.0)
    # LOSS_BCE_LOGITS: (1 - y) * x - ((pw - 1) * y + 1) * log_sigmoid(x)
    lw = (pw - 1) * y + 1 if has_pw else 1.0
    return (1 - y) * x - lw * _log_sigmoid(x)


cdef inline double _loss_grad(int op, double g, double x, double y, double norm, double param) noexcept nogil:
    cdef double d = x - y, den
    if op == LOSS_MSE:
        return norm * d * g
    if op == LOSS_SMOOTH_L1:   # CPU's order of the tests (beta == 0: d <= 0 gives -norm * g)
        return -norm * g if d <= -param else (norm * g if d >= param else norm * d * g / param)
    if op == LOSS_HUBER:
        return -norm * g * param if d < -param else (norm * g * param if d > param else norm * d * g)
    # LOSS_BCE: g * (x - y) / max((1 - x) * x, 1e-12)
    den = (1 - x) * x
    return norm * g * d / (den if den > 1e-12 else 1e-12)


def pointwise_loss(op, out, x, y, w, pos_weight, shape, mode, param):
    """Forward loss. ``out``/``x``/``y``/``w``/``pos_weight``: None or (addr, dtype, strides) described at
    ``shape``; mode 0: ``out`` at ``shape``; 1 (mean) / 2 (sum): ``out`` is a scalar (strides all 0).
    ``param``: beta (smooth_l1) or delta (huber)."""
    cdef int kop = op, m = mode, bad = 0, odt, k
    cdef double p = param, s = 0, v
    cdef Py_ssize_t count = 1, row, j0, cnt, j
    cdef LossWalk wk
    cdef double vx[LOSS_CHUNK]
    cdef double vy[LOSS_CHUNK]
    cdef double vw[LOSS_CHUNK]
    cdef double vp[LOSS_CHUNK]
    cdef bint has_w, has_pw
    if not 0 <= kop <= LOSS_BCE_LOGITS or m not in (0, 1, 2) or out is None or x is None or y is None:
        raise KernelArgumentError(f"pointwise_loss: bad op/mode/operands {op!r} {mode!r}")
    what = _LOSS_NAMES[kop]
    ops = [out, None, x, y, w, pos_weight]
    walk_init(&wk, shape, ops, what)
    has_w, has_pw = wk.present[4], wk.present[5]
    odt = wk.dtype[0]
    for k in range(wk.ndim):
        count *= wk.shape[k]
    walk_addresses(&wk, ops, what)
    with nogil:
        if count > 0:
            row = wk.shape[wk.ndim - 1] if wk.ndim else 1
            while True:
                j0 = 0
                while j0 < row:
                    cnt = row - j0 if row - j0 < LOSS_CHUNK else LOSS_CHUNK
                    if wk.ndim:
                        load_block(wk.ptr[2] + j0 * wk.strides[2][wk.ndim - 1], wk.strides[2][wk.ndim - 1],
                                   wk.dtype[2], cnt, vx)
                        load_block(wk.ptr[3] + j0 * wk.strides[3][wk.ndim - 1], wk.strides[3][wk.ndim - 1],
                                   wk.dtype[3], cnt, vy)
                        if has_w:
                            load_block(wk.ptr[4] + j0 * wk.strides[4][wk.ndim - 1], wk.strides[4][wk.ndim - 1],
                                       wk.dtype[4], cnt, vw)
                        if has_pw:
                            load_block(wk.ptr[5] + j0 * wk.strides[5][wk.ndim - 1], wk.strides[5][wk.ndim - 1],
                                       wk.dtype[5], cnt, vp)
                    else:
                        load_block(wk.ptr[2], 0, wk.dtype[2], 1, vx)
                        load_block(wk.ptr[3], 0, wk.dtype[3], 1, vy)
                        if has_w:
                            load_block(wk.ptr[4], 0, wk.dtype[4], 1, vw)
                        if has_pw:
                            load_block(wk.ptr[5], 0, wk.dtype[5], 1, vp)
                    for j in range(cnt):
                        v = _loss_value(kop, vx[j], vy[j], vp[j] if has_pw else 0.0, has_pw, p, &bad)
                        if has_w:
                            v = v * vw[j]
                        if m == 0:
                            vx[j] = v
                        else:
                            s += v
                    if bad:
                        break
                    if m == 0:
                        store_block(vx, cnt, odt, wk.ptr[0] + j0 * (wk.strides[0][wk.ndim - 1] if wk.ndim else 0),
                                    wk.strides[0][wk.ndim - 1] if wk.ndim else 0)
                    j0 += cnt
                if bad or wk.ndim <= 1 or not walk_next_row(&wk):
                    break
        if m != 0 and not bad:
            if m == 1:
                s = s / <double>count           # 0 / 0 = NaN for an empty mean, as CPU
            s = round_to(s, odt)
            store_block(&s, 1, odt, wk.ptr[0], 0)
    if bad == 1:
        raise KernelArgumentError("all elements of input should be between 0 and 1")
    if bad == 2:
        raise KernelArgumentError("all elements of target should be between 0 and 1")


def pointwise_loss_backward(op, grad_input, grad_output, x, y, w, shape, mode, param):
    """grad_input (at ``shape``) of a pointwise loss; ``grad_output`` is described at ``shape`` too
    (all strides 0 for mean/sum). mean divides by the element count (mse also doubles)."""
    cdef int kop = op, m = mode, gdt, k
    cdef double p = param, norm
    cdef Py_ssize_t count = 1, row, j0, cnt, j, last
    cdef LossWalk wk
    cdef double vg[LOSS_CHUNK]
    cdef double vx[LOSS_CHUNK]
    cdef double vy[LOSS_CHUNK]
    cdef double vw[LOSS_CHUNK]
    cdef double* bufs[5]
    cdef bint has_w
    bufs[0], bufs[1], bufs[2], bufs[3], bufs[4] = NULL, vg, vx, vy, vw
    if not 0 <= kop <= LOSS_BCE or m not in (0, 1, 2) or grad_input is None or grad_output is None \
            or x is None or y is None:
        raise KernelArgumentError(f"pointwise_loss_backward: bad op/mode/operands {op!r} {mode!r}")
    what = _LOSS_NAMES[kop] + "_backward"
    ops = [grad_input, grad_output, x, y, w, None]
    walk_init(&wk, shape, ops, what)
    has_w = wk.present[4]
    gdt = wk.dtype[0]
    for k in range(wk.ndim):
        count *= wk.shape[k]
    if count == 0:
        return
    walk_addresses(&wk, ops, what)
    norm = 2.0 if kop == LOSS_MSE else 1.0
    if m == 1:
        norm = norm / <double>count
    with nogil:
        last = wk.ndim - 1
        row = wk.shape[last] if wk.ndim else 1
        while True:
            j0 = 0
            while j0 < row:
                cnt = row - j0 if row - j0 < LOSS_CHUNK else LOSS_CHUNK
                for k in range(5):
                    if k == 0 or (k == 4 and not has_w):
                        continue
                    load_block(wk.ptr[k] + (j0 * wk.strides[k][last] if wk.ndim else 0),
                               wk.strides[k][last] if wk.ndim else 0, wk.dtype[k], cnt, bufs[k])
                for j in range(cnt):
                    vg[j] = _loss_grad(kop, vg[j], vx[j], vy[j], norm, p)
                    if has_w:
                        vg[j] = vg[j] * vw[j]
                store_block(vg, cnt, gdt, wk.ptr[0] + (j0 * wk.strides[0][last] if wk.ndim else 0),
                            wk.strides[0][last] if wk.ndim else 0)
                j0 += cnt
            if wk.ndim <= 1 or not walk_next_row(&wk):
                break
