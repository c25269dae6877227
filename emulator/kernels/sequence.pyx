# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Sequence kernels of the device: arange and linspace into a 1-D strided output.

Numerics follow PyTorch's CPU kernels: arange computes ``start + i * step`` in
int64 for integer outputs and in double for floating ones, then casts once;
linspace fills the first half from ``start`` and the second half back from
``end`` so both ends are exact. Left out: float16 rounding of intermediate
steps (CPU rounds each step for half; here they are computed in double).
"""

include "_common.pxi"


def arange(out_addr, out_dtype, out_stride, n, start, step):
    """out[i] = start + i * step for i < n (integer arithmetic when all are ints)."""
    cdef int dt = check_dtype(out_dtype, "arange")
    cdef Py_ssize_t count = n, stride = out_stride * itemsize_of(dt), i, j, m
    cdef double fstart, fstep
    cdef int64_t istart, istep
    cdef double dbuf[BLOCK]
    cdef int64_t ibuf[BLOCK]
    cdef char* p
    cdef bint integral = (not is_floating(dt)) and isinstance(start, int) and isinstance(step, int)
    if count <= 0:
        return
    p = as_ptr(out_addr, "arange")
    if integral:
        istart, istep = start, step
    else:
        fstart, fstep = start, step
    with nogil:
        i = 0
        while i < count:
            m = min(<Py_ssize_t>BLOCK, count - i)
            if integral:
                for j in range(m):
                    ibuf[j] = istart + (i + j) * istep
                store_block(ibuf, m, dt, p + i * stride, stride)
            else:
                for j in range(m):
                    dbuf[j] = fstart + (i + j) * fstep
                store_block(dbuf, m, dt, p + i * stride, stride)
            i += m


def linspace(out_addr, out_dtype, out_stride, steps, start, end):
    """``steps`` evenly spaced values from start to end inclusive."""
    cdef int dt = check_dtype(out_dtype, "linspace")
    cdef Py_ssize_t count = steps, stride = out_stride * itemsize_of(dt), i, j, m, halfway
    cdef double fstart = start, fend = end, step
    cdef double dbuf[BLOCK]
    cdef char* p
    if count <= 0:
        return
    p = as_ptr(out_addr, "linspace")
    step = (fend - fstart) / (count - 1) if count > 1 else 0.0
    halfway = count // 2
    with nogil:
        i = 0
        while i < count:
            m = min(<Py_ssize_t>BLOCK, count - i)
            for j in range(m):
                if i + j < halfway:
                    dbuf[j] = fstart + step * (i + j)
                else:
                    dbuf[j] = fend - step * (count - (i + j) - 1)
            store_block(dbuf, m, dt, p + i * stride, stride)
            i += m
