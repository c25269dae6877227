"""complex32 (torch.chalf) as a storage dtype on emu, like complex64/complex128: created, filled,
copied and converted on the device (bit-exact against CPU's ``.to()``), viewed (``view_as_real``
gives float16 pairs) and serialized; and complex random sampling from the device's Philox
generators (ops/random.py): moments and reproducibility, not CPU's bits (the streams differ).
"""
from __future__ import annotations

import math
import warnings

import pytest
import torch

import torch_plugin  # noqa: F401
from plugin_testing import saved_and_loaded

EMU = "emu"
CHALF = torch.complex32
OTHERS = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128]
VALUES = [0.0, -0.0, 1.0, -2.5, 3.75, 100.25, 1e-3, 6e-5, 65504.0, 1e5, float("inf"), float("-inf"),
          float("nan")]


@pytest.fixture(autouse=True)
def quiet_and_native():
    torch.emu.reset_op_stats()
    with warnings.catch_warnings(), torch.emu.host_fallback("forbid"):
        warnings.simplefilter("ignore")  # "ComplexHalf support is experimental", complex -> real
        yield
    assert not torch.emu.op_stats()["host_fallback"], torch.emu.op_stats()["host_fallback"]


def bits(t: torch.Tensor) -> torch.Tensor:
    t = t.cpu()
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def assert_bits_equal(actual, expected, what=""):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    assert torch.equal(bits(actual), bits(expected)), f"{what}: emu {actual.cpu()} cpu {expected}"


def sample(reverse: bool = False) -> torch.Tensor:
    """complex32 values (CPU has few complex32 kernels: built from float32 parts; reverse: the
    same values in the opposite order, as CPU has no complex32 flip)."""
    re = torch.tensor(VALUES, dtype=torch.float32)
    re, im = (re.flip(0), re) if reverse else (re, re.flip(0))
    return torch.complex(re, im).to(CHALF)


def test_round_trips_are_bit_exact():
    x = sample()
    e = x.to(EMU)
    assert e.device.type == "emu" and e.dtype == CHALF and e.element_size() == 4
    assert_bits_equal(e.cpu(), x, "host -> emu -> host")
    assert_bits_equal(e.clone().cpu(), x, "clone")
    grid = torch.stack([x, sample(reverse=True)], 1)
    assert_bits_equal(grid.t().to(EMU).cpu(), grid.t(), "strided host source")
    out = torch.empty(2 * len(x), dtype=CHALF, device=EMU)[::2]
    out.copy_(e)
    assert_bits_equal(out.cpu(), x, "strided device destination")
    assert_bits_equal(e.to("emu:1").cpu(), x, "emu:0 -> emu:1")
    assert_bits_equal(grid.to(EMU).t().contiguous().cpu(), grid.t().contiguous(), "contiguous of a transpose")
    assert torch.emu.op_stats()["native"].get("aten::_copy_from", 0) > 0


@pytest.mark.parametrize("other", OTHERS, ids=str)
def test_device_conversions_match_cpu_bit_for_bit(other):
    x = sample()
    if other in (torch.int16, torch.int32):
        # Out of range (inf, NaN, 1e5) -> int16/int32 is implementation-defined and documented to
        # differ from CPU's AVX2 loop (docs/operators.md, "Storage dtypes"): in-range values only.
        x = x[:9]
    e = x.to(EMU)
    assert_bits_equal(e.to(other), x.to(other), f"complex32 -> {other}")
    y = x.to(other)
    assert_bits_equal(y.to(EMU).to(CHALF), y.to(CHALF), f"{other} -> complex32")
    # Strided operands (the same conversion with other addressing).
    strided = torch.zeros(len(x), 2, dtype=CHALF, device=EMU)[:, 0]
    strided.copy_(e)
    out = torch.empty(len(x), 2, dtype=other, device=EMU)[:, 1]
    out.copy_(strided)
    assert_bits_equal(out, x.to(other), f"complex32 -> {other} strided")


def test_factories_and_fills_match_cpu():
    for make in (torch.zeros, torch.ones):
        assert_bits_equal(make(2, 3, dtype=CHALF, device=EMU), make(2, 3, dtype=CHALF), make.__name__)
    for value in (1.5, complex(0.25, -3.0), complex(1e5, 2.0), -0.0, complex(float("nan"), 1.0)):
        assert_bits_equal(torch.full((5,), value, dtype=CHALF, device=EMU), torch.full((5,), value, dtype=CHALF),
                          f"full {value}")
        t = torch.zeros(4, 3, dtype=CHALF, device=EMU)
        t[:, 1].fill_(value)
        c = torch.zeros(4, 3, dtype=CHALF)
        c[:, 1].fill_(value)
        assert_bits_equal(t, c, f"strided fill_ {value}")
    assert torch.empty(0, 3, dtype=CHALF, device=EMU).cpu().shape == (0, 3)
    assert_bits_equal(torch.zeros_like(torch.empty(3, dtype=CHALF, device=EMU)), torch.zeros(3, dtype=CHALF))


def test_view_as_real_gives_float16_pairs_that_alias():
    x = sample()
    e = x.to(EMU)
    parts = torch.view_as_real(e)
    assert parts.dtype == torch.float16 and parts.shape == (len(x), 2) and parts.stride() == (2, 1)
    assert_bits_equal(parts, torch.view_as_real(x), "view_as_real")
    parts[0, 1] = 7.0                                   # writes through to the complex tensor
    assert e[0].item() == complex(x[0].item().real, 7.0)
    back = torch.view_as_complex(parts)
    assert back.dtype == CHALF and back.data_ptr() == e.data_ptr()
    # A strided complex32 view (every other element) views as strided float16 pairs.
    strided = torch.view_as_real(e[::2])
    assert strided.stride() == (4, 1)
    assert_bits_equal(strided, torch.view_as_real(e.cpu()[::2]), "strided view_as_real")


def test_conjugate_copy_resolves_on_the_device():
    x = torch.complex(torch.tensor([1.0, -2.0, 0.5]), torch.tensor([3.0, 0.0, -4.0])).to(CHALF)
    e = x.to(EMU)
    assert_bits_equal(e.conj().clone(), x.conj().clone(), "conj().clone()")
    assert_bits_equal(e.conj().cpu(), x.conj().resolve_conj(), "conj() to host")


@pytest.mark.parametrize("map_location", ["emu", "cpu", None])
def test_save_and_load(map_location):
    x = sample()
    saved = {"t": x.to(EMU)}
    saved["view"] = saved["t"][1::3]
    loaded = saved_and_loaded(saved, map_location)
    want = "cpu" if map_location == "cpu" else "emu"
    assert loaded["t"].device.type == want and loaded["t"].dtype == CHALF
    assert_bits_equal(loaded["t"], x, "load")
    view = loaded["view"]
    assert view.stride() == (3,) and view.storage_offset() == 1
    assert view.untyped_storage().data_ptr() == loaded["t"].untyped_storage().data_ptr()
    assert_bits_equal(view, x[1::3], "view")


def test_cpu_checkpoint_onto_emu():
    x = sample()
    t = saved_and_loaded(x, "emu")
    assert t.device.type == "emu"
    assert_bits_equal(t, x, "cpu checkpoint onto emu")


# ------------------------------------------------------------------------------- complex random
COMPLEX = [torch.complex32, torch.complex64, torch.complex128]
N = 40000
# Moments of N samples: a mean is within 5 standard errors (sigma / sqrt(N)); a variance v of a
# normal part within 5 * v * sqrt(2 / N); a uniform part's variance 1/12 within 5 * sqrt(1/180 / N).
SE = 5 / math.sqrt(N)


def _parts64(t):
    return torch.view_as_real(t.cpu().to(torch.complex128))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_randn_complex_parts_are_independent_normals_of_variance_half(dtype):
    torch.emu.manual_seed(0)
    z = torch.randn(N, dtype=dtype, device=EMU)
    assert z.dtype == dtype and z.device.type == "emu"
    p = _parts64(z)
    re, im = p[:, 0], p[:, 1]
    for part in (re, im):
        assert abs(part.mean().item()) < SE * math.sqrt(0.5)
        assert abs(part.var().item() - 0.5) < 5 * 0.5 * math.sqrt(2 / N)
    assert abs(torch.corrcoef(torch.stack([re, im]))[0, 1].item()) < SE
    assert abs((re ** 2 + im ** 2).mean().item() - 1.0) < 5 * math.sqrt(1 / N)   # E|z|^2 = 1
    assert torch.emu.op_stats()["native"].get("aten::normal_", 0) >= 1


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_normal_on_complex_shifts_both_parts_and_scales_by_sqrt_half(dtype):
    torch.emu.manual_seed(1)
    z = torch.empty(N, dtype=dtype, device=EMU).normal_(2.0, 3.0)
    p = _parts64(z)
    sigma = 3.0 / math.sqrt(2)
    for part in (p[:, 0], p[:, 1]):
        assert abs(part.mean().item() - 2.0) < SE * sigma
        assert abs(part.std().item() - sigma) < 5 * sigma * math.sqrt(1 / (2 * N))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_rand_and_uniform_on_complex_draw_each_part_uniformly(dtype):
    torch.emu.manual_seed(2)
    z = torch.rand(N, dtype=dtype, device=EMU)
    p = _parts64(z)
    assert (p >= 0).all() and (p <= 1).all()   # float16 rounds values near 1 up to 1.0, as on CPU
    for part in (p[:, 0], p[:, 1]):
        assert abs(part.mean().item() - 0.5) < SE * math.sqrt(1 / 12)
        assert abs(part.var().item() - 1 / 12) < 5 * math.sqrt(1 / 180 / N)
    u = torch.empty(N, dtype=dtype, device=EMU).uniform_(-3.0, 1.0)
    q = _parts64(u)
    assert (q >= -3).all() and (q <= 1).all()
    for part in (q[:, 0], q[:, 1]):
        assert abs(part.mean().item() + 1.0) < SE * 4 * math.sqrt(1 / 12)


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_draws_are_reproducible_from_the_seed(dtype):
    def draw():
        torch.emu.manual_seed(1234)
        return (torch.randn(33, dtype=dtype, device=EMU), torch.rand(5, 7, dtype=dtype, device=EMU),
                torch.randn_like(torch.empty(4, dtype=dtype, device=EMU)))
    first, second = draw(), draw()
    for a, b in zip(first, second):
        assert_bits_equal(a, b, "same seed")
    gen = torch.Generator(device=EMU).manual_seed(7)
    a = torch.randn(16, dtype=dtype, device=EMU, generator=gen)
    gen.manual_seed(7)
    assert_bits_equal(torch.randn(16, dtype=dtype, device=EMU, generator=gen), a, "generator")
    assert not torch.equal(bits(first[0]), bits(torch.randn(33, dtype=dtype, device=EMU)))


def test_complex_draw_into_a_strided_view_leaves_the_rest():
    torch.emu.manual_seed(3)
    t = torch.zeros(6, 4, dtype=torch.complex64, device=EMU)
    t[:, 1].normal_()
    host = t.cpu()
    assert (host[:, 1] != 0).all()
    assert (host[:, [0, 2, 3]] == 0).all()


def test_normal_with_a_complex_mean_tensor():
    torch.emu.manual_seed(4)
    mean = torch.full((N,), complex(1.0, -2.0), dtype=torch.complex64)
    z = torch.normal(mean.to(EMU), 2.0)
    assert z.dtype == torch.complex64
    p = _parts64(z)
    sigma = 2.0 / math.sqrt(2)
    assert abs(p[:, 0].mean().item() - 1.0) < SE * sigma
    assert abs(p[:, 1].mean().item() + 2.0) < SE * sigma
    assert abs(p[:, 0].std().item() - sigma) < 5 * sigma * math.sqrt(1 / (2 * N))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
@pytest.mark.parametrize("call", ["random_", "random_to", "exponential_", "bernoulli_", "bernoulli_tensor",
                                  "log_normal_", "geometric_", "cauchy_"])
def test_other_distributions_reject_complex_like_cpu(call, dtype):
    args = {"bernoulli_": (0.5,), "geometric_": (0.5,), "random_to": (3,),
            "bernoulli_tensor": (torch.full((3,), 0.5),)}.get(call, ())
    method = {"random_to": "random_", "bernoulli_tensor": "bernoulli_"}.get(call, call)
    with pytest.raises((RuntimeError, NotImplementedError)) as cpu:
        getattr(torch.zeros(3, dtype=dtype), method)(*args)
    e = torch.zeros(3, dtype=dtype, device=EMU)
    with pytest.raises(type(cpu.value)) as emu:
        getattr(e, method)(*(a.to(EMU) if isinstance(a, torch.Tensor) else a for a in args))
    assert str(emu.value).startswith(str(cpu.value).splitlines()[0])
    assert (e.cpu() == 0).all()


def test_bad_std_is_rejected_and_nothing_changes():
    e = torch.zeros(3, dtype=torch.complex64, device=EMU)
    with pytest.raises(RuntimeError, match="normal expects std >= 0.0"):
        e.normal_(0.0, -1.0)
    assert (e.cpu() == 0).all()
