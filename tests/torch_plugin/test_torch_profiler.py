"""emu in PyTorch's own profiler: torch.profiler.profile() (default activities and CPU +
PrivateUse1), torch.autograd.profiler.profile(use_device="emu") (the legacy mode); device times
are the emulator's modelled times (torch_plugin/csrc/profiler.cpp, torch_plugin/profile/kineto.py's
_TorchProfilerFeed; docs/profiling.md#pytorchs-profiler)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import runtime

# Kineto times are integer nanoseconds: a modelled duration comes out truncated by < 1 ns.
NS_US = 1e-3


def workload(n=64):
    x = torch.randn(n, n, device="emu")
    w = torch.randn(n, n, device="emu")
    torch.emu.synchronize()
    return x, w


def modelled_us(seq: int) -> float:
    """A command's modelled device time (first start to last end of its trace records), in us."""
    rt = runtime.get_runtime()
    entries = [e for d in range(rt.device_count) for e in rt.command_trace(d) if e.seq == seq]
    assert entries, f"no firmware trace record for command {seq}"
    return (max(e.end_ns for e in entries) - min(e.start_ns for e in entries)) / 1e3


def chrome_events(prof, tmp_path):
    """The profile's Chrome trace events (kineto saves a trace once: read back after that)."""
    if not hasattr(prof, "_test_trace"):
        path = tmp_path / "trace.json"
        prof.export_chrome_trace(str(path))
        prof._test_trace = json.loads(path.read_text())["traceEvents"]
    return prof._test_trace


def device_events(prof):
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]


@pytest.fixture(params=["default", "cpu_and_privateuse1"])
def kineto_profile(request):
    """A profiled mm + relu + copy to the host under torch.profiler.profile()."""
    x, w = workload()
    activities = None if request.param == "default" else [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
    kwargs = {} if activities is None else {"activities": activities}
    with profile(**kwargs) as prof:
        y = (x @ w).relu()
        host = y.cpu()
    torch.testing.assert_close(host, (x.cpu() @ w.cpu()).relu(), rtol=1.3e-6, atol=1e-5)
    return prof


def test_privateuse1_is_a_supported_activity():
    assert ProfilerActivity.PrivateUse1 in torch._C._autograd._supported_activities()


def test_kineto_device_kernels_carry_modelled_times(kineto_profile, tmp_path):
    kernels = {e["name"]: e for e in chrome_events(kineto_profile, tmp_path) if e.get("cat") == "kernel"}
    assert {"matmul", "unary.relu"} <= set(kernels)
    for name in ("matmul", "unary.relu"):
        event = kernels[name]
        assert event["pid"] == 0  # emu:0
        assert event["dur"] == pytest.approx(modelled_us(event["args"]["seq"]), abs=NS_US)
        assert event["args"]["modelled_end_us"] - event["args"]["modelled_start_us"] == pytest.approx(
            event["dur"], abs=NS_US)
    copies = [e for e in chrome_events(kineto_profile, tmp_path) if e.get("cat") == "gpu_memcpy"]
    assert [e["name"] for e in copies] == ["memcpy_d2h"]
    assert copies[0]["dur"] == pytest.approx(modelled_us(copies[0]["args"]["seq"]), abs=NS_US)


def test_kineto_device_time_is_attributed_to_the_op_that_launched_it(kineto_profile, tmp_path):
    events = chrome_events(kineto_profile, tmp_path)
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op"}
    matmul = next(e for e in events if e.get("cat") == "kernel" and e["name"] == "matmul")
    owner = ops[matmul["args"]["correlation"]]
    assert owner["name"] == "aten::mm"
    assert matmul["ts"] >= owner["ts"]  # placed at its submission, inside its op or after
    rows = {row.key: row for row in kineto_profile.key_averages()}
    assert rows["aten::mm"].device_time_total == pytest.approx(matmul["dur"], abs=NS_US)
    assert rows["matmul"].self_device_time_total == pytest.approx(matmul["dur"], abs=NS_US)
    assert rows["aten::relu"].device_time_total > 0
    # The host-side copy op carries the copy's modelled time.
    memcpy = next(e for e in events if e.get("cat") == "gpu_memcpy")
    assert ops[memcpy["args"]["correlation"]]["name"] == "aten::_copy_from"


def test_kineto_times_are_never_negative_and_the_table_has_device_columns(kineto_profile):
    for event in kineto_profile.events():
        assert event.time_range.end >= event.time_range.start >= 0, event.name
        assert event.cpu_time_total >= 0 and event.device_time_total >= 0, event.name
    table = kineto_profile.key_averages().table(sort_by="device_time_total", row_limit=20)
    assert "Self EMU" in table and "EMU total" in table
    assert "matmul" in table and "aten::mm" in table


def test_kineto_backward_kernels_on_autograd_thread_are_linked():
    x, w = workload()
    w.requires_grad_()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        (x @ w).sum().backward()
        torch.emu.synchronize()
    kernels = [e for e in device_events(prof) if e.name == "matmul"]
    assert len(kernels) == 2  # forward and the weight's gradient
    linked = {e.linked_correlation_id for e in kernels}
    assert 0 not in linked
    ops = {e.id: e.name for e in prof.events() if e.id in linked}
    assert sorted(ops.values()) == ["aten::mm", "aten::mm"]


def test_kineto_block_without_device_work_has_no_device_events():
    x = torch.randn(8, 8)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        (x @ x).sum()
    assert device_events(prof) == []
    assert prof.key_averages().table()


def test_legacy_use_device_emu_reports_modelled_device_time(tmp_path):
    x, w = workload()
    with torch.autograd.profiler.profile(use_device="emu") as prof:
        y = x @ w
        y.cpu()
    assert prof.profiler_kind == torch.autograd.ProfilerState.KINETO_PRIVATEUSE1_FALLBACK
    for event in prof.function_events:
        assert event.time_range.end >= event.time_range.start >= 0, event.name
        assert event.cpu_time_total >= 0 and event.device_time_total >= 0, event.name
    rows = {row.key: row for row in prof.key_averages()}
    # The op's device time is the modelled time between the events recorded at its start and its
    # end on the stream: its kernel and the events' own commands. The matmul alone takes this:
    rt = runtime.get_runtime()
    matmul = [e for e in rt.command_trace(0) if e.name == "matmul"][-1]
    kernel_us = (matmul.end_ns - matmul.start_ns) / 1e3
    assert rows["aten::mm"].device_time_total >= kernel_us
    assert rows["aten::mm"].device_time_total < kernel_us + 50.0  # a few event commands, not wall time
    table = prof.key_averages().table()
    assert "EMU total" in table
    prof.export_chrome_trace(str(tmp_path / "legacy.json"))
    assert json.loads((tmp_path / "legacy.json").read_text())["traceEvents"]


def test_no_profiler_asserts_on_any_entry_point():
    """PyTorch prints a failing profiler callback to stderr and carries on; none may fail."""
    script = textwrap.dedent("""
        import torch, torch_plugin
        from torch.profiler import profile, ProfilerActivity
        x = torch.randn(32, 32, device="emu")
        for ctx in (profile(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]),
                    torch.autograd.profiler.profile(use_device="emu")):
            with ctx as prof:
                (x @ x).relu().cpu()
            assert min(e.cpu_time_total for e in prof.key_averages()) >= 0
            print(prof.key_averages().table(row_limit=3))
        print("DONE")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "EMU_PRESET": "tiny"})
    assert done.returncode == 0, done.stderr
    assert "DONE" in done.stdout
    for bad in ("INTERNAL ASSERT", "not enabled", "Exception in RecordFunction callback"):
        assert bad not in done.stderr, done.stderr


def test_scheduled_profile_reports_each_active_cycle_once():
    """torch.profiler's schedule starts and stops the device trace once per active cycle."""
    from torch.profiler import schedule

    import torch_plugin.profile as emu_profile

    x, _ = workload(32)
    per_cycle = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
                 on_trace_ready=lambda p: per_cycle.append(sum(e.name == "matmul" for e in device_events(p)))) as prof:
        for _ in range(10):
            (x @ x).cpu()
            prof.step()
    assert per_cycle == [2, 2]  # two steps per active cycle, one matmul each
    assert emu_profile._torch_feeds == []  # every device trace it started was stopped
