"""Errors as a PyTorch user sees them: out of memory, device faults (asynchronous and under
EMU_LAUNCH_BLOCKING=1), recovery, bad input that must not corrupt state, and a firmware whose
major version the driver does not speak.

Faults are sticky for the device's context and OOM needs a fresh 64 MiB device, so those run in
a subprocess (``sys.executable``, EMU_PRESET=tiny) that reports JSON.

A real fault is made by a tensor whose storage points past every mapping of the context: a
storage built with ``torch._C._construct_storage_from_data_pointer`` at 1 GiB above a live
allocation (inside emu:0's virtual window, so host-side checks pass) and a tensor ``set_`` onto
it. Writing to it makes the vector engine's access page-fault in the MMU.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from torch_plugin import HostFallbackError

import runtime
import torch_plugin  # noqa: F401
from firmware import FirmwareImage
from firmware import abi

MiB = 1 << 20

PRELUDE = """
import json, warnings
import torch
warnings.simplefilter("ignore")
RESULT = {}

def chain(err):
    out = []
    while err is not None:
        out.append({"type": type(err).__name__, "module": type(err).__module__, "message": str(err),
                    "error_code": getattr(err, "error_code", None), "scope": getattr(err, "scope", None),
                    "record": repr(getattr(err, "record", None))})
        err = err.__cause__
    return out

def faulting_tensor(t):
    # 4 float32 elements 1 GiB above t's allocation: inside emu:0's window, in no mapping.
    storage = torch._C._construct_storage_from_data_pointer(t.data_ptr() + (1 << 30), t.device, 16)
    return torch.empty(0, device=t.device).set_(storage, 0, (4,), (1,))
"""


def run_json(code: str, tmp_path, **env_extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMU_")}
    env["EMU_PRESET"] = "tiny"
    env.update(env_extra)
    script = PRELUDE + textwrap.dedent(code) + "\nprint('@@RESULT@@' + json.dumps(RESULT, default=str))\n"
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"subprocess failed (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.split("@@RESULT@@", 1)[1])


# ------------------------------------------------------------------------ out of memory
def test_out_of_memory_on_a_fresh_device(tmp_path):
    r = run_json("""
        keep = torch.arange(1000, dtype=torch.float32, device="emu")
        fill = torch.empty(40 << 20, dtype=torch.uint8, device="emu")  # 40 MiB of the 64 live
        fill.fill_(7)
        RESULT["allocated_before"] = torch.emu.memory_allocated()
        RESULT["reserved_before"] = torch.emu.memory_reserved()
        RESULT["free_before"] = torch.emu.mem_get_info()[0]
        try:
            torch.empty(32 << 20, dtype=torch.uint8, device="emu")  # fits the device, not what is left
        except Exception as err:
            RESULT["fits_device"] = {"chain": chain(err), "is_oom": isinstance(err, torch.OutOfMemoryError)}
        try:
            torch.empty(80 << 20, dtype=torch.uint8, device="emu")  # more than the whole device
        except Exception as err:
            RESULT["too_big"] = {"chain": chain(err), "is_oom": isinstance(err, torch.OutOfMemoryError)}
        try:
            torch.mm(torch.ones(4096, 1, device="emu"), torch.ones(1, 4096, device="emu"))  # 64 MiB output
        except Exception as err:
            RESULT["op_output"] = {"chain": chain(err), "is_oom": isinstance(err, torch.OutOfMemoryError)}
        RESULT["allocated_after"] = torch.emu.memory_allocated()
        RESULT["keep"] = keep.cpu().tolist() == list(range(1000))
        RESULT["fill"] = bool((fill.cpu() == 7).all())
        del fill
        later = torch.empty(32 << 20, dtype=torch.uint8, device="emu")  # fits now
        later.fill_(3)
        RESULT["later"] = int(later[-1].item())
        RESULT["num_ooms"] = torch.emu.memory_stats()["num_ooms"]
        RESULT["other_device_ok"] = (torch.ones(3, device="emu:1") * 2).cpu().tolist()
    """, tmp_path)
    for case, requested in (("fits_device", 32 * MiB), ("too_big", 80 * MiB)):
        info = r[case]
        assert info["is_oom"], info
        message = info["chain"][0]["message"]
        assert f"tried to allocate {requested} bytes" in message
        assert f"{r['allocated_before']} bytes allocated" in message
        assert "bytes reserved" in message and "bytes free of 67108864" in message
        assert info["chain"][1]["type"] == "OutOfMemoryError" and info["chain"][1]["module"] == "runtime.errors"
        assert info["chain"][2]["type"] == "DriverError"  # the driver's refusal is the root cause
    assert r["op_output"]["is_oom"], r["op_output"]  # an op's output allocation raises the same type
    assert "tried to allocate 67108864 bytes" in r["op_output"]["chain"][0]["message"]
    assert r["allocated_after"] == r["allocated_before"]  # the failed requests left nothing behind
    assert r["keep"] and r["fill"]  # earlier tensors keep their values
    assert r["later"] == 3
    assert r["num_ooms"] == 3
    assert r["other_device_ok"] == [2.0, 2.0, 2.0]


def test_out_of_memory_message_names_requested_allocated_reserved_free():
    """In-process, on the live device: the message has all four numbers."""
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(1 << 30, dtype=torch.uint8, device="emu:1")
    message = str(info.value)
    assert "emu:1 out of memory" in message
    assert f"tried to allocate {1 << 30} bytes" in message
    for part in ("bytes allocated", "bytes reserved", "bytes free of"):
        assert part in message
    assert isinstance(info.value.__cause__, runtime.OutOfMemoryError)
    assert (torch.ones(2, device="emu:1") + 1).cpu().tolist() == [2.0, 2.0]


# --------------------------------------------------------------------------- device faults
def test_device_fault_is_reported_at_the_next_synchronize_and_recovered(tmp_path):
    r = run_json("""
        before = torch.arange(16, dtype=torch.float32, device="emu")
        on1 = torch.full((4,), 9.0, device="emu:1")
        torch.emu.synchronize()
        bad = faulting_tensor(before)
        try:
            bad.fill_(1.0)  # queued: launches are asynchronous
            RESULT["op_returned"] = True
        except Exception as err:
            RESULT["op_returned"] = False
        try:
            torch.emu.synchronize()
        except Exception as err:
            RESULT["sync"] = {"chain": chain(err), "accel": isinstance(err, torch.AcceleratorError),
                              "runtime_error": isinstance(err, RuntimeError)}
        for name, fn in (("cpu", lambda: before.cpu()), ("add", lambda: before + 1), ("item", lambda: before[0].item())):
            try:
                fn()
                RESULT["sticky_" + name] = None
            except Exception as err:
                RESULT["sticky_" + name] = [getattr(err, "error_code", None), type(err).__name__]
        RESULT["other_device"] = (on1 + 1).cpu().tolist()  # context scope: emu:1 is not affected
        dump = torch.emu.recover()
        RESULT["dump_faults"] = [getattr(f.get("status"), "name", str(f.get("status"))) for f in dump["faults"]]
        RESULT["second_recover_faults"] = torch.emu.recover()["faults"]  # safe to call twice
        RESULT["before_after_recover"] = before.cpu().tolist()
        RESULT["usable"] = (before * 2 + 1).cpu().tolist()
        RESULT["new_alloc"] = torch.ones(8, device="emu").sum().item()
    """, tmp_path)
    assert r["op_returned"] is True
    sync = r["sync"]
    assert sync["accel"] and sync["runtime_error"]
    top, rt_err, drv_err = sync["chain"][:3]
    assert top["type"] == "EmuAcceleratorError" and top["error_code"] == 700 and top["scope"] == "context"
    assert "PAGE_FAULT" in top["message"] and "ILLEGAL_ADDRESS" in top["message"]
    assert rt_err["type"] == "DeviceFaultError" and rt_err["module"] == "runtime.errors"
    assert drv_err["module"].startswith("driver")
    # the driver error holds the firmware's error record: status, unit, faulting address
    assert "PAGE_FAULT" in drv_err["record"] and "vector_engine" in drv_err["record"]
    assert "address=" in drv_err["record"]
    for name in ("cpu", "add", "item"):
        assert r["sticky_" + name] == [700, "EmuAcceleratorError"], (name, r["sticky_" + name])
    assert r["other_device"] == [10.0] * 4
    assert any("PAGE_FAULT" in f for f in r["dump_faults"]), r["dump_faults"]
    assert r["second_recover_faults"] == []
    assert r["before_after_recover"] == [float(i) for i in range(16)]
    assert r["usable"] == [2.0 * i + 1 for i in range(16)]
    assert r["new_alloc"] == 8.0


def test_launch_blocking_makes_the_faulting_op_raise(tmp_path):
    r = run_json("""
        t = torch.zeros(4, device="emu")
        torch.emu.synchronize()
        bad = faulting_tensor(t)
        try:
            bad.fill_(1.0)
            RESULT["raised_by_op"] = None
        except Exception as err:
            RESULT["raised_by_op"] = chain(err)
        torch.emu.recover()
        RESULT["after"] = (t + 5).cpu().tolist()
    """, tmp_path, EMU_LAUNCH_BLOCKING="1")
    chain = r["raised_by_op"]
    assert chain is not None, "under EMU_LAUNCH_BLOCKING=1 the faulting op itself must raise"
    assert chain[0]["error_code"] == 700 and chain[1]["type"] == "DeviceFaultError"
    assert r["after"] == [5.0] * 4


# ------------------------------------------------------------ bad input never corrupts state
@pytest.fixture
def witnesses():
    """Tensors on both devices whose values must survive every failing call."""
    a = torch.arange(12, dtype=torch.float32, device="emu").reshape(3, 4)
    b = torch.full((5,), 3, dtype=torch.int32, device="emu:1")
    yield a, b
    assert a.cpu().tolist() == torch.arange(12, dtype=torch.float32).reshape(3, 4).tolist()
    assert b.cpu().tolist() == [3] * 5
    assert (a + 1).sum().item() == 78.0  # the device still works


def _forbidden(call):
    with torch.emu.host_fallback("forbid"):
        return call()


FAILING_CALLS = {
    "add_shape_mismatch": (RuntimeError, "must match the size of tensor b", lambda a, b: a + torch.ones(5, device="emu")),
    "add_inplace_shape": (RuntimeError, "doesn't match the broadcast shape",
                          lambda a, b: a[:1].add_(torch.ones(3, 4, device="emu"))),
    "add_inplace_dtype": (RuntimeError, "can't be cast", lambda a, b: b.add_(0.5)),
    "mul_out_bad_dtype": (RuntimeError, "can't be cast",
                          lambda a, b: torch.mul(a, 2, out=torch.empty(3, 4, dtype=torch.int32, device="emu"))),
    "add_out_overlap": (RuntimeError, "single memory location", lambda a, b: torch.add(a[0, 1:], 1, out=a[0, :3])),
    "mm_shapes": (RuntimeError, r"cannot be multiplied \(3x4 and 3x4\)", lambda a, b: a @ a),
    "mm_out_aliases_input": (RuntimeError, "refer to a single memory location", lambda a, b: torch.mm(a, a.t(), out=a)),
    "cross_device": (RuntimeError, "same device", lambda a, b: a[0, :4] + b[:4].float()),
    # complex and uint16/32/64 are storage dtypes (copies, fills, views work; test_storage_dtypes.py):
    # an op whose device kernel has no path for them goes to the counted host fallback, and with
    # the fallback forbidden it is refused with the kernel's reason (op, dtype, what is supported)
    "complex_result": (HostFallbackError, "aten::add.*complex64 is not supported on emu",
                       lambda a, b: _forbidden(lambda: a + 1j)),
    "complex_tensor": (HostFallbackError, "aten::div.*complex64 is not supported on emu",
                       lambda a, b: _forbidden(lambda: a / torch.empty(3, 4, dtype=torch.complex64, device="emu"))),
    "complex_mm": (HostFallbackError, "aten::mm: dtype torch.complex64 is not supported",
                   lambda a, b: _forbidden(lambda: torch.empty(2, 2, dtype=torch.complex64, device="emu") @
                                           torch.empty(2, 2, dtype=torch.complex64, device="emu"))),
    "uint32_arithmetic": (NotImplementedError, "not implemented for 'UInt32'",   # CPU's own error
                          lambda a, b: torch.ones(3, dtype=torch.uint32, device="emu") + 1),
    "fill_overflow": (RuntimeError, "without overflow", lambda a, b: b.fill_(1 << 40)),
    "invalid_device": (RuntimeError, "invalid", lambda a, b: torch.ones(3, device="emu:2")),
    "bad_random_range": (RuntimeError, "from.*less than", lambda a, b: b.random_(5, 5)),
    "alpha_float_for_int": (RuntimeError, "alpha", lambda a, b: torch.add(b, b, alpha=0.5)),
    "oom": (torch.OutOfMemoryError, "out of memory", lambda a, b: torch.empty(1 << 31, device="emu")),
    # arguments the kernel would turn into a (sticky, context-wide) device fault: checked on the host
    "uniform_inf_bound": (RuntimeError, "to is out of bounds", lambda a, b: a.uniform_(0, float("inf"))),
    "uniform_nan_bound": (RuntimeError, "from is out of bounds", lambda a, b: a.uniform_(float("nan"), 1)),
    "uniform_range_too_wide": (RuntimeError, "to-from", lambda a, b: a.uniform_(-3e38, 3e38)),
    "normal_nan_std": (RuntimeError, "std >= 0.0", lambda a, b: a.normal_(0, float("nan"))),
    "bernoulli_int_p": (NotImplementedError, "floating point", lambda a, b: torch.bernoulli(b)),
    "bernoulli_bad_p_shape": (RuntimeError, "cannot be expanded",
                              lambda a, b: torch.zeros(2, 3, device="emu").bernoulli_(torch.ones(2, device="emu"))),
    "linspace_int_overflow": (RuntimeError, "without overflow",
                              lambda a, b: torch.linspace(0, 1e30, 3, dtype=torch.int32, device="emu")),
}


@pytest.mark.parametrize("name", FAILING_CALLS)
def test_failing_call_leaves_other_tensors_unchanged(name, witnesses):
    error, pattern, call = FAILING_CALLS[name]
    a, b = witnesses
    with pytest.raises(error, match=pattern):
        call(a, b)


def test_unsupported_dtype_error_names_op_dtype_and_what_is_supported():
    a = torch.ones(3, device="emu")
    with torch.emu.host_fallback("forbid"), pytest.raises(HostFallbackError) as info:
        a + torch.tensor(2j)  # through the operator: the message must survive (not "unsupported operand")
    message = str(info.value)
    assert "aten::add" in message and "torch.complex64" in message
    assert "supported:" in message and "torch.float32" in message and "torch.bfloat16" in message


def test_bad_launch_is_rejected_before_the_device_sees_it():
    """The driver validates what user space hands it: a malformed descriptor is an error of the
    call (scope operation), not a device fault, and the context stays healthy."""
    t = torch.zeros(4, device="emu")
    rt = runtime.get_runtime()
    stream = rt.stream(0, 0)
    bad = runtime.TensorRef(False, 0, t.data_ptr(), 999, (4,), (1,))  # no such dtype code
    with pytest.raises(runtime.EmuError) as info:
        rt.launch("unary", ("relu", bad, bad, 999), stream)
    assert info.value.scope == runtime.Scope.OPERATION
    assert (t + 1).cpu().tolist() == [1.0] * 4


# ------------------------------------------------------------------------ firmware version
def test_firmware_major_version_mismatch_names_both_versions():
    with pytest.raises(runtime.InitializationError) as info:
        runtime.Runtime(firmware_image=FirmwareImage.build(version=(9, 0, 0)))
    err = info.value
    assert err.code == runtime.ErrorCode.FIRMWARE_VERSION_MISMATCH
    message = str(err)
    assert "9.0.0" in message  # the firmware's version
    assert f"major version {abi.ABI_MAJOR}" in message  # the driver's
    assert err.__cause__ is not None and type(err.__cause__).__name__ == "DriverError"
    # as a torch error (what torch_plugin raises if the process's runtime hit this)
    from torch_plugin.errors import translate
    as_torch = translate(err)
    assert isinstance(as_torch, torch.AcceleratorError)
    assert as_torch.error_code == int(runtime.ErrorCode.FIRMWARE_VERSION_MISMATCH)
    assert as_torch.scope == "device"  # the device cannot run until matching firmware is loaded
    # the process's own runtime is untouched
    assert (torch.ones(2, device="emu") * 3).cpu().tolist() == [3.0, 3.0]


def test_firmware_minor_version_difference_is_accepted():
    major = abi.ABI_MAJOR
    rt = runtime.Runtime(firmware_image=FirmwareImage.build(version=(major, 99, 0)))
    assert rt.device_count == 2


# ------------------------------------------------------------------ emulator bugs, deadlocks
def test_emulator_bug_is_an_internal_error_and_the_device_stays_usable(monkeypatch):
    """A kernel that raises a plain Python exception is a bug in the emulator: an
    ``EmuInternalError`` (a RuntimeError that says so), chained to the runtime's EmulatorBugError
    and the DriverError holding the firmware's record; never sticky, no recover() needed."""
    import dataclasses

    from driver import DriverError, DriverStatus
    from emulator.kernels.library import KERNELS
    from torch_plugin.errors import EmuInternalError

    keep = torch.arange(8, dtype=torch.float32, device="emu")
    a = torch.full((3, 7), 2.0, device="emu")
    b = torch.ones(3, 7, device="emu")
    torch.emu.synchronize()
    original = KERNELS["binary"]
    armed = [True]

    def bad(*args):
        if armed[0]:
            raise RuntimeError("boom")
        return original.run(*args)  # the firmware may have cached this launch's decode

    monkeypatch.setitem(KERNELS, "binary", dataclasses.replace(original, run=bad))
    try:
        with pytest.raises(EmuInternalError) as info:
            (a + b).cpu()
    finally:
        armed[0] = False
        monkeypatch.undo()
    err = info.value
    assert isinstance(err, RuntimeError) and not isinstance(err, torch.AcceleratorError)
    message = str(err)
    assert "internal error in the emu emulator (a bug, not a fault of your program)" in message
    assert "RuntimeError: boom" in message and "Traceback" in message
    chain = []
    e = err
    while e is not None:
        chain.append(e)
        e = e.__cause__
    assert isinstance(chain[1], runtime.errors.EmulatorBugError)
    assert chain[1].code == runtime.ErrorCode.INTERNAL and chain[1].scope == runtime.Scope.OPERATION
    assert isinstance(chain[2], DriverError) and chain[2].status == DriverStatus.INTERNAL_ERROR
    assert chain[2].record.detail == "RuntimeError: boom" and "in bad" in chain[2].record.traceback
    assert err.error_code == int(runtime.ErrorCode.INTERNAL) and err.scope == "operation"
    # Not sticky: the device works without torch.emu.recover(), other tensors keep their values.
    assert (a + b).cpu().tolist() == [[3.0] * 7] * 3
    assert keep.cpu().tolist() == [float(i) for i in range(8)]
    torch.emu.synchronize()


def test_a_stream_waiting_for_an_event_nothing_records_is_a_stream_error():
    """A host wait that no queued work can satisfy is a user error (stream scope) naming the
    stream and the fence, not an emulator bug."""
    from emulator.errors import EmulatorBug

    rt = runtime.get_runtime()
    stream = rt.stream_create(0)
    never = rt.event_create(0)
    never.count = never.base + 1  # as if recorded, but nothing will ever signal it
    rt.stream_wait_event(stream, never)
    try:
        with pytest.raises(runtime.StreamError) as info:
            stream.synchronize()
    finally:
        rt.event_record(never, rt.stream(0))  # unblock the stream: later device syncs must work
    stream.synchronize()
    err = info.value
    assert err.scope == runtime.Scope.STREAM
    assert f"stream emu:0/{stream.stream_id}" in str(err)
    at = stream._base  # a recycled semaphore starts where its last owner left it
    assert f"semaphore {stream.semaphore} to reach {at + 1} (it is at {at})" in str(err)
    e = err
    while e is not None:
        assert not isinstance(e, EmulatorBug)
        e = e.__cause__
    from torch_plugin.errors import translate
    as_torch = translate(err)
    assert isinstance(as_torch, torch.AcceleratorError) and as_torch.scope == "stream"
    assert (torch.ones(2, device="emu") * 3).cpu().tolist() == [3.0, 3.0]
    torch.emu.synchronize()
