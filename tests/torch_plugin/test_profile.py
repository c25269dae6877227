"""torch.emu.profile(): the report, its rows, the verdict, the Chrome trace and the roofline
(torch_plugin/profile/, runtime/report.py; docs/profiling.md)."""
import json
import math

import pytest
import torch

import runtime
from torch_plugin.ops import fallback
from torch_plugin.profile import OpRow, ProfileReport

ROW_FIELDS = ("op", "shapes", "dtype", "path", "kernel", "engines", "cycles", "time_s", "flops", "bytes",
              "fraction_of_peak", "bound", "energy_j", "throttled")


def small_workload(n=64):
    x = torch.randn(n, n).to("emu")
    w = torch.randn(n, n).to("emu")
    with torch.emu.profile() as prof:
        y = (x @ w).relu()
        total = y.sum().item()
    return prof, total


def block_trace(prof):
    """The firmware trace records of the block's commands (what the report is built from)."""
    seqs = {c[0] for c in prof._commands}
    rt = runtime.get_runtime()
    return [e for d in range(rt.device_count) for e in rt.command_trace(d) if e.seq in seqs]


def test_report_has_the_documented_fields_and_rows():
    prof, _ = small_workload()
    report = prof.report()
    assert isinstance(report, ProfileReport)
    public = {k for k in vars(report) if not k.startswith("_")}
    assert public == set(ProfileReport.FIELDS) == {"projected_device_time_s", "projected_total_time_s",
                                                     "wall_time_s", "ops", "engine_utilization",
                                                     "host_fallback_count"}
    assert report.projected_total_time_s >= report.projected_device_time_s > 0
    assert report.wall_time_s > 0
    assert report.host_fallback_count == 0
    for row in report.ops:
        assert isinstance(row, OpRow)
        assert tuple(row.keys()) == ROW_FIELDS
        assert tuple(row.as_dict()) == ROW_FIELDS
        assert row.bound in ("compute", "memory", "latency", "host")
        assert 0.0 <= row.fraction_of_peak <= 1.0
    (mm,) = [r for r in report.ops if r.op == "aten::mm"]
    assert mm["kernel"] == "matmul" and mm.path == "native" and mm.dtype == "float32"
    assert mm.shapes == ((64, 64), (64, 64))
    assert mm.flops == 2 * 64 ** 3
    assert mm.time_s > 0 and mm.cycles > 0 and mm.engines
    assert any("matrix" in lane for lane in mm.engines)
    (relu,) = [r for r in report.ops if r.op == "aten::relu"]
    assert any("vector" in lane for lane in relu.engines)
    # item() copied the scalar to the host over the host link
    (scalar,) = [r for r in report.ops if r.op == "aten::_local_scalar_dense"]
    assert scalar.kernel == "memcpy_d2h" and any("host_link" in lane for lane in scalar.engines)


def test_rows_carry_each_command_once():
    prof, _ = small_workload()
    report = prof.report()
    entries = block_trace(prof)
    device_rows = [r for r in report.ops if r.bound != "host"]
    assert math.isclose(sum(r.time_s for r in device_rows), sum(e.end_ns - e.start_ns for e in entries) / 1e9)
    assert sum(r.flops for r in device_rows) == sum(e.flops for e in entries)
    assert sum(r.bytes for r in device_rows) == sum(e.nbytes for e in entries)


def test_utilization_is_per_lane_and_never_above_one():
    xs = [torch.randn(256, 256) for _ in range(8)]
    with torch.emu.profile() as prof:
        on_device = [x.to("emu", non_blocking=True) for x in xs]   # several DMA engines at once
        total = sum(t.sum() for t in on_device)
        total.item()
    util = prof.report().engine_utilization
    assert util and all(0.0 <= f <= 1.0 for f in util.values()), util
    assert any(lane.startswith("dev0.dma") for lane in util)
    assert any("host_link.h2d" in lane for lane in util)


def test_host_fallback_ops_carry_their_host_cost():
    n = 1 << 14
    x = torch.ones(n, device="emu")
    clock = runtime.get_runtime().clock
    with torch.emu.host_fallback("allow"), torch.emu.profile() as prof:
        fallback.run_on_host(torch.ops.aten.cumsum.default, x, 0)
    report = prof.report()
    assert report.host_fallback_count == 1
    (row,) = [r for r in report.ops if r.path == "host_fallback"]
    assert row.op == "aten::cumsum" and row.bound == "host" and row.kernel == "host"
    # the host cost model (runtime/host_clock.py): n flops, 4n bytes in + 4n bytes out
    assert row.time_s == pytest.approx(clock.host_work_cost_ns(n, 8 * n) / 1e9)
    assert row.time_s > 0
    assert report.host_time["host_work_ns"] == pytest.approx(row.time_s * 1e9)
    # the fallback's own copies are device rows of their own
    copies = [r for r in report.ops if r.path == "host_fallback_copies"]
    assert {r.kernel for r in copies} >= {"memcpy_d2h", "memcpy_h2d"}


def test_verdict_names_the_largest_term():
    # many tiny kernels: launch overhead dominates
    x = torch.ones(8, device="emu")
    with torch.emu.profile() as launch:
        for _ in range(50):
            x = x + 1
        x.sum().item()
    # one large GEMM: the device dominates
    a = torch.randn(512, 512).to("emu")
    with torch.emu.profile() as device:
        (a @ a).sum().item()
    # a large op on the host CPU: host work dominates
    big = torch.ones(1 << 20, device="emu")
    with torch.emu.host_fallback("allow"), torch.emu.profile() as host:
        fallback.run_on_host(torch.ops.aten.cumsum.default, big, 0)
    verdicts = {}
    for name, prof in (("launch", launch), ("device", device), ("host", host)):
        report = prof.report()
        h = report.host_time
        terms = {"device-bound": report.projected_device_time_s * 1e9, "host-bound": h["host_work_ns"],
                 "launch-bound": h["dispatch_ns"]}
        assert report.verdict == max(terms, key=terms.get)
        assert h["dispatch_ns"] == pytest.approx(h["api_ns"] + h["interrupt_stolen_ns"])
        verdicts[name] = report.verdict
    assert verdicts == {"launch": "launch-bound", "device": "device-bound", "host": "host-bound"}


def test_back_pressure_and_interrupts_are_host_time():
    ring = runtime.get_runtime().config.device.command_processor.ring_entries
    a = torch.randn(256, 256).to("emu")
    with torch.emu.profile() as prof:
        for _ in range(ring + 16):  # more commands than the ring holds, each far slower than its launch
            c = a @ a
        c.sum().item()
    h = prof.report().host_time
    # The host blocked on the full ring (how long in modelled time depends on when the firmware
    # frees ring slots: it books commands ahead of the simulation clock).
    assert h["backpressure_waits"] > 0 and h["backpressure_wait_ns"] >= 0
    assert h["sync_waits"] >= 1 and h["sync_wait_ns"] > 0   # the final item() waited for the GEMMs
    assert h["interrupts"] >= 1
    assert h["total_ns"] == pytest.approx(prof.report().projected_total_time_s * 1e9)


def test_table_and_json():
    prof, _ = small_workload()
    report = prof.report()
    text = str(report)
    assert text == report.table()
    assert "aten::mm" in text and "matmul" in text and "verdict:" in text
    data = json.loads(report.to_json())
    for field in ProfileReport.FIELDS:
        assert field in data
    assert data["verdict"] == report.verdict
    assert [tuple(row) for row in data["ops"]] == [ROW_FIELDS] * len(report.ops)


def test_to_json_writes_the_file(tmp_path):
    prof, _ = small_workload()
    path = tmp_path / "report.json"
    text = prof.report().to_json(path)
    assert json.loads(path.read_text()) == json.loads(text)


def test_profiler_misuse_is_a_clear_error():
    prof = torch.emu.profile()
    with pytest.raises(RuntimeError, match="after the `with` block"):
        prof.report()
    with prof:
        with pytest.raises(RuntimeError, match="after the `with` block"):
            prof.export_chrome_trace("unused.json")
    with pytest.raises(RuntimeError, match="create another"):
        with prof:
            pass


def test_profile_and_telemetry_blocks_nest():
    x = torch.ones(16, device="emu")
    with torch.emu.telemetry() as tel:
        with torch.emu.profile() as prof:
            (x * 2).sum().item()
    assert any(r.op == "aten::mul.Tensor" for r in prof.report().ops)
    assert any(row["op"] == "aten::mul.Tensor" for row in tel.as_dict()["ops"])
    # nothing is hooked after both closed
    assert "launch" not in vars(runtime.get_runtime())


# -- the Chrome trace ----------------------------------------------------------------------------
def test_chrome_trace_structure(tmp_path):
    prof, _ = small_workload()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    names = set(lanes.values())
    cores = runtime.get_runtime().config.device
    assert {"host thread", "runtime", "driver", "dev0.host_link.h2d", "dev0.host_link.d2h"} <= names
    assert {f"dev0.dma{k}" for k in range(cores.dma.engines)} <= names
    assert {f"dev0.core0.{unit}" for unit in ("matrix", "vector")} <= names
    complete = [e for e in events if e["ph"] == "X"]
    for e in complete:
        assert type(e["ts"]) in (int, float) and type(e["dur"]) in (int, float) and e["dur"] >= 0
        assert (e["pid"], e["tid"]) in lanes
    aten_ids = {cid for e in complete if e["cat"] == "aten" for cid in e["args"]["correlation_ids"]}
    engine = [e for e in complete if e["cat"] == "engine"]
    assert engine
    for cat in ("engine", "firmware", "runtime", "driver"):
        ids = {e["args"]["correlation_id"] for e in complete if e["cat"] == cat}
        assert ids and ids <= aten_ids, cat
    # each correlation id is one flow: a start on the host thread, steps, a finish on an engine lane
    flows = {}
    for e in events:
        if e["ph"] in "stf" and e.get("cat") == "correlation":
            flows.setdefault(e["id"], []).append(e)
    assert set(flows) == {e["args"]["correlation_id"] for e in engine}
    for cid, chain in flows.items():
        phases = [e["ph"] for e in sorted(chain, key=lambda e: e["ts"])]
        assert phases[0] == "s" and phases[-1] == "f" and set(phases[1:-1]) == {"t"}
        finish = next(e for e in chain if e["ph"] == "f")
        assert lanes[(finish["pid"], finish["tid"])].startswith("dev")
        start = next(e for e in chain if e["ph"] == "s")
        assert lanes[(start["pid"], start["tid"])] == "host thread"


def trace_slices(prof, tmp_path, cat):
    """{(pid, tid): [(start, end)]} of the exported trace's complete events of category ``cat``."""
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    by_lane = {}
    for e in json.loads(path.read_text())["traceEvents"]:
        if e["ph"] == "X" and e["cat"] == cat:
            by_lane.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    return by_lane


def assert_lanes_disjoint(by_lane):
    for spans in by_lane.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert start >= end - 1e-9


def test_engine_lanes_hold_disjoint_events(tmp_path):
    xs = [torch.randn(128, 128) for _ in range(6)]
    with torch.emu.profile() as prof:
        for x in xs:
            x.to("emu", non_blocking=True)
        torch.emu.synchronize()
    assert_lanes_disjoint(trace_slices(prof, tmp_path, "engine"))


# -- the roofline --------------------------------------------------------------------------------
def test_roofline_png(tmp_path):
    pytest.importorskip("matplotlib", reason="save_roofline needs matplotlib (Makefile DEPS installs it)")
    prof, _ = small_workload()
    path = tmp_path / "roofline.png"
    prof.save_roofline(path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_ring_lanes_hold_disjoint_events_under_launch_pipelining(tmp_path):
    # Back-to-back kernels on one stream: each next launch overlaps the running kernel
    # (docs/hardware.md, "Launch pipelining"), the ring lane's slices still do not overlap.
    x = torch.randn(256, 256).to("emu")
    torch.emu.synchronize()
    with torch.emu.profile() as prof:
        for _ in range(6):
            x = x @ x * 0.01
        torch.emu.synchronize()
    by_ring = trace_slices(prof, tmp_path, "firmware")
    assert sum(len(spans) for spans in by_ring.values()) >= 12
    assert_lanes_disjoint(by_ring)
