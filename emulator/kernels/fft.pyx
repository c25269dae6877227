# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Discrete Fourier transforms of the device's vector engine, and the complex construction
kernels (complex from real and imaginary parts, polar).

``fft`` computes ATen's three transform kinds over any list of dims, for operands of any
strides:

  * c2c: complex -> complex, forward (exp(-2 pi i jk/n)) or inverse (exp(+2 pi i jk/n));
  * r2c: real -> complex, forward; ``out``'s extent on the last transformed dim is n (two-sided)
    or n//2 + 1 (onesided: the other half is the conjugate of it);
  * c2r: complex (the first n//2 + 1 terms of a Hermitian spectrum on the last transformed dim)
    -> real, inverse; the other dims are inverse c2c transforms first, then the last dim is
    extended by conjugate symmetry, as ATen's CPU kernel does (the imaginary parts of the DC and
    Nyquist terms do not contribute).

Every 1-D line of a transformed dim is transformed in float64 (complex double): iterative radix-2
for powers of two, a direct DFT for other lengths up to DIRECT_MAX, and Bluestein's chirp-z
algorithm (a radix-2 convolution) beyond; twiddles are computed directly from exact angles
(reduced mod the period), so errors stay near float64 rounding. The operand is gathered into a
float64 scratch first and the result rounded once to the output dtype, after the normalization
scale: an output may therefore alias its input. Deliberately left out: half-precision complex
(complex32 is no device storage dtype) and any plan caching across launches.
"""

include "_common.pxi"

from libc.math cimport cos, sin, cosf, sinf
from libc.stdlib cimport malloc, free

cdef double TWO_PI = 6.283185307179586476925286766559
cdef double PI = 3.1415926535897932384626433832795

cdef enum:
    KIND_C2C = 0
    KIND_R2C = 1
    KIND_C2R = 2
    DIRECT_MAX = 64     # direct O(n^2) DFT up to this non-power-of-two length


cdef struct Plan:
    Py_ssize_t n
    double sign         # -1 forward, +1 inverse
    int method          # 0 identity, 1 radix-2, 2 direct, 3 Bluestein
    double* tw          # radix-2: n/2 twiddles; direct: n twiddles (interleaved re, im)
    Py_ssize_t m        # Bluestein: the radix-2 convolution length (>= 2n - 1)
    double* tw_m        # Bluestein: m/2 forward twiddles of length m
    double* chirp       # Bluestein: c_k = exp(sign i pi k^2 / n), k < n
    double* filt        # Bluestein: FFT_m of the conjugate chirp, circularly placed
    double* work        # n (direct) or m (Bluestein) complex scratch


cdef inline bint _is_pow2(Py_ssize_t n) noexcept nogil:
    return n > 0 and (n & (n - 1)) == 0


cdef void _twiddles(double* tw, Py_ssize_t count, Py_ssize_t n, double sign) noexcept nogil:
    """tw[k] = exp(sign * 2 pi i k / n) for k < count."""
    cdef Py_ssize_t k
    cdef double angle
    for k in range(count):
        angle = TWO_PI * <double>k / <double>n
        tw[2 * k] = cos(angle)
        tw[2 * k + 1] = sign * sin(angle)


cdef void _radix2(double* a, Py_ssize_t n, const double* tw) noexcept nogil:
    """In-place iterative radix-2 FFT of n (a power of two) interleaved complex values;
    tw holds n/2 twiddles exp(s 2 pi i k / n)."""
    cdef Py_ssize_t i, j, bit, length, half, step, k, p, q
    cdef double tr, ti, ur, ui, vr, vi, wr, wi
    j = 0
    for i in range(1, n):
        bit = n >> 1
        while j & bit:
            j ^= bit
            bit >>= 1
        j |= bit
        if i < j:
            tr = a[2 * i]; ti = a[2 * i + 1]
            a[2 * i] = a[2 * j]; a[2 * i + 1] = a[2 * j + 1]
            a[2 * j] = tr; a[2 * j + 1] = ti
    length = 2
    while length <= n:
        half = length >> 1
        step = n // length
        i = 0
        while i < n:
            for k in range(half):
                wr = tw[2 * k * step]; wi = tw[2 * k * step + 1]
                p = i + k
                q = p + half
                ur = a[2 * p]; ui = a[2 * p + 1]
                vr = a[2 * q] * wr - a[2 * q + 1] * wi
                vi = a[2 * q] * wi + a[2 * q + 1] * wr
                a[2 * p] = ur + vr; a[2 * p + 1] = ui + vi
                a[2 * q] = ur - vr; a[2 * q + 1] = ui - vi
            i += length
        length <<= 1


cdef void _inverse_radix2(double* a, Py_ssize_t n, const double* tw_forward) noexcept nogil:
    """Unscaled inverse transform with the forward twiddles: conj(FFT(conj(a)))."""
    cdef Py_ssize_t i
    for i in range(n):
        a[2 * i + 1] = -a[2 * i + 1]
    _radix2(a, n, tw_forward)
    for i in range(n):
        a[2 * i + 1] = -a[2 * i + 1]


cdef void plan_free(Plan* plan) noexcept nogil:
    free(plan.tw)
    free(plan.tw_m)
    free(plan.chirp)
    free(plan.filt)
    free(plan.work)
    plan.tw = plan.tw_m = plan.chirp = plan.filt = plan.work = NULL


cdef int _out_of_memory(Plan* plan) except -1 nogil:
    plan_free(plan)
    with gil:
        raise MemoryError(f"fft: no host memory for the plan of a length-{plan.n} transform")


cdef int plan_init(Plan* plan, Py_ssize_t n, double sign) except -1 nogil:
    cdef Py_ssize_t k, m, t
    cdef long long sq
    cdef double angle, inv_m
    plan.n = n
    plan.sign = sign
    plan.tw = NULL
    plan.tw_m = NULL
    plan.chirp = NULL
    plan.filt = NULL
    plan.work = NULL
    plan.m = 0
    if n <= 1:
        plan.method = 0
        return 0
    if _is_pow2(n):
        plan.method = 1
        plan.tw = <double*>malloc(sizeof(double) * n)
        if plan.tw == NULL:
            return _out_of_memory(plan)
        _twiddles(plan.tw, n // 2, n, sign)
        return 0
    if n <= DIRECT_MAX:
        plan.method = 2
        plan.tw = <double*>malloc(sizeof(double) * 2 * n)
        plan.work = <double*>malloc(sizeof(double) * 2 * n)
        if plan.tw == NULL or plan.work == NULL:
            return _out_of_memory(plan)
        _twiddles(plan.tw, n, n, sign)
        return 0
    plan.method = 3
    m = 1
    while m < 2 * n - 1:
        m <<= 1
    plan.m = m
    plan.tw_m = <double*>malloc(sizeof(double) * m)
    plan.chirp = <double*>malloc(sizeof(double) * 2 * n)
    plan.filt = <double*>malloc(sizeof(double) * 2 * m)
    plan.work = <double*>malloc(sizeof(double) * 2 * m)
    if plan.tw_m == NULL or plan.chirp == NULL or plan.filt == NULL or plan.work == NULL:
        return _out_of_memory(plan)
    _twiddles(plan.tw_m, m // 2, m, -1.0)
    for k in range(n):
        sq = (<long long>k * <long long>k) % (2 * <long long>n)  # exact angle reduction
        angle = PI * <double>sq / <double>n
        plan.chirp[2 * k] = cos(angle)
        plan.chirp[2 * k + 1] = sign * sin(angle)
    for k in range(2 * m):
        plan.filt[k] = 0.0
    for k in range(n):  # b_t = conj(c_t), at t and at m - t
        plan.filt[2 * k] = plan.chirp[2 * k]
        plan.filt[2 * k + 1] = -plan.chirp[2 * k + 1]
        if k > 0:
            t = m - k
            plan.filt[2 * t] = plan.chirp[2 * k]
            plan.filt[2 * t + 1] = -plan.chirp[2 * k + 1]
    _radix2(plan.filt, m, plan.tw_m)
    inv_m = 1.0 / <double>m  # folded into the filter: the inverse transform is unscaled
    for k in range(2 * m):
        plan.filt[k] *= inv_m
    return 0


cdef void plan_execute(Plan* plan, double* a) noexcept nogil:
    """In-place DFT of n contiguous interleaved complex values."""
    cdef Py_ssize_t n = plan.n, m = plan.m, j, k, idx
    cdef double sr, si, xr, xi, wr, wi, cr, ci
    cdef double* w = plan.work
    if plan.method == 0:
        return
    if plan.method == 1:
        _radix2(a, n, plan.tw)
        return
    if plan.method == 2:
        for k in range(n):
            sr = 0.0
            si = 0.0
            idx = 0
            for j in range(n):
                wr = plan.tw[2 * idx]; wi = plan.tw[2 * idx + 1]
                xr = a[2 * j]; xi = a[2 * j + 1]
                sr += xr * wr - xi * wi
                si += xr * wi + xi * wr
                idx += k
                if idx >= n:
                    idx -= n
            w[2 * k] = sr
            w[2 * k + 1] = si
        for k in range(2 * n):
            a[k] = w[k]
        return
    # Bluestein: X_k = c_k * sum_j (x_j c_j) conj(c_{k-j}), a circular convolution of length m.
    for j in range(n):
        cr = plan.chirp[2 * j]; ci = plan.chirp[2 * j + 1]
        xr = a[2 * j]; xi = a[2 * j + 1]
        w[2 * j] = xr * cr - xi * ci
        w[2 * j + 1] = xr * ci + xi * cr
    for j in range(2 * n, 2 * m):
        w[j] = 0.0
    _radix2(w, m, plan.tw_m)
    for j in range(m):
        xr = w[2 * j]; xi = w[2 * j + 1]
        wr = plan.filt[2 * j]; wi = plan.filt[2 * j + 1]
        w[2 * j] = xr * wr - xi * wi
        w[2 * j + 1] = xr * wi + xi * wr
    _inverse_radix2(w, m, plan.tw_m)
    for k in range(n):
        cr = plan.chirp[2 * k]; ci = plan.chirp[2 * k + 1]
        xr = w[2 * k]; xi = w[2 * k + 1]
        a[2 * k] = xr * cr - xi * ci
        a[2 * k + 1] = xr * ci + xi * cr


cdef inline void _outer_inner(const Py_ssize_t* shape, int ndim, int d, Py_ssize_t* outer,
                              Py_ssize_t* inner) noexcept nogil:
    """The extents of a C-contiguous shape before (outer) and after (inner) dim d."""
    cdef int k
    outer[0] = 1
    inner[0] = 1
    for k in range(d):
        outer[0] *= shape[k]
    for k in range(d + 1, ndim):
        inner[0] *= shape[k]


cdef int transform_dim(double* buf, const Py_ssize_t* shape, int ndim, int d, double sign,
                       double* line) except -1 nogil:
    """DFT of every line of the C-contiguous complex scratch ``buf`` along dim ``d``."""
    cdef Py_ssize_t outer, inner, n = shape[d], o, i, j, base, pos
    cdef Plan plan
    if n <= 1:
        return 0
    _outer_inner(shape, ndim, d, &outer, &inner)
    if outer * inner == 0:
        return 0
    plan_init(&plan, n, sign)
    for o in range(outer):
        for i in range(inner):
            base = o * n * inner + i
            pos = base
            for j in range(n):
                line[2 * j] = buf[2 * pos]
                line[2 * j + 1] = buf[2 * pos + 1]
                pos += inner
            plan_execute(&plan, line)
            pos = base
            for j in range(n):
                buf[2 * pos] = line[2 * j]
                buf[2 * pos + 1] = line[2 * j + 1]
                pos += inner
    plan_free(&plan)
    return 0


cdef int c2r_last_dim(const double* buf, double* rbuf, const Py_ssize_t* shape, int ndim, int d,
                      Py_ssize_t n, double* line) except -1 nogil:
    """Inverse real transform along dim ``d``: ``buf`` (complex, C-contiguous, extent n//2+1 on
    d) -> ``rbuf`` (real, C-contiguous, extent n on d), each line extended by conjugate symmetry."""
    cdef Py_ssize_t outer, inner, h = n // 2 + 1, o, i, j, base
    cdef Plan plan
    _outer_inner(shape, ndim, d, &outer, &inner)
    if outer * inner == 0:
        return 0
    plan_init(&plan, n, 1.0)
    for o in range(outer):
        for i in range(inner):
            base = o * h * inner + i
            for j in range(h):
                line[2 * j] = buf[2 * (base + j * inner)]
                line[2 * j + 1] = buf[2 * (base + j * inner) + 1]
            for j in range(h, n):  # x[j] = conj(x[n - j]); n - j < h
                line[2 * j] = line[2 * (n - j)]
                line[2 * j + 1] = -line[2 * (n - j) + 1]
            if n > 1:
                plan_execute(&plan, line)
            base = o * n * inner + i
            for j in range(n):
                rbuf[base + j * inner] = line[2 * j]
    plan_free(&plan)
    return 0


cdef inline Py_ssize_t _first_row(NdIter* it, char** ptrs, char* op0, const char* op1, Py_ssize_t* s0,
                                  Py_ssize_t* s1) noexcept nogil:
    """Point ptrs at the first row of a two-operand walk; returns the row length and its strides."""
    ptrs[0] = op0
    ptrs[1] = <char*>op1
    s0[0] = iter_row_stride(it, 0)
    s1[0] = iter_row_stride(it, 1)
    return iter_row_len(it)


cdef int _load_complex(NdIter* it, char* scratch, const char* src, int dt) except -1 nogil:
    """Scratch (op 0, complex double) <- src (op 1: complex64/128 or a real dtype)."""
    cdef char* ptrs[2]
    cdef Py_ssize_t L, s0, s1, j
    cdef double block[BLOCK]
    cdef Py_ssize_t done, chunk
    if it.size == 0:
        return 0
    L = _first_row(it, ptrs, scratch, src, &s0, &s1)
    while True:
        if dt == DT_COMPLEX64:
            for j in range(L):
                ek_st_f64(ptrs[0] + j * s0, <double>ek_ld_f32(ptrs[1] + j * s1))
                ek_st_f64(ptrs[0] + j * s0 + 8, <double>ek_ld_f32(ptrs[1] + j * s1 + 4))
        elif dt == DT_COMPLEX128:
            for j in range(L):
                ek_st_f64(ptrs[0] + j * s0, ek_ld_f64(ptrs[1] + j * s1))
                ek_st_f64(ptrs[0] + j * s0 + 8, ek_ld_f64(ptrs[1] + j * s1 + 8))
        else:
            done = 0
            while done < L:
                chunk = L - done if L - done < BLOCK else BLOCK
                load_block(ptrs[1] + done * s1, s1, dt, chunk, block)
                for j in range(chunk):
                    ek_st_f64(ptrs[0] + (done + j) * s0, block[j])
                    ek_st_f64(ptrs[0] + (done + j) * s0 + 8, 0.0)
                done += chunk
        if not iter_next_row(it, ptrs):
            break
    return 0


cdef int _store_complex(NdIter* it, char* dst, int dt, const char* scratch, double scale) except -1 nogil:
    """dst (op 0: complex64/128) <- scale * scratch (op 1, complex double)."""
    cdef char* ptrs[2]
    cdef Py_ssize_t L, s0, s1, j
    cdef double re, im
    if it.size == 0:
        return 0
    L = _first_row(it, ptrs, dst, scratch, &s0, &s1)
    while True:
        for j in range(L):
            re = ek_ld_f64(ptrs[1] + j * s1) * scale
            im = ek_ld_f64(ptrs[1] + j * s1 + 8) * scale
            if dt == DT_COMPLEX64:
                ek_st_f32(ptrs[0] + j * s0, <float>re)
                ek_st_f32(ptrs[0] + j * s0 + 4, <float>im)
            else:
                ek_st_f64(ptrs[0] + j * s0, re)
                ek_st_f64(ptrs[0] + j * s0 + 8, im)
        if not iter_next_row(it, ptrs):
            break
    return 0


cdef int _store_real(NdIter* it, char* dst, int dt, const char* scratch, double scale) except -1 nogil:
    """dst (op 0: a floating dtype) <- scale * scratch (op 1, double)."""
    cdef char* ptrs[2]
    cdef Py_ssize_t L, s0, s1, j, done, chunk
    cdef double block[BLOCK]
    if it.size == 0:
        return 0
    L = _first_row(it, ptrs, dst, scratch, &s0, &s1)
    while True:
        done = 0
        while done < L:
            chunk = L - done if L - done < BLOCK else BLOCK
            for j in range(chunk):
                block[j] = ek_ld_f64(ptrs[1] + (done + j) * s1) * scale
            store_block(block, chunk, dt, ptrs[0] + done * s0, s0)
            done += chunk
        if not iter_next_row(it, ptrs):
            break
    return 0


def _contiguous_strides(shape) -> tuple:
    strides = []
    step = 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


def _check_shape(shape, strides, what):
    shape = tuple(int(n) for n in shape)
    if len(shape) > MAX_RANK:
        raise KernelArgumentError(f"fft: {what} has rank {len(shape)}, more than {MAX_RANK}")
    if len(tuple(strides)) != len(shape):
        raise KernelArgumentError(f"fft: {what} strides {tuple(strides)!r} do not match shape {shape!r}")
    if any(n < 0 for n in shape):
        raise KernelArgumentError(f"fft: {what} shape {shape!r} has a negative extent")
    return shape


def fft(kind, out_addr, out_dtype, out_strides, out_shape, in_addr, in_dtype, in_strides, in_shape, dims,
        forward, scale):
    """out = scale * DFT over ``dims`` of in (see the module docstring for ``kind``: 0 c2c, 1 r2c,
    2 c2r). Strides are in elements. The last entry of ``dims`` is the real/half dim of r2c/c2r."""
    cdef int k_kind = kind, odt, idt, ndim, d, k
    cdef Py_ssize_t work_shape[MAX_RANK]
    cdef Py_ssize_t total = 1, n_last = 0, line_len = 1, h
    cdef double* buf = NULL
    cdef double* rbuf = NULL
    cdef double* line = NULL
    cdef double sign, c_scale = scale
    cdef int dim_list[MAX_RANK]
    cdef int ndims, last
    cdef NdIter it
    cdef char* src = NULL
    cdef char* dst = NULL
    if k_kind not in (KIND_C2C, KIND_R2C, KIND_C2R):
        raise KernelArgumentError(f"fft: unknown transform kind {kind!r} (0 c2c, 1 r2c, 2 c2r)")
    odt = check_storage_dtype(out_dtype, "fft out_dtype")
    idt = check_storage_dtype(in_dtype, "fft in_dtype")
    oshape = _check_shape(out_shape, out_strides, "out")
    ishape = _check_shape(in_shape, in_strides, "input")
    ndim = len(ishape)
    if len(oshape) != ndim:
        raise KernelArgumentError(f"fft: out shape {oshape!r} and input shape {ishape!r} differ in rank")
    dims = tuple(int(x) for x in dims)
    if not dims or len(set(dims)) != len(dims) or any(not 0 <= x < ndim for x in dims):
        raise KernelArgumentError(f"fft: dims {dims!r} must be distinct dims of a rank-{ndim} operand")
    complex_in = idt in (DT_COMPLEX64, DT_COMPLEX128)
    complex_out = odt in (DT_COMPLEX64, DT_COMPLEX128)
    if k_kind == KIND_R2C and not (is_floating(idt) and complex_out):
        raise KernelArgumentError("fft r2c: takes a real floating input and a complex output, got "
                                  f"{_DTYPE_NAMES[idt]} -> {_DTYPE_NAMES[odt]}")
    if k_kind == KIND_C2C and not (complex_in and complex_out):
        raise KernelArgumentError("fft c2c: takes complex operands, got "
                                  f"{_DTYPE_NAMES[idt]} -> {_DTYPE_NAMES[odt]}")
    if k_kind == KIND_C2R and not (complex_in and is_floating(odt)):
        raise KernelArgumentError("fft c2r: takes a complex input and a real floating output, got "
                                  f"{_DTYPE_NAMES[idt]} -> {_DTYPE_NAMES[odt]}")
    last = dims[len(dims) - 1]
    for d in range(ndim):
        if d != last and oshape[d] != ishape[d]:
            raise KernelArgumentError(f"fft: out shape {oshape!r} does not match input shape {ishape!r}")
    if k_kind == KIND_C2C and oshape[last] != ishape[last]:
        raise KernelArgumentError(f"fft c2c: out shape {oshape!r} does not match input shape {ishape!r}")
    if k_kind == KIND_R2C and oshape[last] not in (ishape[last], ishape[last] // 2 + 1):
        raise KernelArgumentError(f"fft r2c: out extent {oshape[last]} on dim {last} is neither n = "
                                  f"{ishape[last]} nor n//2 + 1")
    if k_kind == KIND_C2R and ishape[last] < oshape[last] // 2 + 1:
        raise KernelArgumentError(f"fft c2r: input extent {ishape[last]} on dim {last} is less than "
                                  f"n//2 + 1 = {oshape[last] // 2 + 1} for n = {oshape[last]}")
    if any(n == 0 for n in oshape):
        return
    # The complex scratch: the input's shape (c2c, r2c) or the half spectrum (c2r).
    wshape = list(ishape)
    if k_kind == KIND_C2R:
        wshape[last] = oshape[last] // 2 + 1
    for d in range(ndim):
        work_shape[d] = wshape[d]
        total *= wshape[d]
        if wshape[d] > line_len:
            line_len = wshape[d]
    if k_kind == KIND_C2R:
        n_last = oshape[last]
        if n_last > line_len:
            line_len = n_last
    ndims = len(dims)
    for k in range(ndims):
        dim_list[k] = dims[k]
    sign = -1.0 if (k_kind == KIND_R2C or (k_kind == KIND_C2C and forward)) else 1.0
    wstrides = _contiguous_strides(wshape)
    if total == 0:  # r2c of an empty signal (out extent 1): CPU has no value for it either
        raise KernelArgumentError(f"fft: input shape {ishape!r} is empty but out shape {oshape!r} is not")
    src = as_ptr(in_addr, "fft input")
    dst = as_ptr(out_addr, "fft out")
    buf = <double*>malloc(sizeof(double) * 2 * total)
    line = <double*>malloc(sizeof(double) * 2 * line_len)
    if k_kind == KIND_C2R:
        rbuf = <double*>malloc(sizeof(double) * max(total // wshape[last] * n_last, 1))
    try:
        if buf == NULL or line == NULL or (k_kind == KIND_C2R and rbuf == NULL):
            raise MemoryError("fft: no host memory for the transform's scratch")
        iter_init(&it, wshape, [wstrides, tuple(in_strides)], [16, itemsize_of(idt)], "fft")
        with nogil:
            _load_complex(&it, <char*>buf, src, idt)
            if k_kind == KIND_C2R:
                for k in range(ndims - 1):
                    transform_dim(buf, work_shape, ndim, dim_list[k], sign, line)
                c2r_last_dim(buf, rbuf, work_shape, ndim, last, n_last, line)
            else:
                for k in range(ndims):
                    transform_dim(buf, work_shape, ndim, dim_list[k], sign, line)
        if k_kind == KIND_C2R:
            iter_init(&it, oshape, [tuple(out_strides), _contiguous_strides(oshape)], [itemsize_of(odt), 8], "fft")
            with nogil:
                _store_real(&it, dst, odt, <char*>rbuf, c_scale)
        else:
            # r2c onesided: out is the first n//2 + 1 terms, a view of the scratch.
            iter_init(&it, oshape, [tuple(out_strides), wstrides], [itemsize_of(odt), 16], "fft")
            with nogil:
                _store_complex(&it, dst, odt, <char*>buf, c_scale)
    finally:
        free(buf)
        free(line)
        free(rbuf)


cdef inline void _load_parts(const char* p, Py_ssize_t s, int dt, Py_ssize_t n, double* re, double* im) noexcept nogil:
    cdef Py_ssize_t j
    if dt == DT_COMPLEX64:
        for j in range(n):
            re[j] = ek_ld_f32(p + j * s)
            im[j] = ek_ld_f32(p + j * s + 4)
    elif dt == DT_COMPLEX128:
        for j in range(n):
            re[j] = ek_ld_f64(p + j * s)
            im[j] = ek_ld_f64(p + j * s + 8)
    else:
        load_block(p, s, dt, n, re)
        for j in range(n):
            im[j] = 0.0


cdef enum:
    OP_COMPLEX = 0      # a + i b
    OP_POLAR = 1        # a cos(b) + i a sin(b)
    OP_MUL = 2          # a * b, complex


cdef inline void _combine(int op, int odt, char* out, Py_ssize_t s, Py_ssize_t n, const double* ar,
                          const double* ai, const double* br, const double* bi) noexcept nogil:
    """out[j] = op(a[j], b[j]) for j < n, in float32 math for a complex64 out (as CPU)."""
    cdef Py_ssize_t j
    cdef float fa, fb, far, fai, fbr, fbi
    cdef double re, im
    if op == OP_MUL:
        if odt == DT_COMPLEX64:
            for j in range(n):
                far = <float>ar[j]; fai = <float>ai[j]; fbr = <float>br[j]; fbi = <float>bi[j]
                ek_st_f32(out + j * s, far * fbr - fai * fbi)
                ek_st_f32(out + j * s + 4, far * fbi + fai * fbr)
        else:
            for j in range(n):
                ek_st_f64(out + j * s, ar[j] * br[j] - ai[j] * bi[j])
                ek_st_f64(out + j * s + 8, ar[j] * bi[j] + ai[j] * br[j])
        return
    for j in range(n):      # complex / polar: a and b are the real parts ar, br
        if odt == DT_COMPLEX64:
            fa = <float>ar[j]
            fb = <float>br[j]
            if op == OP_POLAR:
                ek_st_f32(out + j * s, fa * cosf(fb))
                ek_st_f32(out + j * s + 4, fa * sinf(fb))
            else:
                ek_st_f32(out + j * s, fa)
                ek_st_f32(out + j * s + 4, fb)
        else:
            re = ar[j]
            im = br[j]
            if op == OP_POLAR:
                ek_st_f64(out + j * s, re * cos(im))
                ek_st_f64(out + j * s + 8, re * sin(im))
            else:
                ek_st_f64(out + j * s, re)
                ek_st_f64(out + j * s + 8, im)


cdef int _complex_binary(int op, str name, out_addr, int odt, out_strides, a_addr, int adt, a_strides,
                         b_addr, int bdt, b_strides, shape) except -1:
    """out = op(a, b) elementwise over ``shape`` (strides in elements), dtypes already checked.
    Each chunk of a and b is read before out's is written, so out may alias a or b."""
    cdef NdIter it
    cdef char* ptrs[3]
    cdef Py_ssize_t L, s0, s1, s2, done, chunk
    cdef double ar[BLOCK]
    cdef double ai[BLOCK]
    cdef double br[BLOCK]
    cdef double bi[BLOCK]
    iter_init(&it, shape, [tuple(out_strides), tuple(a_strides), tuple(b_strides)],
              [itemsize_of(odt), itemsize_of(adt), itemsize_of(bdt)], name)
    if it.size == 0:
        return 0
    ptrs[0] = as_ptr(out_addr, f"{name} out")
    ptrs[1] = as_ptr(a_addr, f"{name} a")
    ptrs[2] = as_ptr(b_addr, f"{name} b")
    with nogil:
        L = iter_row_len(&it)
        s0 = iter_row_stride(&it, 0)
        s1 = iter_row_stride(&it, 1)
        s2 = iter_row_stride(&it, 2)
        while True:
            done = 0
            while done < L:
                chunk = L - done if L - done < BLOCK else BLOCK
                _load_parts(ptrs[1] + done * s1, s1, adt, chunk, ar, ai)
                _load_parts(ptrs[2] + done * s2, s2, bdt, chunk, br, bi)
                _combine(op, odt, ptrs[0] + done * s0, s0, chunk, ar, ai, br, bi)
                done += chunk
            if not iter_next_row(&it, ptrs):
                break
    return 0


def complex_parts(mode, out_addr, out_dtype, out_strides, a_addr, a_dtype, a_strides, b_addr, b_dtype,
                  b_strides, shape):
    """out = a + i b (mode 0, aten::complex) or a cos(b) + i a sin(b) (mode 1, aten::polar), in
    the part dtype's precision (float32 math for complex64, as CPU); a and b are real floating."""
    cdef int m = mode, odt, adt, bdt
    if m not in (0, 1):
        raise KernelArgumentError(f"complex_parts: unknown mode {mode!r} (0 complex, 1 polar)")
    odt = check_storage_dtype(out_dtype, "complex_parts out_dtype")
    adt = check_dtype(a_dtype, "complex_parts a_dtype")
    bdt = check_dtype(b_dtype, "complex_parts b_dtype")
    if odt not in (DT_COMPLEX64, DT_COMPLEX128) or not is_floating(adt) or not is_floating(bdt):
        raise KernelArgumentError(f"complex_parts: takes real floating parts and a complex output, got "
                                  f"{_DTYPE_NAMES[adt]}, {_DTYPE_NAMES[bdt]} -> {_DTYPE_NAMES[odt]}")
    _complex_binary(OP_POLAR if m == 1 else OP_COMPLEX, "complex_parts", out_addr, odt, out_strides,
                    a_addr, adt, a_strides, b_addr, bdt, b_strides, shape)


def complex_mul(out_addr, out_dtype, out_strides, a_addr, a_dtype, a_strides, b_addr, b_dtype, b_strides, shape):
    """out = a * b for a complex64/complex128 out; a and b are complex or real (imaginary part 0),
    cast to out's dtype first (CPU's type promotion), multiplied as CPU's c10::complex:
    (ar br - ai bi) + i (ar bi + ai br), in float32 for complex64. Elementwise: out may alias a or b."""
    cdef int odt, adt, bdt
    odt = check_storage_dtype(out_dtype, "complex_mul out_dtype")
    adt = check_storage_dtype(a_dtype, "complex_mul a_dtype")
    bdt = check_storage_dtype(b_dtype, "complex_mul b_dtype")
    if odt not in (DT_COMPLEX64, DT_COMPLEX128):
        raise KernelArgumentError(f"complex_mul: out must be complex, got {_DTYPE_NAMES[odt]}")
    for dt in (adt, bdt):
        if dt >= NUM_ARITHMETIC_DTYPES and dt not in (DT_COMPLEX64, DT_COMPLEX128):
            raise KernelArgumentError(f"complex_mul: cannot read a {_DTYPE_NAMES[dt]} operand")
    _complex_binary(OP_MUL, "complex_mul", out_addr, odt, out_strides, a_addr, adt, a_strides,
                    b_addr, bdt, b_strides, shape)
