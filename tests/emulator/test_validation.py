"""Validation of the timing model (docs/hardware.md, "Validation"): roofline invariant, fidelity
agreement, SCALE-Sim compute cycles, an H200 preset against measured figures, scaling."""
import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from cost_helpers import (BF16, F32, F64, add, attention, bmm, conv, device, im2col, matmul, op, softmax,
                          system)
from emulator.device import CostDevice
from emulator.kernels import dtypes
from emulator.kernels.library import KERNELS

DATA = Path(__file__).parent / "data" / "scalesim_results.jsonl"
SCALESIM = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
NAMES = dtypes.NAMES


def roofline_floor(dev, cost, engine, dtype):
    """max(FLOPs / peak of the engine, bytes / sustained HBM bandwidth), in ns."""
    cfg = dev.config
    peak = cfg.peak_flops(engine, NAMES[dtype]) / 1e9     # FLOP/ns
    return max(cost.flops / peak, cost.nbytes / (cfg.hbm_bytes_per_s / 1e9))


# -- launches over many kernels: (name, engine, dtype, cost(dev)) ---------------------------------
def _catalogue():
    u = lambda op_, n, dt=F32: ("unary_op." + op_, "vector", dt,
                                lambda d: KERNELS["unary_op"].cost(d, op_, op(dt, n), op(dt, n), dt, dt))
    return [
        ("matmul", "matrix", BF16, lambda d: matmul(d, 1024, 1024, 1024)),
        ("matmul.rect", "matrix", F32, lambda d: matmul(d, 100, 3000, 70, F32)),
        ("matmul.f64", "matrix", F64, lambda d: matmul(d, 256, 256, 256, F64)),
        ("matmul.skinny", "matrix", BF16, lambda d: matmul(d, 1, 4096, 4096)),
        ("bmm", "matrix", BF16, lambda d: bmm(d, 12, 128, 128, 64)),
        ("binary.add", "vector", F32, lambda d: add(d, 1 << 20)),
        ("binary.add.tiny", "vector", F32, lambda d: add(d, 3)),
        ("binary.add.f64", "vector", F64, lambda d: add(d, 1 << 16, F64)),
        u("exp", 1 << 18), u("gelu", 12345), u("sqrt", 77), u("lgamma", 1 << 14, F64),
        ("softmax", "vector", F32, lambda d: softmax(d, 512, 1024)),
        ("sum", "vector", F32, lambda d: KERNELS["sum"].cost(d, op(F32, 256, 1), op(F32, 256, 4096), 0b10, F32)),
        ("im2col", "vector", F32, lambda d: im2col(d, 16, 32, 32, 3)),
        ("copy", "vector", F32, lambda d: KERNELS["copy"].cost(d, op(F32, 1000, 1000), op(F32, 1000, 1000))),
        ("fill", "vector", BF16, lambda d: KERNELS["fill"].cost(d, op(BF16, 1 << 20), 1.0)),
        ("getrf", "matrix", F32, lambda d: KERNELS["getrf"].cost(d, 1, op(F32, 3, 64, 64), op(F32, 3, 64, 64),
                                                                   op(dtypes.INT32, 3, 64), op(dtypes.INT32, 3))),
        ("fft", "vector", dtypes.COMPLEX64,
         lambda d: KERNELS["fft"].cost(d, 0, op(dtypes.COMPLEX64, 64, 256), op(dtypes.COMPLEX64, 64, 256),
                                       0b10, 1, True, 1.0)),
    ]


CATALOGUE = _catalogue()


@pytest.mark.parametrize("preset", ["default", "tiny", "h200"])
@pytest.mark.parametrize("fidelity", ["kernel", "tile"])
@pytest.mark.parametrize("name, engine, dtype, launch", CATALOGUE, ids=[c[0] for c in CATALOGUE])
def test_projected_time_is_at_least_the_roofline_of_its_engines(preset, fidelity, name, engine, dtype, launch):
    dev = device(preset, fidelity)
    cost = launch(dev)
    assert cost.ns >= roofline_floor(dev, cost, engine, dtype) * (1 - 1e-9), (name, cost)
    assert cost.bound in ("compute", "memory", "latency")
    assert cost.cycles == round(cost.ns * dev.config.clock_ghz)
    assert 1 <= cost.cores <= dev.config.cores and cost.tiling
    assert all(lane.startswith("dev0.") for lane in cost.engines)


dims = st.integers(1, 3000)


@settings(max_examples=60, deadline=None)
@given(M=dims, N=dims, K=dims, dtype=st.sampled_from([BF16, F32, F64]), fidelity=st.sampled_from(["kernel", "tile"]))
def test_roofline_invariant_on_generated_gemms(M, N, K, dtype, fidelity):
    dev = device("default", fidelity)
    cost = matmul(dev, M, N, K, dtype)
    assert cost.ns >= roofline_floor(dev, cost, "matrix", dtype) * (1 - 1e-9)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 1 << 22), cycles_op=st.sampled_from(["neg", "exp", "tan", "igamma"]),
       fidelity=st.sampled_from(["kernel", "tile"]), preset=st.sampled_from(["default", "tiny", "h200"]))
def test_roofline_invariant_on_generated_elementwise(n, cycles_op, fidelity, preset):
    dev = device(preset, fidelity)
    x = op(F32, n)
    cost = KERNELS["unary_op"].cost(dev, cycles_op, x, x, F32, F32)
    assert cost.ns >= roofline_floor(dev, cost, "vector", F32) * (1 - 1e-9)


@pytest.mark.parametrize("size", [4096, 8192])
def test_large_gemms_on_the_default_preset_reach_80_percent_of_peak(size):
    dev = device("default")
    cost = matmul(dev, size, size, size)
    achieved = cost.flops / cost.ns * 1e9
    assert achieved >= 0.8 * dev.config.peak_flops("matrix", "bfloat16")
    assert cost.bound == "compute" and cost.cores == dev.config.cores


@pytest.mark.parametrize("fidelity", ["kernel", "tile"])
@pytest.mark.parametrize("grow", [
    lambda d, s: matmul(d, 64 * s, 64 * s, 64 * s), lambda d, s: matmul(d, 7 * s, 300, 500),
    lambda d, s: matmul(d, 300, 9 * s, 64), lambda d, s: bmm(d, s, 100, 100, 100),
    lambda d, s: add(d, 1000 * s * s), lambda d, s: softmax(d, 3 * s, 1000),
    lambda d, s: im2col(d, s, 20, 20, 3),
], ids=["gemm", "gemm-M", "gemm-N", "bmm-batch", "add", "softmax", "im2col"])
def test_cost_never_decreases_when_size_grows(fidelity, grow):
    dev = device("default", fidelity)
    times = [grow(dev, s).ns for s in range(1, 40)]
    assert all(b >= a * (1 - 1e-9) for a, b in zip(times, times[1:])), times


# -- tile vs kernel fidelity ------------------------------------------------------------------------
def _total(costs):
    return sum(c.ns for c in (costs if isinstance(costs, list) else [costs]))


@pytest.mark.parametrize("preset", ["default", "tiny", "h200"])
@pytest.mark.parametrize("workload", [
    lambda d: matmul(d, 1024, 1024, 1024), lambda d: matmul(d, 768, 3072, 768),
    lambda d: matmul(d, 512, 768, 768, F32),
    lambda d: conv(d, 4, 64, 56, 56, 64, 3), lambda d: conv(d, 2, 3, 224, 224, 32, 7),
    lambda d: attention(d, 12, 256, 64), lambda d: attention(d, 16, 1024, 64),
    lambda d: add(d, 1 << 20), lambda d: add(d, 1 << 16), lambda d: softmax(d, 1024, 1024),
    lambda d: KERNELS["unary_op"].cost(d, "gelu", op(F32, 1 << 20), op(F32, 1 << 20), F32, F32),
], ids=["gemm1k", "gemm-mlp", "gemm-f32", "conv3x3", "conv7x7", "attention-256", "attention-1k",
        "add-1M", "add-64k", "softmax", "gelu"])
def test_tile_and_kernel_fidelity_agree_within_10_percent(preset, workload):
    kernel = _total(workload(device(preset, "kernel")))
    tile = _total(workload(device(preset, "tile")))
    assert tile == pytest.approx(kernel, rel=0.10)


def test_tile_fidelity_shows_the_unhidden_prologue_of_a_balanced_kernel():
    # Without double buffering the tile model serialises each tile's load, compute and store,
    # as the kernel model's compute + memory does; with it, loads hide behind compute.
    single = device("default", "tile", device={"scratchpad": {"double_buffering": False}})
    double = device("default", "tile")
    assert matmul(single, 2048, 2048, 256).ns > matmul(double, 2048, 2048, 256).ns


# -- SCALE-Sim ------------------------------------------------------------------------------------
def scalesim_device(row, fidelity):
    # Configured like SCALE-Sim: one core, same array and dataflow, no weight double buffering,
    # one MAC per PE per cycle, operands resident in SRAM (its compute cycles exclude DRAM).
    return CostDevice(system("default", device={
        "cores": 1, "clock_ghz": 1.0,
        "matrix_engine": {"rows": row["R"], "cols": row["C"], "dataflow": row["df"],
                          "weight_double_buffering": False, "efficiency": 1.0, "macs_per_cycle": {"float32": 1.0}},
        "scratchpad": {"operands_resident": True}}).device, fidelity=fidelity)


@pytest.mark.parametrize("row", SCALESIM, ids=[f"{r['cfg']}-{r['M']}x{r['N']}x{r['K']}" for r in SCALESIM])
def test_both_fidelities_give_scalesim_compute_cycles(row):
    assert len(SCALESIM) == 30
    kernel = matmul(scalesim_device(row, "kernel"), row["M"], row["N"], row["K"], F32)
    tile = matmul(scalesim_device(row, "tile"), row["M"], row["N"], row["K"], F32)
    assert kernel.cycles == row["compute_cycles"]                       # exact, as the formulas
    assert tile.cycles == pytest.approx(row["compute_cycles"], rel=0.02)
    assert kernel.cores == 1 and kernel.bound != "memory"        # no HBM traffic: resident


# -- against a real part ----------------------------------------------------------------------------
def test_h200_preset_has_the_published_figures():
    cfg = system("h200")
    d = cfg.device
    assert d.cores == 132 and d.clock_ghz == 1.98
    assert d.hbm.capacity_bytes == 141_000_000_000 and d.hbm.bandwidth_gb_per_s == 4800.0
    assert d.peak_flops("matrix", "bfloat16") == pytest.approx(989.4e12, rel=0.005)


@pytest.mark.parametrize("fidelity", ["kernel", "tile"])
def test_h200_8192_cubed_bf16_matmul_is_within_15_percent_of_measured(fidelity):
    cost = matmul(device("h200", fidelity), 8192, 8192, 8192, BF16)
    assert cost.ns / 1e6 == pytest.approx(1.4, rel=0.15)
    assert cost.flops / cost.ns / 1e3 == pytest.approx((769 + 798) / 2, rel=0.15)   # TFLOP/s


def test_h200_device_to_device_copy_of_8_6_gb_is_within_15_percent_of_measured():
    dev = device("h200")
    read_plus_write = 8.6e9
    ns = dev.dma.copy_ns(int(read_plus_write / 2), dev.hbm)
    assert ns / 1e6 == pytest.approx(2.0, rel=0.15)


# -- scaling ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("fidelity", ["kernel", "tile"])
def test_doubling_cores_roughly_halves_a_large_compute_bound_kernel(fidelity):
    four = matmul(device("default", fidelity, device={"cores": 4}), 8192, 8192, 8192)
    eight = matmul(device("default", fidelity, device={"cores": 8}), 8192, 8192, 8192)
    assert four.bound == eight.bound == "compute"
    assert four.ns / eight.ns == pytest.approx(2.0, rel=0.1)


@pytest.mark.parametrize("fidelity", ["kernel", "tile"])
def test_doubling_hbm_bandwidth_roughly_halves_a_memory_bound_kernel(fidelity):
    slow = add(device("default", fidelity), 1 << 24)
    fast = add(device("default", fidelity, device={"hbm": {"bandwidth_gb_per_s": 3200.0}}), 1 << 24)
    assert slow.bound == fast.bound == "memory"
    assert slow.ns / fast.ns == pytest.approx(2.0, rel=0.1)
