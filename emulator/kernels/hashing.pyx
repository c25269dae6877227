# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Hash kernel of the device's vector engine: ``hash_xor``, the xor over a set of reduced dims of
each element widened to its 64-bit float or integer type and read as 64 bits (aten::hash_tensor).

Left out: hash modes other than xor (the only one aten defines), and any cost.
"""

include "_common.pxi"
include "_index_iter.pxi"


cdef inline int64_t hash_bits(const char* p, int dt) noexcept nogil:
    """An element widened to its 64-bit float / integer type and read as 64 bits (hash_tensor)."""
    cdef double dv
    cdef int64_t iv
    if is_floating(dt):
        dv = ld_d(p, dt)
        memcpy(&iv, &dv, 8)
        return iv
    return ld_i(p, dt)


def hash_xor(out_addr, out_strides, src_addr, src_dtype, src_strides, shape):
    """out[q] = xor over the elements p of src that map to q (out's strides over src's ``shape``
    are 0 on the reduced dims) of hash_bits(src[p]); out is 64-bit (uint64 read as int64)."""
    cdef int dt = check_dtype(src_dtype, "hash_xor src_dtype")
    cdef NdIter it
    cdef char* ptrs[2]
    cdef char* p[2]
    cdef Py_ssize_t n, i, so, ss
    cdef int pass_
    iter_init(&it, shape, [list(out_strides), list(src_strides)], [8, itemsize_of(dt)], "hash_xor")
    if it.size == 0:
        return
    ptrs[0] = as_ptr(out_addr, "hash_xor out_addr")
    ptrs[1] = as_ptr(src_addr, "hash_xor src_addr")
    with nogil:
        n = iter_row_len(&it)
        so = iter_row_stride(&it, 0)
        ss = iter_row_stride(&it, 1)
        for pass_ in range(2):                    # 0: clear the outputs, 1: accumulate
            p[0], p[1] = ptrs[0], ptrs[1]
            while True:
                for i in range(n):
                    if pass_ == 0:
                        ek_st_i64(p[0] + i * so, 0)
                    else:
                        ek_st_i64(p[0] + i * so, ek_ld_i64(p[0] + i * so) ^ hash_bits(p[1] + i * ss, dt))
                if not iter_next_row(&it, p):
                    break
