# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Matrix-engine GEMM of the device: out = beta * C + alpha * (A @ B).

Models the matrix engine's numerics contract: float16/bfloat16 operands are
widened to float32, products accumulate in float32, alpha/beta are applied in
float32 and the result is rounded once to the output dtype; float32 runs in
float32 and float64 in float64.  The arithmetic itself is delegated to the
host BLAS (scipy.linalg.cython_blas sgemm/dgemm), so the summation order --
and hence the last bits -- is BLAS's, not a systolic array's.

Operands already in the BLAS type and in a row- or column-major layout are
handed to BLAS in place; anything else (other dtypes, broadcast or odd
strides) is packed into malloc'd contiguous scratch first.  Row-major
buffers are passed to column-major BLAS as their transposes:
C^T (N x M) = B^T (N x K) @ A^T (K x M).

Left out: integer/bool GEMM (rejected), batching (the caller loops), tiling
and timing (the cost model lives in library.py / matrix_engine.py).
"""

from libc.stdlib cimport malloc, calloc, free
from libc.limits cimport INT_MAX
from scipy.linalg.cython_blas cimport sgemm, dgemm

include "_common.pxi"

ctypedef fused real_t:
    float
    double

_INT_ERROR = "matmul: integer dtypes are not supported by the matrix engine"


cdef inline void _extent(const char* p, Py_ssize_t s0, Py_ssize_t s1, Py_ssize_t n0, Py_ssize_t n1,
                         Py_ssize_t isz, const char** lo, const char** hi) noexcept nogil:
    """Byte range [lo, hi) touched by a strided n0 x n1 operand."""
    cdef const char* a = p
    cdef const char* b = p
    if s0 >= 0:
        b += s0 * (n0 - 1)
    else:
        a += s0 * (n0 - 1)
    if s1 >= 0:
        b += s1 * (n1 - 1)
    else:
        a += s1 * (n1 - 1)
    lo[0] = a
    hi[0] = b + isz


cdef inline bint _overlaps(const char* lo1, const char* hi1, const char* lo2, const char* hi2) noexcept nogil:
    return lo1 < hi2 and lo2 < hi1


cdef bint _blas_view(const char* p, int dt, int want, Py_ssize_t s0, Py_ssize_t s1,
                     Py_ssize_t rows, Py_ssize_t cols, char* trans, int* ld) noexcept nogil:
    """Can a rows x cols operand be given to BLAS as is?  Sets trans/ld for
    the row-major-as-transpose convention: 'N' if row-major, 'T' if
    column-major.  Only for the BLAS element type and aligned pointers."""
    cdef Py_ssize_t isz = itemsize_of(want)
    if dt != want or (<uintptr_t>p) % isz != 0 or s0 % isz != 0 or s1 % isz != 0:
        return False
    if s1 == isz and s0 // isz >= (cols if cols > 1 else 1) and s0 // isz <= INT_MAX:
        trans[0] = b'N'
        ld[0] = <int>(s0 // isz)
        return True
    if s0 == isz and s1 // isz >= (rows if rows > 1 else 1) and s1 // isz <= INT_MAX:
        trans[0] = b'T'
        ld[0] = <int>(s1 // isz)
        return True
    return False


cdef void _pack(const char* p, int dt, Py_ssize_t s0, Py_ssize_t s1, Py_ssize_t rows,
                Py_ssize_t cols, real_t* dst) noexcept nogil:
    """dst[r*cols + c] = cast<real_t>(p[r, c]) (row-major scratch)."""
    cdef Py_ssize_t r
    for r in range(rows):
        load_block(p + r * s0, s1, dt, cols, dst + r * cols)


cdef int _gemm(char* out, int odt, Py_ssize_t os0, Py_ssize_t os1,
               char* a, int adt, Py_ssize_t as0, Py_ssize_t as1,
               char* b, int bdt, Py_ssize_t bs0, Py_ssize_t bs1,
               char* c, int cdt, Py_ssize_t cs0, Py_ssize_t cs1,
               int M, int N, int K, real_t alpha, real_t beta) noexcept nogil:
    """Returns 0, or -1 if scratch allocation failed."""
    cdef int want = DT_FLOAT32 if real_t is float else DT_FLOAT64
    cdef Py_ssize_t isz = itemsize_of(want), i, j
    cdef real_t* abuf = NULL
    cdef real_t* bbuf = NULL
    cdef real_t* cbuf = NULL
    cdef real_t* A
    cdef real_t* B
    cdef real_t* C
    cdef char ta, tb, tc
    cdef int lda, ldb, ldc
    cdef const char* lo_o
    cdef const char* hi_o
    cdef const char* lo_x
    cdef const char* hi_x
    cdef bint direct_out, pack_a = False, pack_b = False

    # 1. Decide layouts: operands in BLAS type and layout are used in place.
    if K > 0:
        pack_a = not _blas_view(a, adt, want, as0, as1, M, K, &ta, &lda)
        pack_b = not _blas_view(b, bdt, want, bs0, bs1, K, N, &tb, &ldb)
    # The output is written by BLAS in place when it is a row-major buffer of
    # the BLAS type that aliases neither A nor B and needs no C but itself.
    direct_out = _blas_view(out, odt, want, os0, os1, M, N, &tc, &ldc) and tc == b'N'
    if direct_out:
        _extent(out, os0, os1, M, N, isz, &lo_o, &hi_o)
        if K > 0:
            _extent(a, as0, as1, M, K, itemsize_of(adt), &lo_x, &hi_x)
            direct_out = not _overlaps(lo_o, hi_o, lo_x, hi_x)
            _extent(b, bs0, bs1, K, N, itemsize_of(bdt), &lo_x, &hi_x)
            direct_out = direct_out and not _overlaps(lo_o, hi_o, lo_x, hi_x)
        if beta != 0 and not (c == out and cdt == odt and cs0 == os0 and cs1 == os1):
            direct_out = False

    # 2. Scratch.
    if pack_a:
        abuf = <real_t*>malloc(<size_t>M * K * sizeof(real_t))
    if pack_b:
        bbuf = <real_t*>malloc(<size_t>K * N * sizeof(real_t))
    if not direct_out:
        cbuf = <real_t*>calloc(<size_t>M * N, sizeof(real_t))
    if (pack_a and abuf == NULL) or (pack_b and bbuf == NULL) or (not direct_out and cbuf == NULL):
        free(abuf)
        free(bbuf)
        free(cbuf)
        return -1

    # 3. Pack (this is where float16/bfloat16/strided operands are widened).
    A = <real_t*>a
    B = <real_t*>b
    C = <real_t*>out
    if pack_a:
        _pack(a, adt, as0, as1, M, K, abuf)
        A = abuf
        ta = b'N'
        lda = K
    if pack_b:
        _pack(b, bdt, bs0, bs1, K, N, bbuf)
        B = bbuf
        tb = b'N'
        ldb = N
    if not direct_out:
        if beta != 0:
            _pack(c, cdt, cs0, cs1, M, N, cbuf)      # C widened exactly to fp32/fp64
        C = cbuf
        ldc = N

    if K == 0:
        # Empty sum: out = beta * C.  Done here because BLAS implementations
        # disagree on degenerate k.
        for i in range(M):
            for j in range(N):
                C[i * ldc + j] = 0 if beta == 0 else beta * C[i * ldc + j]
    elif real_t is float:
        sgemm(&tb, &ta, &N, &M, &K, &alpha, B, &ldb, A, &lda, &beta, C, &ldc)
    else:
        dgemm(&tb, &ta, &N, &M, &K, &alpha, B, &ldb, A, &lda, &beta, C, &ldc)

    if not direct_out:
        for i in range(M):                          # the single rounding to the output dtype
            store_block(cbuf + i * N, N, odt, out + i * os0, os1)
    free(abuf)
    free(bbuf)
    free(cbuf)
    return 0


cdef tuple _strides2(object s, Py_ssize_t isz, str what):
    s = tuple(s)
    if len(s) != 2:
        raise KernelArgumentError(f"matmul: {what} must have 2 entries, got {s!r}")
    return (<Py_ssize_t>s[0] * isz, <Py_ssize_t>s[1] * isz)


def matmul(out_addr, out_dtype, out_strides2, a_addr, a_dtype, a_strides2,
           b_addr, b_dtype, b_strides2, M, N, K, beta=0.0, c_addr=0, c_dtype=DT_FLOAT32,
           c_strides2=(0, 0), alpha=1.0):
    """out[M,N] = beta * C[M,N] + alpha * (A[M,K] @ B[K,N]); strides in elements.

    C is not read when beta == 0 (c_addr may be 0); its strides may be 0 to
    broadcast a bias.  float64 compute if A or B is float64, else float32.
    """
    cdef int odt = check_dtype(out_dtype, "matmul out_dtype")
    cdef int adt = check_dtype(a_dtype, "matmul a_dtype")
    cdef int bdt = check_dtype(b_dtype, "matmul b_dtype")
    cdef int cdt = check_dtype(c_dtype, "matmul c_dtype")
    cdef int m, n, k, rc
    cdef char* po
    cdef char* pa = NULL
    cdef char* pb = NULL
    cdef char* pc = NULL
    cdef Py_ssize_t os0, os1, as0, as1, bs0, bs1, cs0 = 0, cs1 = 0
    cdef double dbeta = float(beta), dalpha = float(alpha)
    if not (is_floating(odt) and is_floating(adt) and is_floating(bdt)) or \
            (dbeta != 0 and not is_floating(cdt)):
        raise KernelArgumentError(_INT_ERROR)
    for v, name in ((M, "M"), (N, "N"), (K, "K")):
        if not hasattr(v, "__index__") or not (0 <= v < 2**31):
            raise KernelArgumentError(f"matmul: {name} must be an int in [0, 2**31), got {v!r}")
    m, n, k = M, N, K
    os0, os1 = _strides2(out_strides2, itemsize_of(odt), "out_strides2")
    as0, as1 = _strides2(a_strides2, itemsize_of(adt), "a_strides2")
    bs0, bs1 = _strides2(b_strides2, itemsize_of(bdt), "b_strides2")
    if dbeta != 0:
        cs0, cs1 = _strides2(c_strides2, itemsize_of(cdt), "c_strides2")
    if m == 0 or n == 0:
        return
    po = as_ptr(out_addr, "matmul out_addr")
    if k > 0:
        pa = as_ptr(a_addr, "matmul a_addr")
        pb = as_ptr(b_addr, "matmul b_addr")
    if dbeta != 0:
        pc = as_ptr(c_addr, "matmul c_addr")
    with nogil:
        if adt == DT_FLOAT64 or bdt == DT_FLOAT64:
            rc = _gemm(po, odt, os0, os1, pa, adt, as0, as1, pb, bdt, bs0, bs1, pc, cdt, cs0, cs1,
                       m, n, k, dalpha, dbeta)
        else:
            rc = _gemm(po, odt, os0, os1, pa, adt, as0, as1, pb, bdt, bs0, bs1, pc, cdt, cs0, cs1,
                       m, n, k, <float>dalpha, <float>dbeta)
    if rc != 0:
        raise MemoryError("matmul: could not allocate scratch buffers")
