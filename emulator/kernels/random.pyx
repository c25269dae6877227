# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Random-number kernels of the device: a counter-based Philox4x32-10 stream.

Models the accelerator's RNG unit the way CUDA's curand Philox and PyTorch's
at::Philox4_32 work: key = the 64-bit seed split in two 32-bit halves,
counter = a 128-bit block number; each block yields four 32-bit words.  Word j
of the stream (j counted from 0) is lane j % 4 of block j // 4, so the stream
is a pure function of (seed, j): any element can be generated independently
and launches are reproducible from (seed, offset) alone.

Element i (C order over the logical output shape) uses words
offset + i*w ... offset + i*w + w - 1, where w is the per-element word count
(uniform: 1, or 2 for float64; normal: 2, or 4 for float64; randint: 1, or 2
for ranges above 2**32; bernoulli: 1).  Every kernel returns how many words
it consumed, rounded up to a multiple of 4 (whole Philox blocks), so the
caller can advance its generator offset like PyTorch's philox offset.

Also: exponential, cauchy, log-normal and geometric draws (CPU's transformations
of a uniform/normal draw, computed in double and rounded once to the output
dtype); multinomial sampling with replacement (inverse CDF by binary search);
and logspace, the one non-random sequence kernel here (see its docstring).

Left out: bit-compatibility with PyTorch's CPU (mt19937) or CUDA streams.
"""

from libc.math cimport sqrt, log, log1p, cos, tan, exp, ceil, pow, nextafter, nextafterf, INFINITY, M_PI
from libc.stdlib cimport malloc, free

include "_common.pxi"
include "_philox.pxi"

cdef enum:
    K_UNIFORM, K_NORMAL, K_RANDINT, K_BERNOULLI, K_EXPONENTIAL, K_CAUCHY, K_LOG_NORMAL, K_GEOMETRIC


cdef inline uint64_t stream_u64(Stream* s, uint64_t j) noexcept nogil:
    return (<uint64_t>stream_word(s, j + 1) << 32) | stream_word(s, j)


cdef struct Params:
    int kind
    int odt
    int words                            # per element
    double a, b                          # uniform low/high, normal mean/std, bernoulli p
    double below                         # uniform: largest output value < high
    uint64_t range_                      # randint: high - low (0 means 2**64)
    uint64_t low                         # randint: low, two's complement
    int pdt                              # bernoulli: p tensor dtype, -1 for scalar p


cdef void _generate(Params* P, Stream* s, uint64_t j, Py_ssize_t m, double* d, int64_t* q) noexcept nogil:
    """Fill d[0:m] (or q[0:m] for randint) for the m elements whose first word
    is j.  For bernoulli with a p tensor, d holds the p values on entry."""
    cdef Py_ssize_t t
    cdef double u, u2, v
    cdef uint64_t x
    if P.kind == K_UNIFORM:
        for t in range(m):
            if P.words == 1:
                u = (stream_word(s, j) >> 8) * (1.0 / 16777216.0)             # 24 bits
            else:
                u = (stream_u64(s, j) >> 11) * (1.0 / 9007199254740992.0)     # 53 bits
            v = round_to(P.a + u * (P.b - P.a), P.odt)
            # Rounding (of the product, or to the output dtype) can reach
            # `high`; PyTorch's contract is [low, high), so clamp below it.
            d[t] = v if v < P.b else P.below
            j += P.words
    elif P.kind == K_NORMAL:
        for t in range(m):
            # Box-Muller, cosine branch.  u in (0, 1] keeps log() finite.
            if P.words == 2:
                u = (stream_word(s, j) + 1.0) * (1.0 / 4294967296.0)
                u2 = stream_word(s, j + 1) * (1.0 / 4294967296.0)
            else:
                u = ((stream_u64(s, j) >> 11) + 1.0) * (1.0 / 9007199254740992.0)
                u2 = (stream_u64(s, j + 2) >> 11) * (1.0 / 9007199254740992.0)
            d[t] = P.a + P.b * (sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * u2))
            j += P.words
    elif P.kind == K_RANDINT:
        for t in range(m):
            x = stream_word(s, j) if P.words == 1 else stream_u64(s, j)
            if P.range_ != 0:
                # Modulo reduction; the bias is <= range / 2**32 (or 2**64)
                # and PyTorch's CPU/CUDA randint use the same reduction.
                x = x % P.range_
            q[t] = <int64_t>(P.low + x)
            j += P.words
    elif P.kind == K_EXPONENTIAL or P.kind == K_CAUCHY or P.kind == K_GEOMETRIC:
        for t in range(m):
            if P.words == 1:
                u = (stream_word(s, j) >> 8) * (1.0 / 16777216.0)             # [0, 1), 24 bits
            else:
                u = (stream_u64(s, j) >> 11) * (1.0 / 9007199254740992.0)     # [0, 1), 53 bits
            if P.kind == K_EXPONENTIAL:
                d[t] = -1.0 / P.a * log1p(-u)                    # CPU's transformation::exponential
            elif P.kind == K_CAUCHY:
                d[t] = P.a + P.b * tan(M_PI * (u - 0.5))        # transformation::cauchy
            else:
                # transformation::geometric, ceil(log(u) / log1p(-p)), with u moved off 0
                # (half a step up: u in (0, 1)) so that no draw is inf or 0.
                u += (0.5 / 16777216.0) if P.words == 1 else (0.5 / 9007199254740992.0)
                d[t] = ceil(log(u) / log1p(-P.a))
            j += P.words
    elif P.kind == K_LOG_NORMAL:
        for t in range(m):
            if P.words == 2:
                u = (stream_word(s, j) + 1.0) * (1.0 / 4294967296.0)
                u2 = stream_word(s, j + 1) * (1.0 / 4294967296.0)
            else:
                u = ((stream_u64(s, j) >> 11) + 1.0) * (1.0 / 9007199254740992.0)
                u2 = (stream_u64(s, j + 2) >> 11) * (1.0 / 9007199254740992.0)
            d[t] = exp(P.a + P.b * (sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * u2)))
            j += P.words
    else:  # K_BERNOULLI
        for t in range(m):
            u = stream_word(s, j) * (1.0 / 4294967296.0)                    # [0, 1)
            v = P.a if P.pdt < 0 else d[t]
            d[t] = 1.0 if u < v else 0.0
            j += 1


cdef void _run(NdIter* it, char** ptrs, Params* P, Stream* s, uint64_t j) noexcept nogil:
    cdef Py_ssize_t n = iter_row_len(it), so = iter_row_stride(it, 0), ps = 0
    cdef Py_ssize_t k, m
    cdef double d[BLOCK]
    cdef int64_t q[BLOCK]
    if P.pdt >= 0:
        ps = iter_row_stride(it, 1)
    while True:
        k = 0
        while k < n:
            m = n - k if n - k < BLOCK else BLOCK
            if P.pdt >= 0:
                load_block(ptrs[1] + k * ps, ps, P.pdt, m, d)
            _generate(P, s, j, m, d, q)
            if P.kind == K_RANDINT:
                store_block(q, m, P.odt, ptrs[0] + k * so, so)
            else:
                store_block(d, m, P.odt, ptrs[0] + k * so, so)
            j += <uint64_t>m * P.words
            k += m
        if not iter_next_row(it, ptrs):
            break


cdef object _launch(Params* P, out_addr, out_strides, shape, seed, offset, str what,
                    p_addr=0, p_strides=None):
    """Common driver: validate, iterate, return words consumed (multiple of 4)."""
    cdef NdIter it
    cdef Stream s
    cdef char* ptrs[2]
    cdef uint64_t seed64, j0
    if not hasattr(seed, "__index__") or not hasattr(offset, "__index__"):
        raise KernelArgumentError(f"{what}: seed and offset must be integers")
    if offset < 0:
        raise KernelArgumentError(f"{what}: offset must be >= 0, got {offset!r}")
    seed64 = <uint64_t>(int(seed) & 0xFFFFFFFFFFFFFFFF)
    j0 = <uint64_t>(int(offset) & 0xFFFFFFFFFFFFFFFF)
    if P.pdt >= 0:
        iter_init(&it, shape, [out_strides, p_strides], [itemsize_of(P.odt), itemsize_of(P.pdt)], what)
    else:
        iter_init(&it, shape, [out_strides], [itemsize_of(P.odt)], what)
    consumed = it.size * P.words
    consumed = (consumed + 3) // 4 * 4
    if it.size == 0:
        return consumed
    ptrs[0] = as_ptr(out_addr, what + " out_addr")
    if P.pdt >= 0:
        ptrs[1] = as_ptr(p_addr, what + " p_addr")
    s.k0 = <uint32_t>seed64
    s.k1 = <uint32_t>(seed64 >> 32)
    s.valid = False
    s.block = 0
    with nogil:
        _run(&it, ptrs, P, &s, j0)
    return consumed


cdef double _largest_below(double high, int dt):
    """Largest value of floating dtype dt strictly below `high` (finite high)."""
    cdef float f
    cdef uint16_t h
    cdef double r
    if dt == DT_FLOAT64:
        return nextafter(high, -INFINITY)
    f = <float>high
    if dt == DT_FLOAT32:
        return nextafterf(f, -INFINITY) if f >= high else f
    h = ek_f16_from_f32(f) if dt == DT_FLOAT16 else ek_bf16_from_f32(f)
    r = ek_f16_to_f32(h) if dt == DT_FLOAT16 else ek_bf16_to_f32(h)
    if r >= high:
        # One step toward -inf in sign-magnitude encoding.
        if h & 0x7FFF == 0:
            h = 0x8001
        elif h & 0x8000:
            h = h + 1
        else:
            h = h - 1
        r = ek_f16_to_f32(h) if dt == DT_FLOAT16 else ek_bf16_to_f32(h)
    return r


def _finite(x):
    return x == x and x not in (float("inf"), float("-inf"))


def uniform(out_addr, out_dtype, out_strides, shape, seed, offset, low, high):
    """Fill a floating tensor with U[low, high); returns words consumed."""
    cdef Params P
    P.odt = check_dtype(out_dtype, "uniform out_dtype")
    if not is_floating(P.odt):
        raise KernelArgumentError("uniform: out_dtype must be a floating dtype")
    low, high = float(low), float(high)
    if not (_finite(low) and _finite(high) and low <= high and _finite(high - low)):
        raise KernelArgumentError(f"uniform: need finite low <= high with a finite range, got [{low}, {high})")
    P.kind = K_UNIFORM
    P.words = 2 if P.odt == DT_FLOAT64 else 1
    P.a, P.b = low, high
    # low == high: every draw is low (PyTorch allows the empty interval too).
    P.below = low if low == high else max(_largest_below(high, P.odt), round_to(low, P.odt))
    if low == high:
        P.b = float("inf")               # disables the clamp
    P.pdt = -1
    return _launch(&P, out_addr, out_strides, shape, seed, offset, "uniform")


def normal(out_addr, out_dtype, out_strides, shape, seed, offset, mean, std):
    """Fill a floating tensor with N(mean, std**2) (Box-Muller); returns words consumed."""
    cdef Params P
    P.odt = check_dtype(out_dtype, "normal out_dtype")
    if not is_floating(P.odt):
        raise KernelArgumentError("normal: out_dtype must be a floating dtype")
    mean, std = float(mean), float(std)
    if not (_finite(mean) and _finite(std) and std >= 0):
        raise KernelArgumentError(f"normal: need finite mean and std >= 0, got mean={mean}, std={std}")
    P.kind = K_NORMAL
    P.words = 4 if P.odt == DT_FLOAT64 else 2
    P.a, P.b = mean, std
    P.pdt = -1
    return _launch(&P, out_addr, out_strides, shape, seed, offset, "normal")


def randint(out_addr, out_dtype, out_strides, shape, seed, offset, low, high):
    """Fill a tensor of any dtype with integers uniform in [low, high); returns words consumed."""
    cdef Params P
    P.odt = check_dtype(out_dtype, "randint out_dtype")
    if not (hasattr(low, "__index__") and hasattr(high, "__index__")):
        raise KernelArgumentError("randint: low and high must be integers")
    low, high = int(low), int(high)
    if not (-2**63 <= low < high <= 2**63):
        raise KernelArgumentError(f"randint: need -2**63 <= low < high <= 2**63, got [{low}, {high})")
    P.kind = K_RANDINT
    P.range_ = <uint64_t>((high - low) & 0xFFFFFFFFFFFFFFFF)    # 2**64 -> 0
    P.words = 1 if high - low <= 2**32 else 2
    P.low = <uint64_t>(low & 0xFFFFFFFFFFFFFFFF)
    P.pdt = -1
    return _launch(&P, out_addr, out_strides, shape, seed, offset, "randint")


def bernoulli(out_addr, out_dtype, out_strides, shape, seed, offset,
              p_addr, p_dtype, p_strides, p_scalar):
    """out = 1 if u < p else 0, u ~ U[0, 1) with 32 bits; p from a tensor
    (p_addr != 0, broadcast via p_strides) or p_scalar.  Returns words consumed.
    Tensor p values are not range-checked: p <= 0 gives 0, p >= 1 gives 1."""
    cdef Params P
    P.odt = check_dtype(out_dtype, "bernoulli out_dtype")
    P.kind = K_BERNOULLI
    P.words = 1
    P.a = P.b = 0
    if p_addr:
        P.pdt = check_dtype(p_dtype, "bernoulli p_dtype")
        if not is_floating(P.pdt):
            raise KernelArgumentError("bernoulli: p tensor must have a floating dtype")
    else:
        P.pdt = -1
        P.a = float(p_scalar)
        if not (0.0 <= P.a <= 1.0):
            raise KernelArgumentError(f"bernoulli: p must be in [0, 1], got {p_scalar!r}")
    return _launch(&P, out_addr, out_strides, shape, seed, offset, "bernoulli", p_addr, p_strides)


cdef int _floating_out(Params* P, object out_dtype, str what) except -1:
    P.odt = check_dtype(out_dtype, what + " out_dtype")
    if not is_floating(P.odt):
        raise KernelArgumentError(f"{what}: out_dtype must be a floating dtype")
    P.words = 2 if P.odt == DT_FLOAT64 else 1
    P.pdt = -1
    return 0


def exponential(out_addr, out_dtype, out_strides, shape, seed, offset, lambd):
    """Fill a floating tensor with Exp(lambd) draws, -log1p(-u) / lambd; returns words consumed."""
    cdef Params P
    _floating_out(&P, out_dtype, "exponential")
    lambd = float(lambd)
    if not (_finite(lambd) and lambd > 0):
        raise KernelArgumentError(f"exponential: need a finite lambda > 0, got {lambd}")
    P.kind = K_EXPONENTIAL
    P.a = lambd
    return _launch(&P, out_addr, out_strides, shape, seed, offset, "exponential")


def cauchy(out_addr, out_dtype, out_strides, shape, seed, offset, median, sigma):
    """Fill a floating tensor with Cauchy(median, sigma) draws; returns words consumed."""
    cdef Params P
    _floating_out(&P, out_dtype, "cauchy")
    median, sigma = float(median), float(sigma)
    if not (_finite(median) and _finite(sigma) and sigma > 0):
        raise KernelArgumentError(f"cauchy: need a finite median and finite sigma > 0, got {median}, {sigma}")
    P.kind = K_CAUCHY
    P.a, P.b = median, sigma
    return _launch(&P, out_addr, out_strides, shape, seed, offset, "cauchy")


def log_normal(out_addr, out_dtype, out_strides, shape, seed, offset, mean, std):
    """Fill a floating tensor with exp(N(mean, std**2)) draws; returns words consumed."""
    cdef Params P
    _floating_out(&P, out_dtype, "log_normal")
    mean, std = float(mean), float(std)
    if not (_finite(mean) and _finite(std) and std > 0):
        raise KernelArgumentError(f"log_normal: need a finite mean and finite std > 0, got {mean}, {std}")
    P.kind = K_LOG_NORMAL
    P.words = 4 if P.odt == DT_FLOAT64 else 2
    P.a, P.b = mean, std
    return _launch(&P, out_addr, out_strides, shape, seed, offset, "log_normal")


def geometric(out_addr, out_dtype, out_strides, shape, seed, offset, p):
    """Fill a tensor (floating or integer, not bool) with Geometric(p) draws on {1, 2, ...};
    returns words consumed."""
    cdef Params P
    P.odt = check_dtype(out_dtype, "geometric out_dtype")
    if P.odt == DT_BOOL:
        raise KernelArgumentError("geometric: out_dtype must not be bool")
    p = float(p)
    if not 0 < p < 1:
        raise KernelArgumentError(f"geometric: need 0 < p < 1, got {p}")
    P.kind = K_GEOMETRIC
    P.words = 2 if P.odt == DT_FLOAT64 else 1
    P.a = p
    P.pdt = -1
    return _launch(&P, out_addr, out_strides, shape, seed, offset, "geometric")


cdef inline double ld_prob(const char* p, int dt) noexcept nogil:
    cdef double v
    load_block(p, 0, dt, 1, &v)
    return v


def multinomial(out_addr, out_strides, probs_addr, probs_dtype, probs_strides, rows, categories, samples,
                seed, offset):
    """Samples with replacement: out[r, k] (int64, rows x samples) = the category c of row r whose
    normalised cumulative probability is the first >= u, u ~ U[0, 1) (53 bits, words
    offset + 2*(r*samples + k) ...).  The cumulative sums are in double; the last is set to 1
    (as CPU does).  Rows must have non-negative, finite entries with a positive sum (the host
    checked this; a bad row is a KernelArgumentError before anything is written).
    Returns words consumed."""
    cdef int pdt = check_dtype(probs_dtype, "multinomial probs_dtype")
    cdef Py_ssize_t R = rows, C = categories, S = samples, r, c, k, lo, hi, mid
    cdef Py_ssize_t ps0, ps1, os0, os1
    cdef double* cdf
    cdef double total, v, u
    cdef Stream s
    cdef uint64_t seed64, j
    cdef char* probs
    cdef char* out
    cdef int bad = 0
    if not is_floating(pdt):
        raise KernelArgumentError("multinomial: probabilities must have a floating dtype")
    if R < 0 or C < 1 or S < 0 or len(probs_strides) != 2 or len(out_strides) != 2:
        raise KernelArgumentError(f"multinomial: bad extents rows={rows} categories={categories} samples={samples}")
    if offset < 0:
        raise KernelArgumentError(f"multinomial: offset must be >= 0, got {offset!r}")
    consumed = (R * S * 2 + 3) // 4 * 4
    if R * S == 0:
        return consumed
    ps0, ps1 = <Py_ssize_t>probs_strides[0] * itemsize_of(pdt), <Py_ssize_t>probs_strides[1] * itemsize_of(pdt)
    os0, os1 = <Py_ssize_t>out_strides[0] * 8, <Py_ssize_t>out_strides[1] * 8
    probs = as_ptr(probs_addr, "multinomial probs_addr")
    out = as_ptr(out_addr, "multinomial out_addr")
    seed64 = <uint64_t>(int(seed) & 0xFFFFFFFFFFFFFFFF)
    j = <uint64_t>(int(offset) & 0xFFFFFFFFFFFFFFFF)
    s.k0 = <uint32_t>seed64
    s.k1 = <uint32_t>(seed64 >> 32)
    s.valid = False
    s.block = 0
    cdf = <double*>malloc(C * sizeof(double))
    if cdf == NULL:
        raise MemoryError("multinomial: cannot allocate the cumulative distribution")
    try:
        with nogil:
            for r in range(R):                       # validate every row before writing
                total = 0
                for c in range(C):
                    v = ld_prob(probs + r * ps0 + c * ps1, pdt)
                    if not (v >= 0 and v < INFINITY):
                        bad = 1
                    total += v
                if not total > 0:
                    bad = 2
                if bad:
                    break
            if not bad:
                for r in range(R):
                    total = 0
                    for c in range(C):
                        total += ld_prob(probs + r * ps0 + c * ps1, pdt)
                        cdf[c] = total
                    for c in range(C):
                        cdf[c] /= total
                    cdf[C - 1] = 1.0
                    for k in range(S):
                        u = (stream_u64(&s, j) >> 11) * (1.0 / 9007199254740992.0)
                        j += 2
                        lo, hi = 0, C - 1
                        while hi > lo:
                            mid = lo + (hi - lo) // 2
                            if cdf[mid] <= u:
                                lo = mid + 1
                            else:
                                hi = mid
                        # (a zero-probability category never has cdf[c] > u > cdf[c - 1])
                        ek_st_i64(out + r * os0 + k * os1, lo)
    finally:
        free(cdf)
    if bad == 1:
        raise KernelArgumentError("multinomial: invalid multinomial distribution (encountering probability "
                                  "entry < 0, infinity or NaN)")
    if bad == 2:
        raise KernelArgumentError("multinomial: invalid multinomial distribution (sum of probabilities <= 0)")
    return consumed


# ---------------------------------------------------------------------------
# logspace: a sequence kernel, kept beside the random ones because it belongs to the same
# factory family of this block of work (sequence.pyx holds arange/linspace).

def logspace(out_addr, out_dtype, out_stride, steps, start, end, step, base, single):
    """out[i] = base ** (start + step * i) for i < steps // 2, else
    base ** (end - step * (steps - i - 1)), in double, then cast to out's dtype (C cast for
    integers): CPU's logspace formula.  The host passes start/end already cast to the output
    dtype and ``step`` = (end - start) / (steps - 1) as CPU computes it; ``single`` (steps == 1):
    out[0] = base ** start."""
    cdef int dt = check_dtype(out_dtype, "logspace out_dtype")
    cdef Py_ssize_t n = steps, i, k, m, half, so
    cdef double a = start, b = end, h = step, bs = base
    cdef bint one = single
    cdef double buf[BLOCK]
    cdef char* out
    if n < 0:
        raise KernelArgumentError(f"logspace: negative steps {steps}")
    if n == 0:
        return
    out = as_ptr(out_addr, "logspace out_addr")
    so = <Py_ssize_t>out_stride * itemsize_of(dt)
    half = n // 2
    with nogil:
        k = 0
        while k < n:
            m = n - k if n - k < BLOCK else BLOCK
            for i in range(m):
                if one:
                    buf[i] = pow(bs, a)
                elif k + i < half:
                    buf[i] = pow(bs, a + h * (k + i))
                else:
                    buf[i] = pow(bs, b - h * (n - (k + i) - 1))
            store_block(buf, m, dt, out + k * so, so)
            k += m


def philox4x32(counter, key):
    """One Philox4x32-10 block: 4 counter words, 2 key words -> 4 output words.
    Exposed for known-answer tests (Random123 kat_vectors)."""
    cdef uint32_t ctr[4]
    cdef uint32_t out[4]
    counter, key = tuple(counter), tuple(key)
    if len(counter) != 4 or len(key) != 2:
        raise KernelArgumentError("philox4x32: need 4 counter words and 2 key words")
    for i in range(4):
        ctr[i] = <uint32_t>(int(counter[i]) & 0xFFFFFFFF)
    philox4x32_10(ctr, <uint32_t>(int(key[0]) & 0xFFFFFFFF), <uint32_t>(int(key[1]) & 0xFFFFFFFF), out)
    return (out[0], out[1], out[2], out[3])
