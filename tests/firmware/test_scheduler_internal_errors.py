"""Emulator bugs are not device faults (firmware/scheduler.py).

Only a hardware fault (sticky for its scope) or a kernel's ``KernelArgumentError`` (an
operation-scope INVALID_ARGUMENT: only that command did not run) becomes an error record. Any
other exception raised while a command executes is a bug in the
emulator: an INTERNAL_ERROR interrupt with the traceback; the context stays healthy and the
ring goes on with its next command.
"""
import dataclasses

import numpy as np
import pytest

from emulator.errors import KernelArgumentError
from emulator.kernels import dtypes
from emulator.kernels.library import KERNELS
from firmware import abi

F32 = dtypes.FLOAT32


def _internal_errors(rig, device=0):
    return [p for v, p in rig.irqs[device] if v == abi.Irq.INTERNAL_ERROR]


def _patch_kernel(monkeypatch, name, run):
    monkeypatch.setitem(KERNELS, name, dataclasses.replace(KERNELS[name], run=run))


def test_a_kernel_raising_a_python_error_is_an_internal_error_not_a_fault(rig, monkeypatch):
    def bogus(*args):
        return 1 / 0

    _patch_kernel(monkeypatch, "binary", bogus)
    ep = rig.ep(0)
    ring = ep.create_ring()
    args = ("add", rig.dev(0, 4), rig.dev(64, 4), rig.dev(128, 4), F32, 1)
    launch = rig.launch("binary", args)
    rig.submit(ring, launch, rig.fill(rig.dev(256, 4), 3.0), rig.signal(1, 1))
    rig.run_until_sem(1, 1)

    assert rig.errors(0) == []                         # no error record ...
    assert 1 not in ep.firmware.faulted_asids          # ... and the context is not faulted
    assert (rig.hbm(0, 256, 16, np.float32) == 3.0).all()  # the next command on the ring ran
    (bug,) = _internal_errors(rig)
    assert isinstance(bug, abi.InternalErrorRecord)
    assert (bug.device, bug.ring, bug.seq, bug.asid) == (0, ring, launch.seq, 1)
    assert bug.unit == "vector_engine"
    assert bug.detail == "ZeroDivisionError: division by zero"
    assert "Traceback (most recent call last)" in bug.traceback
    assert "in bogus" in bug.traceback and "ZeroDivisionError" in bug.traceback

    # The ring process is still alive: later submissions run as well.
    rig.submit(ring, rig.fill(rig.dev(512, 4), 5.0), rig.signal(1, 2))
    rig.run_until_sem(1, 2)
    assert (rig.hbm(0, 512, 16, np.float32) == 5.0).all()
    assert len(_internal_errors(rig)) == 1 and rig.errors(0) == []


def test_a_kernel_argument_error_is_an_operation_scope_rejection(rig, monkeypatch):
    """Formerly a sticky KERNEL_FAULT of the context: one bad argument then failed every later op
    until a reset (issue 18). A rejected command is operation scope, like cudaErrorInvalidValue."""
    def rejects(*args):
        raise KernelArgumentError("Target 7 is out of bounds.")

    _patch_kernel(monkeypatch, "binary", rejects)
    ep = rig.ep(0)
    ring = ep.create_ring()
    launch = rig.launch("binary", ("add", rig.dev(0, 4), rig.dev(64, 4), rig.dev(128, 4), F32, 1))
    rig.submit(ring, launch, rig.fill(rig.dev(256, 4), 3.0), rig.signal(1, 1))
    rig.run_until_sem(1, 1)

    (record,) = rig.errors(0)
    assert record.status == abi.Status.INVALID_ARGUMENT and abi.STATUS_SCOPE[record.status] == "operation"
    assert record.seq == launch.seq and record.unit == "vector_engine"
    assert record.detail == "KernelArgumentError: Target 7 is out of bounds."
    assert 1 not in ep.firmware.faulted_asids                   # not sticky
    assert (rig.hbm(0, 256, 16, np.float32) == 3.0).all()     # the ring's next command ran
    poisoned = ep.firmware.take_poisoned_writes()              # the output is noted as not written
    assert [(d, asid, va, seq) for d, asid, va, seq, _ in poisoned] == [(0, 1, rig.VA, launch.seq)]
    assert _internal_errors(rig) == []


def test_the_compiled_kernels_reject_bad_arguments_with_kernel_argument_error(rig):
    """A real kernel's argument check (unknown binary op) is a KernelArgumentError -> INVALID_ARGUMENT."""
    from emulator.kernels import library
    with pytest.raises(KernelArgumentError, match="unknown op"):
        library._module("elementwise").binary("frobnicate", 0, F32, (1,), 0, F32, (1,), 0, F32, (1,),
                                              (1,), F32, 1)
    ring = rig.ep(0).create_ring()
    rig.submit(ring, rig.launch("binary", ("frobnicate", rig.dev(0, 4), rig.dev(64, 4), rig.dev(128, 4), F32, 1)),
               rig.signal(1, 1))
    rig.run_until_sem(1, 1)
    (record,) = rig.errors(0)
    assert record.status == abi.Status.INVALID_ARGUMENT
    assert record.detail.startswith("KernelArgumentError: binary: unknown op")
    assert _internal_errors(rig) == []
