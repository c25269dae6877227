"""The default ``torch.compile(model)`` (Inductor) on emu tensors: a clear compile-time error.

Inductor generates source code (C++/OpenMP for the CPU, Triton for GPUs) and runs it on the
host process's view of device memory; emu has no code generator (its kernels are the fixed
Cython library of the emulated chip, launched through the runtime), so there is nothing for
Inductor's scheduling to emit. Rather than Inductor's ``KeyError: 'emu'`` deep inside its
wrapper codegen, emu is registered with Inductor (``register_backend_for_device`` and
``register_device_op_overrides``) with constructors that refuse, naming ``backend="emu"``, the
compiler that lowers graphs to the emu device programs. docs/compile.md#inductor.
"""
from __future__ import annotations

MESSAGE = ("torch.compile's default backend (Inductor) cannot compile for the emu device: Inductor "
           "generates C++/Triton source and emu has no code generator (its kernels are the emulated "
           "chip's fixed kernel library). Use torch.compile(model, backend=\"emu\"), which lowers each "
           "graph to an emu device program (fused elementwise kernels, matmul epilogues, planned buffers).")


class InductorUnsupportedError(RuntimeError):
    """Inductor was asked to generate code for emu tensors."""


class _Refusing(type):
    # Inductor's compile_fx_inner first asks the device's wrapper codegen whether it supports
    # caching, before any code generation: the earliest point to refuse.
    @property
    def supports_caching(cls):
        raise InductorUnsupportedError(MESSAGE)


class _Refuse(metaclass=_Refusing):
    """Stands where Inductor expects emu's scheduling and wrapper-codegen classes."""

    def __init__(self, *args, **kwargs):
        raise InductorUnsupportedError(MESSAGE)

    @classmethod
    def create(cls, *args, **kwargs):
        raise InductorUnsupportedError(MESSAGE)


_registered = False


def register() -> None:
    global _registered
    if _registered:
        return
    from torch._inductor.codegen import common
    if "emu" not in common.device_codegens:
        common.register_backend_for_device("emu", _Refuse, _Refuse, _Refuse, _Refuse)
    if "emu" not in common.device_op_overrides_dict:
        common.register_device_op_overrides("emu", common.DeviceOpOverrides())
    _registered = True
