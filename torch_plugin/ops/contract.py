"""The out= and in-place contract, enforced for every kernel the plugin registers, before it runs.

Each op kernel (native, decomposition or the boxed host fallback) used to check its own out=
arguments, and the ones that forgot accepted a CPU out, an unsafe cast or a wrong shape. The
checks here sit in front of all of them, so a kernel cannot forget:

- **Device.** Every out= tensor is on the inputs' emu device (CPU 0-dim tensors among the
  inputs are scalars); anything else is CPU's RuntimeError, raised before any work.
- **Dtype and shape.** The overload runs first on meta tensors of the same sizes, strides and
  dtypes: PyTorch's meta kernels carry CPU's out= rules (safe casts for promoting ops, equal
  dtypes where CPU wants them, "output with shape ... doesn't match the broadcast shape" for an
  out that is also an input, reductions' dtype rules). Where the meta kernel refuses, the op's
  kernel still has the first word (its own check states CPU's message where it has one); a
  kernel that would accept is undone (its written arguments restored) and the refusal raised as
  CPU words it. An out of the wrong shape is resized here as ATen's resize_output does (silently
  when it is empty, with CPU's deprecation warning when it is not), so the kernel then sees a
  correctly shaped out; an out that shares memory with an input is left to the kernel. Ops whose
  meta kernel cannot answer (none registered, or the answer needs values) are left to the
  kernel's own checks. Verdicts are
  cached per argument signature, so a loop over the same shapes pays the meta run once.
- **In-place ops never resize ``self``.** Checked after the kernel: a kernel that changed
  ``self``'s shape is an emulator bug (EmuInternalError), never a silent result.

What it leaves out: partial-overlap checks (the kernels' ``check_overlap``, which needs the
device addresses) and the dtype rules that no meta kernel states, which the op tables carry
(``ops/pointwise.py``'s ``same_dtype_out``).
"""
from __future__ import annotations

import re
import threading
import warnings

import torch

from torch_plugin._dtypes import SCALAR_TYPE_NAMES

# In-place overloads that change self's metadata by design.
_RESHAPING_INPLACE = frozenset({
    "resize_", "resize_as_", "set_", "squeeze_", "unsqueeze_", "t_", "transpose_", "swapdims_",
    "swapaxes_", "as_strided_", "_resize_output_", "resize_as_sparse_", "_coalesced_", "detach_",
    "_index_put_impl_", "_set_grad_enabled", "sparse_resize_", "sparse_resize_and_clear_",
})

# A meta kernel that cannot answer says so with one of these (or NotImplementedError).
_META_CANNOT_ANSWER = re.compile(r"\bmeta\b|Meta|data.dependent|item\(\)|DataDependent|unbacked|symbolic",
                                 re.IGNORECASE)

_CAT_FAMILY = frozenset(("cat", "_chunk_cat", "stack", "hstack", "vstack", "dstack", "column_stack"))

# Meta kernels whose output shapes are not CPU's: the device and dtype verdict stands, the kernel
# resizes. native_batch_norm's meta gives eval-mode save_mean/save_invstd the channel count, CPU
# gives them no elements; normal's meta resizes an empty out to mean's shape, CPU broadcasts
# mean against out's shape and refuses.
_META_SHAPES_DIFFER = frozenset(("native_batch_norm", "_native_batch_norm_legit",
                                 "_native_batch_norm_legit_no_training", "normal"))

_META_CAST = re.compile(r"Attempting to cast from torch\.(\w+) to out tensor with dtype torch\.(\w+)")
_DTYPES = {str(d).split(".")[-1]: d for d in SCALAR_TYPE_NAMES}

# Meta kernels that refuse what CPU accepts: the kernel's own checks decide. arange's meta casts
# a fractional step to an integer dtype before checking it (arange(0, 2, 0.3, dtype=int32) is
# "step must be nonzero" there, [0, 0, 0, 0, 0, 0, 0] on CPU); the other factories alike.
_META_ERRORS_DIFFER = frozenset(("arange", "range", "linspace", "logspace"))

_CACHE_LIMIT = 4096
_cache: dict = {}
_cache_lock = threading.Lock()


class _Verdict:
    __slots__ = ("error", "shapes")

    def __init__(self, error=None, shapes=None):
        self.error = error          # (exception type, message) or None
        self.shapes = shapes        # the out tensors' shapes after the op, in schema order


_OK_UNKNOWN = _Verdict()


class OverloadContract:
    """What the schema of one overload says about its written arguments."""

    __slots__ = ("qualified", "out_names", "inplace", "base")

    def __init__(self, schema):
        self.qualified = f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name
        self.base = schema.name.split("::")[-1]
        self.out_names = tuple(a.name for a in schema.arguments
                               if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write)
        first = schema.arguments[0] if schema.arguments else None
        self.inplace = (not self.out_names and first is not None and not first.kwarg_only
                        and first.alias_info is not None and first.alias_info.is_write
                        and isinstance(first.type, torch.TensorType)
                        and self.base not in _RESHAPING_INPLACE
                        and not self.base.startswith(("_foreach_", "_fused_")))


def contract_of(op) -> OverloadContract | None:
    """The contract of an OpOverload, or None when the overload writes nothing it must check."""
    contract = OverloadContract(op._schema)
    return contract if contract.out_names or contract.inplace else None


def _flat_tensors(values, into: list) -> list:
    for v in values:
        if isinstance(v, torch.Tensor):
            into.append(v)
        elif isinstance(v, (list, tuple)):
            _flat_tensors(v, into)
    return into


def _outs(contract: OverloadContract, kwargs) -> list:
    outs = []
    for name in contract.out_names:
        value = kwargs.get(name)
        if isinstance(value, torch.Tensor):
            outs.append(value)
        elif isinstance(value, (list, tuple)):
            outs.extend(t for t in value if isinstance(t, torch.Tensor))
    return outs


def check_devices(contract: OverloadContract, args, kwargs, outs) -> None:
    """CPU's device rule for out=: every out and every dimensioned input on one device."""
    inputs = _flat_tensors(args, [])
    _flat_tensors([v for k, v in kwargs.items() if k not in contract.out_names], inputs)
    device = None
    for t in inputs:
        if t.device.type == "cpu" and t.dim() == 0:
            continue
        if device is None:
            device = t.device
        elif t.device != device:
            _device_error(device, t.device)
    for t in outs:
        if device is None:
            device = t.device
        elif t.device != device:
            _device_error(device, t.device)


def _device_error(a, b):
    raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, {a} and "
                       f"{b}!")


# -- the meta run ------------------------------------------------------------------------------------
def _signature(args, kwargs):
    """A hashable description of a call: tensors by size, stride, dtype, device type and alias group."""
    groups: dict = {}

    def describe(v):
        if isinstance(v, torch.Tensor):
            key = id(v)
            group = groups.setdefault(key, len(groups))
            return ("T", tuple(v.shape), v.stride(), v.dtype, v.device.type, group, v.requires_grad)
        if isinstance(v, (list, tuple)):
            return (type(v).__name__,) + tuple(describe(x) for x in v)
        if isinstance(v, torch.Generator):
            return ("G",)
        if isinstance(v, float) and v != v:
            return ("nan",)
        try:
            hash(v)
        except TypeError:
            return ("?", repr(v))
        return (type(v).__name__, v)

    return tuple(describe(a) for a in args), tuple((k, describe(v)) for k, v in sorted(kwargs.items()))


def _to_meta(values, memo: dict):
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            if v.device.type == "cpu" and v.dim() == 0:
                out.append(v)
                continue
            m = memo.get(id(v))
            if m is None:
                m = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
                memo[id(v)] = m
            out.append(m)
        elif isinstance(v, (list, tuple)):
            out.append(type(v)(_to_meta(v, memo)))
        elif isinstance(v, torch.Generator):
            out.append(None)
        else:
            out.append(v)
    return out


def _meta_verdict(op, contract: OverloadContract, args, kwargs) -> _Verdict:
    memo: dict = {}
    margs = _to_meta(args, memo)
    keys = list(kwargs)
    mkwargs = dict(zip(keys, _to_meta([kwargs[k] for k in keys], memo)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.no_grad():
                op(*margs, **mkwargs)
        except NotImplementedError:
            return _OK_UNKNOWN
        except (RuntimeError, ValueError, IndexError) as err:  # CPU's kinds of argument error
            message = str(err)
            if _META_CANNOT_ANSWER.search(message):
                return _OK_UNKNOWN
            return _Verdict(error=(type(err), message))
        except Exception:  # noqa: BLE001 (a meta kernel's own bug, e.g. a TypeError in Python meta code)
            return _OK_UNKNOWN
    shapes = tuple(tuple(t.shape) for t in _outs(contract, mkwargs))
    return _Verdict(shapes=shapes)


def check_out(op, contract: OverloadContract, args, kwargs):
    """The out= contract of one call, before its kernel runs: resizes a wrong-shaped out (with
    CPU's warning where CPU warns) and returns None, or returns the error CPU raises."""
    outs = _outs(contract, kwargs)
    check_devices(contract, args, kwargs, outs)
    try:
        key = (contract.qualified, _signature(args, kwargs))
        verdict = _cache.get(key)
    except TypeError:  # an argument that cannot be hashed: no cache
        key, verdict = None, None
    if verdict is None:
        verdict = _meta_verdict(op, contract, args, kwargs)
        if key is not None:
            with _cache_lock:
                if len(_cache) >= _CACHE_LIMIT:
                    _cache.clear()
                _cache[key] = verdict
    if verdict.error is not None:
        return None if contract.base in _META_ERRORS_DIFFER else _error(contract, verdict.error, outs)
    if verdict.shapes is not None and len(verdict.shapes) == len(outs) and contract.base not in _META_SHAPES_DIFFER:
        inputs = None
        for t, shape in zip(outs, verdict.shapes):
            if tuple(t.shape) != shape:
                if inputs is None:
                    inputs = _flat_tensors(args, [])
                # An out that shares memory with an input is the kernel's to judge (CPU refuses
                # most such calls; resizing it here would change the input).
                if not any(_is_alias_of(t, x) for x in inputs):
                    _resize_output(t, shape)
    return None


_is_alias_of = torch._C._is_alias_of


def _error(contract: OverloadContract, error, outs) -> Exception:
    kind, message = error
    cast = _META_CAST.match(message)
    if cast is not None:  # the refs' wording of an unsafe cast; CPU's TensorIterator says it so
        message = (f"result type {SCALAR_TYPE_NAMES.get(_DTYPES.get(cast[1]), cast[1])} can't be cast to the desired "
                   f"output type {SCALAR_TYPE_NAMES.get(_DTYPES.get(cast[2]), cast[2])}")
    if contract.base in _CAT_FAMILY and "cast" in message and outs:
        # CPU's cat kernel states its unsafe-cast rule as a TypeError; its meta kernel as a RuntimeError.
        kind, message = TypeError, (f"torch.cat(): input types can't be cast to the desired output type "
                                    f"{SCALAR_TYPE_NAMES.get(outs[0].dtype, outs[0].dtype)}")
    try:
        return kind(message)
    except Exception:  # noqa: BLE001 (an exception type that takes other arguments)
        return RuntimeError(message)


class _Saved:
    """The written arguments of a call, kept so that a kernel which accepted what CPU refuses can
    be undone: each tensor's storage, view and values."""

    def __init__(self, tensors):
        self.saved = [(t, t.untyped_storage(), t.storage_offset(), tuple(t.shape), t.stride(), t.clone())
                      for t in tensors]

    def restore(self):
        for t, storage, offset, shape, stride, values in self.saved:
            with torch.no_grad():
                t.set_(storage, offset, shape, stride)
                t.copy_(values)


def _written(contract: OverloadContract, op, args, kwargs) -> list:
    written = _outs(contract, kwargs)
    for i, a in enumerate(op._schema.arguments):
        if a.kwarg_only or a.alias_info is None or not a.alias_info.is_write or i >= len(args):
            continue
        _flat_tensors([args[i]], written)
    return written


def _call_refused(op, contract, kernel, error, args, kwargs):
    """CPU refuses this call (``error``, from its meta kernel). The kernel is given the first word,
    since its own check states CPU's message where it has one; a kernel that accepts the call is
    undone and CPU's refusal raised."""
    from torch_plugin.errors import HostFallbackError
    saved = _Saved(_written(contract, op, args, kwargs))
    try:
        kernel(*args, **kwargs)
    except HostFallbackError:
        raise error from None
    saved.restore()
    raise error


def _resize_output(t: torch.Tensor, shape) -> None:
    """ATen's resize_output: an empty out is resized silently, a non-empty one with the warning."""
    if t.numel():
        warnings.warn(f"An output with one or more elements was resized since it had shape {list(t.shape)}, which "
                      f"does not match the required output shape {list(shape)}. This behavior is deprecated, and "
                      "in a future PyTorch release outputs will not be resized unless they have zero elements. You "
                      "can explicitly reuse an out tensor t by resizing it, inplace, to zero elements with "
                      "t.resize_(0).", UserWarning, stacklevel=5)
    t.resize_(shape)


def resized_self(qualified: str, before, after):
    """The error of an in-place kernel that resized self (a bug of the emulator's kernel)."""
    from torch_plugin.errors import EmuInternalError
    return EmuInternalError(f"internal error in the emu emulator (a bug, not a fault of your program): "
                            f"{qualified} changed the shape of self from {list(before)} to {list(after)}; "
                            f"an in-place op never resizes self", 999, "operation")


def guarded(op, contract: OverloadContract, kernel):
    """``kernel`` with ``contract`` checked around it."""
    if contract.out_names:
        def checked_out(*args, **kwargs):
            error = check_out(op, contract, args, kwargs)
            if error is not None:
                _call_refused(op, contract, kernel, error, args, kwargs)
            return kernel(*args, **kwargs)
        checked_out.__name__ = getattr(kernel, "__name__", "emu_kernel")
        return checked_out

    def checked_inplace(*args, **kwargs):
        self = args[0]
        shape = self.shape
        result = kernel(*args, **kwargs)
        if self.shape != shape:
            raise resized_self(contract.qualified, shape, self.shape)
        return result
    checked_inplace.__name__ = getattr(kernel, "__name__", "emu_kernel")
    return checked_inplace
