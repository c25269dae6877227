"""Helpers shared by the op kernels: operand descriptors, streams, launches."""
from __future__ import annotations

import warnings

import torch

import runtime
from torch_plugin import _C
from torch_plugin._dtypes import STORABLE, SUPPORTED, TO_CODE


rt = runtime.get_runtime  # the process's runtime (an alias: one Python frame less per op)
_current_stream_id = _C._current_stream_id


def current_stream(device: int) -> runtime.Stream:
    return runtime.get_runtime().stream(device, _current_stream_id(device))


_TensorRef = runtime.TensorRef
_new_tuple = tuple.__new__  # builds the namedtuple without its Python-level __new__ (hot path)


def _device_ref_py(t: torch.Tensor, shape=None, strides=None) -> runtime.TensorRef:
    """Descriptor of an emu tensor (its data_ptr already includes the storage offset), in Python:
    what the C++ core's ``_tensor_ref`` (``device_ref``) builds, for the test that compares them."""
    return _new_tuple(_TensorRef, (False, t.get_device(), t.data_ptr(), TO_CODE[t.dtype],
                                   tuple(t.shape) if shape is None else shape,  # the driver makes it a tuple
                                   tuple(t.stride()) if strides is None else strides))


# device_ref(t, shape=None, strides=None): the descriptor of an emu tensor, read from the at::Tensor
# in one C++ call (csrc/tensor_ref.cpp; five binding calls per operand in Python). binary_refs(a, b,
# flags): both descriptors when a and b are the binary ops' common case, else None.
_C._set_tensor_ref(_TensorRef, TO_CODE)
device_ref = _C._tensor_ref
binary_refs = _C._binary_refs


def host_ref(t: torch.Tensor) -> runtime.TensorRef:
    return runtime.TensorRef(True, -1, t.data_ptr(), TO_CODE[t.dtype], tuple(t.shape), tuple(t.stride()))


def broadcast_shape(*shapes) -> tuple:
    """torch.broadcast_shapes, in plain Python (the torch version costs ~10 us, most of a tiny op's
    budget): equal shapes and a 0-dim operand are answered at once."""
    first = shapes[0]
    if len(shapes) == 2:
        second = shapes[1]
        if second == first or not second:
            return first
        if not first:
            return second
    ndim = max(len(shape) for shape in shapes)
    result = [1] * ndim
    for shape in shapes:
        offset = ndim - len(shape)
        for i, n in enumerate(shape):
            r = result[offset + i]
            if n != r:
                if r == 1:
                    result[offset + i] = n
                elif n != 1:
                    raise RuntimeError(f"The size of tensor a ({r}) must match the size of tensor b ({n}) "
                                       f"at non-singleton dimension {offset + i}")
    return tuple(result)


def broadcast_strides(t: torch.Tensor, shape) -> tuple:
    """Strides that read ``t`` broadcast to ``shape`` (0 on broadcast dimensions)."""
    tshape, tstrides = t.shape, t.stride()
    if tshape == shape:
        return tstrides
    offset = len(shape) - len(tshape)
    return tuple(0 if i < offset or tshape[i - offset] == 1 and shape[i] != 1 else tstrides[i - offset]
                 for i in range(len(shape)))


def check_dtype(op: str, *tensors, allowed=SUPPORTED) -> None:
    """The operands' dtypes must be in ``allowed`` (default: the arithmetic dtypes)."""
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.dtype not in allowed:
            raise TypeError(f"{op}: dtype {t.dtype} is not supported on emu "
                            f"(supported: {', '.join(sorted(str(d) for d in allowed))})")


def check_storable(op: str, *tensors) -> None:
    """check_dtype for copies, fills and views: every dtype the device can store."""
    check_dtype(op, *tensors, allowed=STORABLE)


def common_device(op: str, *tensors) -> int:
    """The emu device index of the operands; CPU 0-dim tensors count as scalars."""
    index = None
    for t in tensors:
        if type(t) is torch.Tensor:  # the common case first: an emu tensor (the only indexed
            device = t.get_device()    # device type a CPU build of torch can hold); -1 otherwise
            if device >= 0 and (index is None or device == index):
                index = device
                continue
        if not isinstance(t, torch.Tensor):
            continue
        if t.device.type == "cpu" and t.dim() == 0:
            continue
        if t.device.type != "emu" or (index is not None and t.device.index != index):
            found = [str(x.device) for x in tensors if isinstance(x, torch.Tensor)]
            raise RuntimeError(f"{op}: expected all tensors to be on the same device, but found at least "
                               f"two devices, {found[0]} and {[f for f in found if f != found[0]][0]}!")
        index = t.device.index
    if index is None:
        raise RuntimeError(f"{op}: no emu tensor among the operands")
    return index


def non_overlapping_and_dense(t: torch.Tensor) -> bool:
    """ATen's TensorImpl::is_non_overlapping_and_dense(), which torch.Tensor does not expose
    (calling t.is_non_overlapping_and_dense() raised AttributeError). ATen's has_internal_overlap
    answers NO exactly for such tensors (aten/src/ATen/MemoryOverlap.cpp); it reads metadata only."""
    return torch._debug_has_internal_overlap(t) == 0


def is_dense(t: torch.Tensor) -> bool:
    return non_overlapping_and_dense(t)


def empty_like_layout(shape, dtype, device: int, *candidates) -> torch.Tensor:
    """Output of ``shape``: takes the layout of the first dense operand of that shape (as
    TensorIterator does), else contiguous."""
    for t in candidates:
        if isinstance(t, torch.Tensor) and tuple(t.shape) == tuple(shape) and not t.is_contiguous() \
                and non_overlapping_and_dense(t):
            return torch.empty_strided(shape, t.stride(), dtype=dtype, device=torch.device("emu", device))
    return torch.empty(shape, dtype=dtype, device=torch.device("emu", device))


def prepare_out(op: str, out: torch.Tensor, shape, result_dtype, *inputs) -> None:
    """out= contract, as ATen: check the device and a safe cast first (a rejected out keeps its
    shape), then resize a wrong-shaped out (with resize_output's deprecation warning when it had
    elements). ``inputs``: the op's operands. An out that is one of them (an in-place op, or out=
    aliasing an input: TensorIterator's read-write operand) is never resized, empty or not:
    "output with shape ... doesn't match the broadcast shape ...". Without ``inputs`` the caller
    has not said whether out is an operand, so a non-empty out of the wrong shape is refused the
    same way (ops/contract.py has already resized an out= that CPU resizes)."""
    if out.device.type != "emu":
        raise RuntimeError(f"{op}: expected all tensors to be on the same device, but found at least two "
                           f"devices, emu and {out.device}!")
    if out.dtype != result_dtype and not torch.can_cast(result_dtype, out.dtype):
        raise RuntimeError(f"{op}: result type {result_dtype} can't be cast to the desired output type "
                           f"{out.dtype}")
    if tuple(out.shape) == tuple(shape):
        return
    # An out that is an operand (in-place) is never resized, even when it has no elements: CPU's
    # TensorIterator refuses zeros(0, 1, 3).add_(zeros(0, 3, 3)).
    operand = bool(inputs) and any(t is out or (isinstance(t, torch.Tensor) and t.device == out.device
                                                and _is_alias_of(t, out)) for t in inputs)
    if operand or (out.numel() != 0 and not inputs):
        raise RuntimeError(f"{op}: output with shape {list(out.shape)} doesn't match the broadcast "
                           f"shape {list(shape)}")
    resize_out(out, shape)


def _byte_range(t: torch.Tensor) -> tuple[int, int]:
    start = t.data_ptr()
    if t.is_contiguous():
        return start, start + t.numel() * t.element_size()
    span = sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1
    return start, start + span * t.element_size()


_is_alias_of = torch._C._is_alias_of  # same storage (ATen's is_alias_of)


def check_overlap(op: str, out: torch.Tensor, *inputs) -> None:
    """ATen's rules: out must not overlap itself; an input may alias out exactly, not partly."""
    if out.numel() == 0:
        return
    if not out.is_contiguous() and torch._debug_has_internal_overlap(out) == 1:
        raise RuntimeError(f"{op}: unsupported operation: more than one element of the written-to tensor "
                           "refers to a single memory location. Please clone() the tensor before "
                           "performing the operation.")
    # Byte ranges decide, like ATen's get_overlap_status; device virtual addresses are unique
    # across storages of a device, so ranges that do not meet cannot share memory.
    lo = hi = None
    for t in inputs:
        if t is out or not isinstance(t, torch.Tensor) or not _is_alias_of(t, out) or t.numel() == 0:
            continue  # another storage cannot share memory with out (allocations are disjoint)
        if lo is None:
            lo, hi = _byte_range(out)
        tlo, thi = _byte_range(t)
        if not (tlo < hi and lo < thi) or t.device != out.device:
            continue
        if tlo == lo and t.stride() == out.stride() and t.shape == out.shape:
            continue  # exact alias: the in-place form
        raise RuntimeError(f"{op}: unsupported operation: some elements of the input tensor and the "
                           "written-to tensor refer to a single memory location.")


def resize_out(out: torch.Tensor, shape) -> None:
    """ATen's resize_output: a non-empty out of the wrong shape is resized with its warning."""
    if tuple(out.shape) != tuple(shape):
        if out.numel() != 0:
            warnings.warn(f"An output with one or more elements was resized since it had shape "
                          f"{list(out.shape)}, which does not match the required output shape "
                          f"{list(shape)}. This behavior is deprecated, and in a future PyTorch "
                          "release outputs will not be resized unless they have zero elements. "
                          "You can explicitly reuse an out tensor t by resizing it, inplace, to "
                          "zero elements with t.resize_(0).", UserWarning, stacklevel=5)
        out.resize_(shape)
