"""The emu device as PyTorch sees it: discovery, autoload and lazy init, configuration errors,
device indices, streams and events, memory statistics, random numbers and op telemetry.

Runs against the tiny preset (tests/conftest.py): 2 devices with 64 MiB HBM each. Checks
that need a fresh process (environment variables, autoload, lazy init) run a small script
in a subprocess with ``sys.executable``.
"""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import torch_plugin  # noqa: F401  (the entry point registers it anyway; explicit for the test run)
from torch_plugin.ops import fallback

MiB = 1 << 20
TINY_HBM_BYTES = 64 * MiB


def run_python(code: str, tmp_path, **env_extra) -> subprocess.CompletedProcess:
    """Runs ``code`` in a fresh interpreter (cwd = tmp_path, so nothing is imported from the
    repository by accident) with EMU_PRESET=tiny unless overridden."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMU_")}
    env["EMU_PRESET"] = "tiny"
    for key, value in env_extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"subprocess failed (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(autouse=True)
def _restore_device_and_stream():
    """Every test starts and ends on emu:0 with the default stream."""
    torch.emu.set_device(0)
    yield
    for index in range(torch.emu.device_count()):
        torch.emu.set_stream(torch.emu.default_stream(index))
    torch.emu.set_device(0)


# ------------------------------------------------------------------- discovery
def test_is_available_and_device_count():
    assert torch.emu.is_available()
    assert torch.emu.device_count() == 2
    assert torch.device("emu").type == "emu"
    assert torch.zeros(1, device="emu").device == torch.device("emu", 0)


def test_set_device_and_current_device():
    torch.emu.set_device(1)
    assert torch.emu.current_device() == 1
    assert torch.zeros(1, device="emu").device == torch.device("emu", 1)  # "emu" means the current device
    torch.emu.set_device("emu:0")
    assert torch.emu.current_device() == 0
    torch.emu.set_device(torch.device("emu", 1))
    assert torch.emu.current_device() == 1


def test_device_context_manager_restores():
    assert torch.emu.current_device() == 0
    with torch.emu.device(1):
        assert torch.emu.current_device() == 1
        with torch.emu.device(0):
            assert torch.emu.current_device() == 0
        assert torch.emu.current_device() == 1
    assert torch.emu.current_device() == 0
    with pytest.raises(ZeroDivisionError):  # restored on an exception too
        with torch.emu.device(1):
            1 / 0
    assert torch.emu.current_device() == 0
    with torch.emu.device(None):  # like torch.cuda.device(None): no change
        assert torch.emu.current_device() == 0


def test_synchronize_every_form():
    x = torch.ones(100, device="emu:1") * 2
    torch.emu.synchronize()
    torch.emu.synchronize(1)
    torch.emu.synchronize("emu:1")
    torch.emu.synchronize(torch.device("emu", 0))
    assert x.sum().item() == 200


def test_device_properties_describe_the_tiny_hardware():
    for index in range(2):
        props = torch.emu.get_device_properties(index)
        assert props.name == "Seed-tiny"
        assert props.hbm.capacity_bytes == TINY_HBM_BYTES
        assert props.matrix_engine.rows == 32 and props.matrix_engine.cols == 32
    assert torch.emu.get_device_name(1) == "Seed-tiny"
    assert torch.emu.get_device_properties("emu:1") == torch.emu.get_device_properties(0)
    description = torch.emu.get_hardware_description()
    assert description["num_devices"] == 2


def test_torch_accelerator_api():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("emu")
    assert torch.accelerator.device_count() == 2
    torch.accelerator.set_device_index(1)
    assert torch.accelerator.current_device_index() == 1
    assert torch.emu.current_device() == 1
    with torch.accelerator.device_index(0):
        assert torch.emu.current_device() == 0
    assert torch.accelerator.current_device_index() == 1
    x = torch.full((64,), 3.0, device="emu") * 2
    torch.accelerator.synchronize()
    torch.accelerator.synchronize(0)
    assert x.device.index == 1 and x.sum().item() == 384.0
    s = torch.emu.Stream(1)
    torch.accelerator.set_stream(s)
    assert torch.accelerator.current_stream(1) == s
    assert torch.emu.current_stream(1) == s


def test_torch_accelerator_memory_api(tmp_path):
    # csrc/allocator.cpp registers a c10::DeviceAllocator (it used to be a plain c10::Allocator,
    # and these hit "INTERNAL ASSERT FAILED ... Allocator for emu is not a DeviceAllocator").
    acc = torch.accelerator

    def agree(device=0):
        assert acc.memory_allocated(device) == torch.emu.memory_allocated(device)
        assert acc.max_memory_allocated(device) == torch.emu.max_memory_allocated(device)
        assert acc.memory_reserved(device) == torch.emu.memory_reserved(device)
        assert acc.max_memory_reserved(device) == torch.emu.max_memory_reserved(device)

    x = torch.empty(1000, device="emu")
    y = torch.empty(3 * MiB // 4, device="emu")  # 3 MiB: a block of its own
    agree()
    agree(1)
    assert acc.memory_allocated() >= 3 * MiB + 4000
    for device in (None, 0, "emu:0", torch.device("emu", 0), torch.device("emu")):
        assert acc.memory_allocated(device) == torch.emu.memory_allocated(0)
    stats, raw = acc.memory_stats(), torch.emu.memory_stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                "reserved_bytes.all.peak", "active.all.current", "num_alloc_retries", "num_ooms",
                "num_device_alloc"):
        assert stats[key] == raw[key], key
    assert stats["active_bytes.all.current"] == stats["allocated_bytes.all.current"]
    assert stats["allocation.all.current"] == stats["active.all.current"] >= 2
    assert all(isinstance(v, int) and v >= 0 for v in stats.values())

    del y
    agree()
    acc.empty_cache()  # y's cached 3 MiB go back to the driver
    agree()
    assert acc.max_memory_reserved() >= acc.memory_reserved() + 3 * MiB
    acc.reset_peak_memory_stats()
    assert acc.max_memory_allocated() == acc.memory_allocated()
    assert acc.max_memory_reserved() == acc.memory_reserved()
    agree()

    gc.collect()
    acc.reset_accumulated_memory_stats()
    stats = acc.memory_stats()
    assert stats["allocation.all.allocated"] == stats["allocation.all.freed"] == 0
    z = torch.empty(10, device="emu")
    del z
    stats = acc.memory_stats()
    assert stats["allocation.all.allocated"] == stats["allocation.all.freed"] == 1
    assert stats["allocated_bytes.all.current"] == torch.emu.memory_allocated()

    assert acc.get_memory_info() == torch.emu.mem_get_info()
    assert acc.get_memory_info(1) == torch.emu.mem_get_info(1)
    with pytest.raises(RuntimeError, match="invalid device index"):
        acc.memory_stats(torch.emu.device_count())
    del x

    # Like CUDA, the queries never power the system on (get_memory_info may), nor give an
    # untouched device a context.
    out = ok(run_python("""
        import torch
        import runtime
        acc = torch.accelerator
        print("before", acc.memory_allocated(), acc.max_memory_allocated(), acc.memory_reserved(),
              acc.max_memory_reserved(), dict(acc.memory_stats()))
        acc.empty_cache(); acc.reset_peak_memory_stats(); acc.reset_accumulated_memory_stats()
        print("init_after_queries", torch.emu.is_initialized())
        x = torch.ones(1000, device="emu:0")
        print("device1", acc.memory_allocated(1), acc.memory_stats(1)["reserved_bytes.all.current"],
              runtime.get_runtime().has_context(1))
        print("device0", acc.memory_allocated(0) == torch.emu.memory_allocated(0) > 0)
        print("info", acc.get_memory_info(1) == torch.emu.mem_get_info(1))
    """, tmp_path))
    assert "before 0 0 0 0 {}" in out
    assert "init_after_queries False" in out
    assert "device1 0 0 False" in out
    assert "device0 True" in out
    assert "info True" in out


def test_torch_accelerator_empty_host_cache_does_not_crash(tmp_path):
    # It segfaulted while csrc registered no at::HostAllocator for PrivateUse1.
    ok(run_python("""
        import torch
        x = torch.ones(3, device="emu")
        torch.accelerator.empty_host_cache()
        print("ok")
    """, tmp_path))


# ---------------------------------------------------------- autoload, lazy init
def test_autoload_and_lazy_init_in_fresh_process(tmp_path):
    out = ok(run_python("""
        import sys
        import torch
        assert hasattr(torch, "emu"), "autoload did not register torch.emu"
        print("init_after_import", torch.emu.is_initialized())
        print("available", torch.emu.is_available(), torch.emu.device_count())
        print("memory_before_init", torch.emu.memory_allocated(), torch.emu.memory_stats())
        print("init_after_discovery", torch.emu.is_initialized())
        x = torch.zeros(2, device="emu")
        print("init_after_tensor", torch.emu.is_initialized())
        print("values", x.cpu().tolist(), x.device)
        print("imported_by_autoload", "torch_plugin" in sys.modules)
    """, tmp_path))
    assert "init_after_import False" in out
    assert "available True 2" in out
    assert "memory_before_init 0 {}" in out  # like CUDA, memory queries do not initialise
    assert "init_after_discovery False" in out  # discovery reads the configuration only
    assert "init_after_tensor True" in out
    assert "values [0.0, 0.0] emu:0" in out
    assert "imported_by_autoload True" in out


def test_autoload_disabled_by_env(tmp_path):
    out = ok(run_python("""
        import torch
        print("has_emu", hasattr(torch, "emu"))
        try:
            torch.zeros(2, device="emu")
            print("created")
        except RuntimeError as err:
            print("error", err)
    """, tmp_path, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    assert "has_emu False" in out
    assert "created" not in out and "error" in out


# ------------------------------------------------------------ configuration errors
@pytest.mark.parametrize("case", ["bad_toml", "bad_value", "unknown_field", "bad_preset"])
def test_bad_configuration_names_the_problem_on_first_use(tmp_path, case):
    env, expected = {}, []
    if case == "bad_toml":
        path = tmp_path / "broken.toml"
        path.write_text('name = "x"\nnum_devices = 2\n[device\n')
        env["EMU_CONFIG"], expected = str(path), [str(path), "not valid TOML", "line 3"]
    elif case == "bad_value":
        path = tmp_path / "bad_value.toml"
        path.write_text('name = "x"\nnum_devices = 2\n[device.hbm]\ncapacity_bytes = -5\n')
        env["EMU_CONFIG"], expected = str(path), ["device.hbm.capacity_bytes", "-5"]
    elif case == "unknown_field":
        path = tmp_path / "typo.toml"
        path.write_text('name = "x"\nnum_devices = 2\n[device.matrix_engine]\nrowz = 8\n')
        env["EMU_CONFIG"], expected = str(path), ["device.matrix_engine.rowz", "unknown field", "rows"]
    else:
        env["EMU_PRESET"], expected = "nonexistent", ["nonexistent", "available", "tiny", "default"]
    out = ok(run_python("""
        import warnings
        import torch
        print("import_ok")  # a broken configuration never breaks `import torch`
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            print("available", torch.emu.is_available())
        try:
            torch.zeros(2, device="emu")
            print("no error")
        except Exception as err:
            print("type", type(err).__name__, isinstance(err, RuntimeError))
            print("code", getattr(err, "error_code", None))
            print("message", err)
    """, tmp_path, **env))
    assert "import_ok" in out and "available False" in out
    assert "no error" not in out
    assert "type EmuAcceleratorError True" in out
    assert "code 102" in out  # INVALID_CONFIGURATION
    message = out.split("message", 1)[1]
    for part in expected:
        assert part in message, (part, message)


# ---------------------------------------------------------------- device indices
INVALID_INDEX_CALLS = {
    "zeros": (7, lambda: torch.zeros(1, device="emu:7")),
    "to": (3, lambda: torch.ones(2).to("emu:3")),
    "set_device": (5, lambda: torch.emu.set_device(5)),
    "set_device_str": (5, lambda: torch.emu.set_device("emu:5")),
    "accelerator": (5, lambda: torch.accelerator.set_device_index(5)),
    "device_ctx": (4, lambda: torch.emu.device(4).__enter__()),
    "properties": (5, lambda: torch.emu.get_device_properties(5)),
    "synchronize": (3, lambda: torch.emu.synchronize(3)),
    "memory_allocated": (9, lambda: torch.emu.memory_allocated(9)),
    "stream": (4, lambda: torch.emu.Stream(4)),
    "generator": (5, lambda: torch.Generator(device="emu:5")),
}


@pytest.mark.parametrize("name", INVALID_INDEX_CALLS)
def test_invalid_device_index_says_what_was_asked_and_what_exists(name):
    asked, call = INVALID_INDEX_CALLS[name]
    with pytest.raises(RuntimeError) as info:
        call()
    message = str(info.value)
    assert f"invalid emu device index {asked}" in message or f"emu: invalid device index {asked}" in message
    assert "2 emu device" in message  # what exists
    if message.startswith("invalid emu device index"):  # raised by torch.emu (the C++ guard's are plain)
        assert isinstance(info.value, torch.AcceleratorError) and info.value.error_code == 101
    assert torch.emu.current_device() == 0  # nothing changed


# ------------------------------------------------------------ streams and events
def test_stream_objects_and_context():
    default = torch.emu.current_stream()
    assert default == torch.emu.default_stream() and default.stream_id == 0
    s = torch.emu.Stream()
    assert s.device == torch.device("emu", 0) and s != default
    with torch.emu.stream(s):
        assert torch.emu.current_stream() == s
        x = torch.arange(10, device="emu") * 3
        s.synchronize()
    assert torch.emu.current_stream() == default
    assert x.cpu().tolist() == [3 * i for i in range(10)]
    assert s.query()
    with torch.emu.stream(None):
        assert torch.emu.current_stream() == default


def test_stream_on_another_device_switches_the_device_like_cuda():
    on1 = torch.emu.Stream("emu:1")
    assert on1.device_index == 1
    default0, default1 = torch.emu.current_stream(0), torch.emu.current_stream(1)
    with torch.emu.stream(on1):  # torch.cuda.stream semantics: the stream's device becomes current
        assert torch.emu.current_device() == 1
        assert torch.emu.current_stream() == on1 and torch.emu.current_stream(0) == default0
        y = torch.arange(6, device="emu") * 2
        assert y.device == torch.device("emu", 1)
        assert y.cpu().tolist() == [0, 2, 4, 6, 8, 10]  # read on on1
    assert torch.emu.current_device() == 0
    assert torch.emu.current_stream(1) == default1 and torch.emu.current_stream(0) == default0
    torch.emu.set_stream(on1)  # like torch.cuda.set_stream: the device follows the stream
    assert torch.emu.current_device() == 1 and torch.emu.current_stream() == on1
    torch.emu.set_stream(default0)
    assert torch.emu.current_device() == 0


def test_cross_stream_wait_gives_correct_data():
    s1, s2 = torch.emu.Stream(), torch.emu.Stream()
    a = torch.randn(128, 128, device="emu")
    x = torch.zeros(128, 128, device="emu")
    torch.emu.synchronize()
    with torch.emu.stream(s1):
        for _ in range(3):  # keep s1 busy so that a read without the wait would see zeros
            a = a @ torch.eye(128, device="emu")
        x.fill_(1.0)
        x.mul_(7.0)
    s2.wait_stream(s1)
    with torch.emu.stream(s2):
        y = x + 1
        assert y.cpu().unique().tolist() == [8.0]  # read on s2


def test_wait_event_between_streams():
    s1, s2 = torch.emu.Stream(), torch.emu.Stream()
    x = torch.zeros(1000, device="emu")
    torch.emu.synchronize()
    event = torch.Event(device="emu")
    with torch.emu.stream(s1):
        x.fill_(5.0)
        event.record()
    s2.wait_event(event)
    with torch.emu.stream(s2):
        assert (x * 2).sum().item() == 10000.0


def _block_state(address):
    for segment in torch.emu.memory_snapshot():
        for block in segment["blocks"]:
            if block["address"] <= address < block["address"] + block["size"]:
                return block["state"]
    return None


def test_record_stream_defers_reuse_until_the_stream_passes():
    s = torch.emu.Stream()
    a = torch.randn(128, 128, device="emu")
    t = torch.empty(1024, device="emu")
    t.fill_(1.0)
    torch.emu.synchronize()
    address = t.data_ptr()
    with torch.emu.stream(s):
        for _ in range(3):
            a = a @ a.t()
        u = t * 2  # t is read by s, which has not run yet
    t.record_stream(s)
    del t
    assert _block_state(address) == "active_pending_free"
    other = torch.empty(1024, device="emu")
    assert other.data_ptr() != address  # not handed out while s may still read it
    s.synchronize()
    del other
    torch.empty(1, device="emu")  # an allocation reclaims the blocks whose streams passed
    assert _block_state(address) in ("inactive", "active_allocated")  # reusable again
    with torch.emu.stream(s):
        assert u.sum().item() == 2048.0


def test_events_record_query_synchronize_elapsed_time():
    start = torch.Event(device="emu", enable_timing=True)
    end = torch.Event(device="emu", enable_timing=True)
    a = torch.randn(256, 256, device="emu")
    start.record()
    for _ in range(4):
        a = a @ a
    end.record()
    end.synchronize()
    assert end.query() and start.query()
    elapsed = start.elapsed_time(end)
    assert isinstance(elapsed, float) and elapsed > 0.0  # modelled device time, in ms
    # more work takes longer (modelled time, deterministic)
    start.record()
    for _ in range(16):
        a = a @ a
    end.record()
    end.synchronize()  # like CUDA, elapsed_time needs both events completed
    assert start.elapsed_time(end) > elapsed
    never = torch.Event(device="emu")
    assert never.query()  # like CUDA: a never-recorded event is complete


# --------------------------------------------------------------- memory statistics
def _rounded(nbytes: int) -> int:
    return max(512, -(-nbytes // 512) * 512)  # every block is a multiple of 512 bytes


@pytest.mark.parametrize("nbytes", [1, 1000, 4096, MiB + 1, 5 * MiB])
def test_memory_allocated_grows_by_the_rounded_size(nbytes):
    gc.collect()  # no tensor of an earlier test may be freed in the middle
    before = torch.emu.memory_allocated()
    t = torch.empty(nbytes, dtype=torch.uint8, device="emu")
    assert torch.emu.memory_allocated() - before == _rounded(nbytes)
    assert torch.emu.memory_allocated(0) == torch.emu.memory_allocated("emu:0")
    assert torch.emu.memory_reserved() >= torch.emu.memory_allocated()
    del t
    assert torch.emu.memory_allocated() == before


def test_memory_is_per_device():
    gc.collect()  # no tensor of an earlier test may be freed in the middle
    before0, before1 = torch.emu.memory_allocated(0), torch.emu.memory_allocated(1)
    t = torch.empty(4096, dtype=torch.uint8, device="emu:1")
    assert torch.emu.memory_allocated(1) - before1 == 4096
    assert torch.emu.memory_allocated(0) == before0
    del t


def test_peak_and_reset_peak_memory_stats():
    gc.collect()  # no tensor of an earlier test may be freed in the middle
    torch.emu.reset_peak_memory_stats()
    base = torch.emu.memory_allocated()
    assert torch.emu.max_memory_allocated() == base
    big = torch.empty(4 * MiB, dtype=torch.uint8, device="emu")
    del big
    assert torch.emu.memory_allocated() == base
    assert torch.emu.max_memory_allocated() == base + 4 * MiB
    assert torch.emu.max_memory_reserved() >= torch.emu.max_memory_allocated()
    torch.emu.reset_peak_memory_stats()
    assert torch.emu.max_memory_allocated() == base
    stats = torch.emu.memory_stats()
    assert stats["allocated_bytes.all.current"] == base
    assert stats["allocated_bytes.all.peak"] == base


def test_empty_cache_and_mem_get_info():
    gc.collect()  # no tensor of an earlier test may be freed in the middle
    torch.emu.empty_cache()
    free0, total = torch.emu.mem_get_info()
    assert total == TINY_HBM_BYTES and 0 < free0 <= total
    # nothing cached but the free part of a small (2 MiB) segment that a live tensor of an earlier
    # test still holds (empty_cache returns whole free segments only)
    assert 0 <= torch.emu.memory_reserved() - torch.emu.memory_allocated() < 2 * MiB
    t = torch.empty(8 * MiB, dtype=torch.uint8, device="emu")
    free1, _ = torch.emu.mem_get_info()
    assert free0 - free1 >= 8 * MiB
    reserved = torch.emu.memory_reserved()
    del t
    assert torch.emu.memory_reserved() == reserved  # the block stays cached ...
    again = torch.empty(8 * MiB, dtype=torch.uint8, device="emu")
    assert torch.emu.mem_get_info()[0] == free1  # ... and is reused without a new reservation
    del again
    torch.emu.empty_cache()  # ... until empty_cache returns its whole (20 MiB) segment
    assert torch.emu.memory_reserved() == reserved - 20 * MiB
    assert torch.emu.mem_get_info() == (free0, total)
    assert torch.emu.mem_get_info(1)[1] == TINY_HBM_BYTES


# --------------------------------------------------------------------- random numbers
SAMPLERS = {
    "rand": lambda g: torch.rand(64, device="emu", generator=g),
    "randn": lambda g: torch.randn(64, device="emu", generator=g),
    "randint": lambda g: torch.randint(-50, 50, (64,), device="emu", generator=g),
    "normal_": lambda g: torch.empty(64, device="emu").normal_(2.0, 3.0, generator=g),
    "uniform_": lambda g: torch.empty(64, device="emu", dtype=torch.float64).uniform_(-1, 4, generator=g),
    "bernoulli_": lambda g: torch.empty(64, device="emu").bernoulli_(0.3, generator=g),
    "bernoulli": lambda g: torch.bernoulli(torch.full((64,), 0.6, device="emu"), generator=g),
    "randn_f16": lambda g: torch.randn(64, device="emu", dtype=torch.float16, generator=g),
}


@pytest.mark.parametrize("name", SAMPLERS)
def test_generator_manual_seed_reproduces(name):
    sample = SAMPLERS[name]
    g = torch.Generator(device="emu")
    assert g.device == torch.device("emu", 0)
    g.manual_seed(1234)
    first, second = sample(g).cpu(), sample(g).cpu()
    g.manual_seed(1234)
    assert torch.equal(sample(g).cpu(), first)
    assert torch.equal(sample(g).cpu(), second)
    if name not in ("bernoulli_", "bernoulli"):
        assert not torch.equal(first, second)  # the generator advances
    g.manual_seed(4321)
    assert not torch.equal(sample(g).cpu(), first)  # different seeds differ


def test_default_generator_seeding_and_state_replay():
    torch.emu.manual_seed(7)
    assert torch.emu.initial_seed() == 7
    a = torch.randn(100, device="emu").cpu()
    torch.emu.manual_seed(7)
    assert torch.equal(torch.randn(100, device="emu").cpu(), a)
    state = torch.emu.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    b = torch.rand(50, device="emu").cpu()
    c = torch.randint(0, 1000, (50,), device="emu").cpu()
    torch.emu.set_rng_state(state)
    assert torch.equal(torch.rand(50, device="emu").cpu(), b)
    assert torch.equal(torch.randint(0, 1000, (50,), device="emu").cpu(), c)
    torch.emu.manual_seed(8)
    assert not torch.equal(torch.randn(100, device="emu").cpu(), a)
    # torch.manual_seed seeds the emu generators too (as it does CUDA's)
    torch.manual_seed(7)
    assert torch.equal(torch.randn(100, device="emu").cpu(), a)


def test_generator_get_set_state_and_per_device_generators():
    g = torch.Generator(device="emu:1").manual_seed(3)
    state = g.get_state()
    x = torch.rand(20, device="emu:1", generator=g).cpu()
    g.set_state(state)
    assert torch.equal(torch.rand(20, device="emu:1", generator=g).cpu(), x)
    torch.emu.manual_seed_all(11)
    states = torch.emu.get_rng_state_all()
    assert len(states) == 2
    on0 = torch.rand(10, device="emu:0").cpu()
    on1 = torch.rand(10, device="emu:1").cpu()
    torch.emu.set_rng_state_all(states)
    assert torch.equal(torch.rand(10, device="emu:1").cpu(), on1)
    assert torch.equal(torch.rand(10, device="emu:0").cpu(), on0)


def test_distribution_sanity():
    g = torch.Generator(device="emu").manual_seed(0)
    n = 200_000
    u = torch.rand(n, device="emu", generator=g).cpu()
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.std() - (1 / 12) ** 0.5) < 0.005
    z = torch.randn(n, device="emu", generator=g).cpu()
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1.0) < 0.01
    assert 0.6 < ((z > -1) & (z < 1)).float().mean() < 0.765  # ~68.3% within one sigma
    w = torch.empty(n, device="emu").normal_(2.0, 3.0, generator=g).cpu()
    assert abs(w.mean() - 2.0) < 0.05 and abs(w.std() - 3.0) < 0.05
    v = torch.empty(n, device="emu", dtype=torch.float64).uniform_(-2.0, 5.0, generator=g).cpu()
    assert -2.0 <= v.min() and v.max() < 5.0 and abs(v.mean() - 1.5) < 0.05
    b = torch.empty(n, device="emu").bernoulli_(0.3, generator=g).cpu()
    assert set(b.unique().tolist()) == {0.0, 1.0} and abs(b.mean() - 0.3) < 0.01
    for dtype in (torch.float16, torch.bfloat16):
        h = torch.randn(20_000, device="emu", dtype=dtype, generator=g).cpu().float()
        assert abs(h.mean()) < 0.03 and abs(h.std() - 1.0) < 0.03


@pytest.mark.parametrize("dtype,low,high", [
    (torch.int64, -5, 7), (torch.int32, 0, 3), (torch.int8, -128, 128), (torch.uint8, 0, 256),
    (torch.int64, 0, 1 << 40), (torch.float32, -3, 4),
])
def test_randint_bounds(dtype, low, high):
    g = torch.Generator(device="emu").manual_seed(5)
    r = torch.randint(low, high, (20_000,), device="emu", dtype=dtype, generator=g).cpu()
    assert r.dtype == dtype
    assert r.min().item() >= low and r.max().item() < high
    if high - low <= 256:
        assert set(r.unique().tolist()) == set(range(low, high))  # every value is reachable
    else:
        assert r.double().mean() == pytest.approx((low + high - 1) / 2, rel=0.05)


def test_normal_with_non_finite_parameters_matches_cpu():
    """CPU returns mean + std * z (inf/NaN); the kernel faults the device on non-finite
    parameters, so these must not reach it (a bad argument never poisons the context)."""
    g = torch.Generator(device="emu").manual_seed(0)
    inf_std = torch.empty(1000, device="emu").normal_(1.0, float("inf"), generator=g).cpu()
    assert inf_std.isinf().all() and (inf_std > 0).any() and (inf_std < 0).any()
    assert torch.empty(8, device="emu").normal_(float("inf"), 2.0).cpu().tolist() == [float("inf")] * 8
    assert torch.empty(8, device="emu").normal_(float("nan"), 2.0).cpu().isnan().all()
    assert torch.empty(4, device="emu").normal_(5.0, 0.0).cpu().tolist() == [5.0] * 4
    assert (torch.ones(3, device="emu") + 1).cpu().tolist() == [2.0] * 3  # the context is healthy


def test_bernoulli_with_a_broadcast_probability_tensor():
    p = torch.tensor([0.0, 1.0, 0.5], dtype=torch.float64)  # another dtype, on the host
    x = torch.empty(2000, 3, device="emu").bernoulli_(p).cpu()
    assert x[:, 0].eq(0).all() and x[:, 1].eq(1).all()
    assert 0.45 < x[:, 2].mean() < 0.55
    y = torch.bernoulli(torch.full((4, 5), 1.0, device="emu:1"))
    assert y.device == torch.device("emu", 1) and y.cpu().eq(1).all()


def test_uniform_bounds_are_checked_like_cpu():
    t = torch.zeros(4, dtype=torch.float16, device="emu")
    with pytest.raises(RuntimeError, match="to is out of bounds for torch.float16"):
        t.uniform_(0, 1e6)  # beyond float16's range
    with pytest.raises(RuntimeError, match=r"\[from, to\) range"):
        t.uniform_(2, 1)
    assert t.uniform_(2, 2).cpu().tolist() == [2.0] * 4
    assert t.cpu().tolist() == [2.0] * 4


def test_random_without_bounds_uses_the_dtype_range():
    x = torch.empty(10_000, dtype=torch.int8, device="emu").random_().cpu()
    assert x.min() >= 0 and x.max() <= 127  # like CPU: [0, 2**7)
    b = torch.empty(1000, dtype=torch.bool, device="emu").random_().cpu()
    assert set(b.unique().tolist()) == {False, True}


# -------------------------------------------------------------------- op telemetry
# Ops with only a CPU kernel: they reach the host fallback whatever aten ops have emu kernels.
_host_ops = torch.library.Library("seed_device_test", "DEF")
_host_ops.define("atan2(Tensor a, Tensor b) -> Tensor")
_host_ops.define("hypot(Tensor a, Tensor b) -> Tensor")
_host_ops.impl("atan2", torch.atan2, "CPU")
_host_ops.impl("hypot", torch.hypot, "CPU")
host_atan2, host_hypot = torch.ops.seed_device_test.atan2, torch.ops.seed_device_test.hypot


def test_op_stats_counts_native_and_host_fallback():
    torch.emu.reset_op_stats()
    a = torch.ones(4, device="emu")
    a + a
    a * 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        host_atan2(a, a)
    stats = torch.emu.op_stats()
    assert stats["native"]["aten::add.Tensor"] == 1
    assert stats["native"]["aten::mul.Tensor"] == 1
    assert stats["host_fallback"] == {"seed_device_test::atan2": 1}
    assert "seed_device_test::atan2" not in stats["native"]  # exactly one path per op instance
    torch.emu.reset_op_stats()
    assert torch.emu.op_stats() == {"native": {}, "composite": {}, "decomposition": {}, "host_fallback": {},
                                    "rejection": {}, "host_fallback_copies": {}}


def test_host_fallback_warns_once_per_op():
    op = "seed_device_test::hypot"
    fallback._warned.discard(op)  # the warning is once per process; forget any earlier test's use
    a = torch.full((3,), 3.0, device="emu")
    b = torch.full((3,), 4.0, device="emu")
    torch.emu.reset_op_stats()
    with pytest.warns(UserWarning, match="seed_device_test::hypot has no emu kernel"):
        first = host_hypot(a, b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second warning for the same op would raise here
        second = host_hypot(a, b)
    assert first.device.type == "emu" and first.cpu().tolist() == [5.0, 5.0, 5.0]
    assert torch.equal(second.cpu(), first.cpu())
    assert torch.emu.op_stats()["host_fallback"][op] == 2  # counted every time


def test_host_fallback_can_be_forbidden():
    a = torch.ones(3, device="emu")
    torch.emu.set_host_fallback(False)
    try:
        with pytest.raises(RuntimeError, match="seed_device_test::atan2 has no emu kernel and host fallback is "
                                               "disabled"):
            host_atan2(a, a)
        assert (a + a).cpu().tolist() == [2.0, 2.0, 2.0]  # native ops still run
    finally:
        torch.emu.set_host_fallback(True)
