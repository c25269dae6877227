"""Storage dtypes on emu: uint16, uint32, uint64, complex64, complex128.

The device stores, copies, converts (on the device, bit-exact vs CPU's ``.to()``), fills,
views (``view_as_real`` / ``view_as_complex``) and serializes them. Arithmetic on them is not a
device kernel: ops without an emu kernel reach the counted host fallback; ops with one reject
these dtypes by name. Conversions compare bit patterns (NaN payloads and -0.0 included).
"""
from __future__ import annotations

import itertools
import math
import warnings

import pytest
import torch

import torch_plugin

from emulator.errors import KernelArgumentError
from torch_plugin._dtypes import STORABLE, SUPPORTED
from torch_plugin.errors import HostFallbackError
from plugin_testing import saved_and_loaded

EMU = "emu"
NEW = [torch.uint16, torch.uint32, torch.uint64, torch.complex64, torch.complex128]
ALL = sorted(STORABLE, key=str)
INT_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
COMPLEX_TO_REAL = "Casting complex values to real discards the imaginary part"

# Float values for every conversion, and extreme ones for the conversions whose out-of-range
# results are defined the same way on emu and on CPU (see _extreme_ok).
SAFE_FLOATS = [0.0, -0.0, 1.0, 2.5, 3.75, 100.25, 127.0, 255.9, 1e-3]
SPECIAL_FLOATS = [-1.0, -2.5, -128.5, 65535.5, 70000.0, 2.0 ** 31, 3e9, 2.0 ** 32, 1e10, -1e10,
                  2.0 ** 63, 1.8e19, 2e19, -1e19, 1e-40, 6e4, 1e39, float("nan"), float("inf"),
                  float("-inf")]
INTS = [0, 1, 7, 255, 256, 65535, 65536, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1, 2 ** 32, 2 ** 53 + 1,
        2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1, 12345678901234567]


def bits(t: torch.Tensor) -> torch.Tensor:
    """The stored bit patterns (complex as pairs), for exact comparison including NaNs."""
    t = t.cpu()
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.view(INT_BITS[t.element_size()]) if t.dtype != torch.bool else t.view(torch.uint8)


def assert_bits_equal(actual: torch.Tensor, expected: torch.Tensor, what=""):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, (what, actual, expected)
    a, e = bits(actual), bits(expected)
    if not torch.equal(a, e):
        bad = (a != e).reshape(a.shape[0], -1).any(1).nonzero().flatten().tolist() if a.dim() else [0]
        raise AssertionError(f"{what}: differs at {bad}: emu {actual.cpu().flatten()[bad].tolist()} "
                             f"cpu {expected.flatten()[bad].tolist()}")


def sample(dtype: torch.dtype, extreme: bool) -> torch.Tensor:
    """A CPU tensor of dtype: in-range values, plus the extremes when ``extreme``."""
    floats = SAFE_FLOATS + (SPECIAL_FLOATS if extreme else [])
    if dtype.is_complex:
        re = torch.tensor(floats, dtype=torch.float64)
        return torch.complex(re, re.flip(0) if extreme else re * 0.5 - 1).to(dtype)
    if dtype.is_floating_point:
        return torch.tensor(floats, dtype=torch.float64).to(dtype)
    if dtype == torch.bool:
        return torch.tensor([True, False, True, True, False])
    values = INTS if extreme else [0, 1, 7, 100, 127]
    if dtype == torch.uint64:
        return torch.tensor(values, dtype=torch.uint64)
    # Every bit pattern of the type: wrap the Python ints (torch's int64 -> narrower is a wrap).
    return torch.tensor([v - (1 << 64) if v >= 1 << 63 else v for v in values], dtype=torch.int64).to(dtype)


def _reversed(x: torch.Tensor) -> torch.Tensor:
    """x.flip(0), also for the unsigned types CPU has no flip kernel for (through their bits)."""
    if x.dtype in (torch.uint16, torch.uint32, torch.uint64):
        return x.view(INT_BITS[x.element_size()]).flip(0).view(x.dtype)
    return x.flip(0)


def _extreme_ok(src: torch.dtype, dst: torch.dtype) -> bool:
    """Floating (and complex) -> int16/int32/uint32 out of range is implementation-defined: CPU's
    AVX2 loop and its scalar loop disagree there (emu follows the scalar loop for uint32, and the
    existing float -> int path for int16/int32). Every other pair is compared on extremes too."""
    floating = src.is_floating_point or src.is_complex
    return not (floating and dst in (torch.int16, torch.int32, torch.uint32))


PAIRS = [(s, d) for s, d in itertools.product(ALL, ALL) if s != d and (s in NEW or d in NEW)]


# ----------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("dtype", NEW, ids=str)
def test_host_device_round_trip_is_bit_exact(dtype, stats):
    stats_before = stats.native("aten::_copy_from")
    x = sample(dtype, extreme=True)
    e = x.to(EMU)
    assert e.device.type == "emu" and e.dtype == dtype
    assert_bits_equal(e.cpu(), x, "host -> emu -> host")
    # Non-contiguous on both sides: a strided host source, a transposed device tensor.
    grid = torch.stack([x, _reversed(x)], 1)               # (n, 2)
    eg = grid.t().to(EMU)                                   # (2, n), a strided host source
    assert_bits_equal(eg.cpu(), grid.t(), "strided host source")
    dst = torch.empty(grid.shape, dtype=dtype).t()          # a strided host destination
    dst.copy_(eg)
    assert_bits_equal(dst, grid.t(), "strided host destination")
    # Device <-> device: same device (clone, strided copy_) and to the other device.
    assert_bits_equal(e.clone().cpu(), x, "clone")
    out = torch.empty(2 * len(x), dtype=dtype, device=EMU)[::2]
    out.copy_(e)
    assert_bits_equal(out.cpu(), x, "strided device destination")
    assert_bits_equal(e.to("emu:1").cpu(), x, "emu:0 -> emu:1")
    assert stats.native("aten::_copy_from") > stats_before
    stats.no_fallback()


def test_scalars_read_back_exactly():
    assert torch.tensor([2 ** 64 - 1], dtype=torch.uint64).to(EMU).item() == 2 ** 64 - 1
    assert torch.tensor([2 ** 32 - 1], dtype=torch.uint32).to(EMU).tolist() == [2 ** 32 - 1]
    z = torch.tensor([complex(1.5, -2.0), complex(float("inf"), float("nan"))], dtype=torch.complex128).to(EMU)
    assert z[0].item() == complex(1.5, -2.0)
    w = z[1].item()
    assert w.real == float("inf") and math.isnan(w.imag)


def test_empty_tensors_and_factories(stats):
    for dtype in NEW:
        t = torch.empty(0, 3, dtype=dtype, device=EMU)
        assert t.shape == (0, 3) and t.dtype == dtype
        assert t.cpu().shape == (0, 3)
        assert torch.empty(2, 3, dtype=dtype, device=EMU).to(torch.complex128).shape == (2, 3)
        for make in (torch.zeros, torch.ones):
            assert_bits_equal(make(2, 3, dtype=dtype, device=EMU), make(2, 3, dtype=dtype), make.__name__)
        like = torch.empty(4, dtype=dtype, device=EMU)
        assert_bits_equal(torch.ones_like(like), torch.ones(4, dtype=dtype), "ones_like")
        assert_bits_equal(torch.zeros_like(like), torch.zeros(4, dtype=dtype), "zeros_like")
    stats.no_fallback()


# ------------------------------------------------------------------------- conversions
@pytest.mark.parametrize("src,dst", PAIRS, ids=lambda d: str(d).removeprefix("torch."))
def test_device_conversion_matches_cpu_bit_for_bit(src, dst, stats):
    x = sample(src, extreme=_extreme_ok(src, dst))
    e = x.to(EMU)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # complex -> real warns (checked below)
        expected = x.to(dst)
        stats.no_fallback()
        assert_bits_equal(e.to(dst), expected, f"{src} -> {dst}")
        # A strided source into a strided destination (same conversion, other addressing).
        grid = torch.stack([x, x], 1).to(EMU)[:, 1]
        out = torch.empty(len(x), 3, dtype=dst, device=EMU)[:, 2]
        out.copy_(grid)
        assert_bits_equal(out, expected, f"{src} -> {dst} strided")
        # Host <-> device with conversion (converted on the device).
        assert_bits_equal(x.to(EMU, dtype=dst), expected, f"{src} host -> {dst} emu")
        host = torch.empty(len(x), dtype=dst)
        host.copy_(e)
        assert_bits_equal(host, expected, f"{src} emu -> {dst} host")
    assert stats.native("aten::_copy_from") > 0
    stats.no_fallback()


def test_float_to_uint32_out_of_range_follows_cpus_scalar_loop():
    """Documented: outside [-2**31, 2**32) CPU's contiguous (AVX2) float -> uint32 cast differs from
    its strided one; emu gives the strided (scalar C cast through int64) result everywhere."""
    x = torch.tensor([1e10, -1e10, -3e9, 5e9, 2.0 ** 32, float("nan"), float("inf")], dtype=torch.float64)
    strided = torch.stack([x, x], 1)[:, 0]
    expected = strided.to(torch.uint32)  # CPU's scalar loop
    assert_bits_equal(x.to(EMU).to(torch.uint32), expected, "float64 -> uint32")
    f = x.float()
    assert_bits_equal(f.to(EMU).to(torch.uint32), torch.stack([f, f], 1)[:, 0].to(torch.uint32), "float32 -> uint32")


def test_complex_to_real_warns_like_cpu():
    z = torch.tensor([1 + 2j, -3 - 4j]).to(EMU)
    with pytest.warns(UserWarning, match=COMPLEX_TO_REAL):
        r = z.to(torch.float32)
    assert r.cpu().tolist() == [1.0, -3.0]
    with pytest.warns(UserWarning, match=COMPLEX_TO_REAL):
        torch.empty(2, dtype=torch.int64).copy_(z)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning for complex -> bool, complex -> complex (as CPU)
        assert z.to(torch.bool).cpu().tolist() == [True, True]
        assert z.to(torch.complex128).cpu().tolist() == [1 + 2j, -3 - 4j]


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_conjugated_and_negated_views_copy_resolved(dtype, stats):
    # 40 elements: CPU's vectorized neg/conj (0 - x), whose signed zeros and NaN signs emu matches;
    # CPU's scalar loop (a handful of elements) flips sign bits instead (see copy.py).
    x = torch.tensor([1 + 2j, -3 - 0.5j, complex(0.0, -0.0), complex(float("inf"), 1), complex(-0.0, 0.0),
                      complex(float("nan"), -float("nan")), 1e-40j, -7.0] * 5, dtype=dtype)
    e = x.to(EMU)

    def resolved(view):  # what CPU's copy_ of the view into a plain tensor stores
        return torch.empty(view.shape, dtype=view.dtype).copy_(view)
    assert_bits_equal(e.conj().cpu(), resolved(x.conj()), "emu conj -> host")
    assert_bits_equal(x.conj().to(EMU).cpu(), resolved(x.conj()), "host conj -> emu")
    other = torch.complex128 if dtype == torch.complex64 else torch.complex64
    assert_bits_equal(e.conj().to(other), resolved(x.conj()).to(other), "conj with conversion")
    assert_bits_equal(e.conj().clone(), resolved(x.conj()), "conj clone on emu")
    assert_bits_equal(torch._neg_view(e).cpu(), resolved(torch._neg_view(x)), "neg view")
    assert_bits_equal(torch._neg_view(e.conj()).cpu(), resolved(torch._neg_view(x.conj())), "neg of conj")
    dst = torch.zeros(len(x), dtype=dtype, device=EMU)
    dst.conj().copy_(e)  # into a conjugated destination: dst stores conj(e)
    assert_bits_equal(dst, resolved(x.conj()), "conj destination")
    stats.no_fallback()


# --------------------------------------------------------------------------------- fills
FILLS = {
    torch.uint16: [0, 65535, -1, -65535, 3.9, True],
    torch.uint32: [2 ** 32 - 1, -1, 123456.7],
    torch.uint64: [2 ** 64 - 1, 2 ** 63, -1, -(2 ** 63), 1.8e19, 7],
    torch.complex64: [1 + 2j, complex(1, -0.0), complex(float("inf"), float("nan")), 2.5, True, 3, 1e30],
    torch.complex128: [1e300 - 1e-300j, complex(float("nan"), 0), -7, 0.1 + 0.2j],
}


@pytest.mark.parametrize("dtype", NEW, ids=str)
def test_fill_matches_cpu(dtype, stats):
    for value in FILLS[dtype]:
        want = torch.zeros(3, 4, dtype=dtype).fill_(value)
        assert_bits_equal(torch.zeros(3, 4, dtype=dtype, device=EMU).fill_(value), want, f"fill_({value!r})")
        assert_bits_equal(torch.full((3, 4), value, dtype=dtype, device=EMU), want, f"full({value!r})")
        # A strided view: only its elements change.
        base = torch.ones(3, 4, dtype=dtype)
        base_e = base.to(EMU)
        base_e[:, 1::2].fill_(value)
        base[:, 1::2].fill_(value)
        assert_bits_equal(base_e, base, f"strided fill_({value!r})")
        # A 0-dim device tensor as the value: a broadcast copy on the device.
        v = torch.zeros((), dtype=dtype).fill_(value)
        assert_bits_equal(torch.zeros(5, dtype=dtype, device=EMU).fill_(v.to(EMU)),
                          torch.zeros(5, dtype=dtype).fill_(v), f"fill_(tensor {value!r})")
    z = torch.full((2, 3), 5, dtype=dtype, device=EMU).t()
    z.zero_()
    assert_bits_equal(z, torch.zeros(3, 2, dtype=dtype), "zero_")
    assert stats.native("aten::fill_.Scalar") > 0
    stats.no_fallback()


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
def test_fill_negative_zero_after_zero(dtype):
    """The firmware's launch decode cache once keyed 0 and -0.0 alike (0 == -0.0), so +0.0 was written."""
    t = torch.zeros(3, dtype=dtype, device=EMU)
    t.fill_(0)
    t.fill_(-0.0)
    assert_bits_equal(t, torch.zeros(3, dtype=dtype).fill_(-0.0), "fill_(-0.0)")


def test_complex_fills_of_real_tensors_and_overflow_match_cpu():
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.zeros(2, device=EMU).fill_(1 + 2j)
    assert torch.zeros(2, device=EMU).fill_(3 + 0j).cpu().tolist() == [3.0, 3.0]
    with pytest.raises(RuntimeError, match=r"c10::complex<float> without overflow"):
        torch.zeros(2, dtype=torch.complex64, device=EMU).fill_(1e300)
    with pytest.raises(RuntimeError, match=r"c10::complex<float> without overflow"):
        torch.zeros(2, dtype=torch.complex64, device=EMU).fill_(complex(1, -1e300))
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.zeros(2, dtype=torch.uint16, device=EMU).fill_(65536)
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.zeros(2, dtype=torch.uint32, device=EMU).fill_(-1.5)
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.zeros(2, dtype=torch.uint64, device=EMU).fill_(2e19)
    # A same-device complex 0-dim value fills a real tensor with its real part (CPU: copy_, warns).
    value = torch.tensor(1 + 2j, device=EMU)
    with pytest.warns(UserWarning, match=COMPLEX_TO_REAL):
        t = torch.zeros(3, device=EMU).fill_(value)
    assert t.cpu().tolist() == [1.0] * 3
    # A conjugated 0-dim value fills with the conjugate.
    c = torch.zeros(2, dtype=torch.complex64, device=EMU).fill_(value.conj())
    assert c.cpu().tolist() == [1 - 2j] * 2


# --------------------------------------------------------------------------------- views
@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_view_as_real_and_view_as_complex_alias(dtype, stats):
    x = torch.tensor([[1 + 2j, 3 + 4j, 5 + 6j], [7 + 8j, 9 + 10j, 11 + 12j]], dtype=dtype)
    c = x.to(EMU)
    r = torch.view_as_real(c)
    part = torch.float32 if dtype == torch.complex64 else torch.float64
    assert r.dtype == part and r.shape == (2, 3, 2) and r.stride() == (6, 2, 1)
    assert r.data_ptr() == c.data_ptr() and r.untyped_storage().data_ptr() == c.untyped_storage().data_ptr()
    assert_bits_equal(r, torch.view_as_real(x), "view_as_real values")
    r[0, 1, 1] = -40.0                      # a write through the real view...
    assert c[0, 1].item() == 3 - 40j        # ...is seen by the complex tensor
    c[1, 2] = 0.5 - 0.25j                   # and the other way round
    assert r[1, 2].cpu().tolist() == [0.5, -0.25]
    # Strided complex views: strides double, the offset is kept.
    s = c[:, ::2]
    rs = torch.view_as_real(s)
    assert rs.stride() == (6, 4, 1) and rs.data_ptr() == s.data_ptr()
    assert_bits_equal(rs, torch.view_as_real(s.cpu()), "strided view_as_real")
    # view_as_complex: a real (..., 2) tensor viewed as complex, aliasing it.
    f = torch.arange(12, dtype=part).reshape(2, 3, 2).to(EMU)
    z = torch.view_as_complex(f)
    assert z.dtype == dtype and z.shape == (2, 3) and z.data_ptr() == f.data_ptr()
    assert_bits_equal(z, torch.view_as_complex(torch.arange(12, dtype=part).reshape(2, 3, 2)), "view_as_complex")
    z[0, 0] = 100 + 200j
    assert f[0, 0].cpu().tolist() == [100.0, 200.0]
    f[1, 2, 1] = -1.0
    assert z[1, 2].item() == 10 - 1j
    # .real / .imag are views too; a device fill through them lands in the complex tensor.
    c.imag.fill_(9.0)
    assert torch.view_as_real(c)[..., 1].cpu().tolist() == [[9.0] * 3] * 2
    with pytest.raises(RuntimeError, match="last dimension of size 2"):
        torch.view_as_complex(torch.zeros(3, 3, dtype=part, device=EMU))
    with pytest.raises(RuntimeError, match="only supported for complex tensors"):
        torch.view_as_real(torch.zeros(3, dtype=part, device=EMU))
    stats.no_fallback()


# ---------------------------------------------------------------------- complex arithmetic
def _complex_operands():
    a = torch.tensor([1 + 2j, -3 + 0.5j, 0.25 - 4j], dtype=torch.complex64)
    b = torch.tensor([2 - 1j, 4 + 4j, -1 + 0j], dtype=torch.complex64)
    return a, b


def test_complex_ops_without_emu_kernels_run_on_the_host_fallback(stats):
    a, b = _complex_operands()
    ae = a.to(EMU)
    torch.testing.assert_close(ae.angle().cpu(), a.angle())  # float32 result: rtol 1.3e-6
    assert stats.fallback("aten::angle") > 0
    re, im = a.real.contiguous(), a.imag.contiguous()
    c = torch.complex(re.to(EMU), im.to(EMU))
    assert c.device.type == "emu" and c.dtype == torch.complex64
    assert_bits_equal(c, torch.complex(re, im), "torch.complex")
    assert_bits_equal(ae.conj_physical(), a.conj_physical(), "conj_physical")
    with torch.emu.host_fallback("forbid"):
        with pytest.raises(HostFallbackError, match="angle"):
            ae.angle()


@pytest.mark.parametrize("name", ["add", "div", "sum"])
def test_complex_ops_with_emu_kernels_are_refused_when_fallback_is_forbidden(name, stats):
    """The device's arithmetic kernels do not take complex (complex mul is the exception, for
    FFT: tests/torch_plugin/test_fft.py): with the host fallback forbidden the op is refused,
    naming it, and nothing changes."""
    a, b = _complex_operands()
    ae, be = a.to(EMU), b.to(EMU)
    call = {"add": lambda: ae + be, "div": lambda: ae / be, "sum": lambda: ae.sum()}[name]
    with torch.emu.host_fallback("forbid"):
        with pytest.raises(HostFallbackError, match=rf"aten::{name}"):
            call()
    assert_bits_equal(ae, a, "operand unchanged")


def test_complex_arithmetic_through_host_fallback_equals_cpu(stats):
    """An op whose device kernel has no path for a dtype goes to the counted host fallback."""
    a, b = _complex_operands()
    ae, be = a.to(EMU), b.to(EMU)
    torch.testing.assert_close((ae + be).cpu(), a + b)
    torch.testing.assert_close((ae / be).cpu(), a / b)
    torch.testing.assert_close(ae.sum().cpu(), a.sum())
    assert stats.fallback("aten::add.Tensor") == 1 and stats.fallback("aten::div.Tensor") == 1
    assert stats.native("aten::add.Tensor") == 0


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64], ids=str)
def test_unsigned_arithmetic_is_rejected_by_name(dtype):
    t = torch.ones(3, dtype=dtype, device=EMU)
    with pytest.raises(NotImplementedError, match="not implemented for"):
        t + t                                           # CPU has no kernel either: its own error
    with torch.emu.host_fallback("forbid"):
        with pytest.raises(torch_plugin.HostFallbackError, match="add"):
            t + t
    assert t.cpu().tolist() == [1, 1, 1]


def test_arithmetic_kernels_reject_storage_only_codes():
    """At the kernel ABI: an arithmetic kernel refuses the storage-only codes (KernelArgumentError,
    never a computation in the wrong type); the copy kernel takes them."""
    from emulator.kernels import dtypes
    from emulator.kernels.library import KERNELS, Operand
    buf = torch.zeros(4, dtype=torch.complex128)
    for code in sorted(dtypes.STORAGE_ONLY):
        op = Operand(buf.data_ptr(), code, (2,), (1,))
        with pytest.raises(KernelArgumentError):
            KERNELS["unary"].run("relu", op, op, code)
        with pytest.raises(KernelArgumentError):
            KERNELS["unary"].run("relu", op, op, dtypes.FLOAT32)
        KERNELS["copy"].run(op, Operand(buf.data_ptr() + 32, code, (2,), (1,)))  # accepted
    assert SUPPORTED < STORABLE and all(d not in SUPPORTED for d in NEW)


# -------------------------------------------------------------------------- serialization
@pytest.mark.parametrize("map_location", ["emu", "cpu", None])
def test_save_and_load(map_location):
    values = {d: sample(d, extreme=True) for d in NEW}
    saved = {str(d): v.to(EMU) for d, v in values.items()}
    saved["view"] = saved["torch.complex64"][1::3]
    loaded = saved_and_loaded(saved, map_location)
    want = "cpu" if map_location == "cpu" else "emu"
    for d, v in values.items():
        t = loaded[str(d)]
        assert t.device.type == want and t.dtype == d
        assert_bits_equal(t, v, f"load {d}")
    view = loaded["view"]
    assert view.stride() == (3,) and view.storage_offset() == 1
    assert view.untyped_storage().data_ptr() == loaded["torch.complex64"].untyped_storage().data_ptr()
    assert_bits_equal(view, values[torch.complex64][1::3], "view")
    # A CPU checkpoint loaded onto emu.
    t = saved_and_loaded(values[torch.uint64], "emu")
    assert t.device.type == "emu"
    assert_bits_equal(t, values[torch.uint64], "cpu checkpoint onto emu")
