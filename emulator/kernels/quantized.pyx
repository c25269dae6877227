# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Quantized and low-precision matrix-engine kernels of the device.

* ``int_mm``: int8/uint8 x int8 -> int32 (torch._int_mm). Products of 8-bit integers accumulate
  in int32 with wrap-around (exactly CPU's result whatever the order).
* ``weight_int8pack_mm``: A (M, K; float32/bfloat16/float16) @ B^T (B: N x K int8) * scales[n]
  (torch._weight_int8pack_mm). The weight is widened to float32, products accumulate in float32,
  the per-channel scale is applied in float32 and the result rounded once to A's dtype.
* ``int4_pack`` / ``int4pack_mm``: torch CPU's int4 weight layout
  (torch._convert_weight_to_int4pack_for_cpu) and the matmul that reads it
  (torch._weight_int4pack_mm_for_cpu): w = (q - 8) * scale + zero per (K group, column),
  dequantized in float32, then a float32-accumulated product rounded to A's dtype.
* ``scaled_mm``: float8 x float8 (any of the four formats, mixed allowed) with tensor-wise or
  row-wise float32 scales (torch._scaled_mm): float32 accumulation of the exact fp8 products,
  then * scale_a[m] * scale_b[n] (+ bias[n]), then * (1 / scale_result) for an e4m3fn or e5m2
  output, rounded once as a float32 -> float8 conversion (e4m3fn saturates, as torch's reference
  _scaled_mm gives).

The float32 products are summed by the host BLAS's sgemm (scipy's OpenBLAS) on operands unpacked
to float32 (exact for every input type here), so the summation order -- and the last bits -- is
BLAS's; the accumulation width is the contract.

Left out: timing (library.py: the matrix engine at the int8 or float8 rate of the hardware
description) and any fusion with a following op.
"""

from libc.stdlib cimport malloc, free
from scipy.linalg.cython_blas cimport sgemm

include "_common.pxi"
include "_float8.pxi"


cdef void _to_float(const char* p, int dt, Py_ssize_t s0, Py_ssize_t s1, Py_ssize_t rows, Py_ssize_t cols,
                    float* out) noexcept nogil:
    """out (rows x cols, row-major) = the strided operand widened to float32 (strides in bytes)."""
    cdef Py_ssize_t i
    for i in range(rows):
        if is_float8(dt):
            f8_load(p + i * s0, s1, dt, cols, out + i * cols)
        else:
            load_block(p + i * s0, s1, dt, cols, out + i * cols)


cdef void _sgemm_rm(const float* a, const float* b, float* c, int M, int N, int K) noexcept nogil:
    """c (M x N row-major) = a (M x K row-major) @ b (K x N row-major), as column-major BLAS:
    c^T = b^T @ a^T."""
    cdef float one = 1.0, zero = 0.0
    cdef char tr = b'N'
    cdef Py_ssize_t i
    if M == 0 or N == 0:
        return
    if K == 0:
        for i in range(M * N):
            c[i] = 0.0
        return
    sgemm(&tr, &tr, &N, &M, &K, &one, <float*>b, &N, <float*>a, &K, &zero, c, &N)


cdef tuple _s2(object strides, int dt):
    s0, s1 = strides
    return s0 * itemsize_of(dt), s1 * itemsize_of(dt)


cdef float* _alloc(Py_ssize_t n) except NULL:
    cdef float* p = <float*>malloc(<size_t>(n if n > 0 else 1) * sizeof(float))
    if p == NULL:
        raise MemoryError("quantized kernel scratch")
    return p


cdef void _store_rows(const float* c, int odt, char* po, Py_ssize_t os0, Py_ssize_t os1,
                      Py_ssize_t M, Py_ssize_t N) noexcept nogil:
    """Round the float32 results once to odt (a float8 output as a float32 -> float8 conversion:
    e4m3fn saturates)."""
    cdef Py_ssize_t i, j
    for i in range(M):
        if is_float8(odt):
            for j in range(N):
                po[i * os0 + j * os1] = <char>sk_f8_encode(odt - DT_FLOAT8_E4M3FN, c[i * N + j])
        else:
            store_block(c + i * N, N, odt, po + i * os0, os1)


def int_mm(out_addr, out_strides, a_addr, a_dtype, a_strides, b_addr, b_strides, M, N, K):
    """out (M x N int32) = A (M x K, int8 or uint8) @ B (K x N int8), int32 accumulation."""
    cdef int adt = check_dtype(a_dtype, "int_mm a_dtype")
    cdef Py_ssize_t m = M, n = N, k = K, i, j, kk
    cdef Py_ssize_t os0, os1, as0, as1, bs0, bs1
    cdef char* po
    cdef char* pa
    cdef char* pb
    cdef int32_t* bt
    cdef int32_t* ar
    cdef int32_t acc
    if adt != DT_INT8 and adt != DT_UINT8:
        raise KernelArgumentError(f"int_mm: A must be int8 or uint8, got {_DTYPE_NAMES[adt]}")
    if m == 0 or n == 0:
        return
    os0, os1 = _s2(out_strides, DT_INT32)
    as0, as1 = a_strides
    bs0, bs1 = b_strides
    po = as_ptr(out_addr, "int_mm out_addr")
    pa = as_ptr(a_addr, "int_mm a_addr") if k else NULL
    pb = as_ptr(b_addr, "int_mm b_addr") if k else NULL
    bt = <int32_t*>malloc(<size_t>(n * k + k + 1) * sizeof(int32_t))
    if bt == NULL:
        raise MemoryError("int_mm scratch")
    ar = bt + n * k
    with nogil:
        for j in range(n):          # B^T, widened: each output column's weights contiguous
            for kk in range(k):
                bt[j * k + kk] = (<const int8_t*>pb)[kk * bs0 + j * bs1]
        for i in range(m):
            for kk in range(k):
                if adt == DT_INT8:
                    ar[kk] = (<const int8_t*>pa)[i * as0 + kk * as1]
                else:
                    ar[kk] = (<const uint8_t*>pa)[i * as0 + kk * as1]
            for j in range(n):
                acc = 0
                for kk in range(k):
                    acc = <int32_t>(<uint32_t>acc + <uint32_t>(ar[kk] * bt[j * k + kk]))
                ek_st_i32(po + i * os0 + j * os1, acc)
    free(bt)


def weight_int8pack_mm(out_addr, out_dtype, out_strides, a_addr, a_dtype, a_strides, b_addr, b_strides,
                       s_addr, s_dtype, s_stride, M, N, K):
    """out (M x N) = (A (M x K) @ B^T (B: N x K int8)) * scales[n], float32 accumulation."""
    cdef int odt = check_dtype(out_dtype, "weight_int8pack_mm out_dtype")
    cdef int adt = check_dtype(a_dtype, "weight_int8pack_mm a_dtype")
    cdef int sdt = check_dtype(s_dtype, "weight_int8pack_mm s_dtype")
    cdef Py_ssize_t m = M, n = N, k = K, i, j
    cdef Py_ssize_t os0, os1, as0, as1, bs0, bs1, ss = s_stride * itemsize_of(sdt)
    cdef char* po
    cdef char* pa = NULL
    cdef char* pb = NULL
    cdef char* ps
    cdef float* af
    cdef float* bf
    cdef float* cf
    cdef float* sf
    if m == 0 or n == 0:
        return
    os0, os1 = _s2(out_strides, odt)
    as0, as1 = _s2(a_strides, adt)
    bs0, bs1 = b_strides
    po = as_ptr(out_addr, "weight_int8pack_mm out_addr")
    ps = as_ptr(s_addr, "weight_int8pack_mm s_addr")
    if k:
        pa = as_ptr(a_addr, "weight_int8pack_mm a_addr")
        pb = as_ptr(b_addr, "weight_int8pack_mm b_addr")
    af, bf, cf, sf = _alloc(m * k), _alloc(k * n), _alloc(m * n), _alloc(n)
    with nogil:
        _to_float(pa, adt, as0, as1, m, k, af)
        _to_float(pb, DT_INT8, bs1, bs0, k, n, bf)      # B^T: K x N
        load_block(ps, ss, sdt, n, sf)
        _sgemm_rm(af, bf, cf, <int>m, <int>n, <int>k)
        for i in range(m):
            for j in range(n):
                cf[i * n + j] = cf[i * n + j] * sf[j]
        _store_rows(cf, odt, po, os0, os1, m, n)
    free(af); free(bf); free(cf); free(sf)


cdef inline Py_ssize_t _int4_index(Py_ssize_t n, Py_ssize_t k, Py_ssize_t N, Py_ssize_t K, Py_ssize_t block,
                                   bint split, int* high) noexcept nogil:
    """Byte offset of w[n, k] in torch CPU's int4 layout for its vector width, and which nibble.

    Rows go in blocks of ``block`` (64 on AVX-512, 32 otherwise); a block holds, for each k,
    block / 2 bytes. ``split`` (AVX-512, AVX2): row r of a full block sits in byte r % (block / 2),
    the high nibble for the second half; otherwise (and in the N % block rows left at the end,
    one smaller block) rows go in pairs, the low nibble the even row."""
    cdef Py_ssize_t full = N - N % block, half = block // 2, r
    if n < full:
        r = n % block
        if split:
            high[0] = r >= half
            return (n // block) * (K * half) + k * half + (r % half)
        high[0] = r & 1
        return (n // block) * (K * half) + k * half + r // 2
    r = n - full
    high[0] = r & 1
    return full * K // 2 + k * ((N - full) // 2) + r // 2


def int4_pack(out_addr, w_addr, w_strides, N, K, block, split):
    """out (N * K / 2 bytes) = w (N x K int32, values 0..15) packed in torch CPU's int4 layout
    (``block``, ``split``: _int4_index)."""
    cdef Py_ssize_t n_ = N, k_ = K, n, k, off, ws0, ws1, blk = block
    cdef bint spl = split
    cdef int high
    cdef char* po
    cdef char* pw
    cdef uint8_t q
    if n_ == 0 or k_ == 0:
        return
    ws0, ws1 = _s2(w_strides, DT_INT32)
    po = as_ptr(out_addr, "int4_pack out_addr")
    pw = as_ptr(w_addr, "int4_pack w_addr")
    with nogil:
        for n in range(n_):
            for k in range(k_):
                q = <uint8_t>(ek_ld_i32(pw + n * ws0 + k * ws1) & 0xF)
                off = _int4_index(n, k, n_, k_, blk, spl, &high)
                if high:
                    po[off] = <char>((<uint8_t>po[off] & 0x0F) | (q << 4))
                else:
                    po[off] = <char>((<uint8_t>po[off] & 0xF0) | q)


def int4pack_mm(out_addr, out_dtype, out_strides, a_addr, a_dtype, a_strides, w_addr, N, K, group_size,
                sz_addr, sz_dtype, sz_strides, M, block, split):
    """out (M x N) = A (M x K) @ W^T, W[n, k] = (q[n, k] - 8) * sz[k // g, n, 0] + sz[k // g, n, 1]
    (q: torch CPU's int4 layout, int4_pack's ``block`` and ``split``); float32 dequantization and
    accumulation."""
    cdef int odt = check_dtype(out_dtype, "int4pack_mm out_dtype")
    cdef int adt = check_dtype(a_dtype, "int4pack_mm a_dtype")
    cdef int zdt = check_dtype(sz_dtype, "int4pack_mm sz_dtype")
    cdef Py_ssize_t m = M, n_ = N, k_ = K, g = group_size, n, k, off, blk = block
    cdef bint spl = split
    cdef Py_ssize_t os0, os1, as0, as1, z0, z1, z2
    cdef int high
    cdef uint8_t byte
    cdef float scale, zero, q
    cdef char* po
    cdef char* pa = NULL
    cdef char* pw = NULL
    cdef char* pz = NULL
    cdef float* af
    cdef float* wf
    cdef float* cf
    if m == 0 or n_ == 0:
        return
    os0, os1 = _s2(out_strides, odt)
    as0, as1 = _s2(a_strides, adt)
    z0, z1, z2 = [s * itemsize_of(zdt) for s in sz_strides]
    po = as_ptr(out_addr, "int4pack_mm out_addr")
    if k_:
        pa = as_ptr(a_addr, "int4pack_mm a_addr")
        pw = as_ptr(w_addr, "int4pack_mm w_addr")
        pz = as_ptr(sz_addr, "int4pack_mm sz_addr")
    af, wf, cf = _alloc(m * k_), _alloc(k_ * n_), _alloc(m * n_)
    with nogil:
        _to_float(pa, adt, as0, as1, m, k_, af)
        for n in range(n_):
            for k in range(k_):
                off = _int4_index(n, k, n_, k_, blk, spl, &high)
                byte = <uint8_t>pw[off]
                q = <float>(((byte >> 4) if high else (byte & 0xF)) - 8)
                load_block(pz + (k // g) * z0 + n * z1, z2, zdt, 1, &scale)
                load_block(pz + (k // g) * z0 + n * z1 + z2, z2, zdt, 1, &zero)
                wf[k * n_ + n] = q * scale + zero
        _sgemm_rm(af, wf, cf, <int>m, <int>n_, <int>k_)
        _store_rows(cf, odt, po, os0, os1, m, n_)
    free(af); free(wf); free(cf)


def scaled_mm(out_addr, out_dtype, out_strides, a_addr, a_dtype, a_strides, b_addr, b_dtype, b_strides,
              sa_addr, sa_stride, sb_addr, sb_stride, bias_addr, bias_dtype, bias_stride, result_scale_addr,
              M, N, K):
    """out (M x N) = round((A @ B) * sa[m] * sb[n] + bias[n]) (/ result_scale for a float8 out).

    A, B: float8 (strides in elements); sa/sb: float32, stride 0 for a tensor-wise scale;
    bias_addr 0: no bias; result_scale_addr 0: none (a float32 scalar otherwise)."""
    cdef int odt = check_storage_dtype(out_dtype, "scaled_mm out_dtype")
    cdef int adt = check_storage_dtype(a_dtype, "scaled_mm a_dtype")
    cdef int bdt = check_storage_dtype(b_dtype, "scaled_mm b_dtype")
    cdef int cdt = check_dtype(bias_dtype, "scaled_mm bias_dtype") if bias_addr else DT_FLOAT32
    cdef Py_ssize_t m = M, n = N, k = K, i, j
    cdef Py_ssize_t os0, os1, as0, as1, bs0, bs1
    cdef Py_ssize_t sas = sa_stride * 4, sbs = sb_stride * 4, cs = bias_stride * itemsize_of(cdt)
    cdef char* po
    cdef char* pa = NULL
    cdef char* pb = NULL
    cdef char* psa
    cdef char* psb
    cdef char* pc = NULL
    cdef float* af
    cdef float* bf
    cdef float* cf
    cdef float* sa
    cdef float* sb
    cdef float* bias
    cdef float rs = 1.0
    cdef bint has_bias = bias_addr != 0, has_rs = result_scale_addr != 0
    if not (is_float8(adt) and is_float8(bdt)):
        raise KernelArgumentError(f"scaled_mm: A and B must be float8, got {_DTYPE_NAMES[adt]}, {_DTYPE_NAMES[bdt]}")
    if not (is_float8(odt) or is_floating(odt)):
        raise KernelArgumentError(f"scaled_mm: out must be floating or float8, got {_DTYPE_NAMES[odt]}")
    if m == 0 or n == 0:
        return
    os0, os1 = _s2(out_strides, odt)
    as0, as1 = a_strides
    bs0, bs1 = b_strides
    po = as_ptr(out_addr, "scaled_mm out_addr")
    psa = as_ptr(sa_addr, "scaled_mm sa_addr")
    psb = as_ptr(sb_addr, "scaled_mm sb_addr")
    if has_bias:
        pc = as_ptr(bias_addr, "scaled_mm bias_addr")
    if has_rs:
        rs = (<float>1.0) / ek_ld_f32(as_ptr(result_scale_addr, "scaled_mm result_scale_addr"))  # x * (1 / s), as the reference
    if k:
        pa = as_ptr(a_addr, "scaled_mm a_addr")
        pb = as_ptr(b_addr, "scaled_mm b_addr")
    af, bf, cf = _alloc(m * k), _alloc(k * n), _alloc(m * n)
    sa, sb, bias = _alloc(m), _alloc(n), _alloc(n)
    with nogil:
        _to_float(pa, adt, as0, as1, m, k, af)
        _to_float(pb, bdt, bs0, bs1, k, n, bf)
        load_block(psa, sas, DT_FLOAT32, m, sa)
        load_block(psb, sbs, DT_FLOAT32, n, sb)
        if has_bias:
            load_block(pc, cs, cdt, n, bias)
        _sgemm_rm(af, bf, cf, <int>m, <int>n, <int>k)
        for i in range(m):
            for j in range(n):
                cf[i * n + j] = cf[i * n + j] * sa[i] * sb[j]
                if has_bias:
                    cf[i * n + j] = cf[i * n + j] + bias[j]
                if has_rs:
                    cf[i * n + j] = cf[i * n + j] * rs
        _store_rows(cf, odt, po, os0, os1, m, n)
    free(af); free(bf); free(cf); free(sa); free(sb); free(bias)
