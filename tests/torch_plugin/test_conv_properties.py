"""Property-based checks of convolution and pooling against CPU, over their parameters.

Hypothesis draws stride, padding (larger than the input where PyTorch allows it), dilation,
groups (depthwise included), batch sizes 1-5, spatial sizes down to 1, 1-d/2-d/3-d, transposed
convolutions (with output_padding), channels-last, every floating dtype, forward and backward.
Explicit examples and patched thresholds put cases on both sides of every internal path of
torch_plugin/ops/convolution.py: one GEMM per sample, the batch's columns in one GEMM (whole or in
chunks: _BATCHED_COLUMNS, _BATCHED_SCRATCH), the batched pointwise (1x1) GEMM, grouped GEMMs,
the direct depthwise kernels, transposed convolutions; and of the kernels' two-thread split
(_SPLIT_ELEMENTS = 65536 elements of a launch, convolution.pyx).

Everything runs under the "forbid" host fallback policy: nothing may fall back silently.

Stated bounds. Every result is checked against a float64 reference computed on CPU from the same
(rounded) inputs: |got - ref| <= u_out * |ref| + (n + 2) * u_acc * ref_abs + tiny, where ref_abs is
the same op on |inputs| (the sum of the magnitudes of the terms), n the reduction length, u_out
the unit roundoff of the result dtype, u_acc that of the accumulation dtype (float32 for
float16/bfloat16/float32, float64 for float64) and tiny covers float16's subnormal spacing.
float32 and float64 results are also compared with CPU's result of the same dtype, within twice
that bound (both lie within it of the reference). Max-pooling values and indices are exact.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, example, given, settings, strategies as st

import torch_plugin  # noqa: F401
from torch_plugin.ops import convolution as conv_ops
from torch_plugin.ops import pooling as pool_ops

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
UNIT = {torch.float64: 2.0 ** -53, torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}
TINY = {torch.float16: 2.0 ** -20}
SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def forbid_host_fallback():
    with torch.emu.host_fallback("forbid"):
        yield


def _acc_unit(dtype):
    return UNIT[torch.float64] if dtype == torch.float64 else UNIT[torch.float32]


def _check(got, ref, ref_abs, dtype, n, cpu=None, what=""):
    """|got - ref| within the stated bound (module docstring); ``cpu``: CPU's result, within twice it."""
    got = got.detach().cpu()
    assert got.dtype == dtype, what
    assert got.shape == ref.shape, what
    bound = UNIT[dtype] * ref.abs() + (n + 2) * _acc_unit(dtype) * ref_abs.abs() + TINY.get(dtype, 0.0) * (n + 1)
    err = (got.double() - ref).abs()
    worst = (err - bound).argmax()
    assert bool((err <= bound).all()), (f"{what}: |got - ref| = {err.flatten()[worst]:.3g} > bound "
                                        f"{bound.flatten()[worst]:.3g} at {worst}")
    if cpu is not None and dtype in (torch.float32, torch.float64):
        err_cpu = (got.double() - cpu.detach().double()).abs()
        assert bool((err_cpu <= 2 * bound).all()), f"{what}: emu and CPU differ beyond twice the bound"


def _layout(t):
    """The strides that matter (those of dims longer than 1)."""
    return tuple(st for n, st in zip(t.shape, t.stride()) if n > 1)


def _data(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


# ---------------------------------------------------------------------------------------------
# convolution

@st.composite
def conv_cases(draw):
    k = draw(st.integers(1, 3))
    transposed = draw(st.booleans())
    depthwise = draw(st.booleans()) and not transposed
    if depthwise:
        groups = draw(st.integers(2, 6))
        cin_g, cout_g = 1, draw(st.integers(1, 2))
    else:
        groups = draw(st.sampled_from([1, 1, 2, 3]))
        cin_g, cout_g = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    small = k == 3
    kernel = tuple(draw(st.integers(1, 2 if small else 3)) for _ in range(k))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(k))
    dilation = tuple(draw(st.integers(1, 2 if small else 3)) for _ in range(k))
    padding = tuple(draw(st.integers(0, 3 if small else 6)) for _ in range(k))
    spatial = tuple(draw(st.integers(1, 4 if small else 7)) for _ in range(k))
    output_padding = tuple(draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation)) \
        if transposed else (0,) * k
    return dict(k=k, transposed=transposed, groups=groups, cin_g=cin_g, cout_g=cout_g, kernel=kernel,
                stride=stride, dilation=dilation, padding=padding, spatial=spatial, output_padding=output_padding,
                batch=draw(st.integers(1, 5)), bias=draw(st.booleans()), dtype=draw(st.sampled_from(FLOATS)),
                channels_last=k > 1 and draw(st.booleans()), seed=draw(st.integers(0, 1000)))


def _conv_fn(case):
    k = case["k"]
    if case["transposed"]:
        fn = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[k - 1]
        return lambda x, w, b: fn(x, w, b, case["stride"], case["padding"], case["output_padding"], case["groups"],
                                  case["dilation"])
    fn = (F.conv1d, F.conv2d, F.conv3d)[k - 1]
    return lambda x, w, b: fn(x, w, b, case["stride"], case["padding"], case["dilation"], case["groups"])


def _conv_tensors(case):
    G, dtype = case["groups"], case["dtype"]
    cin, cout = G * case["cin_g"], G * case["cout_g"]
    x = _data((case["batch"], cin) + case["spatial"], dtype, case["seed"])
    wshape = (cin, case["cout_g"]) if case["transposed"] else (cout, case["cin_g"])
    w = _data(wshape + case["kernel"], dtype, case["seed"] + 1)
    b = _data((cout,), dtype, case["seed"] + 2) if case["bias"] else None
    if case["channels_last"]:
        fmt = torch.channels_last if case["k"] == 2 else torch.channels_last_3d
        x = x.contiguous(memory_format=fmt)
    return x, w, b


def _run_conv(case):
    fn = _conv_fn(case)
    dtype = case["dtype"]
    x, w, b = _conv_tensors(case)
    try:
        cpu_out = fn(x.float() if dtype in (torch.float16, torch.bfloat16) else x,
                     w.float() if dtype in (torch.float16, torch.bfloat16) else w,
                     None if b is None else (b.float() if dtype in (torch.float16, torch.bfloat16) else b))
    except RuntimeError:
        # Invalid geometry (kernel larger than the padded input, output too small): CPU's error type
        with pytest.raises(RuntimeError):
            fn(x.to("emu"), w.to("emu"), None if b is None else b.to("emu"))
        return
    # float64 reference and the magnitude bound, forward and backward
    leaves64 = [t.double().requires_grad_() for t in (x, w) + ((b,) if b is not None else ())]
    abs64 = [t.detach().abs() for t in leaves64]
    y64 = fn(leaves64[0], leaves64[1], leaves64[2] if b is not None else None)
    gout = _data(y64.shape, dtype, case["seed"] + 3)
    grads64 = torch.autograd.grad(y64, leaves64, gout.double())
    abs_leaves = [t.clone().requires_grad_() for t in abs64]
    y_abs = fn(abs_leaves[0], abs_leaves[1], abs_leaves[2] if b is not None else None)
    grads_abs = torch.autograd.grad(y_abs, abs_leaves, gout.double().abs())
    # emu
    dev = [t.to("emu").requires_grad_() for t in (x, w) + ((b,) if b is not None else ())]
    y = fn(dev[0], dev[1], dev[2] if b is not None else None)
    grads = torch.autograd.grad(y, dev, gout.to("emu"))
    cpu = None
    cpu_grads = [None] * len(dev)
    if dtype in (torch.float32, torch.float64):
        leaves = [t.clone().requires_grad_() for t in (x, w) + ((b,) if b is not None else ())]
        cpu = fn(leaves[0], leaves[1], leaves[2] if b is not None else None)
        cpu_grads = torch.autograd.grad(cpu, leaves, gout)
        if case["k"] == 2 and not case["transposed"]:
            # (CPU's transposed and 3-d convolutions choose their output layout by other rules:
            # values are what this test is about)
            assert _layout(y) == _layout(cpu), "output layout differs from CPU's"
    G = case["groups"]
    taps = 1
    for kk in case["kernel"]:
        taps *= kk
    positions = max(y64[0, 0].numel(), x[0, 0].numel())
    n = max(case["cin_g"], case["cout_g"]) * taps + case["batch"] * positions * taps
    _check(y, y64.detach(), y_abs.detach(), dtype, n, cpu, "output")
    for name, got, ref, ref_abs, c in zip(("grad_input", "grad_weight", "grad_bias"), grads, grads64, grads_abs,
                                           cpu_grads):
        _check(got, ref, ref_abs, dtype, n, c, f"{name} (groups {G})")


def _conv(k, transposed=False, groups=1, cin_g=1, cout_g=1, kernel=None, stride=None, dilation=None, padding=None,
          spatial=None, output_padding=None, batch=2, bias=True, dtype=torch.float32, channels_last=False, seed=0):
    one = (1,) * k
    return dict(k=k, transposed=transposed, groups=groups, cin_g=cin_g, cout_g=cout_g, kernel=kernel or (3,) * k,
                stride=stride or one, dilation=dilation or one, padding=padding or (0,) * k,
                spatial=spatial or (5,) * k, output_padding=output_padding or (0,) * k, batch=batch, bias=bias,
                dtype=dtype, channels_last=channels_last, seed=seed)


# The silent wrong value of issue 18 (DeepLabV3's ASPP head): padding = dilation = 6 on a 4x4
# input, so the first and last kernel columns read only padding; the batch-chunk im2col wrote
# the zeros of a window row past its end, into the next sample's columns.
ASPP = _conv(2, cin_g=4, cout_g=3, padding=(6, 6), dilation=(6, 6), spatial=(4, 4), bias=False)


@settings(max_examples=120, **SETTINGS)
@given(case=conv_cases())
@example(case=ASPP)
@example(case={**ASPP, "dtype": torch.float64, "batch": 5, "bias": True})
@example(case=_conv(1, cin_g=2, cout_g=2, padding=(5,), dilation=(4,), spatial=(3,), batch=3))
@example(case=_conv(3, cin_g=2, cout_g=2, padding=(0, 3, 3), dilation=(1, 3, 3), spatial=(2, 3, 3), batch=3))
@example(case=_conv(2, transposed=True, cin_g=2, cout_g=2, padding=(4, 4), dilation=(3, 3), spatial=(3, 3),
                    stride=(2, 2), output_padding=(1, 2), batch=3))
@example(case=_conv(2, kernel=(1, 1), cin_g=5, cout_g=4, batch=4))                       # pointwise, batched
@example(case=_conv(2, kernel=(1, 1), cin_g=5, cout_g=4, spatial=(1, 1), batch=5))       # squeeze-excite 1x1
@example(case=_conv(2, kernel=(1, 1), cin_g=3, cout_g=2, groups=2, batch=3))             # grouped pointwise
@example(case=_conv(2, groups=4, cout_g=2, stride=(2, 2), padding=(1, 1), spatial=(7, 7), batch=3))  # depthwise x2
@example(case=_conv(2, groups=3, cin_g=1, cout_g=1, padding=(4, 4), dilation=(2, 2), spatial=(2, 3), batch=2,
                    dtype=torch.bfloat16, channels_last=True))
@example(case=_conv(3, groups=3, cin_g=1, cout_g=1, kernel=(2, 3, 3), padding=(1, 2, 2), spatial=(3, 4, 4)))
@example(case=_conv(2, groups=2, cin_g=3, cout_g=2, padding=(1, 1), batch=3, dtype=torch.float16))
@example(case=_conv(2, padding=(7, 0), spatial=(2, 5)))                                  # kernel > padded input
def test_convolution_matches_cpu(case):
    _run_conv(case)


# Both sides of the batched-column thresholds, with the thresholds patched down so small tensors
# reach them: per-sample GEMMs (L >= _BATCHED_COLUMNS), one GEMM over the batch, in chunks.
@settings(max_examples=40, **SETTINGS)
@given(case=conv_cases(), columns=st.sampled_from([1, 4, 16, 1024]), scratch=st.sampled_from([1, 64, 300, 1 << 24]))
@example(case=ASPP, columns=1024, scratch=1)
@example(case=ASPP, columns=1024, scratch=300)
@example(case=ASPP, columns=1, scratch=1 << 24)
def test_convolution_thresholds(case, columns, scratch, monkeypatch):
    monkeypatch.setattr(conv_ops, "_BATCHED_COLUMNS", columns)
    monkeypatch.setattr(conv_ops, "_BATCHED_SCRATCH", scratch)
    _run_conv(case)


# Launches above the kernels' two-thread split (65536 elements: im2col columns, depthwise work,
# pooling input), each path once, with the CPU reference.
LARGE = [
    _conv(2, cin_g=8, cout_g=4, spatial=(40, 40), padding=(1, 1), batch=2),               # per-sample im2col
    _conv(2, cin_g=16, cout_g=4, spatial=(20, 20), padding=(2, 2), dilation=(2, 2), batch=3),  # batched columns
    _conv(2, groups=32, cout_g=1, spatial=(24, 24), padding=(1, 1), batch=3),           # depthwise, split
    _conv(2, groups=16, cout_g=2, spatial=(17, 17), stride=(2, 2), padding=(3, 3), kernel=(7, 7), batch=2),
    _conv(2, groups=4, cin_g=4, cout_g=4, spatial=(18, 18), padding=(1, 1), batch=2),     # grouped
    _conv(2, transposed=True, cin_g=8, cout_g=8, spatial=(12, 12), stride=(2, 2), padding=(1, 1), batch=2),
    _conv(2, kernel=(1, 1), cin_g=32, cout_g=16, spatial=(16, 16), batch=4),               # pointwise
]


@pytest.mark.parametrize("case", LARGE, ids=range(len(LARGE)))
def test_convolution_large_launches(case):
    _run_conv(case)


def test_aspp_regression_each_sample_equals_batch():
    # The repro, verbatim: one sample at a time was right, the batch was not.
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(4, 3, 3, padding=6, dilation=6, bias=False)
    x = torch.randn(2, 4, 4, 4)
    ref = conv(x)
    dev = torch.nn.Conv2d(4, 3, 3, padding=6, dilation=6, bias=False).to("emu")
    dev.load_state_dict(conv.state_dict())
    out = dev(x.to("emu")).cpu()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for n in range(2):
        torch.testing.assert_close(dev(x[n:n + 1].to("emu")).cpu(), ref[n:n + 1], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# pooling

def _distinct(shape, dtype, seed):
    """Values without ties, exact in every floating dtype (max pooling's indices are then unique):
    (1 + j / 64) * 2 ** e, distinct for distinct positions, in random order, random signs."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    i = torch.randperm(n, generator=g).double()
    v = (1 + torch.remainder(i, 64) / 64) * torch.pow(2.0, torch.div(i, 64, rounding_mode="floor") - 10)
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    return (v * sign).reshape(shape).to(dtype)


@st.composite
def pool_cases(draw):
    k = draw(st.integers(1, 3))
    small = k == 3
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(k))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(k))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(k))
    padding = tuple(draw(st.integers(0, ((kk - 1) * d + 1) // 2)) for kk, d in zip(kernel, dilation))
    spatial = tuple(draw(st.integers(1, 5 if small else 8)) for _ in range(k))
    return dict(k=k, kernel=kernel, stride=stride, dilation=dilation, padding=padding, spatial=spatial,
                batch=draw(st.integers(1, 4)), channels=draw(st.integers(1, 3)),
                ceil_mode=draw(st.booleans()), count_include_pad=draw(st.booleans()),
                divisor=draw(st.sampled_from([None, None, 1, 3, -2])), kind=draw(st.sampled_from(
                    ["max", "avg", "adaptive_avg", "adaptive_max"])),
                out_size=tuple(draw(st.integers(1, 4)) for _ in range(k)), dtype=draw(st.sampled_from(FLOATS)),
                channels_last=k > 1 and draw(st.booleans()), unbatched=draw(st.booleans()),
                seed=draw(st.integers(0, 1000)))


def _pool_fn(case):
    k, kind = case["k"], case["kind"]
    if kind == "max":
        fn = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[k - 1]
        return lambda x: fn(x, case["kernel"], case["stride"], case["padding"], case["dilation"], case["ceil_mode"],
                            return_indices=True)
    if kind == "avg":
        fn = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[k - 1]
        extra = () if k == 1 else (case["divisor"],)
        return lambda x: fn(x, case["kernel"], case["stride"], case["padding"], case["ceil_mode"],
                            case["count_include_pad"], *extra)
    fn = {("adaptive_avg", 1): F.adaptive_avg_pool1d, ("adaptive_avg", 2): F.adaptive_avg_pool2d,
          ("adaptive_avg", 3): F.adaptive_avg_pool3d, ("adaptive_max", 1): F.adaptive_max_pool1d,
          ("adaptive_max", 2): F.adaptive_max_pool2d, ("adaptive_max", 3): F.adaptive_max_pool3d}[kind, k]
    if kind == "adaptive_max":
        return lambda x: fn(x, case["out_size"], return_indices=True)
    return lambda x: fn(x, case["out_size"])


def _empty_window(case):
    """A max-pooling window with no element inside the input (dilation steps over it): CPU then
    returns -inf with an index outside the plane, which its backward cannot use."""
    if case["kind"] != "max":
        return False
    for n, kk, s, p, d in zip(case["spatial"], case["kernel"], case["stride"], case["padding"], case["dilation"]):
        out = pool_ops._pool_output(n, kk, p, s, d, case["ceil_mode"])
        for o in range(out):
            if not any(0 <= o * s - p + j * d < n for j in range(kk)):
                return True
    return False


def _run_pool(case):
    fn = _pool_fn(case)
    dtype = case["dtype"]
    shape = ((case["channels"],) if case["unbatched"] else (case["batch"], case["channels"])) + case["spatial"]
    x = _distinct(shape, dtype, case["seed"])
    if case["channels_last"] and not case["unbatched"]:
        x = x.contiguous(memory_format=torch.channels_last if case["k"] == 2 else torch.channels_last_3d)
    try:
        fn(x.double())
    except RuntimeError:
        with pytest.raises(RuntimeError):
            fn(x.to("emu"))
        return
    if _empty_window(case):
        # forward as CPU (-inf and CPU's index); the backward's out-of-plane index is refused by
        # the device (an operation-scope error; later work runs normally), never used
        y, idx = fn(x.to("emu"))
        want, want_idx = fn(x)
        assert torch.equal(y.cpu(), want) and torch.equal(idx.cpu(), want_idx)
        xd = x.to("emu").requires_grad_()
        with pytest.raises(RuntimeError, match="out of range"):
            fn(xd)[0].backward(torch.ones(want.shape, dtype=dtype).to("emu"))
            torch.emu.synchronize()
        assert torch.equal((x.to("emu") * 1).cpu(), x)
        return
    x64 = x.double().requires_grad_()
    ref = fn(x64)
    indexed = isinstance(ref, tuple)
    y64 = ref[0] if indexed else ref
    gout = _data(y64.shape, dtype, case["seed"] + 1)
    (g64,) = torch.autograd.grad(y64, x64, gout.double())
    xa = x.double().abs().requires_grad_()
    ya = fn(xa)
    ya = ya[0] if indexed else ya
    (ga,) = torch.autograd.grad(ya, xa, gout.double().abs())
    xd = x.to("emu").requires_grad_()
    got = fn(xd)
    yd = got[0] if indexed else got
    (gd,) = torch.autograd.grad(yd, xd, gout.to("emu"))
    if dtype in (torch.float32, torch.float64) and case["k"] == 2:
        cpu = fn(x)      # (3-d layouts of ambiguous strides follow other rules on CPU: values matter here)
        assert _layout(yd) == _layout(cpu[0] if indexed else cpu), "output layout differs from CPU's"
    window = 1
    for kk, s, n in zip(case["kernel"], case["spatial"], x.shape[-case["k"]:]):
        window *= max(kk, n) if case["kind"].startswith("adaptive") else kk
    if indexed:
        # distinct values: the maximum and its index are exact (CPU's on the float64 copy)
        assert torch.equal(yd.detach().cpu(), y64.detach().to(dtype)), "max values"
        assert torch.equal(got[1].cpu(), ref[1]), "max indices"
        assert got[1].dtype == torch.int64
    else:
        _check(yd, y64.detach(), ya.detach(), dtype, window, None, f"{case['kind']} output")
    _check(gd, g64, ga, dtype, window, None, f"{case['kind']} grad_input")


def _pool(kind, k, **kw):
    one = (1,) * k
    case = dict(k=k, kernel=(2,) * k, stride=(2,) * k, dilation=one, padding=(0,) * k, spatial=(5,) * k, batch=2,
                channels=3, ceil_mode=False, count_include_pad=True, divisor=None, kind=kind, out_size=(2,) * k,
                dtype=torch.float32, channels_last=False, unbatched=False, seed=0)
    case.update(kw)
    return case


@settings(max_examples=150, **SETTINGS)
@given(case=pool_cases())
@example(case=_pool("avg", 2, divisor=-2))
@example(case=_pool("avg", 3, divisor=-2, dtype=torch.float64))
@example(case=_pool("avg", 2, divisor=-3, ceil_mode=True, padding=(1, 1), kernel=(3, 3), count_include_pad=False))
@example(case=_pool("avg", 2, divisor=0))                                  # CPU's error: divisor must be not zero
@example(case=_pool("avg", 3, divisor=0))
@example(case=_pool("max", 2, kernel=(3, 3), padding=(1, 1), ceil_mode=True, spatial=(1, 1)))
@example(case=_pool("adaptive_avg", 2, out_size=(1, 1), spatial=(7, 7), dtype=torch.bfloat16))  # squeeze-excite
@example(case=_pool("max", 2, spatial=(130, 130), batch=4, channels=2))     # over the two-thread split
@example(case=_pool("max", 1, kernel=(2,), stride=(1,), dilation=(2,), padding=(1,), spatial=(1,)))  # empty window
@example(case=_pool("max", 2, kernel=(1, 3), stride=(1, 1), dilation=(1, 2), padding=(0, 2), spatial=(1, 1)))
def test_pooling_matches_cpu(case):
    _run_pool(case)


@pytest.mark.parametrize("k", [2, 3])
def test_avg_pool_negative_divisor_values_and_state(k):
    # CPU returns the window sum divided by the (negative) override; zero is CPU's error and the
    # device stays usable (nothing launched).
    fn = F.avg_pool2d if k == 2 else F.avg_pool3d
    x = _data((2, 3) + (4,) * k, torch.float32, 5)
    got = fn(x.to("emu"), 2, divisor_override=-2)
    torch.testing.assert_close(got.cpu(), fn(x, 2, divisor_override=-2), rtol=1e-6, atol=1e-6)
    with pytest.raises(RuntimeError, match="divisor must be not zero"):
        fn(x.to("emu"), 2, divisor_override=0)
    keep = x.to("emu")
    torch.testing.assert_close((keep * 2).cpu(), x * 2)
