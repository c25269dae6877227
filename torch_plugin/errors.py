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


def translate(err: runtime.EmuError) -> Exception:
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
