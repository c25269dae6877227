# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Reduction kernels of the device's vector engine: sum over a set of dimensions.

The input is walked in C order of its logical shape (after coalescing, like the
elementwise kernels) with a second, virtual operand: an accumulator array laid
out contiguously over the kept dimensions, with stride 0 on the reduced ones.
A row whose accumulator stride is 0 (the innermost dimension is reduced) is
summed pairwise within each block of BLOCK elements and the block sums are
added to the accumulator; otherwise each element is added to its own
accumulator slot.  At the end the accumulators are cast to the output dtype
and stored through the output's strides.

Numerics (the compute dtype is the output dtype, chosen on the host):
  * every input element is first cast to the compute dtype (``sum(x, dtype=)``
    semantics: ``x.to(dtype).sum()``);
  * float16/bfloat16/float32 accumulate in float32, float64 in float64, and
    integers and bool in int64 (wrapping); the result is rounded/wrapped once
    on store.  CPU's cascade summation adds in a different order, so floating
    results agree with CPU within a few ulps of the float32/float64 sum, not
    bit for bit; integer sums are exact.
  * an empty reduction gives 0.
"""

from libc.stdlib cimport calloc, free

include "_common.pxi"


cdef acc_t _pairwise(acc_t* v, Py_ssize_t m) noexcept nogil:
    """Sum of v[0:m] by pairwise halving in place (m <= BLOCK); integers wrap."""
    cdef Py_ssize_t i, h
    if m == 0:
        return 0
    while m > 1:
        h = m >> 1
        for i in range(h):
            if acc_t is int64_t:
                v[i] = <int64_t>(<uint64_t>v[i] + <uint64_t>v[i + h])
            else:
                v[i] = v[i] + v[i + h]
        if m & 1:
            v[h] = v[m - 1]
            m = h + 1
        else:
            m = h
    return v[0]


cdef void _sum_rows(NdIter* it, char** ptrs, int idt, int cdt, acc_t* scratch) noexcept nogil:
    # ptrs[0]: accumulator (acc_t array), ptrs[1]: input
    cdef Py_ssize_t n = iter_row_len(it)
    cdef Py_ssize_t sa = iter_row_stride(it, 0), si = iter_row_stride(it, 1)
    cdef Py_ssize_t j, m, i
    cdef acc_t* acc
    cdef acc_t s
    while True:
        j = 0
        while j < n:
            m = n - j if n - j < BLOCK else BLOCK
            load_block(ptrs[1] + j * si, si, idt, m, scratch)
            if idt != cdt:
                round_block_to(scratch, m, cdt)
            if sa == 0:
                acc = <acc_t*>ptrs[0]
                s = _pairwise(scratch, m)
                if acc_t is int64_t:
                    acc[0] = <int64_t>(<uint64_t>acc[0] + <uint64_t>s)
                else:
                    acc[0] = acc[0] + s
            else:
                acc = <acc_t*>(ptrs[0] + j * sa)
                for i in range(m):
                    if acc_t is int64_t:
                        acc[i] = <int64_t>(<uint64_t>acc[i] + <uint64_t>scratch[i])
                    else:
                        acc[i] = acc[i] + scratch[i]
            j += m
        if not iter_next_row(it, ptrs):
            break


cdef void _store_rows(NdIter* it, char** ptrs, int odt, acc_t* scratch) noexcept nogil:
    # ptrs[0]: output, ptrs[1]: accumulator (acc_t array, read with memcpy-based loads)
    cdef Py_ssize_t n = iter_row_len(it)
    cdef Py_ssize_t so = iter_row_stride(it, 0), sa = iter_row_stride(it, 1)
    cdef Py_ssize_t j, m, i
    while True:
        j = 0
        while j < n:
            m = n - j if n - j < BLOCK else BLOCK
            for i in range(m):
                scratch[i] = (<acc_t*>(ptrs[1] + (j + i) * sa))[0]
            store_block(scratch, m, odt, ptrs[0] + j * so, so)
            j += m
        if not iter_next_row(it, ptrs):
            break


def reduce_sum(out_addr, out_dtype, out_strides, in_addr, in_dtype, in_strides, shape, dims, compute_dtype):
    """out = sum over `dims` of cast<compute>(input), cast to the output dtype.

    ``shape`` and ``in_strides`` describe the input; ``out_strides`` are the
    output's strides in keepdim form (one per input dimension; the value on a
    reduced dimension is ignored).  ``dims``: distinct dimensions in
    [0, len(shape)).  Accumulates in float32 (float16/bfloat16/float32
    compute), float64, or int64 (integer and bool compute, wrapping).
    """
    cdef int odt, idt, cdt, nd, d, acc_kind
    cdef Py_ssize_t n_out = 1, acc_size, k
    cdef NdIter it
    cdef char* ptrs[2]
    cdef char* acc = NULL
    cdef float fs[BLOCK]
    cdef double ds[BLOCK]
    cdef int64_t is_[BLOCK]
    odt = check_dtype(out_dtype, "sum out_dtype")
    idt = check_dtype(in_dtype, "sum in_dtype")
    cdt = check_dtype(compute_dtype, "sum compute_dtype")
    shape = tuple(shape)
    nd = len(shape)
    if len(in_strides) != nd or len(out_strides) != nd:
        raise KernelArgumentError(f"sum: strides {tuple(in_strides)!r} / {tuple(out_strides)!r} do not match shape {shape!r}")
    reduced = set()
    for d in dims:
        if isinstance(d, bool) or not hasattr(d, "__index__") or not (0 <= d < nd) or d in reduced:
            raise KernelArgumentError(f"sum: invalid or repeated dim {d!r} for rank {nd}")
        reduced.add(int(d))
    for d in range(nd):
        if shape[d] < 0:
            raise KernelArgumentError(f"sum: negative extent in shape {shape!r}")
    out_shape = tuple(1 if d in reduced else shape[d] for d in range(nd))
    for d in range(nd):
        n_out *= out_shape[d]
    if n_out == 0:
        return
    if cdt == DT_FLOAT64:
        acc_kind, acc_size = 1, 8
    elif is_floating(cdt):
        acc_kind, acc_size = 0, 4
    else:
        acc_kind, acc_size = 2, 8
    # Accumulator strides (elements): C-contiguous over out_shape, 0 on reduced dims.
    acc_strides = [0] * nd
    k = 1
    for d in range(nd - 1, -1, -1):
        acc_strides[d] = 0 if d in reduced else k
        k *= out_shape[d]
    acc = <char*>calloc(n_out, acc_size)
    if acc == NULL:
        raise MemoryError("sum: cannot allocate the accumulator")
    try:
        iter_init(&it, shape, [acc_strides, in_strides], [acc_size, itemsize_of(idt)], "sum")
        if it.size:
            ptrs[0] = acc
            ptrs[1] = as_ptr(in_addr, "sum in_addr")
            with nogil:
                if acc_kind == 0:
                    _sum_rows(&it, ptrs, idt, cdt, fs)
                elif acc_kind == 1:
                    _sum_rows(&it, ptrs, idt, cdt, ds)
                else:
                    _sum_rows(&it, ptrs, idt, cdt, is_)
        out_acc_strides = [0 if d in reduced else acc_strides[d] for d in range(nd)]
        iter_init(&it, out_shape, [list(out_strides), out_acc_strides],
                  [itemsize_of(odt), acc_size], "sum")
        ptrs[0] = as_ptr(out_addr, "sum out_addr")
        ptrs[1] = acc
        with nogil:
            if acc_kind == 0:
                _store_rows(&it, ptrs, odt, fs)
            elif acc_kind == 1:
                _store_rows(&it, ptrs, odt, ds)
            else:
                _store_rows(&it, ptrs, odt, is_)
    finally:
        free(acc)
