# Mixed-precision and optimizer kernels of the device library: the GradScaler pair
# (non-finite check + unscale, scale update) and the fused optimizer steps (Adam/AdamW, SGD).
#
# Numerics follow CUDA's kernels (aten/src/ATen/native/cuda/AmpKernels.cu, fused_adam_utils.cuh,
# FusedSgdKernel.cu): every element is computed in the op math type (float32 for
# float16/bfloat16/float32 tensors, float64 for float64) and rounded once to the tensor's dtype
# on store. The scalars that the host must not read (found_inf, grad_scale, the step count, a
# tensor learning rate) are read from device memory when the kernel runs, so a step with an
# inf/nan gradient is skipped without a host synchronisation.
#
# Operands of the fused steps are dense and contiguous (the op kernels check it); they are
# passed as (address, dtype code) pairs plus one element count.
include "_common.pxi"

from libc.math cimport sqrt, pow, isfinite

ctypedef fused real_t:
    float
    double


cdef inline double _ld(const char* p, int dt) noexcept nogil:
    cdef double v
    load_block(p, 0, dt, 1, &v)
    return v


cdef inline void _st(char* p, int dt, double v) noexcept nogil:
    store_block(&v, 1, dt, p, 0)


cdef inline real_t _ldr(const char* p, int dt, Py_ssize_t i, real_t kind) noexcept nogil:
    cdef real_t v
    load_block(p + i * itemsize_of(dt), 0, dt, 1, &v)
    return v


cdef inline void _str(char* p, int dt, Py_ssize_t i, real_t v) noexcept nogil:
    store_block(&v, 1, dt, p + i * itemsize_of(dt), 0)


cdef char* _opt_ptr(object addr, str what) except? NULL:
    return NULL if addr is None else as_ptr(addr, what)


cdef int _float_code(object dt, str what) except -1:
    cdef int code = check_dtype(dt, what)
    if not is_floating(code):
        raise KernelArgumentError(f"{what}: expected a floating-point operand, got dtype code {code}")
    return code


# -- GradScaler ---------------------------------------------------------------------------------
def amp_unscale(g_addr, g_dtype, g_strides, shape, found_inf_addr, inv_scale_addr):
    """g *= inv_scale (skipped when inv_scale == 1, as CUDA); found_inf = 1.0 if any g is inf/nan.
    found_inf and inv_scale are float32 scalars in device memory; g is any strided float tensor."""
    cdef int gdt = _float_code(g_dtype, "amp_unscale: grad")
    cdef char* fi = as_ptr(found_inf_addr, "amp_unscale: found_inf")
    cdef char* isp = as_ptr(inv_scale_addr, "amp_unscale: inv_scale")
    cdef NdIter it
    cdef Py_ssize_t n, k, st
    cdef float inv, vf
    cdef double vd
    cdef bint nonfinite = False
    cdef char* ptrs[1]
    iter_init(&it, shape, [g_strides], [itemsize_of(gdt)], "amp_unscale")
    if it.size == 0:
        return
    ptrs[0] = as_ptr(g_addr, "amp_unscale: grad")
    with nogil:
        inv = ek_ld_f32(isp)
        n = iter_row_len(&it)
        st = iter_row_stride(&it, 0)
        while True:
            for k in range(n):
                if gdt == DT_FLOAT64:
                    vd = ek_ld_f64(ptrs[0] + k * st)
                    if not isfinite(vd):
                        nonfinite = True
                    if inv != 1.0:
                        ek_st_f64(ptrs[0] + k * st, vd * <double>inv)
                else:
                    vf = <float>_ld(ptrs[0] + k * st, gdt)
                    if not isfinite(vf):
                        nonfinite = True
                    if inv != 1.0:
                        _st(ptrs[0] + k * st, gdt, <double>(vf * inv))
            if not iter_next_row(&it, ptrs):
                break
        if nonfinite:
            ek_st_f32(fi, 1.0)


def amp_update_scale(scale_addr, tracker_addr, found_inf_addr, double growth_factor,
                     double backoff_factor, long long growth_interval):
    """CUDA's amp_update_scale_cuda_kernel: float32 scale, int32 growth tracker, float32 found_inf."""
    cdef char* sp = as_ptr(scale_addr, "amp_update_scale: scale")
    cdef char* tp = as_ptr(tracker_addr, "amp_update_scale: growth_tracker")
    cdef char* fp = as_ptr(found_inf_addr, "amp_update_scale: found_inf")
    cdef float scale, grown
    cdef int32_t successful
    with nogil:
        scale = ek_ld_f32(sp)
        if ek_ld_f32(fp) != 0.0:
            ek_st_f32(sp, scale * <float>backoff_factor)
            ek_st_i32(tp, 0)
        else:
            successful = ek_ld_i32(tp) + 1
            if successful == growth_interval:
                grown = scale * <float>growth_factor
                if isfinite(grown):
                    ek_st_f32(sp, grown)
                ek_st_i32(tp, 0)
            else:
                ek_st_i32(tp, successful)


# -- fused optimizer steps ----------------------------------------------------------------------
cdef void _adam_loop(real_t kind, char* p, int pdt, char* g, int gdt, char* m, int mdt, char* v, int vdt,
                     char* vmax, int vmaxdt, Py_ssize_t n, real_t lr, real_t beta1, real_t beta2,
                     real_t weight_decay, real_t eps, bint adamw, bint maximize, real_t bc1, real_t bc2_sqrt,
                     bint scaled, real_t grad_scale) noexcept nogil:
    cdef Py_ssize_t i
    cdef real_t param, grad, exp_avg, exp_avg_sq, max_sq, denom
    cdef real_t step_size = lr / bc1
    for i in range(n):
        param = _ldr(p, pdt, i, kind)
        grad = _ldr(g, gdt, i, kind)
        exp_avg = _ldr(m, mdt, i, kind)
        exp_avg_sq = _ldr(v, vdt, i, kind)
        if scaled:
            grad = grad / grad_scale
            _str(g, gdt, i, grad)
        if maximize:
            grad = -grad
        if weight_decay != 0:
            if adamw:
                param = param - lr * weight_decay * param
            else:
                grad = grad + param * weight_decay
        exp_avg = beta1 * exp_avg + (1 - beta1) * grad
        exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * grad * grad
        if vmax != NULL:
            max_sq = _ldr(vmax, vmaxdt, i, kind)
            if exp_avg_sq > max_sq or exp_avg_sq != exp_avg_sq:  # std::max keeps a NaN from either side
                max_sq = exp_avg_sq
            _str(vmax, vmaxdt, i, max_sq)
            denom = sqrt(max_sq) / bc2_sqrt + eps
        else:
            denom = sqrt(exp_avg_sq) / bc2_sqrt + eps
        param = param - step_size * exp_avg / denom
        _str(p, pdt, i, param)
        _str(m, mdt, i, exp_avg)
        _str(v, vdt, i, exp_avg_sq)


def fused_adam(p_addr, p_dtype, g_addr, g_dtype, m_addr, m_dtype, v_addr, v_dtype, vmax_addr, vmax_dtype,
               Py_ssize_t n, step_addr, step_dtype, lr_addr, lr_dtype, double lr, double beta1, double beta2,
               double weight_decay, double eps, bint adamw, bint maximize, grad_scale_addr, found_inf_addr):
    """One parameter's Adam (adamw=False) or AdamW step, as CUDA's fused kernel: the step count
    (already incremented by torch.optim) is read from device memory; lr_addr, when given, is a
    tensor learning rate; found_inf != 0 skips the step; grad_scale divides the gradient (written
    back). vmax_addr is None without amsgrad."""
    cdef int pdt = _float_code(p_dtype, "fused_adam: param")
    cdef int gdt = _float_code(g_dtype, "fused_adam: grad")
    cdef int mdt = _float_code(m_dtype, "fused_adam: exp_avg")
    cdef int vdt = _float_code(v_dtype, "fused_adam: exp_avg_sq")
    cdef int vmaxdt = 0 if vmax_addr is None else _float_code(vmax_dtype, "fused_adam: max_exp_avg_sq")
    cdef int sdt = check_dtype(step_dtype, "fused_adam: state_step")
    cdef int lrdt = 0 if lr_addr is None else _float_code(lr_dtype, "fused_adam: lr")
    if n < 0:
        raise KernelArgumentError(f"fused_adam: negative element count {n}")
    if n == 0:
        return
    cdef char* p = as_ptr(p_addr, "fused_adam: param")
    cdef char* g = as_ptr(g_addr, "fused_adam: grad")
    cdef char* m = as_ptr(m_addr, "fused_adam: exp_avg")
    cdef char* v = as_ptr(v_addr, "fused_adam: exp_avg_sq")
    cdef char* vmax = _opt_ptr(vmax_addr, "fused_adam: max_exp_avg_sq")
    cdef char* sp = as_ptr(step_addr, "fused_adam: state_step")
    cdef char* lrp = _opt_ptr(lr_addr, "fused_adam: lr")
    cdef char* gs = _opt_ptr(grad_scale_addr, "fused_adam: grad_scale")
    cdef char* fi = _opt_ptr(found_inf_addr, "fused_adam: found_inf")
    cdef double step, bc1, bc2_sqrt, scale = 1.0
    if fi != NULL and ek_ld_f32(fi) == 1.0:
        return
    with nogil:
        if lrp != NULL:
            lr = _ld(lrp, lrdt)
        if gs != NULL:
            scale = ek_ld_f32(gs)
        step = _ld(sp, sdt)
        bc1 = 1 - pow(beta1, step)
        bc2_sqrt = sqrt(1 - pow(beta2, step))
        if pdt == DT_FLOAT64:
            _adam_loop[double](0, p, pdt, g, gdt, m, mdt, v, vdt, vmax, vmaxdt, n, lr, beta1, beta2,
                               weight_decay, eps, adamw, maximize, bc1, bc2_sqrt, gs != NULL, scale)
        else:
            _adam_loop[float](0, p, pdt, g, gdt, m, mdt, v, vdt, vmax, vmaxdt, n, <float>lr, <float>beta1,
                              <float>beta2, <float>weight_decay, <float>eps, adamw, maximize, <float>bc1,
                              <float>bc2_sqrt, gs != NULL, <float>scale)


cdef void _sgd_loop(real_t kind, char* p, int pdt, char* g, int gdt, char* b, int bdt, Py_ssize_t n,
                    real_t weight_decay, real_t momentum, real_t lr, real_t dampening, bint nesterov,
                    bint maximize, bint first_step, bint scaled, real_t grad_scale) noexcept nogil:
    cdef Py_ssize_t i
    cdef real_t param, grad, buf
    for i in range(n):
        param = _ldr(p, pdt, i, kind)
        grad = _ldr(g, gdt, i, kind)
        if scaled:
            grad = grad / grad_scale
            _str(g, gdt, i, grad)
        if maximize:
            grad = -grad
        if weight_decay != 0:
            grad = grad + weight_decay * param
        if b != NULL:
            if first_step:
                buf = grad
            else:
                buf = momentum * _ldr(b, bdt, i, kind) + (1 - dampening) * grad
            _str(b, bdt, i, buf)
            if nesterov:
                grad = grad + momentum * buf
            else:
                grad = buf
        param = param - lr * grad
        _str(p, pdt, i, param)


def fused_sgd(p_addr, p_dtype, g_addr, g_dtype, b_addr, b_dtype, Py_ssize_t n, lr_addr, lr_dtype,
              double lr, double weight_decay, double momentum, double dampening, bint nesterov, bint maximize,
              bint first_step, grad_scale_addr, found_inf_addr):
    """One parameter's SGD step as CUDA's fused kernel; b_addr (the momentum buffer) is None
    without momentum."""
    cdef int pdt = _float_code(p_dtype, "fused_sgd: param")
    cdef int gdt = _float_code(g_dtype, "fused_sgd: grad")
    cdef int bdt = 0 if b_addr is None else _float_code(b_dtype, "fused_sgd: momentum_buffer")
    cdef int lrdt = 0 if lr_addr is None else _float_code(lr_dtype, "fused_sgd: lr")
    if n < 0:
        raise KernelArgumentError(f"fused_sgd: negative element count {n}")
    if n == 0:
        return
    cdef char* p = as_ptr(p_addr, "fused_sgd: param")
    cdef char* g = as_ptr(g_addr, "fused_sgd: grad")
    cdef char* b = _opt_ptr(b_addr, "fused_sgd: momentum_buffer")
    cdef char* lrp = _opt_ptr(lr_addr, "fused_sgd: lr")
    cdef char* gs = _opt_ptr(grad_scale_addr, "fused_sgd: grad_scale")
    cdef char* fi = _opt_ptr(found_inf_addr, "fused_sgd: found_inf")
    cdef double scale = 1.0
    if fi != NULL and ek_ld_f32(fi) == 1.0:
        return
    with nogil:
        if lrp != NULL:
            lr = _ld(lrp, lrdt)
        if gs != NULL:
            scale = ek_ld_f32(gs)
        if pdt == DT_FLOAT64:
            _sgd_loop[double](0, p, pdt, g, gdt, b, bdt, n, weight_decay, momentum, lr, dampening, nesterov,
                              maximize, first_step, gs != NULL, scale)
        else:
            _sgd_loop[float](0, p, pdt, g, gdt, b, bdt, n, <float>weight_decay, <float>momentum, <float>lr,
                             <float>dampening, nesterov, maximize, first_step, gs != NULL, <float>scale)
