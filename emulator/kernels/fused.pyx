# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Fused kernels of the device's vector engine: what a compiled graph (torch_plugin/compile)
and the ``emu::`` custom operators (torch_plugin/custom_ops.py) launch.

pointwise_program: a chain of elementwise ops evaluated in ONE pass over its operands. The
program is postfix: ``LOAD i`` pushes a block of input ``i``, ``CONST k`` a constant, an op
pops its arguments and pushes its result; the value left on the stack is stored to ``out``.
Inputs are read with their own strides (0 on broadcast dimensions), any arithmetic dtype;
evaluation is in float64 with an explicit ``ROUND_*`` op wherever the eager graph rounds an
intermediate to float32/float16/bfloat16 (so a fused chain gives eager's values, not merely
close ones). Rows are walked in C order after merging dimensions contiguous in every operand,
and processed in blocks of BLOCK elements, so every operand is read once and ``out`` written
once: the one pass over HBM the cost model charges.

add_rms_norm / row_normalize: the device kernels of emu::fused_add_rms_norm and
emu::row_normalize over CONTIGUOUS rows (the caller's eligibility check guarantees it; these
kernels never see a strided operand). Accumulation in float32, blockwise (block sums of
BLOCK elements added in float32), results rounded once on store.
"""

from libc.math cimport exp, log, sqrt, tanh, erf, fabs, pow, sin, cos, log1p, expm1, isnan, INFINITY
from libc.math cimport sqrtf
from libc.stdlib cimport malloc, free

include "_common.pxi"

cdef enum:
    MAX_INPUTS = 15
    MAX_STACK = 16

# Opcodes (library.py's FUSED_OPS names them; keep the two in step).
cdef enum:
    OP_LOAD = 0
    OP_CONST = 1
    OP_NEG = 2
    OP_ABS = 3
    OP_EXP = 4
    OP_LOG = 5
    OP_SQRT = 6
    OP_RSQRT = 7
    OP_TANH = 8
    OP_SIGMOID = 9
    OP_RELU = 10
    OP_ERF = 11
    OP_RECIPROCAL = 12
    OP_SIN = 13
    OP_COS = 14
    OP_LOG1P = 15
    OP_EXPM1 = 16
    OP_SILU = 17
    OP_GELU = 18
    OP_GELU_TANH = 19
    OP_NOT = 20
    OP_ROUND_F32 = 21
    OP_ROUND_F16 = 22
    OP_ROUND_BF16 = 23
    OP_TO_BOOL = 24
    OP_ADD = 40
    OP_SUB = 41
    OP_MUL = 42
    OP_DIV = 43
    OP_POW = 44
    OP_MAX = 45
    OP_MIN = 46
    OP_GT = 47
    OP_LT = 48
    OP_GE = 49
    OP_LE = 50
    OP_EQ = 51
    OP_NE = 52
    OP_AND = 53
    OP_OR = 54
    OP_WHERE = 60


cdef inline int arity_of(int op) noexcept nogil:
    if op < OP_NEG:
        return 0
    if op < OP_ADD:
        return 1
    if op < OP_WHERE:
        return 2
    return 3


cdef inline double nan_max(double a, double b) noexcept nogil:
    # torch.maximum/minimum propagate NaN
    if isnan(a) or isnan(b):
        return a + b
    return a if a > b else b


cdef inline double nan_min(double a, double b) noexcept nogil:
    if isnan(a) or isnan(b):
        return a + b
    return a if a < b else b


cdef void apply_unary(int op, double* v, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef double x
    if op == OP_NEG:
        for i in range(n):
            v[i] = -v[i]
    elif op == OP_ABS:
        for i in range(n):
            v[i] = fabs(v[i])
    elif op == OP_EXP:
        for i in range(n):
            v[i] = exp(v[i])
    elif op == OP_LOG:
        for i in range(n):
            v[i] = log(v[i])
    elif op == OP_SQRT:
        for i in range(n):
            v[i] = sqrt(v[i])
    elif op == OP_RSQRT:
        for i in range(n):
            v[i] = 1.0 / sqrt(v[i])
    elif op == OP_TANH:
        for i in range(n):
            v[i] = tanh(v[i])
    elif op == OP_SIGMOID:
        for i in range(n):
            v[i] = 1.0 / (1.0 + exp(-v[i]))
    elif op == OP_RELU:
        for i in range(n):
            x = v[i]
            v[i] = x if (x > 0 or isnan(x)) else 0.0
    elif op == OP_ERF:
        for i in range(n):
            v[i] = erf(v[i])
    elif op == OP_RECIPROCAL:
        for i in range(n):
            v[i] = 1.0 / v[i]
    elif op == OP_SIN:
        for i in range(n):
            v[i] = sin(v[i])
    elif op == OP_COS:
        for i in range(n):
            v[i] = cos(v[i])
    elif op == OP_LOG1P:
        for i in range(n):
            v[i] = log1p(v[i])
    elif op == OP_EXPM1:
        for i in range(n):
            v[i] = expm1(v[i])
    elif op == OP_SILU:
        for i in range(n):
            v[i] = v[i] / (1.0 + exp(-v[i]))
    elif op == OP_GELU:
        for i in range(n):
            v[i] = 0.5 * v[i] * (1.0 + erf(v[i] * 0.7071067811865476))
    elif op == OP_GELU_TANH:
        for i in range(n):
            x = v[i]
            v[i] = 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    elif op == OP_NOT:
        for i in range(n):
            v[i] = 1.0 if v[i] == 0 else 0.0
    elif op == OP_TO_BOOL:
        for i in range(n):
            v[i] = 0.0 if v[i] == 0 else 1.0
    elif op == OP_ROUND_F32:
        for i in range(n):
            v[i] = <float>v[i]
    elif op == OP_ROUND_F16:
        for i in range(n):
            v[i] = ek_round_f16(<float>v[i])
    elif op == OP_ROUND_BF16:
        for i in range(n):
            v[i] = ek_round_bf16(<float>v[i])


cdef void apply_binary(int op, double* a, const double* b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    if op == OP_ADD:
        for i in range(n):
            a[i] = a[i] + b[i]
    elif op == OP_SUB:
        for i in range(n):
            a[i] = a[i] - b[i]
    elif op == OP_MUL:
        for i in range(n):
            a[i] = a[i] * b[i]
    elif op == OP_DIV:
        for i in range(n):
            a[i] = a[i] / b[i]
    elif op == OP_POW:
        for i in range(n):
            a[i] = pow(a[i], b[i])
    elif op == OP_MAX:
        for i in range(n):
            a[i] = nan_max(a[i], b[i])
    elif op == OP_MIN:
        for i in range(n):
            a[i] = nan_min(a[i], b[i])
    elif op == OP_GT:
        for i in range(n):
            a[i] = 1.0 if a[i] > b[i] else 0.0
    elif op == OP_LT:
        for i in range(n):
            a[i] = 1.0 if a[i] < b[i] else 0.0
    elif op == OP_GE:
        for i in range(n):
            a[i] = 1.0 if a[i] >= b[i] else 0.0
    elif op == OP_LE:
        for i in range(n):
            a[i] = 1.0 if a[i] <= b[i] else 0.0
    elif op == OP_EQ:
        for i in range(n):
            a[i] = 1.0 if a[i] == b[i] else 0.0
    elif op == OP_NE:
        for i in range(n):
            a[i] = 1.0 if a[i] != b[i] else 0.0
    elif op == OP_AND:
        for i in range(n):
            a[i] = 1.0 if (a[i] != 0 and b[i] != 0) else 0.0
    elif op == OP_OR:
        for i in range(n):
            a[i] = 1.0 if (a[i] != 0 or b[i] != 0) else 0.0


def pointwise_program(tuple out, list inputs, tuple shape, tuple code, tuple consts):
    """out = (addr, dtype, strides); inputs: [(addr, dtype, strides)]; code: (op, arg) pairs
    flattened; consts: the CONST values. Strides in elements; inputs broadcast with stride 0."""
    cdef int nin = len(inputs), nops = nin + 1, ncode = len(code) // 2, k, d, nd = 0, ndim = len(shape)
    cdef int depth = 0, max_depth = 0, op, arg, ar
    cdef Py_ssize_t size = 1, ext, done, n, row, j, r
    cdef char* ptrs[MAX_INPUTS + 1]
    cdef int dts[MAX_INPUTS + 1]
    cdef Py_ssize_t st[(MAX_INPUTS + 1) * MAX_RANK]
    cdef Py_ssize_t sh[MAX_RANK]
    cdef Py_ssize_t idx[MAX_RANK]
    cdef Py_ssize_t s
    cdef int* ops
    cdef int* args
    cdef double* cvals
    cdef double* stack
    cdef bint merge
    if nin > MAX_INPUTS:
        raise KernelArgumentError(f"pointwise_program: {nin} inputs (at most {MAX_INPUTS})")
    if ndim > MAX_RANK:
        raise KernelArgumentError(f"pointwise_program: rank {ndim} exceeds the maximum of {MAX_RANK}")
    operands = [out] + inputs
    for k in range(nops):
        dts[k] = check_dtype(operands[k][1], "pointwise_program")
        if len(operands[k][2]) != ndim:
            raise KernelArgumentError(f"pointwise_program: strides {operands[k][2]!r} do not match {shape!r}")
    # validate the program: every LOAD/CONST in range, the stack never under/overflows, one result
    for j in range(ncode):
        op, arg = code[2 * j], code[2 * j + 1]
        ar = arity_of(op)
        if op == OP_LOAD and not 0 <= arg < nin or op == OP_CONST and not 0 <= arg < len(consts):
            raise KernelArgumentError(f"pointwise_program: operand {arg} out of range at step {j}")
        if depth < ar:
            raise KernelArgumentError(f"pointwise_program: stack underflow at step {j}")
        depth = depth - ar + 1
        if depth > max_depth:
            max_depth = depth
    if depth != 1 or max_depth > MAX_STACK:
        raise KernelArgumentError(f"pointwise_program: the program leaves {depth} values (needs 1) "
                                  f"or needs {max_depth} stack slots (at most {MAX_STACK})")
    for d in range(ndim):
        size *= shape[d]
    if size == 0:
        return
    for k in range(nops):
        ptrs[k] = as_ptr(operands[k][0], "pointwise_program")
    # merge dimensions contiguous in every operand (C order kept)
    for d in range(ndim):
        ext = shape[d]
        if ext == 1:
            continue
        merge = nd > 0
        if merge:
            for k in range(nops):
                s = <Py_ssize_t>operands[k][2][d] * itemsize_of(dts[k])
                if st[k * MAX_RANK + nd - 1] != s * ext:
                    merge = False
                    break
        if merge:
            sh[nd - 1] *= ext
            for k in range(nops):
                st[k * MAX_RANK + nd - 1] = <Py_ssize_t>operands[k][2][d] * itemsize_of(dts[k])
        else:
            sh[nd] = ext
            for k in range(nops):
                st[k * MAX_RANK + nd] = <Py_ssize_t>operands[k][2][d] * itemsize_of(dts[k])
            nd += 1
    if nd == 0:
        nd = 1
        sh[0] = 1
        for k in range(nops):
            st[k * MAX_RANK] = 0
    ops = <int*>malloc(ncode * sizeof(int) + 1)
    args = <int*>malloc(ncode * sizeof(int) + 1)
    cvals = <double*>malloc(len(consts) * sizeof(double) + 1)
    stack = <double*>malloc(MAX_STACK * BLOCK * sizeof(double))
    if ops == NULL or args == NULL or cvals == NULL or stack == NULL:
        free(ops); free(args); free(cvals); free(stack)
        raise MemoryError()
    for j in range(ncode):
        ops[j], args[j] = code[2 * j], code[2 * j + 1]
    for j in range(len(consts)):
        cvals[j] = consts[j]
    cdef Py_ssize_t rows = size // sh[nd - 1], length = sh[nd - 1]
    cdef char* base[MAX_INPUTS + 1]
    with nogil:
        for d in range(nd):
            idx[d] = 0
        for row in range(rows):
            for k in range(nops):
                base[k] = ptrs[k]
                for d in range(nd - 1):
                    base[k] += idx[d] * st[k * MAX_RANK + d]
            done = 0
            while done < length:
                n = length - done
                if n > BLOCK:
                    n = BLOCK
                depth = 0
                for j in range(ncode):
                    op = ops[j]
                    if op == OP_LOAD:
                        k = args[j] + 1
                        load_block(base[k] + done * st[k * MAX_RANK + nd - 1], st[k * MAX_RANK + nd - 1],
                                   dts[k], n, stack + depth * BLOCK)
                        depth += 1
                    elif op == OP_CONST:
                        for r in range(n):
                            stack[depth * BLOCK + r] = cvals[args[j]]
                        depth += 1
                    elif op < OP_ADD:
                        apply_unary(op, stack + (depth - 1) * BLOCK, n)
                    elif op < OP_WHERE:
                        apply_binary(op, stack + (depth - 2) * BLOCK, stack + (depth - 1) * BLOCK, n)
                        depth -= 1
                    else:  # WHERE(cond, a, b)
                        for r in range(n):
                            if stack[(depth - 3) * BLOCK + r] != 0:
                                stack[(depth - 3) * BLOCK + r] = stack[(depth - 2) * BLOCK + r]
                            else:
                                stack[(depth - 3) * BLOCK + r] = stack[(depth - 1) * BLOCK + r]
                        depth -= 2
                if dts[0] == DT_BOOL:
                    apply_unary(OP_TO_BOOL, stack, n)
                store_block(stack, n, dts[0], base[0] + done * st[nd - 1], st[nd - 1])
                done += n
            # next row (C order over the outer dims)
            d = nd - 2
            while d >= 0:
                idx[d] += 1
                if idx[d] < sh[d]:
                    break
                idx[d] = 0
                d -= 1
    free(ops); free(args); free(cvals); free(stack)


cdef int check_float(int dt, str what) except -1:
    if dt != DT_FLOAT32 and dt != DT_FLOAT16 and dt != DT_BFLOAT16:
        raise KernelArgumentError(f"{what}: dtype {_DTYPE_NAMES[dt]} (float32, float16, bfloat16 only)")
    return 0


cdef float sum_squares(const float* v, Py_ssize_t n) noexcept nogil:
    """float32 accumulation in blocks: block sums of BLOCK elements, added in float32."""
    cdef Py_ssize_t i, j, m
    cdef float total = 0, part
    i = 0
    while i < n:
        m = n - i
        if m > BLOCK:
            m = BLOCK
        part = 0
        for j in range(m):
            part += v[i + j] * v[i + j]
        total += part
        i += m
    return total


def add_rms_norm(out_addr, new_residual_addr, x_addr, residual_addr, int x_dtype, weight_addr, int w_dtype,
                 Py_ssize_t rows, Py_ssize_t hidden, double eps):
    """Contiguous [rows, hidden] rows: new_residual = round_x(x + residual);
    out = round_x(new_residual * 1/sqrt(mean(new_residual^2) + eps) * weight), float32 inside."""
    check_dtype(x_dtype, "add_rms_norm")
    check_dtype(w_dtype, "add_rms_norm")
    check_float(x_dtype, "add_rms_norm")
    check_float(w_dtype, "add_rms_norm")
    if rows < 0 or hidden < 0:
        raise KernelArgumentError(f"add_rms_norm: negative shape ({rows}, {hidden})")
    if rows == 0 or hidden == 0:
        return
    cdef char* out = as_ptr(out_addr, "add_rms_norm")
    cdef char* nres = as_ptr(new_residual_addr, "add_rms_norm")
    cdef char* x = as_ptr(x_addr, "add_rms_norm")
    cdef char* res = as_ptr(residual_addr, "add_rms_norm")
    cdef char* w = as_ptr(weight_addr, "add_rms_norm")
    cdef Py_ssize_t isz = itemsize_of(x_dtype), wsz = itemsize_of(w_dtype), r, i
    cdef float* a = <float*>malloc(3 * hidden * sizeof(float))
    cdef float* b
    cdef float* wf
    cdef float rstd
    if a == NULL:
        raise MemoryError()
    b = a + hidden
    wf = b + hidden
    with nogil:
        load_block(w, wsz, w_dtype, hidden, wf)
        for r in range(rows):
            load_block(x + r * hidden * isz, isz, x_dtype, hidden, a)
            load_block(res + r * hidden * isz, isz, x_dtype, hidden, b)
            for i in range(hidden):
                a[i] = a[i] + b[i]
            round_block_to(a, hidden, x_dtype)
            store_block(a, hidden, x_dtype, nres + r * hidden * isz, isz)
            rstd = 1.0 / sqrtf(sum_squares(a, hidden) / hidden + <float>eps)
            for i in range(hidden):
                a[i] = a[i] * rstd * wf[i]
            store_block(a, hidden, x_dtype, out + r * hidden * isz, isz)
    free(a)


def row_normalize(y_addr, scale_addr, x_addr, int x_dtype, Py_ssize_t rows, Py_ssize_t n):
    """Contiguous [rows, n] rows: scale[r] = sqrt(sum x^2) (float32); y = round_x(x / max(scale, 1e-12))."""
    check_dtype(x_dtype, "row_normalize")
    check_float(x_dtype, "row_normalize")
    if rows < 0 or n < 0:
        raise KernelArgumentError(f"row_normalize: negative shape ({rows}, {n})")
    if rows == 0:
        return
    cdef char* scale = as_ptr(scale_addr, "row_normalize")
    cdef char* y
    cdef char* x
    cdef Py_ssize_t isz = itemsize_of(x_dtype), r, i
    cdef float* a
    cdef float s, d
    if n == 0:  # empty rows: scale 0, nothing to normalize
        with nogil:
            for r in range(rows):
                ek_st_f32(scale + r * 4, 0.0)
        return
    y = as_ptr(y_addr, "row_normalize")
    x = as_ptr(x_addr, "row_normalize")
    a = <float*>malloc(n * sizeof(float))
    if a == NULL:
        raise MemoryError()
    with nogil:
        for r in range(rows):
            load_block(x + r * n * isz, isz, x_dtype, n, a)
            s = sqrtf(sum_squares(a, n))
            ek_st_f32(scale + r * 4, s)
            d = <float>1e-12 if s <= <float>1e-12 else s   # a NaN norm stays NaN (clamp_min propagates it)
            for i in range(n):
                a[i] = a[i] / d
            store_block(a, n, x_dtype, y + r * n * isz, isz)
    free(a)
