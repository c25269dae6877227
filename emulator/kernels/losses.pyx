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
