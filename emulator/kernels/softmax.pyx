# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Softmax kernels of the device's vector engine: log_softmax over one dimension and its gradient.

The operands are walked over their *outer* positions (the logical shape with the softmax
dimension removed, coalesced like the elementwise kernels); at each outer position the
vector along the softmax dimension (any stride) is loaded into a scratch buffer.

Numerics (match PyTorch CPU within a few ulps, not bit for bit: CPU vectorises the sums in
another order):
  * compute in float32 for float16/bfloat16/float32 operands, float64 for float64;
  * forward is numerically stable: ``y = (x - max) - log(sum(exp(x - max)))``; a NaN
    anywhere in the vector makes the whole output vector NaN (as on CPU);
  * backward: ``grad_input = grad_output - exp(output) * sum(grad_output)``;
  * results are rounded once on store to the output dtype.
"""

from libc.math cimport exp, expf, log, logf
from libc.stdlib cimport malloc, free

include "_common.pxi"
include "_isa.pxi"
include "_vecmath.pxi"

ctypedef fused flt_t:
    float
    double


cdef void _log_softmax_rows(NdIter* it, char** ptrs, Py_ssize_t L, Py_ssize_t so, int odt,
                            Py_ssize_t si, int idt, flt_t* buf) noexcept nogil:
    # ptrs[0]: output, ptrs[1]: input (outer positions); so/si: byte strides along the softmax dim
    cdef Py_ssize_t n = iter_row_len(it)
    cdef Py_ssize_t ro = iter_row_stride(it, 0), ri = iter_row_stride(it, 1)
    cdef Py_ssize_t j, k
    cdef flt_t m, s, lse
    while True:
        for j in range(n):
            load_block(ptrs[1] + j * ri, si, idt, L, buf)
            if flt_t is float:
                # The vector-math path (_vecmath.pxi): the same arithmetic, 8 lanes at a time.
                m = ek_row_max_f32(buf, L)
                lse = logf(<float>ek_row_sum_exp_shift_f32(buf, L, m))
                ek_row_shift2_f32(buf, L, m, lse)
            else:
                m = buf[0]
                for k in range(1, L):
                    if buf[k] > m or buf[k] != buf[k]:
                        m = buf[k]
                        if m != m:
                            break
                s = 0
                for k in range(L):
                    s = s + exp(buf[k] - m)
                lse = log(s)
                for k in range(L):
                    buf[k] = (buf[k] - m) - lse
            store_block(buf, L, odt, ptrs[0] + j * ro, so)
        if not iter_next_row(it, ptrs):
            break


cdef void _log_softmax_bwd_rows(NdIter* it, char** ptrs, Py_ssize_t L, Py_ssize_t sgi, int gidt,
                                Py_ssize_t sgo, int godt, Py_ssize_t sy, int ydt,
                                flt_t* g, flt_t* y) noexcept nogil:
    # ptrs[0]: grad_input, ptrs[1]: grad_output, ptrs[2]: output of the forward
    cdef Py_ssize_t n = iter_row_len(it)
    cdef Py_ssize_t r0 = iter_row_stride(it, 0), r1 = iter_row_stride(it, 1), r2 = iter_row_stride(it, 2)
    cdef Py_ssize_t j, k
    cdef flt_t s
    while True:
        for j in range(n):
            load_block(ptrs[1] + j * r1, sgo, godt, L, g)
            load_block(ptrs[2] + j * r2, sy, ydt, L, y)
            s = 0
            for k in range(L):
                s = s + g[k]
            for k in range(L):
                if flt_t is float:
                    g[k] = g[k] - expf(y[k]) * s
                else:
                    g[k] = g[k] - exp(y[k]) * s
            store_block(g, L, gidt, ptrs[0] + j * r0, sgi)
        if not iter_next_row(it, ptrs):
            break


cdef tuple _outer(object shape, int dim, list strides_list):
    outer_shape = tuple(n for d, n in enumerate(shape) if d != dim)
    outer_strides = [tuple(s for d, s in enumerate(st) if d != dim) for st in strides_list]
    return outer_shape, outer_strides


cdef int _check(object shape, int dim, list strides_list, str what) except -1:
    nd = len(shape)
    if not (0 <= dim < nd):
        raise KernelArgumentError(f"{what}: dim {dim} out of range for rank {nd}")
    for st in strides_list:
        if len(st) != nd:
            raise KernelArgumentError(f"{what}: strides {tuple(st)!r} do not match shape {tuple(shape)!r}")
    return 0


def log_softmax(out_addr, out_dtype, out_strides, in_addr, in_dtype, in_strides, shape, dim):
    """out = log_softmax(input) along ``dim`` (strides in elements, any layout)."""
    cdef int odt = check_dtype(out_dtype, "log_softmax out_dtype")
    cdef int idt = check_dtype(in_dtype, "log_softmax in_dtype")
    cdef int d = dim
    cdef NdIter it
    cdef char* ptrs[2]
    cdef Py_ssize_t L, so, si
    cdef void* buf
    cdef bint dbl
    shape = tuple(shape)
    _check(shape, d, [out_strides, in_strides], "log_softmax")
    if not is_floating(odt) or not is_floating(idt):
        raise KernelArgumentError("log_softmax: floating dtypes only")
    L = shape[d]
    outer_shape, outer_strides = _outer(shape, d, [out_strides, in_strides])
    iter_init(&it, outer_shape, outer_strides, [itemsize_of(odt), itemsize_of(idt)], "log_softmax")
    if it.size == 0 or L == 0:
        return
    so = <Py_ssize_t>out_strides[d] * itemsize_of(odt)
    si = <Py_ssize_t>in_strides[d] * itemsize_of(idt)
    dbl = odt == DT_FLOAT64 or idt == DT_FLOAT64
    buf = malloc(L * sizeof(double))
    if buf == NULL:
        raise MemoryError("log_softmax: cannot allocate scratch")
    try:
        ptrs[0] = as_ptr(out_addr, "log_softmax out_addr")
        ptrs[1] = as_ptr(in_addr, "log_softmax in_addr")
        with nogil:
            if dbl:
                _log_softmax_rows(&it, ptrs, L, so, odt, si, idt, <double*>buf)
            else:
                _log_softmax_rows(&it, ptrs, L, so, odt, si, idt, <float*>buf)
    finally:
        free(buf)


def log_softmax_backward(gi_addr, gi_dtype, gi_strides, go_addr, go_dtype, go_strides,
                         y_addr, y_dtype, y_strides, shape, dim):
    """grad_input = grad_output - exp(output) * sum(grad_output) along ``dim``."""
    cdef int gidt = check_dtype(gi_dtype, "log_softmax_backward gi_dtype")
    cdef int godt = check_dtype(go_dtype, "log_softmax_backward go_dtype")
    cdef int ydt = check_dtype(y_dtype, "log_softmax_backward y_dtype")
    cdef int d = dim
    cdef NdIter it
    cdef char* ptrs[3]
    cdef Py_ssize_t L, sgi, sgo, sy
    cdef void* g
    cdef void* y
    cdef bint dbl
    shape = tuple(shape)
    _check(shape, d, [gi_strides, go_strides, y_strides], "log_softmax_backward")
    if not (is_floating(gidt) and is_floating(godt) and is_floating(ydt)):
        raise KernelArgumentError("log_softmax_backward: floating dtypes only")
    L = shape[d]
    outer_shape, outer_strides = _outer(shape, d, [gi_strides, go_strides, y_strides])
    iter_init(&it, outer_shape, outer_strides, [itemsize_of(gidt), itemsize_of(godt), itemsize_of(ydt)],
              "log_softmax_backward")
    if it.size == 0 or L == 0:
        return
    sgi = <Py_ssize_t>gi_strides[d] * itemsize_of(gidt)
    sgo = <Py_ssize_t>go_strides[d] * itemsize_of(godt)
    sy = <Py_ssize_t>y_strides[d] * itemsize_of(ydt)
    dbl = gidt == DT_FLOAT64 or godt == DT_FLOAT64 or ydt == DT_FLOAT64
    g = malloc(L * sizeof(double))
    y = malloc(L * sizeof(double))
    if g == NULL or y == NULL:
        free(g)
        free(y)
        raise MemoryError("log_softmax_backward: cannot allocate scratch")
    try:
        ptrs[0] = as_ptr(gi_addr, "log_softmax_backward gi_addr")
        ptrs[1] = as_ptr(go_addr, "log_softmax_backward go_addr")
        ptrs[2] = as_ptr(y_addr, "log_softmax_backward y_addr")
        with nogil:
            if dbl:
                _log_softmax_bwd_rows(&it, ptrs, L, sgi, gidt, sgo, godt, sy, ydt, <double*>g, <double*>y)
            else:
                _log_softmax_bwd_rows(&it, ptrs, L, sgi, gidt, sgo, godt, sy, ydt, <float*>g, <float*>y)
    finally:
        free(g)
        free(y)
