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

Left out: bit-compatibility with PyTorch's CPU (mt19937) or CUDA streams, and
other distributions (exponential, geometric, ...).
"""

from libc.math cimport sqrt, log, cos, nextafter, nextafterf, INFINITY, M_PI

include "_common.pxi"

cdef enum:
    PHILOX_M0 = 0xD2511F53
    PHILOX_M1 = 0xCD9E8D57
    PHILOX_W0 = 0x9E3779B9
    PHILOX_W1 = 0xBB67AE85

cdef enum:
    K_UNIFORM, K_NORMAL, K_RANDINT, K_BERNOULLI


cdef void philox4x32_10(uint32_t* ctr, uint32_t k0, uint32_t k1, uint32_t* out) noexcept nogil:
    """Random123 Philox4x32 with 10 rounds (the curand/PyTorch variant)."""
    cdef uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], t0, t2
    cdef uint64_t p0, p1
    cdef int r
    for r in range(10):
        if r > 0:                        # key schedule: bump between rounds
            k0 = k0 + <uint32_t>PHILOX_W0
            k1 = k1 + <uint32_t>PHILOX_W1
        p0 = <uint64_t><uint32_t>PHILOX_M0 * c0
        p1 = <uint64_t><uint32_t>PHILOX_M1 * c2
        t0 = <uint32_t>(p1 >> 32) ^ c1 ^ k0
        t2 = <uint32_t>(p0 >> 32) ^ c3 ^ k1
        c1 = <uint32_t>p1
        c3 = <uint32_t>p0
        c0 = t0
        c2 = t2
    out[0] = c0
    out[1] = c1
    out[2] = c2
    out[3] = c3


cdef struct Stream:
    uint32_t k0, k1
    uint64_t block                       # block held in `words`
    bint valid
    uint32_t words[4]


cdef inline uint32_t stream_word(Stream* s, uint64_t j) noexcept nogil:
    """Word j of the stream (cached per 4-word block: sequential use costs one
    Philox evaluation per 4 words)."""
    cdef uint64_t b = j >> 2
    cdef uint32_t ctr[4]
    if not s.valid or b != s.block:
        ctr[0] = <uint32_t>b
        ctr[1] = <uint32_t>(b >> 32)
        ctr[2] = 0
        ctr[3] = 0
        philox4x32_10(ctr, s.k0, s.k1, s.words)
        s.block = b
        s.valid = True
    return s.words[j & 3]


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
