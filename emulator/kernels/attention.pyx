# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Fused attention of the device: softmax(scale * Q K^T + bias) V in one kernel, forward and
backward, the tiled online-softmax algorithm of FlashAttention-2.

Forward, per (batch, query head) and per tile of ``TILE_Q`` query rows: the rows stay in scratch;
K and V stream past in tiles of ``TILE_K`` rows; each score tile gets its bias (an additive float
mask, or a boolean mask: false is -inf) and the causal mask (top-left aligned: row i sees keys
j <= i), then the row's running max and sum are updated, the accumulator is rescaled by
exp(old max - new max) and the tile's probabilities times V are added. The score matrix never
exists beyond one tile. Key tiles entirely above the diagonal are skipped under ``causal``. The
output is the accumulator over the sum, rounded once to the output dtype; the logsumexp
``max + log(sum)`` (float32) is kept for the backward. A row that attends to nothing (every score
-inf) gives zeros, as PyTorch's math path (its _safe_softmax), and logsumexp +inf; a NaN score
makes its row NaN.

GQA: query head h reads key/value head h // (Hq / Hk).

Dropout: the probability of (b, h, i, j) is kept, and scaled by 1 / (1 - p), when word
``offset + ((b * Hq + h) * Lq + i) * Lk + j`` of the device's Philox stream (random.pyx: the same
generator, the same word order as its bernoulli kernel over a (B, Hq, Lq, Lk) tensor) is below
(1 - p) * 2**32. The row sum uses the undropped probabilities, as the math path's dropout after
softmax. The backward draws the same words from the same (seed, offset), so both see one mask.

Backward (FlashAttention-2's): per (batch, key/value head), for each query head of its group and
each query tile: D_i = rowsum(dO * O); per key tile the probabilities are recomputed from the saved
logsumexp, P = exp(S - lse); dV += (P Z)^T dO, dP = dO V^T, dS = P (dP Z - D), dQ += scale dS K,
dK += scale dS^T Q, where Z is the dropout's keep-and-scale factor. dK and dV of a key/value head
sum over its query heads. With a bias gradient requested, dS is summed into a float32 (float64)
buffer that has the bias's broadcast strides (the caller zeroes it and rounds it to the bias dtype).

Numerics: float16/bfloat16/float32 operands are widened to float32 and every product and sum
accumulates in float32 (float64 operands in float64); results are rounded once. The summation
order is the tiles', not the math path's, so the last bits differ from CPU's.

Left out: timing (library.py's cost model describes the tiles as the hardware runs them), and
the host's SIMD beyond what the compiler vectorises.
"""

from libc.math cimport exp, expf, log, logf, INFINITY, NAN
from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memset

include "_common.pxi"

cdef enum:
    TILE_Q = 64
    TILE_K = 64

ctypedef fused real_t:
    float
    double


# -- the device's Philox4x32-10 stream (random.pyx's: _philox.pxi) -----------------------------
include "_philox.pxi"


# -- the kernel's operands ------------------------------------------------------------------------
cdef struct Attn:
    int dt, bias_dt
    Py_ssize_t B, Hq, Hk, Lq, Lk, D, Dv, group
    char* q
    char* k
    char* v
    char* o
    char* lse
    char* bias
    char* do
    char* dq
    char* dk
    char* dv
    char* dbias
    Py_ssize_t sq[4]
    Py_ssize_t sk[4]
    Py_ssize_t sv[4]
    Py_ssize_t so[4]
    Py_ssize_t slse[3]
    Py_ssize_t sbias[4]
    Py_ssize_t sdo[4]
    Py_ssize_t sdq[4]
    Py_ssize_t sdk[4]
    Py_ssize_t sdv[4]
    Py_ssize_t sdbias[4]     # in elements of the compute type
    double scale
    bint causal
    double keep              # 1 - dropout p
    double rescale           # 1 / keep (0 when keep == 0)
    bint dropout
    uint64_t offset
    Stream rng


cdef inline real_t _exp(real_t x) noexcept nogil:
    if real_t is float:
        return expf(x)
    else:
        return exp(x)


cdef inline real_t _log(real_t x) noexcept nogil:
    if real_t is float:
        return logf(x)
    else:
        return log(x)


cdef inline double _dropout_factor(Attn* a, Py_ssize_t b, Py_ssize_t h, Py_ssize_t i, Py_ssize_t j) noexcept nogil:
    cdef uint64_t n = <uint64_t>(((b * a.Hq + h) * a.Lq + i) * a.Lk + j)
    cdef double u = stream_word(&a.rng, a.offset + n) * (1.0 / 4294967296.0)
    return a.rescale if u < a.keep else 0.0


cdef void _scores(Attn* a, real_t* srow, const real_t* qrow, const real_t* kt, real_t* bias_row,
                  Py_ssize_t b, Py_ssize_t h, Py_ssize_t i, Py_ssize_t j0, Py_ssize_t nk) noexcept nogil:
    """srow[0:nk] = scale * q_i . k_j (+ bias, causal mask) for keys j0 .. j0 + nk - 1."""
    cdef Py_ssize_t jj, d
    cdef real_t qv, scale = <real_t>a.scale
    cdef const real_t* krow
    for jj in range(nk):
        srow[jj] = 0
    for d in range(a.D):
        qv = qrow[d]
        krow = kt + d * TILE_K
        for jj in range(nk):
            srow[jj] += qv * krow[jj]
    for jj in range(nk):
        srow[jj] *= scale
    if a.bias != NULL:
        load_block(a.bias + b * a.sbias[0] + h * a.sbias[1] + i * a.sbias[2] + j0 * a.sbias[3], a.sbias[3],
                   a.bias_dt, nk, bias_row)
        if a.bias_dt == DT_BOOL:
            for jj in range(nk):
                if bias_row[jj] == 0:
                    srow[jj] = -INFINITY
        else:
            for jj in range(nk):
                srow[jj] += bias_row[jj]
    if a.causal:
        for jj in range(nk):
            if j0 + jj > i:
                srow[jj] = -INFINITY


cdef void _pack_rows(const char* base, Py_ssize_t row_stride, Py_ssize_t col_stride, int dt, Py_ssize_t rows,
                     Py_ssize_t cols, real_t* out, Py_ssize_t ld) noexcept nogil:
    cdef Py_ssize_t r
    for r in range(rows):
        load_block(base + r * row_stride, col_stride, dt, cols, out + r * ld)


cdef void _pack_cols(const char* base, Py_ssize_t row_stride, Py_ssize_t col_stride, int dt, Py_ssize_t rows,
                     Py_ssize_t cols, real_t* out) noexcept nogil:
    """out[c * TILE_K + r] = element (r, c): a key/value tile transposed."""
    cdef Py_ssize_t c
    for c in range(cols):
        load_block(base + c * col_stride, row_stride, dt, rows, out + c * TILE_K)


cdef int _forward(Attn* a, real_t kind) noexcept nogil:
    cdef Py_ssize_t D = a.D, Dv = a.Dv
    cdef real_t* qt = <real_t*>malloc(TILE_Q * D * sizeof(real_t))
    cdef real_t* kt = <real_t*>malloc(D * TILE_K * sizeof(real_t))
    cdef real_t* vt = <real_t*>malloc(TILE_K * Dv * sizeof(real_t))
    cdef real_t* acc = <real_t*>malloc(TILE_Q * Dv * sizeof(real_t))
    cdef real_t* s = <real_t*>malloc(TILE_K * sizeof(real_t))
    cdef real_t* brow = <real_t*>malloc(TILE_K * sizeof(real_t))
    cdef real_t* m = <real_t*>malloc(TILE_Q * sizeof(real_t))
    cdef real_t* l = <real_t*>malloc(TILE_Q * sizeof(real_t))
    cdef char* bad = <char*>malloc(TILE_Q)
    cdef Py_ssize_t b, h, hk, i0, j0, nq, nk, ii, jj, e, jend, i
    cdef real_t mx, alpha, p, rowsum, inv, lse
    cdef real_t* arow
    cdef real_t* vrow
    cdef char* kb
    cdef char* vb
    cdef char* qb
    cdef char* ob
    cdef float lse32
    if qt == NULL or kt == NULL or vt == NULL or acc == NULL or s == NULL or brow == NULL or m == NULL \
            or l == NULL or bad == NULL:
        free(qt); free(kt); free(vt); free(acc); free(s); free(brow); free(m); free(l); free(bad)
        return -1
    for b in range(a.B):
        for h in range(a.Hq):
            hk = h // a.group
            qb = a.q + b * a.sq[0] + h * a.sq[1]
            kb = a.k + b * a.sk[0] + hk * a.sk[1]
            vb = a.v + b * a.sv[0] + hk * a.sv[1]
            ob = a.o + b * a.so[0] + h * a.so[1]
            i0 = 0
            while i0 < a.Lq:
                nq = min(<Py_ssize_t>TILE_Q, a.Lq - i0)
                _pack_rows(qb + i0 * a.sq[2], a.sq[2], a.sq[3], a.dt, nq, D, qt, D)
                for ii in range(nq):
                    m[ii] = -INFINITY
                    l[ii] = 0
                    bad[ii] = 0
                memset(acc, 0, nq * Dv * sizeof(real_t))
                jend = min(a.Lk, i0 + nq) if a.causal else a.Lk   # causal: tiles above the diagonal are skipped
                j0 = 0
                while j0 < jend:
                    nk = min(<Py_ssize_t>TILE_K, jend - j0)
                    _pack_cols(kb + j0 * a.sk[2], a.sk[2], a.sk[3], a.dt, nk, D, kt)
                    _pack_rows(vb + j0 * a.sv[2], a.sv[2], a.sv[3], a.dt, nk, Dv, vt, Dv)
                    for ii in range(nq):
                        i = i0 + ii
                        _scores(a, s, qt + ii * D, kt, brow, b, h, i, j0, nk)
                        mx = m[ii]
                        for jj in range(nk):
                            if s[jj] > mx:
                                mx = s[jj]
                            elif s[jj] != s[jj]:
                                bad[ii] = 1
                        if mx == -INFINITY:
                            continue            # nothing attended yet in this row
                        alpha = _exp(m[ii] - mx)
                        rowsum = 0
                        for jj in range(nk):
                            p = _exp(s[jj] - mx)
                            s[jj] = p
                            rowsum += p
                        l[ii] = l[ii] * alpha + rowsum
                        m[ii] = mx
                        arow = acc + ii * Dv
                        if alpha != 1:
                            for e in range(Dv):
                                arow[e] *= alpha
                        if a.dropout:
                            for jj in range(nk):
                                if s[jj] != 0:
                                    s[jj] *= <real_t>_dropout_factor(a, b, h, i, j0 + jj)
                        for jj in range(nk):
                            p = s[jj]
                            if p == 0:
                                continue
                            vrow = vt + jj * Dv
                            for e in range(Dv):
                                arow[e] += p * vrow[e]
                    j0 += nk
                for ii in range(nq):
                    arow = acc + ii * Dv
                    if bad[ii]:
                        for e in range(Dv):
                            arow[e] = NAN
                        lse = NAN
                    elif l[ii] == 0:                   # every score -inf: zeros (the math path's safe softmax)
                        for e in range(Dv):
                            arow[e] = 0
                        lse = INFINITY
                    else:
                        inv = 1 / l[ii]
                        for e in range(Dv):
                            arow[e] *= inv
                        lse = m[ii] + _log(l[ii])
                    store_block(arow, Dv, a.dt, ob + (i0 + ii) * a.so[2], a.so[3])
                    lse32 = <float>lse
                    ek_st_f32(a.lse + b * a.slse[0] + h * a.slse[1] + (i0 + ii) * a.slse[2], lse32)
                i0 += nq
    free(qt); free(kt); free(vt); free(acc); free(s); free(brow); free(m); free(l); free(bad)
    return 0


cdef int _backward(Attn* a, real_t kind) noexcept nogil:
    cdef Py_ssize_t D = a.D, Dv = a.Dv
    cdef real_t* qt = <real_t*>malloc(TILE_Q * D * sizeof(real_t))
    cdef real_t* dot = <real_t*>malloc(TILE_Q * Dv * sizeof(real_t))
    cdef real_t* orow = <real_t*>malloc(Dv * sizeof(real_t))
    cdef real_t* kt = <real_t*>malloc(D * TILE_K * sizeof(real_t))
    cdef real_t* kr = <real_t*>malloc(TILE_K * D * sizeof(real_t))
    cdef real_t* vt = <real_t*>malloc(Dv * TILE_K * sizeof(real_t))
    cdef real_t* s = <real_t*>malloc(TILE_K * sizeof(real_t))
    cdef real_t* dp = <real_t*>malloc(TILE_K * sizeof(real_t))
    cdef real_t* brow = <real_t*>malloc(TILE_K * sizeof(real_t))
    cdef real_t* lse = <real_t*>malloc(TILE_Q * sizeof(real_t))
    cdef real_t* drow = <real_t*>malloc(TILE_Q * sizeof(real_t))
    cdef real_t* dq = <real_t*>malloc(a.Lq * D * sizeof(real_t))
    cdef real_t* dk = <real_t*>malloc(a.Lk * D * sizeof(real_t))
    cdef real_t* dv = <real_t*>malloc(a.Lk * Dv * sizeof(real_t))
    cdef Py_ssize_t b, h, hk, g, i0, j0, nq, nk, ii, jj, e, jend, i, j
    cdef real_t p, z, ds, acc, scale = <real_t>a.scale
    cdef real_t* row
    cdef const real_t* src
    cdef real_t* dbias_at
    cdef char* qb
    cdef char* kb
    cdef char* vb
    cdef char* ob
    cdef char* gb
    cdef int status = 0
    if qt == NULL or dot == NULL or orow == NULL or kt == NULL or kr == NULL or vt == NULL or s == NULL \
            or dp == NULL or brow == NULL or lse == NULL or drow == NULL or dq == NULL or dk == NULL or dv == NULL:
        status = -1
    for b in range(a.B if status == 0 else 0):
        for hk in range(a.Hk):
            kb = a.k + b * a.sk[0] + hk * a.sk[1]
            vb = a.v + b * a.sv[0] + hk * a.sv[1]
            memset(dk, 0, a.Lk * D * sizeof(real_t))
            memset(dv, 0, a.Lk * Dv * sizeof(real_t))
            for g in range(a.group):
                h = hk * a.group + g
                qb = a.q + b * a.sq[0] + h * a.sq[1]
                ob = a.o + b * a.so[0] + h * a.so[1]
                gb = a.do + b * a.sdo[0] + h * a.sdo[1]
                memset(dq, 0, a.Lq * D * sizeof(real_t))
                i0 = 0
                while i0 < a.Lq:
                    nq = min(<Py_ssize_t>TILE_Q, a.Lq - i0)
                    _pack_rows(qb + i0 * a.sq[2], a.sq[2], a.sq[3], a.dt, nq, D, qt, D)
                    _pack_rows(gb + i0 * a.sdo[2], a.sdo[2], a.sdo[3], a.dt, nq, Dv, dot, Dv)
                    for ii in range(nq):
                        lse[ii] = <real_t>ek_ld_f32(a.lse + b * a.slse[0] + h * a.slse[1] + (i0 + ii) * a.slse[2])
                        load_block(ob + (i0 + ii) * a.so[2], a.so[3], a.dt, Dv, orow)
                        acc = 0
                        for e in range(Dv):
                            acc += dot[ii * Dv + e] * orow[e]
                        drow[ii] = acc
                    jend = min(a.Lk, i0 + nq) if a.causal else a.Lk
                    j0 = 0
                    while j0 < jend:
                        nk = min(<Py_ssize_t>TILE_K, jend - j0)
                        _pack_cols(kb + j0 * a.sk[2], a.sk[2], a.sk[3], a.dt, nk, D, kt)
                        _pack_rows(kb + j0 * a.sk[2], a.sk[2], a.sk[3], a.dt, nk, D, kr, D)
                        _pack_cols(vb + j0 * a.sv[2], a.sv[2], a.sv[3], a.dt, nk, Dv, vt)
                        for ii in range(nq):
                            i = i0 + ii
                            _scores(a, s, qt + ii * D, kt, brow, b, h, i, j0, nk)
                            for jj in range(nk):
                                s[jj] = _exp(s[jj] - lse[ii])     # P, recomputed (lse +inf: 0)
                                dp[jj] = 0
                            for e in range(Dv):                   # dP = dO V^T
                                acc = dot[ii * Dv + e]
                                src = vt + e * TILE_K
                                for jj in range(nk):
                                    dp[jj] += acc * src[jj]
                            for jj in range(nk):
                                p = s[jj]
                                if p == 0:
                                    continue
                                j = j0 + jj
                                z = <real_t>_dropout_factor(a, b, h, i, j) if a.dropout else <real_t>1
                                if z != 0:                         # dV += (P Z)^T dO
                                    row = dv + j * Dv
                                    src = dot + ii * Dv
                                    for e in range(Dv):
                                        row[e] += p * z * src[e]
                                ds = p * (dp[jj] * z - drow[ii])
                                if a.dbias != NULL:
                                    dbias_at = <real_t*>(a.dbias) + (b * a.sdbias[0] + h * a.sdbias[1] +
                                                                    i * a.sdbias[2] + j * a.sdbias[3])
                                    dbias_at[0] += ds
                                ds *= scale
                                row = dq + i * D                    # dQ += dS K
                                src = kr + jj * D
                                for e in range(D):
                                    row[e] += ds * src[e]
                                row = dk + j * D                    # dK += dS^T Q
                                src = qt + ii * D
                                for e in range(D):
                                    row[e] += ds * src[e]
                        j0 += nk
                    i0 += nq
                if a.dq != NULL:
                    for i in range(a.Lq):
                        store_block(dq + i * D, D, a.dt, a.dq + b * a.sdq[0] + h * a.sdq[1] + i * a.sdq[2], a.sdq[3])
            if a.dk != NULL:
                for j in range(a.Lk):
                    store_block(dk + j * D, D, a.dt, a.dk + b * a.sdk[0] + hk * a.sdk[1] + j * a.sdk[2], a.sdk[3])
            if a.dv != NULL:
                for j in range(a.Lk):
                    store_block(dv + j * Dv, Dv, a.dt, a.dv + b * a.sdv[0] + hk * a.sdv[1] + j * a.sdv[2],
                                a.sdv[3])
    free(qt); free(dot); free(orow); free(kt); free(kr); free(vt); free(s); free(dp); free(brow); free(lse)
    free(drow); free(dq); free(dk); free(dv)
    return status


# -- Python entry points --------------------------------------------------------------------------
cdef void _strides(Py_ssize_t* dst, object src, Py_ssize_t itemsize, int n, str what) except *:
    if src is None or len(src) != n:
        raise KernelArgumentError(f"attention: {what} needs {n} strides, got {src!r}")
    for i in range(n):
        dst[i] = <Py_ssize_t>src[i] * itemsize


cdef int _setup(Attn* a, int dt, shape, scale, causal, dropout_p, seed, offset, q, k, v, o, lse, bias,
                bias_dtype) except -1:
    cdef Py_ssize_t isz
    if dt not in (DT_FLOAT16, DT_BFLOAT16, DT_FLOAT32, DT_FLOAT64):
        raise KernelArgumentError(f"attention: dtype code {dt} is not a floating dtype (float16, bfloat16, "
                                  f"float32, float64)")
    isz = itemsize_of(dt)
    B, Hq, Hk, Lq, Lk, D, Dv = (int(x) for x in shape)
    if min(B, Hq, Hk, Lq, Lk, D, Dv) <= 0 or Hq % Hk:
        raise KernelArgumentError(f"attention: bad shape (B, Hq, Hk, Lq, Lk, D, Dv) = {tuple(shape)}")
    memset(a, 0, sizeof(Attn))
    a.dt = dt
    a.B, a.Hq, a.Hk, a.Lq, a.Lk, a.D, a.Dv = B, Hq, Hk, Lq, Lk, D, Dv
    a.group = Hq // Hk
    a.q = as_ptr(q[0], "attention q")
    _strides(a.sq, q[1], isz, 4, "q")
    a.k = as_ptr(k[0], "attention k")
    _strides(a.sk, k[1], isz, 4, "k")
    a.v = as_ptr(v[0], "attention v")
    _strides(a.sv, v[1], isz, 4, "v")
    a.o = as_ptr(o[0], "attention out")
    _strides(a.so, o[1], isz, 4, "out")
    a.lse = as_ptr(lse[0], "attention logsumexp")
    _strides(a.slse, lse[1], 4, 3, "logsumexp")
    if bias is not None:
        a.bias_dt = check_dtype(bias_dtype, "attention bias dtype")
        if not (a.bias_dt == DT_BOOL or is_floating(a.bias_dt)):
            raise KernelArgumentError("attention: the bias must be boolean or floating")
        a.bias = as_ptr(bias[0], "attention bias")
        _strides(a.sbias, bias[1], itemsize_of(a.bias_dt), 4, "bias")
    a.scale = float(scale)
    a.causal = bool(causal)
    p = float(dropout_p)
    if not 0.0 <= p <= 1.0:
        raise KernelArgumentError(f"attention: dropout probability {p} is not in [0, 1]")
    a.dropout = p > 0.0
    a.keep = 1.0 - p
    a.rescale = 0.0 if a.keep == 0.0 else 1.0 / a.keep
    seed64 = int(seed) & 0xFFFFFFFFFFFFFFFF
    a.rng.k0 = <uint32_t>(seed64 & 0xFFFFFFFF)
    a.rng.k1 = <uint32_t>(seed64 >> 32)
    a.rng.valid = False
    a.offset = <uint64_t>(int(offset) & 0xFFFFFFFFFFFFFFFF)
    return 0


def forward(int dt, shape, scale, causal, dropout_p, seed, offset, q, k, v, out, lse, bias=None, bias_dtype=0):
    """out (B, Hq, Lq, Dv), lse (B, Hq, Lq) float32 from q (B, Hq, Lq, D), k (B, Hk, Lk, D),
    v (B, Hk, Lk, Dv). Each operand is (address, strides in elements); ``bias`` (or None) reads
    (B, Hq, Lq, Lk) with stride 0 on broadcast dims. ``shape`` = (B, Hq, Hk, Lq, Lk, D, Dv)."""
    cdef Attn a
    cdef int status
    _setup(&a, dt, shape, scale, causal, dropout_p, seed, offset, q, k, v, out, lse, bias, bias_dtype)
    with nogil:
        if dt == DT_FLOAT64:
            status = _forward[double](&a, 0.0)
        else:
            status = _forward[float](&a, 0.0)
    if status:
        raise MemoryError("attention: scratch allocation failed")


def backward(int dt, shape, scale, causal, dropout_p, seed, offset, q, k, v, out, lse, grad_out, dq, dk, dv,
             bias=None, bias_dtype=0, dbias=None):
    """dq, dk, dv (each (address, strides) or None) of the forward above, from grad_out (like out).
    ``dbias``: (address, strides) of a zeroed float32 (float64 for float64 operands) buffer read
    with the bias's broadcast strides; dS is summed into it."""
    cdef Attn a
    cdef int status
    _setup(&a, dt, shape, scale, causal, dropout_p, seed, offset, q, k, v, out, lse, bias, bias_dtype)
    cdef Py_ssize_t isz = itemsize_of(dt)
    a.do = as_ptr(grad_out[0], "attention grad_out")
    _strides(a.sdo, grad_out[1], isz, 4, "grad_out")
    if dq is not None:
        a.dq = as_ptr(dq[0], "attention dq")
        _strides(a.sdq, dq[1], isz, 4, "dq")
    if dk is not None:
        a.dk = as_ptr(dk[0], "attention dk")
        _strides(a.sdk, dk[1], isz, 4, "dk")
    if dv is not None:
        a.dv = as_ptr(dv[0], "attention dv")
        _strides(a.sdv, dv[1], isz, 4, "dv")
    if dbias is not None:
        a.dbias = as_ptr(dbias[0], "attention dbias")
        _strides(a.sdbias, dbias[1], 1, 4, "dbias")
    with nogil:
        if dt == DT_FLOAT64:
            status = _backward[double](&a, 0.0)
        else:
            status = _backward[float](&a, 0.0)
    if status:
        raise MemoryError("attention: scratch allocation failed")
