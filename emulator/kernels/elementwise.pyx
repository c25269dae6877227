# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Elementwise arithmetic kernels of the device's vector engine.

Models PyTorch CPU's TensorIterator arithmetic: every operand is loaded, cast to
the compute dtype chosen by the caller (type promotion happens on the host),
computed, and cast to the output dtype on store.  As in PyTorch, float16 and
bfloat16 compute in float32 ("opmath") and round once on store, integers
compute in int64 and wrap to their width, and add/sub with alpha is one fused
multiply-add (PyTorch's vectorized add is ``fmadd(b, alpha, a)``).

Broadcasting arrives as 0 strides.  Rows are processed in blocks of BLOCK
elements through small scratch buffers, so the inner loops are tight typed
loops with the dtype/op dispatch hoisted out of them.

``unary`` runs relu only; every other unary op is a row of the pointwise
table (pointwise.pyx's unary_op).

Left out: integer division / floor_divide / remainder, comparisons and
bitwise ops, and type promotion itself.
"""

from libc.math cimport fma, fmaf, NAN

include "_common.pxi"
include "_isa.pxi"
include "_pool.pxi"

cdef enum:
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MAX, OP_MIN

_BINARY_OPS = {"add": OP_ADD, "sub": OP_SUB, "mul": OP_MUL, "div": OP_DIV,
               "maximum": OP_MAX, "minimum": OP_MIN}
# ``unary`` runs relu only: the other unary ops are rows of the pointwise table (pointwise.pyx).
# relu keeps this kernel, and its cost in the kernel library, so its modelled time stays what it was.
UNARY_OPS = ("relu",)

BINARY_OPS = tuple(_BINARY_OPS)


# ---------------------------------------------------------------------------
# Block compute: x[i] = x[i] (op) y[i].  The scratch type selects the
# arithmetic: float (f16/bf16/f32 compute), double (f64 compute, and bool
# compute on 0/1 values), int64 (integer compute, wrapping).

cdef void _binop(int op, acc_t* x, const acc_t* y, Py_ssize_t m, acc_t alpha) noexcept nogil:
    cdef Py_ssize_t i
    if op == OP_ADD:                     # sub arrives here with alpha negated
        if alpha == 1:
            for i in range(m):
                if acc_t is int64_t:
                    x[i] = <int64_t>(<uint64_t>x[i] + <uint64_t>y[i])
                else:
                    x[i] = x[i] + y[i]
        else:
            for i in range(m):
                if acc_t is int64_t:
                    x[i] = <int64_t>(<uint64_t>x[i] + <uint64_t>alpha * <uint64_t>y[i])
                elif acc_t is float:
                    x[i] = fmaf(y[i], alpha, x[i])
                else:
                    x[i] = fma(y[i], alpha, x[i])
    elif op == OP_MUL:
        for i in range(m):
            if acc_t is int64_t:
                x[i] = <int64_t>(<uint64_t>x[i] * <uint64_t>y[i])
            else:
                x[i] = x[i] * y[i]
    elif op == OP_DIV:                   # floating compute only (checked by caller)
        for i in range(m):
            x[i] = x[i] / y[i]
    elif op == OP_MAX:
        # torch.maximum: NaN if either is NaN.  Ties (+0 vs -0) give the
        # second operand, like PyTorch's vectorized path (x86 maxps).
        for i in range(m):
            if acc_t is int64_t:
                x[i] = x[i] if x[i] > y[i] else y[i]
            else:
                if x[i] != x[i] or y[i] != y[i]:
                    x[i] = NAN
                else:
                    x[i] = x[i] if x[i] > y[i] else y[i]
    else:  # OP_MIN
        for i in range(m):
            if acc_t is int64_t:
                x[i] = x[i] if x[i] < y[i] else y[i]
            else:
                if x[i] != x[i] or y[i] != y[i]:
                    x[i] = NAN
                else:
                    x[i] = x[i] if x[i] < y[i] else y[i]


cdef void _binary_rows(NdIter* it, char** ptrs, int op, int odt, int adt, int bdt, int cdt,
                       acc_t alpha, acc_t* x, acc_t* y) noexcept nogil:
    cdef Py_ssize_t n = iter_row_len(it)
    cdef Py_ssize_t so = iter_row_stride(it, 0), sa = iter_row_stride(it, 1), sb = iter_row_stride(it, 2)
    cdef Py_ssize_t j, m
    while True:
        j = 0
        while j < n:
            m = n - j if n - j < BLOCK else BLOCK
            load_block(ptrs[1] + j * sa, sa, adt, m, x)
            if adt != cdt:
                round_block_to(x, m, cdt)
            load_block(ptrs[2] + j * sb, sb, bdt, m, y)
            if bdt != cdt:
                round_block_to(y, m, cdt)
            _binop(op, x, y, m, alpha)
            if odt != cdt:               # the result has the compute dtype first
                round_block_to(x, m, cdt)
            store_block(x, m, odt, ptrs[0] + j * so, so)
            j += m
        if not iter_next_row(it, ptrs):
            break


cdef void _add_f32_contig(char** ptrs, Py_ssize_t n, int op) noexcept nogil:
    """Fast path: contiguous float32 add/sub/mul with alpha 1 (auto-vectorizes)."""
    cdef float* o = <float*>ptrs[0]
    cdef const float* a = <const float*>ptrs[1]
    cdef const float* b = <const float*>ptrs[2]
    cdef Py_ssize_t i
    if op == OP_ADD:
        for i in range(n):
            o[i] = a[i] + b[i]
    elif op == OP_SUB:
        for i in range(n):
            o[i] = a[i] - b[i]
    else:
        for i in range(n):
            o[i] = a[i] * b[i]


cdef extern from *:
    """
    #include <immintrin.h>
    #include <math.h>
    /* o[i] = fmaf(B(i), alpha, A(i)) over n float32 elements, A(i) = a[ca ? i : 0] (likewise B):
       the fused multiply-add of the hardware where it has one (the same correctly rounded
       result as libm's fmaf, which is a call per element here: the build targets baseline x86-64). */
    __attribute__((target("avx2,fma")))
    static void ek_fma_f32_avx2(float *o, const float *a, int ca, const float *b, int cb, float alpha,
                                Py_ssize_t n) {
        __m256 va = _mm256_set1_ps(a[0]), vb = _mm256_set1_ps(b[0]), al = _mm256_set1_ps(alpha);
        Py_ssize_t i = 0;
        for (; i + 8 <= n; i += 8) {
            __m256 x = ca ? _mm256_loadu_ps(a + i) : va;
            __m256 y = cb ? _mm256_loadu_ps(b + i) : vb;
            _mm256_storeu_ps(o + i, _mm256_fmadd_ps(y, al, x));
        }
        for (; i < n; i++) o[i] = fmaf(b[cb ? i : 0], alpha, a[ca ? i : 0]);
    }
    static int ek_fma_hw = -1;
    static void ek_fma_f32(float *o, const float *a, int ca, const float *b, int cb, float alpha,
                           Py_ssize_t n) {
        Py_ssize_t i;
        if (ek_fma_hw < 0) ek_fma_hw = ek_isa_cap >= EK_ISA_AVX2;   /* _isa.pxi: AVX2 and FMA */
        if (ek_fma_hw) { ek_fma_f32_avx2(o, a, ca, b, cb, alpha, n); return; }
        for (i = 0; i < n; i++) o[i] = fmaf(b[cb ? i : 0], alpha, a[ca ? i : 0]);
    }
    """
    void ek_fma_f32(float* o, const float* a, int ca, const float* b, int cb, float alpha,
                    Py_ssize_t n) noexcept nogil


cdef void _f32_with_scalar(char** ptrs, Py_ssize_t n, int op, bint a_contig, bint b_contig,
                           float alpha) noexcept nogil:
    """Fast path: contiguous float32 (op) a float32 scalar (a stride-0 operand), as _binop computes
    it: add (alpha 1), sub (alpha -1 arrives as sub), mul, div; add with another alpha is a fused
    multiply-add (ek_fma_f32), also for two contiguous operands."""
    cdef bint scalar_first = not a_contig
    cdef float* o = <float*>ptrs[0]
    cdef const float* v = <const float*>(ptrs[2] if scalar_first else ptrs[1])
    cdef float s = (<const float*>(ptrs[1] if scalar_first else ptrs[2]))[0]
    cdef Py_ssize_t i
    if op == OP_ADD and alpha != 1:
        ek_fma_f32(o, <const float*>ptrs[1], a_contig, <const float*>ptrs[2], b_contig, alpha, n)
    elif op == OP_ADD:
        if scalar_first:
            for i in range(n):
                o[i] = s + v[i]
        else:
            for i in range(n):
                o[i] = v[i] + s
    elif op == OP_SUB:
        if scalar_first:
            for i in range(n):
                o[i] = s - v[i]
        else:
            for i in range(n):
                o[i] = v[i] - s
    elif op == OP_MUL:
        if scalar_first:
            for i in range(n):
                o[i] = s * v[i]
        else:
            for i in range(n):
                o[i] = v[i] * s
    else:  # OP_DIV
        if scalar_first:
            for i in range(n):
                o[i] = s / v[i]
        else:
            for i in range(n):
                o[i] = v[i] / s


# Large contiguous float32 launches (the two fast paths above) run in two halves, on this thread
# and the pool's helper (_pool.pxi): elementwise, so each element is computed the same either way.
cdef enum:
    _SPLIT_ELEMENTS = 1 << 17

include "_split.pxi"


ctypedef struct _F32Job:
    char* ptrs[3]
    Py_ssize_t n
    int code
    bint with_scalar, a_contig, b_contig
    float alpha


cdef void _f32_job(void* arg) noexcept nogil:
    cdef _F32Job* j = <_F32Job*>arg
    if j.with_scalar:
        _f32_with_scalar(j.ptrs, j.n, j.code, j.a_contig, j.b_contig, j.alpha)
    else:
        _add_f32_contig(j.ptrs, j.n, j.code)


cdef bint _disjoint_or_same(char** ptrs, Py_ssize_t n, bint a_contig, bint b_contig) noexcept nogil:
    """The contiguous output (n float32) overlaps neither input, or is exactly a contiguous one."""
    cdef char* lo = ptrs[0]
    cdef char* hi = ptrs[0] + 4 * n
    cdef char* a_hi = ptrs[1] + (4 * n if a_contig else 4)
    cdef char* b_hi = ptrs[2] + (4 * n if b_contig else 4)
    if ptrs[1] < hi and lo < a_hi and not (a_contig and ptrs[1] == lo):
        return False
    if ptrs[2] < hi and lo < b_hi and not (b_contig and ptrs[2] == lo):
        return False
    return True


cdef void _f32_run(char** ptrs, Py_ssize_t n, int code, bint with_scalar, bint a_contig, bint b_contig,
                   float alpha, bint split) noexcept nogil:
    cdef _F32Job jobs[2]
    cdef Py_ssize_t half = n // 2, start
    cdef int h
    if not split or n < _SPLIT_ELEMENTS or not _disjoint_or_same(ptrs, n, a_contig, b_contig):
        if with_scalar:
            _f32_with_scalar(ptrs, n, code, a_contig, b_contig, alpha)
        else:
            _add_f32_contig(ptrs, n, code)
        return
    for h in range(2):
        start = 0 if h == 0 else half
        jobs[h].ptrs[0] = ptrs[0] + 4 * start
        jobs[h].ptrs[1] = ptrs[1] + (4 * start if a_contig else 0)
        jobs[h].ptrs[2] = ptrs[2] + (4 * start if b_contig else 0)
        jobs[h].n = half if h == 0 else n - half
        jobs[h].code, jobs[h].with_scalar, jobs[h].a_contig, jobs[h].b_contig = code, with_scalar, a_contig, b_contig
        jobs[h].alpha = alpha
    ek_pool_run(_f32_job, <void*>jobs, sizeof(_F32Job), 2)


def binary(op, out_addr, out_dtype, out_strides, a_addr, a_dtype, a_strides,
           b_addr, b_dtype, b_strides, shape, compute_dtype, alpha=1):
    """out = cast<out>(op(cast<compute>(a), cast<compute>(b))) elementwise over `shape`.

    op: "add" (a + alpha*b), "sub" (a - alpha*b), "mul", "div" (true division,
    floating compute only), "maximum", "minimum" (NaN-propagating).  Bool
    compute: add/maximum = logical or, mul/minimum = logical and.
    """
    cdef int code, odt, adt, bdt, cdt
    cdef NdIter it
    cdef char* ptrs[3]
    cdef float fx[BLOCK]
    cdef float fy[BLOCK]
    cdef double dx[BLOCK]
    cdef double dy[BLOCK]
    cdef int64_t ix[BLOCK]
    cdef int64_t iy[BLOCK]
    cdef float falpha = 1
    cdef double dalpha = 1
    cdef int64_t ialpha = 1
    cdef bint split
    if op not in _BINARY_OPS:
        raise KernelArgumentError(f"binary: unknown op {op!r} (expected one of {BINARY_OPS})")
    code = _BINARY_OPS[op]
    odt = check_dtype(out_dtype, "binary out_dtype")
    adt = check_dtype(a_dtype, "binary a_dtype")
    bdt = check_dtype(b_dtype, "binary b_dtype")
    cdt = check_dtype(compute_dtype, "binary compute_dtype")

    if cdt == DT_BOOL:
        if code == OP_SUB:
            raise KernelArgumentError("binary: subtraction of bool tensors is not supported (use logical_xor)")
        if code == OP_DIV:
            raise KernelArgumentError("binary: div needs a floating compute dtype, got bool")
        # Bool values are computed as 0.0/1.0 doubles: or = max, and = min.
        code = OP_MAX if code == OP_ADD or code == OP_MAX else OP_MIN
    elif not is_floating(cdt):
        if code == OP_DIV:
            raise KernelArgumentError(f"binary: div needs a floating compute dtype, got {_DTYPE_NAMES[cdt]}")
        if isinstance(alpha, float) or not hasattr(alpha, "__index__"):
            raise KernelArgumentError("binary: for integral compute, alpha must be an integer")
        ialpha = <int64_t>(<uint64_t>(int(alpha) & 0xFFFFFFFFFFFFFFFF))
        if code == OP_SUB:
            ialpha = <int64_t>(0 - <uint64_t>ialpha)
            code = OP_ADD
    else:
        dalpha = float(alpha)
        if code == OP_SUB:
            # a - alpha*b == fma(b, -alpha, a); plain sub (alpha 1) is kept
            # as OP_SUB only for the contiguous fast path below.
            dalpha = -dalpha
            if dalpha != -1:
                code = OP_ADD
        falpha = <float>dalpha
        # PyTorch converts alpha to the tensor's scalar type before widening
        # it to opmath, so a float16/bfloat16 add sees a rounded alpha.
        if cdt == DT_FLOAT16:
            falpha = ek_round_f16(falpha)
        elif cdt == DT_BFLOAT16:
            falpha = ek_round_bf16(falpha)

    iter_init(&it, shape, [out_strides, a_strides, b_strides],
              [itemsize_of(odt), itemsize_of(adt), itemsize_of(bdt)], "binary")
    if it.size == 0:
        return
    ptrs[0] = as_ptr(out_addr, "binary out_addr")
    ptrs[1] = as_ptr(a_addr, "binary a_addr")
    ptrs[2] = as_ptr(b_addr, "binary b_addr")
    split = _split_enabled

    with nogil:
        if (odt == DT_FLOAT32 and adt == DT_FLOAT32 and bdt == DT_FLOAT32 and cdt == DT_FLOAT32
                and it.ndim == 1 and iter_row_stride(&it, 0) == 4 and iter_row_stride(&it, 1) == 4
                and iter_row_stride(&it, 2) == 4
                and (code == OP_MUL or code == OP_SUB or (code == OP_ADD and dalpha == 1))):
            _f32_run(ptrs, it.size, code, False, True, True, 1, split)
        elif (odt == DT_FLOAT32 and adt == DT_FLOAT32 and bdt == DT_FLOAT32 and cdt == DT_FLOAT32
                and it.ndim == 1 and iter_row_stride(&it, 0) == 4
                and ((iter_row_stride(&it, 1) == 4 and iter_row_stride(&it, 2) == 0)
                     or (iter_row_stride(&it, 1) == 0 and iter_row_stride(&it, 2) == 4)
                     or (code == OP_ADD and iter_row_stride(&it, 1) == 4 and iter_row_stride(&it, 2) == 4))
                and (code == OP_MUL or code == OP_SUB or code == OP_ADD or code == OP_DIV)):
            _f32_run(ptrs, it.size, code, True, iter_row_stride(&it, 1) != 0, iter_row_stride(&it, 2) != 0,
                     falpha, split)
        else:
            if code == OP_SUB:           # alpha is already -1 here
                code = OP_ADD
            if cdt == DT_BOOL or cdt == DT_FLOAT64:
                _binary_rows(&it, ptrs, code, odt, adt, bdt, cdt, dalpha, dx, dy)
            elif is_floating(cdt):
                _binary_rows(&it, ptrs, code, odt, adt, bdt, cdt, falpha, fx, fy)
            else:
                _binary_rows(&it, ptrs, code, odt, adt, bdt, cdt, ialpha, ix, iy)


# ---------------------------------------------------------------------------

cdef void _relu(acc_t* x, Py_ssize_t m) noexcept nogil:
    cdef Py_ssize_t i
    # NaN and -0.0 pass through, like torch.relu. A select, not a branch: a branch on the
    # sign of random data mispredicts every other element.
    for i in range(m):
        x[i] = 0 if x[i] < 0 else x[i]


cdef void _unary_rows(NdIter* it, char** ptrs, int odt, int adt, int cdt, acc_t* x) noexcept nogil:
    cdef Py_ssize_t n = iter_row_len(it), so = iter_row_stride(it, 0), sa = iter_row_stride(it, 1)
    cdef Py_ssize_t j, m
    while True:
        j = 0
        while j < n:
            m = n - j if n - j < BLOCK else BLOCK
            load_block(ptrs[1] + j * sa, sa, adt, m, x)
            if adt != cdt:
                round_block_to(x, m, cdt)
            _relu(x, m)
            if odt != cdt:
                round_block_to(x, m, cdt)
            store_block(x, m, odt, ptrs[0] + j * so, so)
            j += m
        if not iter_next_row(it, ptrs):
            break


def unary(op, out_addr, out_dtype, out_strides, a_addr, a_dtype, a_strides, shape, compute_dtype):
    """out = cast<out>(op(cast<compute>(a))) elementwise over `shape`; op: relu (any non-bool
    compute dtype). The op argument stays in the launch ABI (other unary ops are unary_op rows)."""
    cdef int odt, adt, cdt
    cdef NdIter it
    cdef char* ptrs[2]
    cdef float fx[BLOCK]
    cdef double dx[BLOCK]
    cdef int64_t ix[BLOCK]
    if op not in UNARY_OPS:
        raise KernelArgumentError(f"unary: unknown op {op!r} (expected one of {UNARY_OPS})")
    odt = check_dtype(out_dtype, "unary out_dtype")
    adt = check_dtype(a_dtype, "unary a_dtype")
    cdt = check_dtype(compute_dtype, "unary compute_dtype")
    if cdt == DT_BOOL:
        raise KernelArgumentError(f"unary: {op} is not supported for bool tensors")

    iter_init(&it, shape, [out_strides, a_strides], [itemsize_of(odt), itemsize_of(adt)], "unary")
    if it.size == 0:
        return
    ptrs[0] = as_ptr(out_addr, "unary out_addr")
    ptrs[1] = as_ptr(a_addr, "unary a_addr")
    with nogil:
        if cdt == DT_FLOAT64:
            _unary_rows(&it, ptrs, odt, adt, cdt, dx)
        elif is_floating(cdt):
            _unary_rows(&it, ptrs, odt, adt, cdt, fx)
        else:
            _unary_rows(&it, ptrs, odt, adt, cdt, ix)


# ---------------------------------------------------------------------------
# threshold_backward: out = (x <= threshold) ? 0 : grad, PyTorch CPU's threshold kernel
# with value 0 and ``other`` = grad. A NaN ``x`` compares false, so its grad passes through
# (as on CPU). Both operands are cast to the compute dtype first; float16/bfloat16 compare
# and select in float32 against the float32 threshold (CPU's reduced-float branch).

cdef void _select_le(acc_t* g, const acc_t* x, Py_ssize_t m, acc_t threshold) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(m):
        if x[i] <= threshold:
            g[i] = 0


cdef void _threshold_rows(NdIter* it, char** ptrs, int odt, int gdt, int xdt, int cdt,
                          acc_t threshold, acc_t* g, acc_t* x) noexcept nogil:
    cdef Py_ssize_t n = iter_row_len(it)
    cdef Py_ssize_t so = iter_row_stride(it, 0), sg = iter_row_stride(it, 1), sx = iter_row_stride(it, 2)
    cdef Py_ssize_t j, m
    while True:
        j = 0
        while j < n:
            m = n - j if n - j < BLOCK else BLOCK
            load_block(ptrs[1] + j * sg, sg, gdt, m, g)
            if gdt != cdt:
                round_block_to(g, m, cdt)
            load_block(ptrs[2] + j * sx, sx, xdt, m, x)
            if xdt != cdt:
                round_block_to(x, m, cdt)
            _select_le(g, x, m, threshold)
            store_block(g, m, odt, ptrs[0] + j * so, so)
            j += m
        if not iter_next_row(it, ptrs):
            break


def threshold_backward(out_addr, out_dtype, out_strides, grad_addr, grad_dtype, grad_strides,
                       x_addr, x_dtype, x_strides, shape, compute_dtype, threshold):
    """out = cast<out>(cast<compute>(x) <= threshold ? 0 : cast<compute>(grad)) over `shape`.

    ``threshold`` is already in the compute dtype's value set (the host converts it as
    ATen's Scalar.to<scalar_t>() does; float32 for float16/bfloat16 compute). Bool compute
    is rejected, as on CPU.
    """
    cdef int odt, gdt, xdt, cdt
    cdef NdIter it
    cdef char* ptrs[3]
    cdef float fg[BLOCK]
    cdef float fx[BLOCK]
    cdef double dg[BLOCK]
    cdef double dx[BLOCK]
    cdef int64_t ig[BLOCK]
    cdef int64_t ix[BLOCK]
    cdef float fthr = 0
    cdef double dthr = 0
    cdef int64_t ithr = 0
    odt = check_dtype(out_dtype, "threshold_backward out_dtype")
    gdt = check_dtype(grad_dtype, "threshold_backward grad_dtype")
    xdt = check_dtype(x_dtype, "threshold_backward x_dtype")
    cdt = check_dtype(compute_dtype, "threshold_backward compute_dtype")
    if cdt == DT_BOOL:
        raise KernelArgumentError("threshold_backward: not supported for bool tensors")
    if is_floating(cdt):
        dthr = float(threshold)
        fthr = <float>dthr
    else:
        if isinstance(threshold, float) or not hasattr(threshold, "__index__"):
            raise KernelArgumentError("threshold_backward: for integral compute, threshold must be an integer")
        ithr = threshold
    iter_init(&it, shape, [out_strides, grad_strides, x_strides],
              [itemsize_of(odt), itemsize_of(gdt), itemsize_of(xdt)], "threshold_backward")
    if it.size == 0:
        return
    ptrs[0] = as_ptr(out_addr, "threshold_backward out_addr")
    ptrs[1] = as_ptr(grad_addr, "threshold_backward grad_addr")
    ptrs[2] = as_ptr(x_addr, "threshold_backward x_addr")
    with nogil:
        if cdt == DT_FLOAT64:
            _threshold_rows(&it, ptrs, odt, gdt, xdt, cdt, dthr, dg, dx)
        elif is_floating(cdt):
            _threshold_rows(&it, ptrs, odt, gdt, xdt, cdt, fthr, fg, fx)
        else:
            _threshold_rows(&it, ptrs, odt, gdt, xdt, cdt, ithr, ig, ix)
