"""Tests of the emu C++ core (torch_plugin/csrc) against a FAKE Python bridge.

Renaming PrivateUse1 and registering hooks/kernels is process-global and
irreversible, and these tests must not depend on (or collide with) the real
torch_plugin package. So every check runs in ONE subprocess
(``python test_csrc_core.py --worker``) that builds the extension from
torch_plugin/csrc with torch.utils.cpp_extension.load (cached under /tmp),
installs a fake bridge whose malloc hands out fake device addresses (never
dereferenced), runs all ``check_*`` functions and reports JSON results; the
pytest side turns each result into one test.
"""
import gc
import json
import os
import struct
import subprocess
import sys
import threading
import traceback
import types
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_DIR = os.environ.get("EMU_CSRC_BUILD_DIR", "/tmp/torch_plugin_csrc_test_build")
MARKER = "@@EMU_CSRC_RESULTS@@"

CHECKS = {}  # name -> (function, needs_bridge); definition order = run order


def check(needs_bridge=True):
    def deco(fn):
        CHECKS[fn.__name__] = (fn, needs_bridge)
        return fn
    return deco


# --------------------------------------------------------------- fake bridge

class FakeBridge:
    """Records every call; device memory is just a counter of fake addresses."""

    DEVICES = 2
    ELAPSED_MS = 1.25

    def __init__(self):
        self.calls = []
        self.live = {}  # ptr -> (device, nbytes)
        self._next_ptr = 0x7_0000_0000
        self._next_id = 100

    def _log(self, *call):
        self.calls.append(call)

    def named(self, name):
        return [c[1:] for c in self.calls if c[0] == name]

    def count(self, name):
        return len(self.named(name))

    def _new_id(self):
        self._next_id += 1
        return self._next_id

    def device_count(self):
        return self.DEVICES

    def lazy_init(self):
        self._log("lazy_init")

    def malloc(self, device, nbytes):
        assert nbytes > 0 and 0 <= device < self.DEVICES
        ptr = self._next_ptr
        self._next_ptr += (nbytes + 0xFFF) // 0x1000 * 0x1000 + 0x1000  # gap between blocks
        self.live[ptr] = (device, nbytes)
        self._log("malloc", device, nbytes, ptr)
        return ptr

    def free(self, device, ptr):
        self._log("free", device, ptr)
        assert self.live.pop(ptr)[0] == device

    def memcpy_d2d(self, device, dst, src, nbytes):
        self._log("memcpy_d2d", device, dst, src, nbytes)

    def device_from_ptr(self, ptr):
        for base, (dev, n) in self.live.items():
            if base <= ptr < base + n:
                return dev
        raise ValueError(f"not a device pointer: {ptr:#x}")

    def has_primary_context(self, device):
        return self.count("lazy_init") > 0

    def stream_create(self, device, priority):
        sid = self._new_id()
        self._log("stream_create", device, priority, sid)
        return sid

    def stream_query(self, device, sid):
        self._log("stream_query", device, sid)
        return True

    def stream_synchronize(self, device, sid):
        self._log("stream_synchronize", device, sid)

    def device_synchronize(self, device):
        self._log("device_synchronize", device)

    def event_create(self, device, flags):
        eid = self._new_id()
        self._log("event_create", device, flags, eid)
        return eid

    def event_record(self, eid, device, sid):
        self._log("event_record", eid, device, sid)

    def event_block(self, eid, device, sid):
        self._log("event_block", eid, device, sid)

    def event_query(self, eid):
        self._log("event_query", eid)
        return True

    def event_synchronize(self, eid):
        self._log("event_synchronize", eid)

    def event_elapsed_ms(self, start, end, device):
        self._log("event_elapsed_ms", start, end, device)
        return self.ELAPSED_MS

    def event_destroy(self, eid, device):
        self._log("event_destroy", eid, device)

    def record_stream(self, device, ptr, sid):
        self._log("record_stream", device, ptr, sid)

    def pinned_free(self, ptr):
        self._log("pinned_free", ptr)


def raises(exc_type, fn, match=None):
    """Minimal pytest.raises for the worker (pytest is not imported there)."""
    try:
        fn()
    except exc_type as e:
        if match is not None:
            assert match in str(e), f"{match!r} not in {str(e)!r}"
        return e
    raise AssertionError(f"{fn} did not raise {exc_type.__name__}")


# -------------------------------------------------------------------- checks
# Each check gets (torch, C, bridge); they share one process and one bridge,
# so they look at call deltas and restore any state they change.

@check(needs_bridge=False)
def check_no_bridge_yet(torch, C, b):
    # Before _set_bridge: no devices, and a clear error instead of a crash.
    assert C._get_device() == 0
    raises(RuntimeError, lambda: torch.empty(2, device="emu"), match="no bridge registered")
    raises(RuntimeError, lambda: C._set_device(0), match="0 emu device(s)")


@check()
def check_backend_registration(torch, C, b):
    assert torch._C._get_privateuse1_backend_name() == "emu"
    assert torch.accelerator.current_accelerator() == torch.device("emu")
    t = torch.empty(1, device="emu")
    assert t.is_emu and t.device.type == "emu"


@check()
def check_empty(torch, C, b):
    n = b.count("malloc")
    t = torch.empty(2, 3, device="emu")
    assert t.device == torch.device("emu", 0)
    assert t.shape == (2, 3) and t.stride() == (3, 1) and t.storage_offset() == 0
    assert b.named("malloc")[-1] == (0, 24, t.data_ptr())
    assert t.untyped_storage().data_ptr() == t.data_ptr()
    assert t.untyped_storage().nbytes() == 24

    z = torch.empty(0, 5, device="emu")  # zero bytes: no bridge allocation
    assert z.data_ptr() == 0 and z.device == torch.device("emu", 0)
    assert b.count("malloc") == n + 1

    cl = torch.empty(2, 3, 4, 5, device="emu", memory_format=torch.channels_last)
    assert cl.stride() == (60, 1, 15, 3)
    assert cl.is_contiguous(memory_format=torch.channels_last)
    assert b.named("malloc")[-1][1] == 2 * 3 * 4 * 5 * 4

    es = torch.empty_strided((2, 3), (1, 2), device="emu", dtype=torch.int64)
    assert es.shape == (2, 3) and es.stride() == (1, 2) and es.dtype == torch.int64
    assert es.untyped_storage().nbytes() == 6 * 8  # (1*1 + 2*2 + 1) elements

    like = torch.empty_like(t)
    assert like.device == t.device and like.data_ptr() != t.data_ptr()
    raises(RuntimeError, lambda: torch.empty(2, device="emu", pin_memory=True), match="pinned")


@check()
def check_views(torch, C, b):
    t = torch.empty(4, 6, device="emu")
    base, n = t.data_ptr(), b.count("malloc")

    s = t[1:, 2:]
    assert s.storage_offset() == 8 and s.stride() == (6, 1)
    assert s.data_ptr() == base + 8 * t.element_size()
    assert s.untyped_storage().data_ptr() == base

    assert t.view(24).stride() == (1,) and t.view(2, 12).stride() == (12, 1)
    assert t.t().shape == (6, 4) and t.t().stride() == (1, 6)
    assert t.t().data_ptr() == base
    assert t[:, ::2].stride() == (6, 2)
    assert t[2].data_ptr() == base + 12 * 4

    a = t.as_strided((3, 3), (2, 1), 5)
    assert a.stride() == (2, 1) and a.storage_offset() == 5 and a.data_ptr() == base + 20

    r = torch.ops.aten._reshape_alias(t, (6, 4), (4, 1))
    assert r.shape == (6, 4) and r.stride() == (4, 1) and r.data_ptr() == base

    assert t.reshape(24).data_ptr() == base and t.unsqueeze(0).stride() == (24, 6, 1)
    assert t.view(torch.int32).data_ptr() == base
    assert t[:1].expand(3, 6).stride() == (0, 1)
    raises(RuntimeError, lambda: t.t().view(24), match="view")

    u = t.unfold(1, 3, 2)  # windows of 3 along dim 1, step 2
    assert u.shape == (4, 2, 3) and u.stride() == (6, 2, 1) and u.data_ptr() == base
    c = torch.empty(3, 4, dtype=torch.complex64, device="emu")
    rv = torch.view_as_real(c)
    assert rv.shape == (3, 4, 2) and rv.stride() == (8, 2, 1) and rv.data_ptr() == c.data_ptr()
    assert torch.view_as_complex(rv).data_ptr() == c.data_ptr()
    n += 1  # c
    # Views never allocate.
    assert b.count("malloc") == n


@check()
def check_set_overloads(torch, C, b):
    src = torch.empty(10, device="emu")
    st = src.untyped_storage()

    a = torch.empty(0, device="emu")
    a.set_(st)
    assert a.shape == (10,) and a.data_ptr() == src.data_ptr()

    c = torch.empty(0, device="emu")
    c.set_(st, 2, (2, 3), (3, 1))
    assert c.storage_offset() == 2 and c.stride() == (3, 1)
    assert c.data_ptr() == src.data_ptr() + 8

    d = torch.empty(0, device="emu")
    d.set_(src[3:])
    assert d.shape == (7,) and d.storage_offset() == 3 and d.data_ptr() == src.data_ptr() + 12

    e = torch.empty(3, device="emu:1")
    e.set_()
    assert e.shape == (0,) and e.device == torch.device("emu", 1)
    assert e.untyped_storage().nbytes() == 0 and e.data_ptr() == 0

    other = torch.empty(4, device="emu:1").untyped_storage()
    raises(RuntimeError, lambda: torch.empty(0, device="emu").set_(other), match="devices must match")

    # Like CPU, set_ beyond the end of the storage grows it (through the bridge).
    small = torch.empty(4, device="emu")
    old_ptr = small.data_ptr()
    g = torch.empty(0, device="emu")
    g.set_(small.untyped_storage(), 0, (8,), (1,))
    assert small.untyped_storage().nbytes() == 32
    assert b.named("memcpy_d2d")[-1] == (0, g.data_ptr(), old_ptr, 16)
    assert small.data_ptr() == g.data_ptr()  # the storage itself was swapped


@check()
def check_resize(torch, C, b):
    t = torch.empty(4, device="emu")
    old = t.data_ptr()
    v = t[:2]
    t.resize_(10)
    assert t.shape == (10,) and t.untyped_storage().nbytes() == 40
    new = t.data_ptr()
    assert new != old and b.named("malloc")[-1] == (0, 40, new)
    assert b.named("memcpy_d2d")[-1] == (0, new, old, 16)
    assert ("free", 0, old) == b.calls[-1] and old not in b.live
    assert v.data_ptr() == new  # views share the (swapped) storage

    n_calls = len(b.calls)
    t.resize_(2)  # shrinking keeps the block
    t.resize_(2)
    assert t.shape == (2,) and t.data_ptr() == new and t.untyped_storage().nbytes() == 40
    assert len(b.calls) == n_calls

    t.resize_(1, 2, 1, 5, memory_format=torch.channels_last)  # 40 bytes: fits
    assert t.stride() == (10, 1, 10, 2) and t.data_ptr() == new and len(b.calls) == n_calls

    # Growth happens on the tensor's device, whatever the current device is.
    t1 = torch.empty(2, device="emu:1")
    t1.resize_(8)
    assert b.named("malloc")[-1][:2] == (1, 32) and b.named("memcpy_d2d")[-1][0] == 1
    assert C._get_device() == 0

    # untyped_storage().resize_ goes through the PrivateUse1 hooks.
    st = torch.empty(4, device="emu").untyped_storage()
    p0 = st.data_ptr()
    st.resize_(64)
    assert st.nbytes() == 64 and b.named("memcpy_d2d")[-1] == (0, st.data_ptr(), p0, 16)
    p1 = st.data_ptr()
    st.resize_(8)
    assert st.nbytes() == 8 and b.named("memcpy_d2d")[-1] == (0, st.data_ptr(), p1, 8)
    p2 = st.data_ptr()
    st.resize_(0)
    assert st.nbytes() == 0 and st.data_ptr() == 0 and p2 not in b.live


@check()
def check_frees(torch, C, b):
    t = torch.empty(8, device="emu")
    p = t.data_ptr()
    v = t[2:]
    del t
    gc.collect()
    assert p in b.live  # the view keeps the storage alive
    del v
    assert p not in b.live and ("free", 0, p) in b.calls

    t1 = torch.empty(3, device="emu:1")
    p1 = t1.data_ptr()
    del t1
    assert ("free", 1, p1) in b.calls


@check()
def check_device_guard(torch, C, b):
    assert C._get_device() == 0
    t1 = torch.empty(3, device="emu:1")
    assert t1.device == torch.device("emu", 1) and b.live[t1.data_ptr()][0] == 1
    assert C._get_device() == 0  # the guard restored the current device

    C._set_device(1)
    try:
        t = torch.empty(2, device="emu")  # no index: current device
        assert t.device == torch.device("emu", 1) and b.live[t.data_ptr()][0] == 1
        assert torch.accelerator.current_device_index() == 1
        assert C._exchange_device(0) == 1 and C._get_device() == 0
    finally:
        C._set_device(0)

    raises(RuntimeError, lambda: C._set_device(5), match="invalid device index 5 (2 emu device(s)")
    raises(RuntimeError, lambda: C._set_device(-1), match="invalid device index -1")
    raises(RuntimeError, lambda: C._set_device(300), match="invalid device index 300")
    raises(RuntimeError, lambda: torch.empty(1, device="emu:7"), match="invalid device index 7")
    assert C._get_device() == 0

    # The current device is per thread.
    seen = {}

    def worker():
        seen["initial"] = C._get_device()
        C._set_device(1)
        seen["after"] = C._get_device()

    th = threading.Thread(target=worker)
    th.start()
    th.join()
    assert seen == {"initial": 0, "after": 1} and C._get_device() == 0


@check()
def check_device_count_errors(torch, C, b):
    def broken():
        raise RuntimeError("emulator is broken")

    hooked = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = lambda u: hooked.append(repr(u.exc_value))  # keep no frames alive
    b.device_count = broken
    try:
        # deviceCount() must not raise: it reports 0 devices (and warns).
        raises(RuntimeError, lambda: C._set_device(1), match="0 emu device(s)")
    finally:
        del b.device_count
        sys.unraisablehook = old_hook
    assert hooked and "emulator is broken" in hooked[0]


@check()
def check_streams(torch, C, b):
    assert C._current_stream_id(0) == 0 and C._current_stream_id(1) == 0
    s = torch.Stream(device="emu")
    assert b.named("stream_create")[-1] == (0, 0, s.stream_id)  # (device, priority, id)
    assert s.device_index == 0
    assert s.query() and b.named("stream_query")[-1] == (0, s.stream_id)
    s.synchronize()
    assert b.named("stream_synchronize")[-1] == (0, s.stream_id)

    C._set_current_stream(0, s.stream_id)
    try:
        assert C._current_stream_id(0) == s.stream_id and C._current_stream_id(1) == 0
        assert C._current_stream_id(-1) == s.stream_id  # -1: current device
        assert torch.accelerator.current_stream().stream_id == s.stream_id
    finally:
        C._set_current_stream(0, 0)
    assert torch.accelerator.current_stream().stream_id == 0

    torch.accelerator.synchronize()
    assert b.named("device_synchronize")[-1] == (0,)

    t = torch.empty(4, device="emu")
    t.record_stream(s)
    assert b.named("record_stream")[-1] == (0, t.data_ptr(), s.stream_id)


@check()
def check_events(torch, C, b):
    e = torch.Event(device="emu")
    n = len(b.calls)
    assert e.query() and len(b.calls) == n  # never recorded: complete, no bridge call
    e.record()
    dev, flags, eid = b.named("event_create")[-1]
    assert (dev, flags) == (0, 0)  # 0 = no timing
    assert b.named("event_record")[-1] == (eid, 0, 0)
    assert e.query() and b.named("event_query")[-1] == (eid,)
    e.synchronize()
    assert b.named("event_synchronize")[-1] == (eid,)

    s = torch.Stream(device="emu")
    e.wait(s)
    assert b.named("event_block")[-1] == (eid, 0, s.stream_id)

    t0 = torch.Event(device="emu", enable_timing=True)
    t1 = torch.Event(device="emu", enable_timing=True)
    t0.record()
    t1.record()
    assert b.named("event_create")[-1][1] == 1  # 1 = timing enabled
    assert t0.elapsed_time(t1) == FakeBridge.ELAPSED_MS
    start, end, dev = b.named("event_elapsed_ms")[-1]
    assert dev == 0 and end == b.named("event_create")[-1][2]

    del e
    gc.collect()
    assert (eid, 0) in b.named("event_destroy")


@check()
def check_generator(torch, C, b):
    g = torch.Generator(device="emu")
    assert g.device == torch.device("emu", 0)
    g.manual_seed(1234)
    assert g.initial_seed() == 1234
    state = g.get_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    assert bytes(state.tolist()) == struct.pack("<QQ", 1234, 0)

    assert C._philox_reserve(g, 8) == (1234, 0)
    assert C._philox_reserve(g, 4) == (1234, 8)
    assert g.get_offset() == 12
    assert bytes(g.get_state().tolist()) == struct.pack("<QQ", 1234, 12)

    g2 = torch.Generator(device="emu:1")
    assert g2.device == torch.device("emu", 1)
    g2.set_state(torch.tensor(list(struct.pack("<QQ", 2**63 + 5, 77)), dtype=torch.uint8))
    assert g2.initial_seed() == 2**63 + 5 and g2.get_offset() == 77
    raises(RuntimeError, lambda: g2.set_state(torch.zeros(3, dtype=torch.uint8)), match="16 bytes")
    raises(TypeError, lambda: g2.set_state(torch.zeros(16)), match="ByteTensor")

    g2.manual_seed(9)  # a new seed restarts the offset
    assert g2.get_offset() == 0
    s = g2.seed()
    assert g2.initial_seed() == s and g2.get_offset() == 0

    d0 = C._default_generator(0)
    assert d0 is C._default_generator(0) and d0 is C._default_generator(-1)
    assert d0.device == torch.device("emu", 0)
    assert C._default_generator(1).device == torch.device("emu", 1)
    raises(RuntimeError, lambda: C._default_generator(9), match="invalid device index 9")
    raises(RuntimeError, lambda: C._philox_reserve(torch.Generator(), 1))

    # _philox_reserve holds the generator's mutex: no lost updates.
    g.manual_seed(1)

    def reserve_many():
        for _ in range(2000):
            C._philox_reserve(g, 1)

    threads = [threading.Thread(target=reserve_many) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert g.get_offset() == 8000


@check()
def check_pinned(torch, C, b):
    cpu = torch.arange(8, dtype=torch.float32)
    assert not cpu.is_pinned()
    p = cpu.pin_memory()
    assert p.is_pinned() and p.device.type == "cpu" and torch.equal(p, cpu)
    assert p.data_ptr() % 64 == 0 and C._is_pinned_ptr(p.data_ptr())
    assert p[3:].is_pinned() and C._is_pinned_ptr(p.data_ptr() + 31)
    assert not C._is_pinned_ptr(cpu.data_ptr())
    assert b.count("lazy_init") >= 1  # pinning initialises the device

    q = torch.empty(16, pin_memory=True)
    assert q.is_pinned()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the device argument is deprecated
        assert cpu.pin_memory("emu").is_pinned()

    ptr = p.data_ptr()
    del p
    gc.collect()
    assert (ptr,) in b.named("pinned_free") and not C._is_pinned_ptr(ptr)


@check()
def check_bridge_errors(torch, C, b):
    def oom(device, nbytes):
        raise torch.OutOfMemoryError(f"fake OOM for {nbytes} bytes")

    b.malloc = oom
    try:
        raises(torch.OutOfMemoryError, lambda: torch.empty(10, device="emu"), match="fake OOM for 40")
    finally:
        del b.malloc

    # A failing free is reported as unraisable, not raised, and nothing crashes.
    hooked = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = lambda u: hooked.append(repr(u.exc_value))  # keep no frames alive
    t = torch.empty(3, device="emu")
    p = t.data_ptr()

    def bad_free(device, ptr):
        raise ValueError("free failed")

    b.free = bad_free
    try:
        del t
        gc.collect()
    finally:
        del b.free
        sys.unraisablehook = old_hook
    assert hooked and hooked[0].startswith("ValueError")
    b.live.pop(p)

    # A failing memcpy during resize propagates; the storage keeps its block
    # and the half-made new block is handed back.
    t = torch.empty(4, device="emu")
    old = t.data_ptr()

    def bad_copy(*args):
        raise RuntimeError("dma fault")

    b.memcpy_d2d = bad_copy
    try:
        raises(RuntimeError, lambda: t.untyped_storage().resize_(64), match="dma fault")
    finally:
        del b.memcpy_d2d
    assert t.data_ptr() == old and t.untyped_storage().nbytes() == 16
    assert b.calls[-1][0] == "free" and b.calls[-1][2] not in b.live


@check()
def check_no_leaks(torch, C, b):
    # Runs last: everything the checks allocated is gone once collected.
    gc.collect()
    leaked = {hex(p): v for p, v in b.live.items()}
    assert not leaked, f"device blocks never freed: {leaked}"


# -------------------------------------------------------------------- worker

def _worker():
    import glob

    import torch
    from torch.utils import cpp_extension

    os.makedirs(BUILD_DIR, exist_ok=True)
    C = cpp_extension.load(
        name="_C",
        sources=sorted(glob.glob(str(REPO / "torch_plugin" / "csrc" / "*.cpp"))),
        extra_cflags=["-O2", "-std=c++17"],
        # kineto's headers include each other by bare name (profiler.cpp, as setup.py says)
        extra_include_paths=[os.path.join(os.path.dirname(torch.__file__), "include", "kineto")],
        build_directory=BUILD_DIR,
        verbose=False,
    )
    torch.utils.rename_privateuse1_backend("emu")
    torch.utils.generate_methods_for_privateuse1_backend()
    # Factory functions import torch.<backend> for lazy init; a bare module
    # (no _lazy_init) is enough, the real plugin provides a full one.
    torch._register_device_module("emu", types.ModuleType("torch.emu"))

    bridge = FakeBridge()
    results = {}
    for name, (fn, needs_bridge) in CHECKS.items():
        if needs_bridge and not getattr(_worker, "bridge_set", False):
            C._set_bridge(bridge)
            _worker.bridge_set = True
        try:
            fn(torch, C, bridge)
            results[name] = None
        except BaseException:  # report, keep going
            results[name] = traceback.format_exc()
        gc.collect()
    print(MARKER + json.dumps(results), flush=True)


if __name__ == "__main__" and "--worker" in sys.argv:
    _worker()
    sys.exit(0)


# -------------------------------------------------------------- pytest side

import pytest  # noqa: E402


@pytest.fixture(scope="module")
def worker_results():
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--worker"],
        cwd=str(REPO), env=env, capture_output=True, text=True, timeout=1200,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARKER)]
    if proc.returncode != 0 or not lines:
        pytest.fail(
            f"worker failed (rc={proc.returncode})\n--- stdout\n{proc.stdout[-5000:]}"
            f"\n--- stderr\n{proc.stderr[-10000:]}"
        )
    return json.loads(lines[-1][len(MARKER):])


@pytest.mark.parametrize("name", list(CHECKS))
def test_csrc_core(worker_results, name):
    error = worker_results.get(name, "check did not run")
    assert error is None, error
