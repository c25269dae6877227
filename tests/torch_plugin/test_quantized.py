"""Quantized and low-precision GEMMs on the matrix engine (torch_plugin/ops/quantized.py,
emulator/kernels/quantized.pyx), with the host fallback forbidden:

* ``_int_mm``: exact against CPU (int8 and uint8 x int8, strided operands, out=, overflow wrap).
* ``_weight_int8pack_mm`` and the int4 pair (``_convert_weight_to_int4pack_for_cpu`` byte for byte,
  ``_weight_int4pack_mm_for_cpu``): against a float64 reference of the same dequantized weight,
  within the float32-accumulation bound stated per test, and against CPU's own result.
  The int4 layout is CPU's for its ATen capability (64-row blocks on AVX-512, 32 otherwise), checked
  for this process's and, in child processes, for ``ATEN_CPU_CAPABILITY=avx2`` and ``default``.
* ``_scaled_mm``: tensor-wise and row-wise scales, float32/bfloat16/float16/float8 output, bias,
  use_fast_accum, every float8 format: against a float64 reference and torch's reference
  ``_scaled_mm`` (CPU with oneDNN off: on an AMX host CPU otherwise runs oneDNN's kernel, whose
  checks, wording and e4m3fn overflow differ; the reference path is the same on every host).
* Costs: _int_mm at macs_per_cycle.int8, _scaled_mm at macs_per_cycle.float8.
* PyTorch's quantized tensors: refused before any host work, naming torchao.
"""
from __future__ import annotations


import os
import subprocess
import sys
import textwrap

import pytest
import torch
from plugin_testing import forbid_fallback  # noqa: F401 (autouse: the host fallback is forbidden here)

import torch_plugin  # noqa: F401

EMU = "emu"
F8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]
# float32 accumulation of K products: |error| <= K * 2**-24 * sum|a*b| (a loose, standard bound);
# the tests state it as rtol on the result plus an atol scaled by the row's absolute sum.
ROUND = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}




def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def assert_within(actual, ref64, abs_sum, out_dtype, K, what=""):
    """|actual - ref| <= round(out_dtype) * |ref| + K * 2**-24 * abs_sum (+ the output's rounding of it)."""
    actual = actual.cpu().double()
    bound = ROUND[out_dtype] * ref64.abs() + (K * 2.0 ** -24) * abs_sum * (1 + ROUND[out_dtype]) + 1e-30
    err = (actual - ref64).abs()
    assert bool((err <= bound).all()), f"{what}: max excess {(err - bound).max().item()}"


# ---------------------------------------------------------------------------------------------
# _int_mm

@pytest.mark.parametrize("adtype", [torch.int8, torch.uint8], ids=str)
@pytest.mark.parametrize("shape", [(17, 64, 8), (1, 1, 1), (32, 128, 40), (5, 0, 3), (0, 4, 4)])
def test_int_mm_exact(adtype, shape):
    M, K, N = shape
    lo, hi = (-128, 128) if adtype == torch.int8 else (0, 256)
    a = torch.randint(lo, hi, (M, K), dtype=torch.int32, generator=gen()).to(adtype)
    b = torch.randint(-128, 128, (K, N), dtype=torch.int32, generator=gen(1)).to(torch.int8)
    got = torch._int_mm(a.to(EMU), b.to(EMU))
    assert got.dtype == torch.int32 and got.device.type == "emu"
    torch.testing.assert_close(got.cpu(), torch._int_mm(a, b), rtol=0, atol=0)
    assert torch.emu.op_stats()["native"].get("aten::_int_mm", 0) >= 1


def test_int_mm_strided_out_and_extremes():
    a = torch.full((8, 64), -128, dtype=torch.int8)
    b = torch.full((64, 16), -128, dtype=torch.int8)
    torch.testing.assert_close(torch._int_mm(a.to(EMU), b.to(EMU)).cpu(), torch._int_mm(a, b), rtol=0, atol=0)
    x = torch.randint(-128, 128, (64, 24), dtype=torch.int32, generator=gen(2)).to(torch.int8)
    y = torch.randint(-128, 128, (16, 64), dtype=torch.int32, generator=gen(3)).to(torch.int8)
    ex, ey = x.to(EMU), y.to(EMU)
    torch.testing.assert_close(torch._int_mm(ex.t(), ey.t()).cpu(), torch._int_mm(x.t(), y.t()), rtol=0, atol=0)
    out = torch.empty(0, dtype=torch.int32, device=EMU)
    torch._int_mm(ex.t(), ey.t(), out=out)
    torch.testing.assert_close(out.cpu(), torch._int_mm(x.t(), y.t()), rtol=0, atol=0)


def test_int_mm_errors_match_cpu_and_change_nothing():
    a = torch.randint(-128, 128, (8, 32), dtype=torch.int32, generator=gen()).to(torch.int8)
    cases = [(a.float(), a.t()), (a, a.t().to(torch.uint8)), (a, a), (a[0], a.t())]
    for x, y in cases:
        with pytest.raises(RuntimeError) as cpu:
            torch._int_mm(x, y)
        with pytest.raises(RuntimeError) as emu:
            torch._int_mm(x.to(EMU), y.to(EMU))
        assert str(emu.value) == str(cpu.value)
    out = torch.full((8, 8), 7, dtype=torch.float32, device=EMU)
    with pytest.raises(RuntimeError, match="Expected result dtype"):
        torch._int_mm(a.to(EMU), a.t().to(EMU), out=out)
    assert bool((out.cpu() == 7).all())


# ---------------------------------------------------------------------------------------------
# _weight_int8pack_mm

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_weight_int8pack_mm(dtype):
    M, K, N = 7, 96, 40
    a = torch.randn(M, K, generator=gen()).to(dtype)
    w = torch.randint(-128, 128, (N, K), dtype=torch.int32, generator=gen(1)).to(torch.int8)
    s = (torch.rand(N, generator=gen(2)) / 64).to(dtype)
    got = torch._weight_int8pack_mm(a.to(EMU), w.to(EMU), s.to(EMU))
    assert got.dtype == dtype
    ref = (a.double() @ w.double().t()) * s.double()
    abs_sum = (a.double().abs() @ w.double().abs().t()) * s.double().abs()
    assert_within(got, ref, abs_sum, dtype, K, "emu vs float64")
    assert_within(torch._weight_int8pack_mm(a, w, s), ref, abs_sum, dtype, K, "cpu vs float64 (the bound is fair)")


def test_weight_int8pack_mm_errors_match_cpu():
    a, w, s = torch.randn(4, 32), torch.zeros(8, 32, dtype=torch.int8), torch.ones(8)
    for args in [(a.double(), w, s.double()), (a, w.t().contiguous().t(), s), (a, w, s.double())]:
        with pytest.raises(RuntimeError) as cpu:
            torch._weight_int8pack_mm(*args)
        with pytest.raises(RuntimeError) as emu:
            torch._weight_int8pack_mm(*[t.to(EMU) for t in args])
        assert str(emu.value) == str(cpu.value)


# ---------------------------------------------------------------------------------------------
# int4

@pytest.mark.parametrize("N", [16, 48, 64, 96, 160])
def test_int4_pack_matches_cpu_byte_for_byte(N):
    K = 64
    w = torch.randint(0, 16, (N, K), dtype=torch.int32, generator=gen(N))
    got = torch._convert_weight_to_int4pack_for_cpu(w.to(EMU), 2)
    want = torch._convert_weight_to_int4pack_for_cpu(w, 2)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.cpu(), want)
    # a transposed (strided) source packs the same
    assert torch.equal(torch._convert_weight_to_int4pack_for_cpu(w.t().contiguous().to(EMU).t(), 2).cpu(), want)


_INT4_CHILD = textwrap.dedent("""
    import torch, torch_plugin
    g = torch.Generator().manual_seed(0)
    for N in (16, 32, 48, 64, 96, 160):
        w = torch.randint(0, 16, (N, 64), dtype=torch.int32, generator=g)
        want = torch._convert_weight_to_int4pack_for_cpu(w, 2)
        assert torch.equal(torch._convert_weight_to_int4pack_for_cpu(w.to("emu"), 2).cpu(), want), N
        a = torch.randn(3, 64, generator=g)
        sz = torch.rand(2, N, 2, generator=g) / 8
        got = torch._weight_int4pack_mm_for_cpu(a.to("emu"), want.to("emu"), 32, sz.to("emu")).cpu()
        torch.testing.assert_close(got, torch._weight_int4pack_mm_for_cpu(a, want, 32, sz), rtol=1e-5, atol=1e-5)
    print(torch.backends.cpu.get_cpu_capability())
""")


@pytest.mark.parametrize("capability", ["avx2", "default"])
def test_int4_layout_follows_cpu_capability(capability):
    """A process whose ATen CPU capability is lowered packs CPU's layout for it; the device packs and
    reads the same bytes (every x86-64 host this suite supports has AVX2)."""
    env = dict(os.environ, ATEN_CPU_CAPABILITY=capability)
    proc = subprocess.run([sys.executable, "-c", _INT4_CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-1] == capability.upper()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("group", [32, 64])
def test_weight_int4pack_mm(dtype, group):
    M, K, N = 5, 128, 96
    q = torch.randint(0, 16, (N, K), dtype=torch.int32, generator=gen())
    sz = (torch.rand(K // group, N, 2, generator=gen(1)) / 8).to(dtype)
    a = torch.randn(M, K, generator=gen(2)).to(dtype)
    packed_cpu = torch._convert_weight_to_int4pack_for_cpu(q, 2)
    got = torch._weight_int4pack_mm_for_cpu(a.to(EMU), packed_cpu.to(EMU), group, sz.to(EMU))
    scale = sz[:, :, 0].float().repeat_interleave(group, 0).t()
    zero = sz[:, :, 1].float().repeat_interleave(group, 0).t()
    deq = ((q.float() - 8) * scale + zero).double()     # the weight as the device dequantizes it (float32)
    ref = a.double() @ deq.t()
    abs_sum = a.double().abs() @ deq.abs().t()
    assert_within(got, ref, abs_sum, dtype, K, "emu vs float64")
    torch.testing.assert_close(got.cpu().double(), torch._weight_int4pack_mm_for_cpu(a, packed_cpu, group, sz).double(),
                               rtol=4 * ROUND[dtype], atol=4 * ROUND[dtype] * float(abs_sum.max()))


# ---------------------------------------------------------------------------------------------
# _scaled_mm

def reference_scaled_mm():
    """torch's reference _scaled_mm on CPU (oneDNN off; otherwise an AMX host runs oneDNN's kernel)."""
    return torch.backends.mkldnn.flags(enabled=False)


def fp8_operands(adtype, bdtype, M=48, K=96, N=40, seed=0):
    a = (torch.randn(M, K, generator=gen(seed)) * 2).to(adtype)
    b = (torch.randn(N, K, generator=gen(seed + 1)) * 2).to(bdtype).t()    # column-major, as cuBLAS wants
    return a, b


def scaled_ref(a, b, sa, sb, bias=None):
    ref = (a.double() @ b.double()) * sa.double() * sb.double()
    abs_sum = (a.double().abs() @ b.double().abs()) * sa.double().abs() * sb.double().abs()
    if bias is not None:
        ref = ref + bias.double()
        abs_sum = abs_sum + bias.double().abs()
    return ref, abs_sum


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("rowwise", [False, True], ids=["tensorwise", "rowwise"])
@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
def test_scaled_mm_against_float64_and_cpu(out_dtype, rowwise, with_bias):
    a, b = fp8_operands(torch.float8_e4m3fn, torch.float8_e4m3fn)
    M, N = a.shape[0], b.shape[1]
    if rowwise:
        sa, sb = torch.rand(M, 1, generator=gen(5)) + 0.5, torch.rand(1, N, generator=gen(6)) + 0.5
    else:
        sa, sb = torch.tensor(0.75), torch.tensor(1.25)
    bias = torch.randn(N, generator=gen(7)).to(out_dtype) if with_bias else None
    kwargs = dict(out_dtype=out_dtype, bias=bias)
    got = torch._scaled_mm(a.to(EMU), b.to(EMU), sa.to(EMU), sb.to(EMU), out_dtype=out_dtype,
                           bias=None if bias is None else bias.to(EMU), use_fast_accum=True)
    assert got.dtype == out_dtype and got.shape == (M, N)
    ref, abs_sum = scaled_ref(a, b, sa, sb, bias)
    assert_within(got, ref, abs_sum, out_dtype, a.shape[1], "emu vs float64")
    with reference_scaled_mm():
        cpu = torch._scaled_mm(a, b, sa, sb, **kwargs)
    torch.testing.assert_close(got.cpu().double(), cpu.double(), rtol=2 * ROUND[out_dtype],
                               atol=2 * ROUND[out_dtype] * float(abs_sum.max()))
    assert torch.emu.op_stats()["native"].get("aten::_scaled_mm", 0) >= 1


@pytest.mark.parametrize("adtype", F8, ids=str)
@pytest.mark.parametrize("bdtype", [torch.float8_e4m3fn, torch.float8_e5m2], ids=str)
def test_scaled_mm_every_format(adtype, bdtype):
    a, b = fp8_operands(adtype, bdtype, M=16, K=64, N=24)
    sa, sb = torch.tensor(1.5), torch.tensor(0.5)
    got = torch._scaled_mm(a.to(EMU), b.to(EMU), sa.to(EMU), sb.to(EMU), out_dtype=torch.float32)
    ref, abs_sum = scaled_ref(a, b, sa, sb)
    assert_within(got, ref, abs_sum, torch.float32, 64, f"{adtype} x {bdtype}")


@pytest.mark.parametrize("out_dtype", [torch.float8_e4m3fn, torch.float8_e5m2], ids=str)
def test_scaled_mm_float8_output_and_scale_result(out_dtype):
    a, b = fp8_operands(torch.float8_e4m3fn, torch.float8_e4m3fn, M=16, K=32, N=16)
    one = torch.tensor(1.0)
    for scale_result in (None, torch.tensor(4.0)):
        got = torch._scaled_mm(a.to(EMU), b.to(EMU), one.to(EMU), one.to(EMU), out_dtype=out_dtype,
                               scale_result=None if scale_result is None else scale_result.to(EMU))
        acc = (a.double() @ b.double()) / (1.0 if scale_result is None else 4.0)
        # the float32 result rounded once to float8: equal to the float64 product's float8 unless
        # it lies within float32 rounding of a float8 midpoint (not the case for these operands)
        assert torch.equal(bits8(got), bits8(acc.float().to(out_dtype))), f"scale_result={scale_result}"
    # overflow: the reference converts the float32 result, so e4m3fn saturates to -448, e5m2 is -inf
    big_a = torch.full((4, 32), 400.0).to(torch.float8_e4m3fn)
    big_b = torch.full((16, 32), -400.0).to(torch.float8_e4m3fn).t()
    with reference_scaled_mm():
        want = torch._scaled_mm(big_a, big_b, one, one, out_dtype=out_dtype)
    assert torch.equal(bits8(want), torch.full((4, 16), 0xFE if out_dtype == torch.float8_e4m3fn else 0xFC,
                                               dtype=torch.uint8))
    got = torch._scaled_mm(big_a.to(EMU), big_b.to(EMU), one.to(EMU), one.to(EMU), out_dtype=out_dtype)
    assert torch.equal(bits8(got), bits8(want))


def bits8(t):
    return t.cpu().view(torch.uint8)


def test_scaled_mm_errors_match_cpu_and_change_nothing():
    a, b = fp8_operands(torch.float8_e4m3fn, torch.float8_e4m3fn, M=16, K=32, N=24)
    one = torch.tensor(1.0)
    cases = [   # the checks in the reference's order: ranks, joint scaling, shapes, strides, scale_result, bias
        ((a[None], b, one, one), {}, RuntimeError),
        ((a, b, torch.ones(16), torch.ones(24)), {}, ValueError),
        ((a.float(), b.float(), one, one), {}, ValueError),
        ((a.view(torch.int8), b, one, one), {}, ValueError),
        ((a, b, one.double(), one), {}, ValueError),
        ((a, b, one, torch.ones(1, 24)), {}, ValueError),
        ((a[:, :31], b[:31], torch.ones(16, 2), one), {}, ValueError),
        ((a, b[:16], one, one), {}, RuntimeError),
        ((a, b, torch.ones(1, 16).t(), torch.ones(1, 24)), {}, ValueError),
        ((a, b, one, one), dict(scale_result=torch.ones(2)), RuntimeError),
        ((a, b, one, one), dict(bias=torch.ones(5)), RuntimeError),
    ]
    for args, kwargs, kind in cases:
        with pytest.raises(kind) as cpu, reference_scaled_mm():
            torch._scaled_mm(*args, out_dtype=torch.bfloat16, **kwargs)
        with pytest.raises(kind) as emu:
            torch._scaled_mm(*[t.to(EMU) for t in args], out_dtype=torch.bfloat16,
                             **{k: v.to(EMU) for k, v in kwargs.items()})
        assert str(emu.value) == str(cpu.value)
    # out= with another out_dtype: the reference's ValueError, and out keeps its values
    out = torch.full((16, 24), 3.0, device=EMU)
    with pytest.raises(ValueError, match="out_dtype must match output matrix type"):
        torch._scaled_mm(a.to(EMU), b.to(EMU), one.to(EMU), one.to(EMU), out_dtype=torch.bfloat16, out=out)
    assert bool((out.cpu() == 3.0).all())
    # what the reference accepts and the device does too: a (1, N) bias, a float64 bias and output
    bias = torch.randn(1, 24, generator=gen(3))
    for kwargs in (dict(bias=bias, out_dtype=torch.float32), dict(bias=bias.double(), out_dtype=torch.float64)):
        with reference_scaled_mm():
            want = torch._scaled_mm(a, b, one, one, **kwargs)
        got = torch._scaled_mm(a.to(EMU), b.to(EMU), one.to(EMU), one.to(EMU),
                               **{k: v.to(EMU) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()})
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# cost: the rates of the hardware description

def test_int_mm_and_scaled_mm_cost_at_their_rates():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "emulator"))
    from cost_helpers import device, op
    from emulator.config import MatrixRates, load_preset
    from emulator.kernels import dtypes
    from emulator.kernels.library import KERNELS
    from emulator.matrix_engine import rate_field
    assert rate_field(dtypes.INT8) == "int8"
    assert all(rate_field(code) == "float8" for code in dtypes.FLOAT8)
    assert MatrixRates().float8 == 2 * MatrixRates().bfloat16
    h200 = load_preset("h200").device
    assert h200.matrix_engine.macs_per_cycle.float8 == pytest.approx(3.696)
    assert h200.peak_flops("matrix", "float8_e4m3fn") / 1e12 == pytest.approx(1979, rel=0.01)
    # compute-bound shapes on operands resident in the scratchpad: the kernels' times are the matrix
    # engine's at their rates (int8 = float8 = 2x bfloat16 on the default preset)
    dev = device("default", device={"scratchpad": {"operands_resident": True}})
    M = K = N = 4096
    E4 = dtypes.FLOAT8_E4M3FN
    int_mm = KERNELS["int_mm"].cost(dev, op(dtypes.INT32, M, N), op(dtypes.INT8, M, K), op(dtypes.INT8, K, N))
    bf16 = KERNELS["matmul"].cost(dev, op(dtypes.BFLOAT16, M, N), op(dtypes.BFLOAT16, M, K),
                                  op(dtypes.BFLOAT16, K, N), None, 0.0, 1.0)
    fp8 = KERNELS["scaled_mm"].cost(dev, op(dtypes.BFLOAT16, M, N), op(E4, M, K), op(E4, K, N, strides=(1, K)),
                                    op(dtypes.FLOAT32, M, strides=(0,)), op(dtypes.FLOAT32, N, strides=(0,)),
                                    None, None)
    gemm_ns = lambda dt: dev.matrix_engine.gemm(M, N, K, dt).ns
    # twice the MAC rate; the one-byte operands' tiles differ in shape (more fit a scratchpad), so
    # the fills and drains do not halve exactly
    assert gemm_ns(dtypes.INT8) == pytest.approx(gemm_ns(dtypes.BFLOAT16) / 2, rel=0.1)
    assert gemm_ns(E4) == pytest.approx(gemm_ns(dtypes.INT8), rel=1e-9)
    assert int_mm.ns == pytest.approx(gemm_ns(dtypes.INT8), rel=1e-6)
    assert bf16.ns == pytest.approx(gemm_ns(dtypes.BFLOAT16), rel=1e-6)
    assert gemm_ns(E4) < fp8.ns < 1.1 * gemm_ns(E4)   # + the scale epilogue on the vector engine
    assert int_mm.flops == fp8.flops - M * N == 2 * M * N * K


# ---------------------------------------------------------------------------------------------
# PyTorch's quantized tensors: refused before any host work

def test_quantize_per_tensor_is_refused_before_host_work():
    x = torch.randn(8, 8, device=EMU)
    before = x.cpu()
    torch.emu.reset_op_stats()
    with pytest.raises(NotImplementedError, match="torchao") as err:
        torch.quantize_per_tensor(x, 0.1, 0, torch.qint8)
    assert "quantize_per_tensor" in str(err.value)
    with pytest.raises(NotImplementedError, match="torchao"):
        torch.quantize_per_channel(x, torch.ones(8, device=EMU), torch.zeros(8, dtype=torch.long, device=EMU), 0,
                                   torch.qint8)
    stats = torch.emu.op_stats()
    assert not stats["host_fallback"] and not stats["host_fallback_copies"], stats
    assert stats["rejection"].get("aten::quantize_per_tensor", 0) == 1
    torch.testing.assert_close(x.cpu(), before, rtol=0, atol=0)


def test_dynamic_quantized_model_is_refused_before_host_work():
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    qmodel = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    x = torch.randn(3, 16)
    want = qmodel(x)
    qmodel.to(EMU)
    torch.emu.reset_op_stats()
    with pytest.raises(NotImplementedError, match="torchao") as err:
        qmodel(x.to(EMU))
    assert "quantized::linear_dynamic" in str(err.value)
    stats = torch.emu.op_stats()
    assert not stats["host_fallback"] and not stats["host_fallback_copies"], stats
    assert stats["rejection"].get("quantized::linear_dynamic", 0) == 1
    # nothing changed: the model still runs on the CPU with the same result
    torch.testing.assert_close(qmodel(x), want, rtol=0, atol=0)
