"""float8 (e4m3fn, e5m2, e4m3fnuz, e5m2fnuz) as storage dtypes on emu: created, filled, copied
host<->device and device<->device, converted to and from every real dtype on the device bit for bit
as CPU converts (all 256 codes; a sweep of float32 bit patterns, every rounding midpoint and the
specials: e4m3fn saturates, e5m2 overflows to inf, the fnuz formats give their one NaN), viewed
and serialized. The host fallback is forbidden throughout.
"""
from __future__ import annotations

import io

import pytest
import torch
from plugin_testing import forbid_fallback  # noqa: F401 (autouse: the host fallback is forbidden here)

import torch_plugin  # noqa: F401

EMU = "emu"
FLOAT8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INTS = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
SPECIALS = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan"), -float("nan"), 1e6, -1e6,
            448.0, 464.0, 465.0, 480.0, 240.0, 248.0, 57344.0, 61440.0, 61439.0, 65504.0, 1e-10, -1e-10,
            2.0 ** -9, 2.0 ** -10, 2.0 ** -17, 2.0 ** -16, 3e38, -3e38]




def bits(t: torch.Tensor) -> torch.Tensor:
    t = t.cpu()
    if t.dtype == torch.bool or t.element_size() == 1:
        return t.view(torch.uint8)
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def assert_bits_equal(actual, expected, what=""):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    a, e = bits(actual), bits(expected)
    bad = (a != e).nonzero()
    assert not len(bad), f"{what}: {len(bad)} differ, first at {bad[0].tolist()}: emu {a[tuple(bad[0])]} cpu {e[tuple(bad[0])]}"


def all_codes(dtype) -> torch.Tensor:
    return torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype)


def float32_sweep(dtype) -> torch.Tensor:
    """Random float32 bit patterns, scaled normals over the format's range, every finite value of
    the format, each rounding midpoint and its two neighbours, and the specials."""
    g = torch.Generator().manual_seed(20)
    patterns = torch.randint(-2 ** 31, 2 ** 31 - 1, (1 << 16,), dtype=torch.int64, generator=g).to(torch.int32)
    scaled = torch.randn(1 << 15, generator=g) * torch.exp2(torch.randint(-30, 20, (1 << 15,), generator=g).float())
    values = all_codes(dtype).float()
    finite = values[torch.isfinite(values)].unique()
    mids = ((finite[1:].double() + finite[:-1].double()) / 2).float()
    return torch.cat([patterns.view(torch.float32), scaled, finite, mids,
                      torch.nextafter(mids, torch.tensor(float("inf"))),
                      torch.nextafter(mids, torch.tensor(float("-inf"))), torch.tensor(SPECIALS)])


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float32_to_float8_bit_for_bit(dtype):
    x = float32_sweep(dtype)
    assert_bits_equal(x.to(EMU).to(dtype), x.to(dtype), f"float32 -> {dtype}")
    # strided source and destination
    xs = x.to(EMU)[::3]
    out = torch.empty(2 * xs.numel(), dtype=dtype, device=EMU)[::2]
    out.copy_(xs)
    assert_bits_equal(out, x[::3].to(dtype), f"strided float32 -> {dtype}")


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
@pytest.mark.parametrize("target", FLOATS + INTS + FLOAT8, ids=str)
def test_all_codes_to_every_dtype(dtype, target):
    codes = all_codes(dtype)
    emu = codes.to(EMU)
    if target in INTS and target is not torch.bool:
        # CPU's float -> integer cast of NaN/inf/out-of-range values is undefined; compare where defined
        values = codes.float()
        info = torch.iinfo(target)
        keep = torch.isfinite(values) & (values >= info.min) & (values <= info.max)
        assert_bits_equal(emu.to(target).cpu()[keep], codes.to(target)[keep], f"{dtype} -> {target}")
    else:
        assert_bits_equal(emu.to(target), codes.to(target), f"{dtype} -> {target}")


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
@pytest.mark.parametrize("source", FLOATS + INTS, ids=str)
def test_every_dtype_to_float8(dtype, source):
    x = float32_sweep(dtype)
    if source in INTS:
        x = torch.cat([torch.arange(-300, 300), torch.tensor([100000, -100000, 2 ** 31 - 1])]).float()
        if source in (torch.bool, torch.uint8):
            x = x.abs()
        x = x.to(source) if source is not torch.int64 else x.long()
    else:
        x = x.to(source)
    if source is torch.float64:   # a float64 is rounded to float32 first, then to float8
        x = torch.cat([x, torch.tensor([1 + 2 ** -4 + 2 ** -30, 1 - 2 ** -6 - 2 ** -40], dtype=torch.float64)])
    assert_bits_equal(x.to(EMU).to(dtype), x.to(dtype), f"{source} -> {dtype}")


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_factories_and_fill(dtype):
    for make in (lambda d: torch.zeros(3, 5, dtype=dtype, device=d), lambda d: torch.ones(4, dtype=dtype, device=d),
                 lambda d: torch.full((2, 3), -2.75, dtype=dtype, device=d)):
        assert_bits_equal(make(EMU), make("cpu"))
    e = torch.empty(4, 4, dtype=dtype, device=EMU)
    assert e.dtype == dtype and e.element_size() == 1
    for value in SPECIALS + [3, -7, 300, 10 ** 6]:
        try:
            want = torch.full((3,), value, dtype=dtype)
        except RuntimeError as cpu_error:
            # CPU's fill_ range check (a finite value past the format's max); emu raises too and
            # leaves the tensor as it was
            t = torch.zeros(2, 6, dtype=dtype, device=EMU)
            with pytest.raises(RuntimeError) as emu_error:
                t[:, ::2].fill_(value)
            assert str(emu_error.value) == str(cpu_error)
            assert_bits_equal(t, torch.zeros(2, 6, dtype=dtype))
            continue
        assert_bits_equal(torch.full((3,), value, dtype=dtype, device=EMU), want, f"full({value})")
        t = torch.zeros(2, 6, dtype=dtype, device=EMU)
        t[:, ::2].fill_(value)
        c = torch.zeros(2, 6, dtype=dtype)
        c[:, ::2].fill_(value)
        assert_bits_equal(t, c, f"strided fill_({value})")
    assert_bits_equal(torch.zeros_like(e), torch.zeros(4, 4, dtype=dtype))


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_copies_between_devices_and_views(dtype):
    codes = all_codes(dtype).reshape(16, 16)
    emu = codes.to(EMU)
    assert_bits_equal(emu.cpu(), codes)
    assert_bits_equal(emu.t().contiguous(), codes.t().contiguous())
    assert_bits_equal(emu.clone(), codes)
    other = emu.to("emu:1")
    assert other.device == torch.device("emu", 1)
    assert_bits_equal(other, codes)
    assert_bits_equal(emu.view(torch.uint8), codes.view(torch.uint8))
    assert_bits_equal(emu.view(torch.int8)[3:5], codes.view(torch.int8)[3:5])
    assert_bits_equal(emu.view(torch.int16), codes.view(torch.int16))
    u8 = torch.arange(256, dtype=torch.int32).to(torch.uint8).to(EMU)
    assert_bits_equal(u8.view(dtype), all_codes(dtype))
    assert_bits_equal(emu[2:5, 1::3], codes[2:5, 1::3])
    # float8 <-> float8: through float32, as CPU
    for target in FLOAT8:
        assert_bits_equal(emu.to(target), codes.to(target), f"{dtype} -> {target}")
    dst = torch.empty(16, 16, dtype=dtype, device=EMU)
    dst.copy_(codes)   # host -> device into an existing tensor
    assert_bits_equal(dst, codes)


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_save_load_round_trip(dtype):
    codes = all_codes(dtype).reshape(4, 64)
    buf = io.BytesIO()
    torch.save({"w": codes.to(EMU), "view": codes.to(EMU)[1]}, buf)
    buf.seek(0)
    back = torch.load(buf, map_location=EMU)
    assert back["w"].device.type == "emu" and back["w"].dtype == dtype
    assert_bits_equal(back["w"], codes)
    assert_bits_equal(back["view"], codes[1])
    buf.seek(0)
    assert_bits_equal(torch.load(buf, map_location="cpu")["w"], codes)


def test_arithmetic_on_float8_is_refused_not_computed():
    a = torch.ones(4, dtype=torch.float8_e4m3fn, device=EMU)
    with pytest.raises((NotImplementedError, RuntimeError)):
        a + a
    assert_bits_equal(a, torch.ones(4, dtype=torch.float8_e4m3fn))
