"""Projected-performance report (runtime/report.py)."""
import numpy as np

from emulator.kernels import dtypes
from runtime import TensorRef
from runtime.report import device_peaks, format_report, kernel_rows

F32 = dtypes.FLOAT32


def ref(address, shape):
    strides = (shape[1], 1) if len(shape) == 2 else (1,)
    return TensorRef(False, 0, address, F32, shape, strides)


def do_work(rt):
    s = rt.stream(0)
    n = 256
    a = np.ones((n, n), np.float32)
    da, db, dc = (rt.malloc(0, a.nbytes) for _ in range(3))
    rt.memcpy(ref(da, a.shape), TensorRef(True, -1, a.ctypes.data, F32, a.shape, (n, 1)), s)
    rt.memcpy(ref(db, a.shape), ref(da, a.shape), s)
    rt.launch("binary", ("add", ref(dc, a.shape), ref(da, a.shape), ref(db, a.shape), F32, 1), s)
    rt.launch("matmul", (ref(dc, a.shape), ref(da, a.shape), ref(db, a.shape), None, 0.0, 1.0), s)
    out = np.zeros_like(a)
    rt.memcpy(TensorRef(True, -1, out.ctypes.data, F32, a.shape, (n, 1)), ref(dc, a.shape), s, blocking=True)
    assert (out == n).all()


def row_of(report, kernel):
    (line,) = [l for l in report.splitlines() if l.split() and l.split()[0] == kernel]
    return line


def test_report_mentions_kernels_utilisation_and_bottlenecks(rt):
    do_work(rt)
    report = format_report(rt)
    assert "Seed-tiny x2" in report and "preset tiny" in report
    assert "emu:0 utilisation" in report
    assert "emu:1" not in report                           # device 1 was never used
    header = [l for l in report.splitlines() if l.split()[:1] == ["kernel"]]
    assert len(header) == 1 and header[0].rstrip().endswith("bottleneck")
    assert row_of(report, "matmul").endswith("compute")    # 256^3 GEMM: high arithmetic intensity
    assert row_of(report, "binary.add").endswith("memory")
    assert row_of(report, "memcpy_h2d").endswith("link")
    assert row_of(report, "memcpy_d2h").endswith("link")
    assert row_of(report, "memcpy_d2d").endswith("memory")
    assert "verdict:" in report


def test_report_on_a_fresh_runtime_is_short(rt):
    report = format_report(rt)
    assert "utilisation" not in report and "kernel" not in report.split("\n", 1)[1]


def test_kernel_rows_numbers(rt):
    do_work(rt)
    rows = {r["kernel"]: r for r in kernel_rows(rt.telemetry(0), rt.config)}
    assert rows["matmul"]["flops"] == 2 * 256 ** 3
    assert rows["matmul"]["count"] == 1
    assert rows["memcpy_h2d"]["bytes"] == 256 * 256 * 4
    # Copies over the host link cannot beat the link bandwidth.
    assert 0 < rows["memcpy_h2d"]["gbytes_per_s"] <= rt.config.host_link.bandwidth_gb_per_s
    peaks = device_peaks(rt.config)
    assert peaks["matrix_flops"] == 2 * 32 * 32 * 1.0e9
    assert rows["matmul"]["gflops_per_s"] * 1e9 <= peaks["matrix_flops"]
    # Rows come busiest first.
    busy = [r["busy_us"] for r in kernel_rows(rt.telemetry(0), rt.config)]
    assert busy == sorted(busy, reverse=True)
