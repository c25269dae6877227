"""The ``_foreach_*`` list ops and the fused optimizer steps (``_fused_adam_``, ``_fused_adamw_``,
``_fused_sgd_``) on the device.

``_foreach_*``: composites, one device op per tensor of the list (each a native kernel of the
pointwise/reduction library, so its numerics and type promotion are the per-tensor op's, as in
ATen's slow path). The table ``_FOREACH`` names the per-tensor op of every foreach op; the
functional and in-place overloads are generated from it. Lists are checked first (non-empty,
equal lengths, one device, in-place shapes), so a bad list changes no tensor.

The fused steps are one device kernel per parameter (emulator/kernels/foreach.pyx), with CUDA's
math in float32 (float64 for float64 parameters). They read the step count, a tensor learning
rate, ``grad_scale`` and ``found_inf`` from device memory, so nothing waits for the device.
Left out: a single launch per list (the list ops launch once per tensor), the ``.out`` overloads
(ATen's CompositeExplicitAutograd kernels run the functional op and copy), ``_foreach_mm`` and
``_foreach_powsum``.
"""
from __future__ import annotations

import torch

from torch_plugin.ops._common import common_device, current_stream, device_ref, rt
from torch_plugin.ops._overloads import Overloads
from torch_plugin.ops.registry import composite

OVERLOADS = Overloads(__name__)

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


# -- list checks (ATen's check_foreach_api_restrictions) ----------------------------------------
def _check_lists(op: str, *lists) -> int:
    first = lists[0]
    if not first:
        raise RuntimeError(f"{op}: Tensor list must have at least one tensor.")
    for other in lists[1:]:
        if len(other) != len(first):
            raise RuntimeError(f"{op}: Tensor lists must have the same number of tensors, got "
                               f"{len(first)} and {len(other)}")
    tensors = [t for lst in lists for t in lst if isinstance(t, torch.Tensor)]
    return common_device(op, *tensors)


def _check_inplace_shapes(op: str, selves, *others) -> None:
    # In-place results keep self's shape: an operand that would broadcast self is an error
    # before anything is written (ATen's slow path would have updated the earlier tensors).
    for lst in others:
        for t, o in zip(selves, lst):
            if isinstance(o, torch.Tensor) and tuple(torch.broadcast_shapes(t.shape, o.shape)) != tuple(t.shape):
                raise RuntimeError(f"{op}: output with shape {list(t.shape)} doesn't match the broadcast "
                                   f"shape {list(torch.broadcast_shapes(t.shape, o.shape))}")


def _scalars(op: str, scalars, n: int) -> list:
    """A ScalarList, or the 1-D CPU tensor of the .Tensor overloads of addcmul/addcdiv, as numbers."""
    if isinstance(scalars, torch.Tensor):
        if scalars.device.type != "cpu" or scalars.dim() != 1:
            raise RuntimeError(f"{op}: Expected scalars to be a 1-D CPU tensor, got {scalars.dim()}-D on "
                               f"{scalars.device}")
        scalars = scalars.tolist()  # host memory: no device synchronisation
    if len(scalars) != n:
        raise RuntimeError(f"{op}: Tensor list must have same number of elements as scalar list "
                           f"({n} and {len(scalars)})")
    return list(scalars)


def _inplace(t: torch.Tensor, fn, *args, **kwargs) -> None:
    """t = fn(t, ...) for ops without a Tensor method of their own (maximum, minimum)."""
    t.copy_(fn(t, *args, **kwargs))


# -- kernel factories ---------------------------------------------------------------------------
def _unary(name: str, per_tensor, inplace: bool):
    op = f"_foreach_{name}{'_' if inplace else ''}"
    method = getattr(torch.Tensor, f"{name}_", None)

    @composite
    def kernel(self):
        _check_lists(op, self)
        if inplace:
            for t in self:
                method(t) if method is not None else _inplace(t, per_tensor)
            return None
        return [per_tensor(t) for t in self]
    return kernel


def _binary(name: str, per_tensor, inplace: bool, kind: str):
    """kind: "List" (other[i]), "Scalar" (one number), "ScalarList" (scalars[i]), "Tensor" (one tensor)."""
    op = f"_foreach_{name}{'_' if inplace else ''}.{kind}"
    method = getattr(torch.Tensor, f"{per_tensor.__name__}_", None)

    @composite
    def kernel(self, other, **kwargs):
        if kind == "List":
            _check_lists(op, self, other)
            items = other
        elif kind == "ScalarList":
            _check_lists(op, self)
            items = _scalars(op, other, len(self))
        else:
            _check_lists(op, self)
            if kind == "Tensor":
                common_device(op, other, *self)  # one emu device (a CPU 0-dim other is a scalar)
            items = [other] * len(self)
        if inplace:
            _check_inplace_shapes(op, self, items)
            for t, o in zip(self, items):
                method(t, o, **kwargs) if method is not None else _inplace(t, per_tensor, o, **kwargs)
            return None
        return [per_tensor(t, o, **kwargs) for t, o in zip(self, items)]
    return kernel


def _ternary(name: str, inplace: bool, kind: str):
    """addcmul/addcdiv: (self, tensor1, tensor2, value | scalars); lerp: (self, end, weight | weights)."""
    op = f"_foreach_{name}{'_' if inplace else ''}.{kind}"
    per_tensor = getattr(torch, name)
    method = getattr(torch.Tensor, f"{name}_")
    is_lerp = name == "lerp"

    @composite
    def kernel(self, a, b=None, c=None, **kwargs):
        if is_lerp:  # (self, tensors1, weight(s))
            lists = (self, a) + ((b,) if kind == "List" else ())
            _check_lists(op, *lists)
            weights = b if kind == "List" else _scalars(op, b, len(self)) if kind == "ScalarList" else [b] * len(self)
            calls = [((e, w), {}) for e, w in zip(a, weights)]
            others = (a, b) if kind == "List" else (a,)
        else:  # (self, tensor1, tensor2, value=1 | scalars)
            _check_lists(op, self, a, b)
            if kind == "Scalar":
                values = [kwargs.get("value", 1 if c is None else c)] * len(self)
            else:
                values = _scalars(op, c if c is not None else kwargs["scalars"], len(self))
            calls = [((t1, t2), {"value": v}) for t1, t2, v in zip(a, b, values)]
            others = (a, b)
        if inplace:
            _check_inplace_shapes(op, self, *others)
            for t, (args, kw) in zip(self, calls):
                method(t, *args, **kw)
            return None
        return [per_tensor(t, *args, **kw) for t, (args, kw) in zip(self, calls)]
    return kernel


@OVERLOADS.implements("_foreach_norm.Scalar")
@composite
def foreach_norm(self, ord=2, dtype=None):
    _check_lists("_foreach_norm.Scalar", self)
    return [torch.linalg.vector_norm(t, ord, dtype=dtype) for t in self]


@OVERLOADS.implements("_foreach_max")
@composite
def foreach_max(self):
    _check_lists("_foreach_max", self)
    return [t.max() for t in self]


@OVERLOADS.implements("_foreach_zero_")
@composite
def foreach_zero_(self):
    _check_lists("_foreach_zero_", self)
    for t in self:
        t.zero_()


@OVERLOADS.implements("_foreach_zero")
@composite
def foreach_zero(self):
    _check_lists("_foreach_zero", self)
    return [torch.zeros_like(t) for t in self]


@OVERLOADS.implements("_foreach_copy_")
@composite
def foreach_copy_(self, src, non_blocking=False):
    _check_lists("_foreach_copy_", self, src)
    for t, s in zip(self, src):
        t.copy_(s, non_blocking)


@OVERLOADS.implements("_foreach_clone")
@composite
def foreach_clone(self):
    _check_lists("_foreach_clone", self)
    return [t.clone() for t in self]


@OVERLOADS.implements("_foreach_pow.ScalarAndTensor")
@composite
def foreach_pow_scalar_and_tensor(self, exponent):
    _check_lists("_foreach_pow.ScalarAndTensor", exponent)
    return [torch.pow(self, e) for e in exponent]


# The foreach ops and their per-tensor device ops. Unary: _foreach_<name>(self[]) -> <name>(t).
_UNARY = ("abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1", "floor", "frac",
          "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sign",
          "sin", "sinh", "sqrt", "tan", "tanh", "trunc")
# Binary: name -> {overload kind: per-tensor op}. maximum/minimum with a number are clamp_min/max.
_BINARY = {
    "add": dict.fromkeys(("List", "Scalar", "ScalarList", "Tensor"), torch.add),
    "sub": dict.fromkeys(("List", "Scalar", "ScalarList"), torch.sub),
    "mul": dict.fromkeys(("List", "Scalar", "ScalarList", "Tensor"), torch.mul),
    "div": dict.fromkeys(("List", "Scalar", "ScalarList", "Tensor"), torch.div),
    "pow": dict.fromkeys(("List", "Scalar", "ScalarList"), torch.pow),
    "clamp_min": dict.fromkeys(("List", "Scalar", "ScalarList"), torch.clamp_min),
    "clamp_max": dict.fromkeys(("List", "Scalar", "ScalarList"), torch.clamp_max),
    "maximum": {"List": torch.maximum, "Scalar": torch.clamp_min, "ScalarList": torch.clamp_min},
    "minimum": {"List": torch.minimum, "Scalar": torch.clamp_max, "ScalarList": torch.clamp_max},
}
_TERNARY = {"addcmul": ("Scalar", "ScalarList", "Tensor"), "addcdiv": ("Scalar", "ScalarList", "Tensor"),
            "lerp": ("List", "Scalar", "ScalarList")}


def _table_kernels():
    """(aten overload name, kernel) for the _UNARY, _BINARY and _TERNARY tables' foreach ops."""
    for name in _UNARY:
        per_tensor = getattr(torch, name)
        yield f"_foreach_{name}", _unary(name, per_tensor, False)
        yield f"_foreach_{name}_", _unary(name, per_tensor, True)
    for name, kinds in _BINARY.items():
        for kind, per_tensor in kinds.items():
            yield f"_foreach_{name}.{kind}", _binary(name, per_tensor, False, kind)
            yield f"_foreach_{name}_.{kind}", _binary(name, per_tensor, True, kind)
    for name, kinds in _TERNARY.items():
        for kind in kinds:
            yield f"_foreach_{name}.{kind}", _ternary(name, False, kind)
            yield f"_foreach_{name}_.{kind}", _ternary(name, True, kind)


OVERLOADS.update(_table_kernels())


# -- fused optimizer steps ----------------------------------------------------------------------
def _dense(t: torch.Tensor) -> bool:
    return t.is_contiguous()


def _check_fused(op: str, params, *lists, scalars=()) -> int:
    device = _check_lists(op, params, *[lst for lst in lists if lst])
    for group in zip(params, *[lst for lst in lists if lst]):
        p = group[0]
        for t in group:
            if t.dtype not in _FLOATS:  # CPU and CUDA have no such kernel either
                raise RuntimeError(f"{op}: not implemented for {t.dtype} (the fused optimizer steps take "
                                   f"{', '.join(map(str, _FLOATS))} tensors)")
            if t.shape != p.shape:
                raise RuntimeError(f"{op}: all tensors of a parameter must have its shape {list(p.shape)}, "
                                   f"got {list(t.shape)}")
            if not _dense(t):
                raise NotImplementedError(f"{op}: emu runs the fused step on contiguous tensors only "
                                          f"(got strides {t.stride()}); use foreach=True")
    for name, t in scalars:
        if t is not None and (t.device.type != "emu" or t.device.index != device or t.numel() != 1):
            raise RuntimeError(f"{op}: {name} must be a one-element tensor on emu:{device}, got "
                               f"{tuple(t.shape)} on {t.device}")
        if t is not None and t.dtype != torch.float32 and name in ("grad_scale", "found_inf"):
            raise RuntimeError(f"{op}: {name} must be a float32 tensor, got {t.dtype}")
    return device


def _lr_operand(op: str, lr, device: int):
    """A float lr is an immediate; a tensor lr on the device is read by the kernel (a CPU one is
    host memory: its value is taken now)."""
    if not isinstance(lr, torch.Tensor):
        return None, float(lr)
    if lr.device.type == "cpu":
        return None, float(lr.item())
    if lr.device.type != "emu" or lr.device.index != device or lr.numel() != 1:
        raise RuntimeError(f"{op}: lr must be a one-element tensor on emu:{device} or the CPU")
    return device_ref(lr, (), ()), 0.0


def _scalar_ref(t):
    return None if t is None else device_ref(t, (), ())


def _fused_adam(op: str, adamw: bool, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *,
                lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    if not params:
        return
    maxes = max_exp_avg_sqs if amsgrad else []
    device = _check_fused(op, params, grads, exp_avgs, exp_avg_sqs, maxes,
                          scalars=(("grad_scale", grad_scale), ("found_inf", found_inf)))
    if len(state_steps) != len(params):
        raise RuntimeError(f"{op}: Tensor lists must have the same number of tensors, got {len(params)} "
                           f"and {len(state_steps)}")
    for step in state_steps:
        if step.device.type != "emu" or step.device.index != device or step.numel() != 1:
            raise RuntimeError(f"{op}: state_steps must be one-element tensors on emu:{device} "
                               f"(torch.optim keeps them on the parameters' device for fused=True)")
    lr_ref, lr_value = _lr_operand(op, lr, device)
    stream, launch = current_stream(device), rt().launch
    scale_ref, inf_ref = _scalar_ref(grad_scale), _scalar_ref(found_inf)
    for i, p in enumerate(params):
        if not p.numel():
            continue
        vmax = device_ref(maxes[i]) if amsgrad else None
        launch("fused_adam", (device_ref(p), device_ref(grads[i]), device_ref(exp_avgs[i]),
                              device_ref(exp_avg_sqs[i]), vmax, device_ref(state_steps[i], (), ()), lr_ref,
                              lr_value, float(beta1), float(beta2), float(weight_decay), float(eps), adamw,
                              bool(maximize), scale_ref, inf_ref), stream)


@OVERLOADS.implements("_fused_adam_", "_fused_adam_.tensor_lr")
def fused_adam_(*args, **kwargs):
    _fused_adam("_fused_adam_", False, *args, **kwargs)


@OVERLOADS.implements("_fused_adamw_", "_fused_adamw_.tensor_lr")
def fused_adamw_(*args, **kwargs):
    _fused_adam("_fused_adamw_", True, *args, **kwargs)


@OVERLOADS.implements("_fused_sgd_", "_fused_sgd_.tensor_lr")
def fused_sgd_(params, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening, nesterov,
               maximize, is_first_step, grad_scale=None, found_inf=None):
    op = "_fused_sgd_"
    if not params:
        return
    buffers = momentum_buffer_list if momentum != 0 else []
    if momentum != 0 and len(buffers) != len(params):
        raise RuntimeError(f"{op}: momentum_buffer_list must have one buffer per parameter, got "
                           f"{len(buffers)} for {len(params)}")
    device = _check_fused(op, params, grads, buffers,
                          scalars=(("grad_scale", grad_scale), ("found_inf", found_inf)))
    lr_ref, lr_value = _lr_operand(op, lr, device)
    stream, launch = current_stream(device), rt().launch
    scale_ref, inf_ref = _scalar_ref(grad_scale), _scalar_ref(found_inf)
    for i, p in enumerate(params):
        if not p.numel():
            continue
        buf = device_ref(buffers[i]) if buffers else None
        launch("fused_sgd", (device_ref(p), device_ref(grads[i]), buf, lr_ref, lr_value, float(weight_decay),
                             float(momentum), float(dampening), bool(nesterov), bool(maximize),
                             bool(is_first_step), scale_ref, inf_ref), stream)
