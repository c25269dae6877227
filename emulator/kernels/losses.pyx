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


# ---------------------------------------------------------------------------------------------
# Margin losses over (N, C) scores (pooling and sampling extras): multi_margin_loss and
# multilabel_margin_loss, forward and backward, in CPU's loop order and its scalar type
# (float32 for float32, float64 for float64). Targets are int64; the host has checked their
# range. Reduction: 0 none (out is (N)), 1 mean, 2 sum (out is one element).

from libc.stdlib cimport malloc, free


ctypedef fused margin_t:
    float
    double


cdef inline margin_t _mld(const char* p, int dt, margin_t kind) noexcept nogil:
    cdef margin_t v
    load_block(p, 0, dt, 1, &v)
    return v


cdef inline void _sample_loss(margin_t s, Py_ssize_t i, int reduction, margin_t* total, char* out, int odt,
                              Py_ssize_t os) noexcept nogil:
    """Sample i's loss: out[i] without a reduction, else a term of the total."""
    if reduction == 0:
        store_block(&s, 1, odt, out + i * os, 0)
    else:
        total[0] = total[0] + s


cdef inline void _store_reduced(margin_t total, Py_ssize_t N, int reduction, char* out, int odt) noexcept nogil:
    """The mean (1) or sum (2) of the sample losses into out's one element; nothing for none (0)."""
    if reduction != 0:
        if reduction == 1:
            total = total / <margin_t>N
        store_block(&total, 1, odt, out, 0)


cdef inline margin_t _grad_unit(Py_ssize_t N, Py_ssize_t C, int reduction, margin_t kind) noexcept nogil:
    """d(loss)/d(one margin term): CPU's 1 / (N * C) for a mean, else 1 / C."""
    return <margin_t>(1.0 / (N * C)) if reduction == 1 else <margin_t>(1.0 / C)


cdef inline void _store_grad_row(margin_t* row, Py_ssize_t C, const char* go, int xdt, char* gi,
                                 Py_ssize_t gs1) noexcept nogil:
    """grad_input's row = row * grad_output (go: the sample's element, or the reduced loss's one)."""
    cdef margin_t scale = _mld(go, xdt, <margin_t>0)
    cdef Py_ssize_t d
    for d in range(C):
        row[d] = row[d] * scale
    store_block(row, C, xdt, gi, gs1)


cdef void* _row(Py_ssize_t C, Py_ssize_t isz, str what) except NULL:
    cdef void* row = malloc(C * isz)
    if row == NULL:
        raise MemoryError(f"{what}: cannot allocate a row")
    return row


cdef void _multi_margin(Py_ssize_t N, Py_ssize_t C, const char* x, int xdt, Py_ssize_t xs0, Py_ssize_t xs1,
                        const char* t, Py_ssize_t ts, const char* w, int wdt, Py_ssize_t ws, int p, double margin,
                        int reduction, char* out, int odt, Py_ssize_t os, margin_t kind) noexcept nogil:
    cdef Py_ssize_t i, d
    cdef int64_t ti
    cdef margin_t total = 0, s, xt, z, h, m = <margin_t>margin
    for i in range(N):
        ti = ek_ld_i64(t + i * ts)
        xt = _mld(x + i * xs0 + ti * xs1, xdt, kind)
        s = 0
        for d in range(C):
            if d == ti:
                continue
            z = m - xt + _mld(x + i * xs0 + d * xs1, xdt, kind)
            if z > 0:
                h = z if p == 1 else z * z
                if w != NULL:
                    h = h * _mld(w + ti * ws, wdt, kind)
                s = s + h
        _sample_loss(s / <margin_t>C, i, reduction, &total, out, odt, os)
    _store_reduced(total, N, reduction, out, odt)


def multi_margin_loss(out_addr, out_dtype, out_stride, x_addr, x_dtype, x_strides, x_shape, t_addr, t_stride,
                      w_addr, w_dtype, w_stride, p, margin, reduction):
    """multi_margin_loss of x (N, C) with int64 targets (N); w_addr 0 = no class weights."""
    cdef int odt = check_dtype(out_dtype, "multi_margin_loss out_dtype")
    cdef int xdt = check_dtype(x_dtype, "multi_margin_loss x_dtype")
    cdef int wdt = check_dtype(w_dtype, "multi_margin_loss w_dtype")
    cdef Py_ssize_t N = x_shape[0], C = x_shape[1], isz = itemsize_of(xdt)
    cdef Py_ssize_t xs0 = x_strides[0] * isz, xs1 = x_strides[1] * isz, ts = t_stride * 8
    cdef Py_ssize_t ws = w_stride * itemsize_of(wdt), os = out_stride * itemsize_of(odt)
    cdef int pp = p, red = reduction
    cdef double mg = margin
    cdef const char* w = NULL
    cdef const char* x = NULL
    cdef const char* t = NULL
    cdef char* out
    if xdt not in (DT_FLOAT32, DT_FLOAT64) or odt != xdt or pp not in (1, 2) or red not in (0, 1, 2) or C <= 0:
        raise KernelArgumentError("multi_margin_loss: float32/float64 scores, p 1 or 2, C > 0 expected")
    if N == 0 and red == 0:
        return
    out = as_ptr(out_addr, "multi_margin_loss out_addr")
    if N:
        x = as_ptr(x_addr, "multi_margin_loss x_addr")
        t = as_ptr(t_addr, "multi_margin_loss t_addr")
    if w_addr:
        w = as_ptr(w_addr, "multi_margin_loss w_addr")
    with nogil:
        if xdt == DT_FLOAT64:
            _multi_margin(N, C, x, xdt, xs0, xs1, t, ts, w, wdt, ws, pp, mg, red, out, odt, os, <double>0)
        else:
            _multi_margin(N, C, x, xdt, xs0, xs1, t, ts, w, wdt, ws, pp, mg, red, out, odt, os, <float>0)


cdef void _multi_margin_backward(Py_ssize_t N, Py_ssize_t C, char* gi, Py_ssize_t gs0, Py_ssize_t gs1,
                                 const char* go, Py_ssize_t gos, const char* x, int xdt, Py_ssize_t xs0,
                                 Py_ssize_t xs1, const char* t, Py_ssize_t ts, const char* w, int wdt,
                                 Py_ssize_t ws, int p, double margin, int reduction, margin_t* row) noexcept nogil:
    cdef Py_ssize_t i, d
    cdef int64_t ti
    cdef margin_t g, xt, z, h, m = <margin_t>margin
    g = _grad_unit(N, C, reduction, <margin_t>0)
    for i in range(N):
        ti = ek_ld_i64(t + i * ts)
        xt = _mld(x + i * xs0 + ti * xs1, xdt, g)
        row[ti] = 0
        for d in range(C):
            if d == ti:
                continue
            z = m - xt + _mld(x + i * xs0 + d * xs1, xdt, g)
            if z > 0:
                h = g if p == 1 else 2 * g * z
                if w != NULL:
                    h = h * _mld(w + ti * ws, wdt, g)
                row[ti] -= h
                row[d] = h
            else:
                row[d] = 0
        _store_grad_row(row, C, go + i * gos, xdt, gi + i * gs0, gs1)      # gos = 0: a reduced loss


def multi_margin_loss_backward(gi_addr, gi_strides, go_addr, go_stride, x_addr, x_dtype, x_strides, x_shape,
                               t_addr, t_stride, w_addr, w_dtype, w_stride, p, margin, reduction):
    """grad_input (N, C) of multi_margin_loss; go_stride 0 for a reduced loss (CPU's formula)."""
    cdef int xdt = check_dtype(x_dtype, "multi_margin_loss_backward x_dtype")
    cdef int wdt = check_dtype(w_dtype, "multi_margin_loss_backward w_dtype")
    cdef Py_ssize_t N = x_shape[0], C = x_shape[1], isz = itemsize_of(xdt)
    cdef Py_ssize_t xs0 = x_strides[0] * isz, xs1 = x_strides[1] * isz, ts = t_stride * 8
    cdef Py_ssize_t gs0 = gi_strides[0] * isz, gs1 = gi_strides[1] * isz, gos = go_stride * isz
    cdef Py_ssize_t ws = w_stride * itemsize_of(wdt)
    cdef int pp = p, red = reduction
    cdef double mg = margin
    cdef const char* w = NULL
    cdef void* row
    cdef char* gi
    cdef const char* go
    cdef const char* x
    cdef const char* t
    if xdt not in (DT_FLOAT32, DT_FLOAT64) or pp not in (1, 2) or red not in (0, 1, 2) or C <= 0:
        raise KernelArgumentError("multi_margin_loss_backward: float32/float64 scores, p 1 or 2, C > 0 expected")
    if N == 0:
        return
    gi = as_ptr(gi_addr, "multi_margin_loss_backward gi_addr")
    go = as_ptr(go_addr, "multi_margin_loss_backward go_addr")
    x = as_ptr(x_addr, "multi_margin_loss_backward x_addr")
    t = as_ptr(t_addr, "multi_margin_loss_backward t_addr")
    if w_addr:
        w = as_ptr(w_addr, "multi_margin_loss_backward w_addr")
    row = _row(C, isz, "multi_margin_loss_backward")
    with nogil:
        if xdt == DT_FLOAT64:
            _multi_margin_backward(N, C, gi, gs0, gs1, go, gos, x, xdt, xs0, xs1, t, ts, w, wdt, ws, pp, mg, red,
                                   <double*>row)
        else:
            _multi_margin_backward(N, C, gi, gs0, gs1, go, gos, x, xdt, xs0, xs1, t, ts, w, wdt, ws, pp, mg, red,
                                   <float*>row)
    free(row)


cdef void _multilabel(Py_ssize_t N, Py_ssize_t C, const char* x, int xdt, Py_ssize_t xs0, Py_ssize_t xs1,
                      const char* t, Py_ssize_t ts0, Py_ssize_t ts1, char* ist, Py_ssize_t is0, Py_ssize_t is1,
                      int reduction, char* out, Py_ssize_t os, margin_t* row) noexcept nogil:
    # row: the sample's is_target flags
    cdef Py_ssize_t i, j, d
    cdef int64_t tj
    cdef margin_t total = 0, s, xt, z
    for i in range(N):
        for d in range(C):
            row[d] = 0
        for j in range(C):
            tj = ek_ld_i64(t + i * ts0 + j * ts1)
            if tj < 0:
                break
            row[tj] = 1
        s = 0
        for j in range(C):
            tj = ek_ld_i64(t + i * ts0 + j * ts1)
            if tj < 0:
                break
            xt = _mld(x + i * xs0 + tj * xs1, xdt, s)
            for d in range(C):
                if row[d] == 0:
                    z = 1 - xt + _mld(x + i * xs0 + d * xs1, xdt, s)
                    if z > 0:
                        s = s + z
        store_block(row, C, xdt, ist + i * is0, is1)
        _sample_loss(s / <margin_t>C, i, reduction, &total, out, xdt, os)
    _store_reduced(total, N, reduction, out, xdt)


def multilabel_margin_loss(out_addr, out_stride, ist_addr, ist_strides, x_addr, x_dtype, x_strides, x_shape,
                           t_addr, t_strides, reduction):
    """multilabel_margin_loss of x (N, C) with int64 label lists (N, C) ended by -1; also writes
    is_target (N, C) in x's dtype."""
    cdef int xdt = check_dtype(x_dtype, "multilabel_margin_loss x_dtype")
    cdef Py_ssize_t N = x_shape[0], C = x_shape[1], isz = itemsize_of(xdt)
    cdef Py_ssize_t xs0 = x_strides[0] * isz, xs1 = x_strides[1] * isz
    cdef Py_ssize_t ts0 = t_strides[0] * 8, ts1 = t_strides[1] * 8
    cdef Py_ssize_t is0 = ist_strides[0] * isz, is1 = ist_strides[1] * isz, os = out_stride * isz
    cdef int red = reduction
    cdef void* row
    cdef char* out
    cdef char* ist = NULL
    cdef const char* x = NULL
    cdef const char* t = NULL
    if xdt not in (DT_FLOAT32, DT_FLOAT64) or red not in (0, 1, 2) or C <= 0:
        raise KernelArgumentError("multilabel_margin_loss: float32/float64 scores, C > 0 expected")
    if N == 0 and red == 0:
        return
    out = as_ptr(out_addr, "multilabel_margin_loss out_addr")
    if N:
        x = as_ptr(x_addr, "multilabel_margin_loss x_addr")
        t = as_ptr(t_addr, "multilabel_margin_loss t_addr")
        ist = as_ptr(ist_addr, "multilabel_margin_loss ist_addr")
    row = _row(C, isz, "multilabel_margin_loss")
    with nogil:
        if xdt == DT_FLOAT64:
            _multilabel(N, C, x, xdt, xs0, xs1, t, ts0, ts1, ist, is0, is1, red, out, os, <double*>row)
        else:
            _multilabel(N, C, x, xdt, xs0, xs1, t, ts0, ts1, ist, is0, is1, red, out, os, <float*>row)
    free(row)


cdef void _multilabel_backward(Py_ssize_t N, Py_ssize_t C, char* gi, Py_ssize_t gs0, Py_ssize_t gs1,
                               const char* go, Py_ssize_t gos, const char* x, int xdt, Py_ssize_t xs0,
                               Py_ssize_t xs1, const char* t, Py_ssize_t ts0, Py_ssize_t ts1, const char* ist,
                               Py_ssize_t is0, Py_ssize_t is1, int reduction, margin_t* row) noexcept nogil:
    cdef Py_ssize_t i, j, d
    cdef int64_t tj
    cdef margin_t g, xt, z
    g = _grad_unit(N, C, reduction, <margin_t>0)
    for i in range(N):
        for d in range(C):
            row[d] = 0
        for j in range(C):
            tj = ek_ld_i64(t + i * ts0 + j * ts1)
            if tj < 0:
                break
            xt = _mld(x + i * xs0 + tj * xs1, xdt, g)
            for d in range(C):
                if _mld(ist + i * is0 + d * is1, xdt, g) == 0:
                    z = 1 - xt + _mld(x + i * xs0 + d * xs1, xdt, g)
                    if z > 0:
                        row[tj] -= g
                        row[d] += g
        _store_grad_row(row, C, go + i * gos, xdt, gi + i * gs0, gs1)


def multilabel_margin_loss_backward(gi_addr, gi_strides, go_addr, go_stride, x_addr, x_dtype, x_strides, x_shape,
                                    t_addr, t_strides, ist_addr, ist_strides, reduction):
    cdef int xdt = check_dtype(x_dtype, "multilabel_margin_loss_backward x_dtype")
    cdef Py_ssize_t N = x_shape[0], C = x_shape[1], isz = itemsize_of(xdt)
    cdef Py_ssize_t xs0 = x_strides[0] * isz, xs1 = x_strides[1] * isz
    cdef Py_ssize_t ts0 = t_strides[0] * 8, ts1 = t_strides[1] * 8
    cdef Py_ssize_t is0 = ist_strides[0] * isz, is1 = ist_strides[1] * isz
    cdef Py_ssize_t gs0 = gi_strides[0] * isz, gs1 = gi_strides[1] * isz, gos = go_stride * isz
    cdef int red = reduction
    cdef void* row
    cdef char* gi
    cdef const char* go
    cdef const char* x
    cdef const char* t
    cdef const char* ist
    if xdt not in (DT_FLOAT32, DT_FLOAT64) or red not in (0, 1, 2) or C <= 0:
        raise KernelArgumentError("multilabel_margin_loss_backward: float32/float64 scores, C > 0 expected")
    if N == 0:
        return
    gi = as_ptr(gi_addr, "multilabel_margin_loss_backward gi_addr")
    go = as_ptr(go_addr, "multilabel_margin_loss_backward go_addr")
    x = as_ptr(x_addr, "multilabel_margin_loss_backward x_addr")
    t = as_ptr(t_addr, "multilabel_margin_loss_backward t_addr")
    ist = as_ptr(ist_addr, "multilabel_margin_loss_backward ist_addr")
    row = _row(C, isz, "multilabel_margin_loss_backward")
    with nogil:
        if xdt == DT_FLOAT64:
            _multilabel_backward(N, C, gi, gs0, gs1, go, gos, x, xdt, xs0, xs1, t, ts0, ts1, ist, is0, is1, red,
                                 <double*>row)
        else:
            _multilabel_backward(N, C, gi, gs0, gs1, go, gos, x, xdt, xs0, xs1, t, ts0, ts1, ist, is0, is1, red,
                                 <float*>row)
    free(row)


# ---------------------------------------------------------------------------------------------
# CTC loss forward: CPU's alpha recursion in log space (ctc_loss_cpu_template), in the scores'
# type. log_alpha (N, T, 2 * Smax + 1) gets -inf outside the recursion's reach (CPU leaves it
# unwritten; its backward reads only the reached part).

from libc.math cimport exp as c_exp, log as c_log, INFINITY as C_INF


cdef inline int64_t _prime(const char* tg, int tdt, Py_ssize_t ts, Py_ssize_t s, int64_t blank) noexcept nogil:
    cdef int64_t v
    if s % 2 == 0:
        return blank
    load_block(tg + ((s - 1) // 2) * ts, 0, tdt, 1, &v)
    return v


cdef void _ctc(Py_ssize_t N, Py_ssize_t T, Py_ssize_t C, Py_ssize_t S2, const char* lp, int ldt, Py_ssize_t* ls,
               const char* tg, int tdt, Py_ssize_t* tgoff, Py_ssize_t ts, int64_t* ilen, int64_t* tlen,
               int64_t blank, char* nll, Py_ssize_t ns, char* la, Py_ssize_t* las, margin_t kind) noexcept nogil:
    # ls: log_probs (T, N, C) byte strides; las: log_alpha (N, T, S2) byte strides
    cdef Py_ssize_t b, t, s, L, Tb
    cdef const char* tgb
    cdef margin_t la1, la2, la3, lamax, v, l1, l2, m, ninf = -C_INF
    cdef int64_t cur
    cdef char* row
    cdef char* prev
    for b in range(N):
        Tb = ilen[b]
        L = tlen[b]
        tgb = tg + tgoff[b]
        for t in range(T):
            row = la + b * las[0] + t * las[1]
            for s in range(S2):
                store_block(&ninf, 1, ldt, row + s * las[2], 0)
        if Tb > 0:
            row = la + b * las[0]
            load_block(lp + b * ls[1] + blank * ls[2], 0, ldt, 1, &v)
            store_block(&v, 1, ldt, row, 0)
            if L > 0:
                load_block(lp + b * ls[1] + _prime(tgb, tdt, ts, 1, blank) * ls[2], 0, ldt, 1, &v)
                store_block(&v, 1, ldt, row + las[2], 0)
        for t in range(1, Tb):
            row = la + b * las[0] + t * las[1]
            prev = row - las[1]
            for s in range(2 * L + 1):
                cur = _prime(tgb, tdt, ts, s, blank)
                load_block(prev + s * las[2], 0, ldt, 1, &la1)
                lamax = la1
                la2 = ninf
                la3 = ninf
                if s > 0:
                    load_block(prev + (s - 1) * las[2], 0, ldt, 1, &la2)
                    if la2 > lamax:
                        lamax = la2
                if s > 1 and _prime(tgb, tdt, ts, s - 2, blank) != cur:
                    load_block(prev + (s - 2) * las[2], 0, ldt, 1, &la3)
                    if la3 > lamax:
                        lamax = la3
                if lamax == ninf:
                    lamax = 0
                load_block(lp + t * ls[0] + b * ls[1] + cur * ls[2], 0, ldt, 1, &v)
                v = <margin_t>c_log(<margin_t>c_exp(la1 - lamax) + <margin_t>c_exp(la2 - lamax)
                                    + <margin_t>c_exp(la3 - lamax)) + lamax + v
                store_block(&v, 1, ldt, row + s * las[2], 0)
        if Tb == 0:
            v = 0 if L == 0 else C_INF      # no frames: only an empty target is reachable
        else:
            row = la + b * las[0] + (Tb - 1) * las[1]
            if L == 0:
                load_block(row, 0, ldt, 1, &v)
                v = -v
            else:
                load_block(row + 2 * L * las[2], 0, ldt, 1, &l1)
                load_block(row + (2 * L - 1) * las[2], 0, ldt, 1, &l2)
                m = l1 if l1 > l2 else l2
                if m == ninf:
                    m = 0
                v = -(<margin_t>c_log(<margin_t>c_exp(l1 - m) + <margin_t>c_exp(l2 - m)) + m)
        store_block(&v, 1, ldt, nll + b * ns, 0)


def ctc_loss(nll_addr, nll_stride, la_addr, la_strides, lp_addr, lp_dtype, lp_strides, lp_shape, tg_addr, tg_dtype,
             tg_stride, meta_addr, meta_strides, blank, max_target):
    """neg_log_likelihood (N) and log_alpha (N, T, 2 * max_target + 1) of log_probs (T, N, C);
    ``meta`` is an int64 (3, N) device table: per sample the targets' offset (elements; read with
    tg_stride), the input length and the target length. Lengths out of range raise."""
    cdef int ldt = check_dtype(lp_dtype, "ctc_loss lp_dtype")
    cdef int tdt = check_dtype(tg_dtype, "ctc_loss tg_dtype")
    cdef Py_ssize_t T = lp_shape[0], N = lp_shape[1], C = lp_shape[2], S2 = 2 * max_target + 1, i
    cdef Py_ssize_t ls[3]
    cdef Py_ssize_t las[3]
    cdef Py_ssize_t ts = tg_stride * itemsize_of(tdt), ns = nll_stride * itemsize_of(ldt)
    cdef int64_t bl = blank
    cdef Py_ssize_t* tgoff = NULL
    cdef int64_t* il = NULL
    cdef int64_t* tl = NULL
    cdef char* nll
    cdef char* la
    cdef const char* lp
    cdef const char* tg = NULL
    if ldt not in (DT_FLOAT32, DT_FLOAT64) or tdt not in (DT_INT32, DT_INT64) or not 0 <= bl < C:
        raise KernelArgumentError("ctc_loss: float32/float64 log_probs, int32/int64 targets, blank in range")
    cdef const char* meta
    cdef Py_ssize_t ms0 = meta_strides[0] * 8, ms1 = meta_strides[1] * 8
    for i in range(3):
        ls[i] = lp_strides[i] * itemsize_of(ldt)
        las[i] = la_strides[i] * itemsize_of(ldt)
    if N == 0:
        return
    nll = as_ptr(nll_addr, "ctc_loss nll_addr")
    la = as_ptr(la_addr, "ctc_loss la_addr") if T else NULL
    lp = as_ptr(lp_addr, "ctc_loss lp_addr") if T else NULL
    if max_target > 0:
        tg = as_ptr(tg_addr, "ctc_loss tg_addr")
    tgoff = <Py_ssize_t*>malloc(N * sizeof(Py_ssize_t))
    il = <int64_t*>malloc(N * sizeof(int64_t))
    tl = <int64_t*>malloc(N * sizeof(int64_t))
    try:
        if tgoff == NULL or il == NULL or tl == NULL:
            raise MemoryError("ctc_loss: cannot allocate the length tables")
        meta = as_ptr(meta_addr, "ctc_loss meta_addr")
        for i in range(N):
            tgoff[i] = ek_ld_i64(meta + i * ms1) * itemsize_of(tdt)
            il[i] = ek_ld_i64(meta + ms0 + i * ms1)
            tl[i] = ek_ld_i64(meta + 2 * ms0 + i * ms1)
            if not 0 <= il[i] <= T or not 0 <= tl[i] <= max_target:
                raise KernelArgumentError(f"ctc_loss: lengths {il[i]}, {tl[i]} out of range")
        with nogil:
            if ldt == DT_FLOAT64:
                _ctc(N, T, C, S2, lp, ldt, ls, tg, tdt, tgoff, ts, il, tl, bl, nll, ns, la, las, <double>0)
            else:
                _ctc(N, T, C, S2, lp, ldt, ls, tg, tdt, tgoff, ts, il, tl, bl, nll, ns, la, las, <float>0)
    finally:
        free(tgoff)
        free(il)
        free(tl)
