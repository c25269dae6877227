"""Maps runtime errors to PyTorch's exception types, keeping the cause chain.

- out of memory -> ``torch.OutOfMemoryError``
- a device fault, a firmware mismatch, any other runtime error ->
  ``EmuAcceleratorError`` (a ``torch.AcceleratorError``) carrying ``error_code``
  and ``scope``; ``__cause__`` is the runtime error, whose cause is the driver
  error holding the firmware's error record.
- a command the device rejected (``runtime.CommandRejectedError``: a kernel's argument check, an
  unknown kernel) -> ``EmuCommandRejectedError``, an ``EmuAcceleratorError`` (so a
  ``torch.AcceleratorError`` and a ``RuntimeError``, CPU's type for a bad argument) with code
  INVALID_VALUE and scope "operation": raised once, at the next synchronising call; the device
  stays usable and only the command's outputs hold no valid data.
- an invalid device index -> ``EmuAcceleratorError`` with code INVALID_DEVICE
  (also a ``RuntimeError``, like CUDA's invalid device ordinal).
- a bug in the emulator itself (``runtime.errors.EmulatorBugError``) ->
  ``EmuInternalError``, a ``RuntimeError`` that says so; never sticky.

``HostFallbackError`` is the plugin's own: an op with no device path would have run on
the host while the fallback policy forbids it (raised before any state changes).

``ProjectionModeError`` (a ``RuntimeError``): in projection mode (``EMU_MODE=projection``) an op
needed values the device does not hold (``.item()``, a copy to the host, a data-dependent shape,
a value check, the host fallback). It names the op (``op``) and the way around it; nothing ran.
"""
from __future__ import annotations

import functools

import torch

import runtime
from runtime.errors import EmulatorBugError


class EmuAcceleratorError(torch.AcceleratorError):
    def __init__(self, message: str, error_code: int, scope: str):
        super().__init__(message)
        self.error_code = error_code
        self.scope = scope


class EmuCommandRejectedError(EmuAcceleratorError):
    """The device rejected a queued command's arguments (operation scope, never sticky)."""


class EmuInternalError(RuntimeError):
    """A bug in the emu emulator (not a device fault, not the program's error). The device stays
    usable; ``__cause__`` is the runtime's ``EmulatorBugError``, whose ``traceback`` is the original one."""

    def __init__(self, message: str, error_code: int, scope: str):
        super().__init__(message)
        self.error_code = error_code
        self.scope = scope


class HostFallbackError(RuntimeError):
    """An op has no device path (native, composite or decomposition) and the host fallback is
    forbidden (``EMU_HOST_FALLBACK=forbid``, ``torch.emu.host_fallback("forbid")`` or
    ``torch.emu.set_host_fallback(False)``). Raised before anything is copied or run; ``op`` is
    the aten op's name (e.g. ``"aten::atan2.out"``)."""

    def __init__(self, message: str, op: str = ""):
        super().__init__(message)
        self.op = op


class ProjectionModeError(RuntimeError):
    """Projection mode (``EMU_MODE=projection``) cannot answer this without values: the op named by
    ``op`` reads device data on the host, has a data-dependent result shape, or needs the host
    fallback. Raised before the op changed anything; the device stays usable. The message says
    the way around it (declared sizes, a fixed generation length, keeping results on the device)."""

    def __init__(self, message: str, op: str = ""):
        super().__init__(message)
        self.op = op


# What a program can do instead, per kind of refused request (the messages' second half).
AROUND_READ = ("keep the value on the device and use it in device ops, or make the control flow that needed "
               "it fixed (a fixed number of steps or generated tokens instead of a stopping criterion)")
AROUND_SHAPE = ("declare the size instead (e.g. torch.nonzero_static(x, size=n), repeat_interleave(..., "
                "output_size=n), integer indices of a known length instead of a boolean mask)")
AROUND_HOST = ("keep results on the device: shapes, device memory and the modelled times are all known "
               "without values (torch.emu.profile(), python -m torch_plugin.project)")
AROUND_FALLBACK = "use ops that have an emu kernel (torch.emu.op_stats() after a functional run lists the fallbacks)"


def is_projection_mode() -> bool:
    """Whether the emulated system runs (or, before power-on, will run) in projection mode."""
    if runtime.is_initialized():
        return runtime.get_runtime().projection
    from runtime.settings import execution_mode
    return execution_mode() == "projection"


def projection_error(op: str, why: str, around: str) -> ProjectionModeError:
    """The refusal of ``op`` in projection mode: ``why`` it needs values and what to do instead."""
    return ProjectionModeError(f"{op}: {why}, and projection mode (EMU_MODE=projection) holds no values. "
                               f"Way around: {around}", op=op)


def refuse_in_projection(op: str | None, why: str, around: str = AROUND_READ) -> None:
    """Raises ``projection_error`` in projection mode (call it before the op does any work). ``op``
    None: the outermost emu op running on this thread (for helpers shared by several ops)."""
    if runtime.is_initialized() and runtime.get_runtime().projection:
        if op is None:
            op = next(iter(_ops_in_flight()), "an emu op")
        raise projection_error(op, why, around)


def _ops_in_flight() -> list[str]:
    """The emu ops (aten names) whose kernels are on this thread's Python stack, outermost first
    (registry._wrap's wrappers hold the name as ``op``). Only read on the error path."""
    import sys
    from torch_plugin.ops import registry
    names, frame = [], sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_filename == registry.__file__ and code.co_name in ("kernel", "observed"):
            op = frame.f_locals.get("op")
            if isinstance(op, str) and (not names or names[-1] != op):
                names.append(op)
        frame = frame.f_back
    return names[::-1]


def _projection_refusal(err: runtime.ProjectionModeError) -> ProjectionModeError:
    """A copy to the host that the runtime refused, named after the op that asked for it."""
    ops = [op for op in _ops_in_flight() if op not in ("aten::_copy_from", "aten::_to_copy")] or _ops_in_flight()
    if not ops:
        return ProjectionModeError(f"a copy from emu to host memory: {err}", op=err.op)
    outer = ops[0]
    if outer == "aten::_local_scalar_dense":
        why, around = "reads a device value on the host (Tensor.item(), int(), float(), bool())", AROUND_READ
    elif outer == "aten::_copy_from":
        why, around = "copies device data to host memory (Tensor.cpu(), .to('cpu'), .numpy(), printing)", AROUND_HOST
    else:
        why = "reads device data on the host" + (f" (through {ops[-1]})" if len(ops) > 1 else "")
        around = AROUND_READ
    return projection_error(outer, why, around)


def translate(err: runtime.EmuError) -> Exception:
    if isinstance(err, runtime.ProjectionModeError):
        return _projection_refusal(err)
    if isinstance(err, runtime.OutOfMemoryError):
        return torch.OutOfMemoryError(str(err))
    if isinstance(err, EmulatorBugError):
        return EmuInternalError(f"internal error in the emu emulator (a bug, not a fault of your program): {err}",
                                int(err.code), err.scope.value)
    if isinstance(err, runtime.CommandRejectedError):
        return EmuCommandRejectedError(str(err), int(err.code), err.scope.value)
    return EmuAcceleratorError(str(err), int(err.code), err.scope.value)


def raises_torch_errors(fn):
    """Decorator for plugin entry points: runtime errors leave as torch errors, chained."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except runtime.EmuError as err:
            raise translate(err) from err
    return wrapper


class UnsupportedDtypeError(NotImplementedError):
    """A device kernel has no path for an operand's dtype (raised before anything changed): the
    op goes to the counted host fallback where that is allowed, else it is rejected."""


def unsupported_dtype(op: str, dtype, supported) -> NotImplementedError:
    """The rejection of a dtype the device has no kernel for. NotImplementedError (a RuntimeError,
    like CPU's "... not implemented for 'ComplexFloat'"), never TypeError: Tensor.__add__ & co.
    turn a TypeError into NotImplemented, and the user then sees only "unsupported operand
    type(s) for +: 'Tensor' and 'Tensor'"."""
    names = ", ".join(sorted(str(d) for d in supported))
    return UnsupportedDtypeError(f"{op}: dtype {dtype} is not supported on emu (supported: {names})")
