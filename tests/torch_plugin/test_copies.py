"""Copies between the host and emu devices (``aten::_copy_from``), every direction and dtype.

Every result is compared exactly with the CPU reference: casts are done with
values for which the conversion is defined (no negative floats into uint8, no
out-of-range float->int), plus the IEEE specials for float->float.
"""
from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

E0 = torch.device("emu", 0)
E1 = torch.device("emu", 1)
CPU = torch.device("cpu")

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
          torch.int8, torch.uint8, torch.bool]
FLOATS = {torch.float32, torch.float16, torch.bfloat16, torch.float64}
SIGNED = {torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int8}


def exact(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0, equal_nan=True)


def source_values(src_dtype, dst_dtype) -> torch.Tensor:
    """A CPU tensor of src_dtype whose conversion to dst_dtype is defined and exact on CPU."""
    vals = [0, 1, 2, 3, 7, 100, 127, 64, 5, 9, 11, 13]
    if src_dtype in FLOATS:
        vals += [0.5, 2.5, 3.75, 126.25]  # fractions: truncated by float->int, kept by float->float
        if dst_dtype in SIGNED:
            vals += [-1.5, -3.0, -100.0, -0.25]
        if dst_dtype in FLOATS:
            vals += [float("inf"), float("-inf"), float("nan"), -0.0, 1e-3]
    elif src_dtype == torch.bool:
        vals = [0, 1, 1, 0, 1]
    elif src_dtype != torch.uint8:
        vals += [-1, -2, -128, -7]  # signed ints: into uint8 these wrap (defined), as on CPU
    t = torch.tensor(vals, dtype=torch.float64).to(src_dtype)
    return t.reshape(-1)


PAIRS = list(itertools.product(DTYPES, DTYPES))
PAIR_IDS = [f"{str(a)[6:]}->{str(b)[6:]}" for a, b in PAIRS]


# -------------------------------------------------------- dtype x direction

def _copied(t, device, dtype, src):
    """t.to(device, dtype), checked: it lies on device and holds src (the CPU values t holds)
    converted to dtype on CPU."""
    out = t.to(device, dtype)
    assert out.device == device
    exact(out, src.to(dtype))
    return out


@pytest.mark.parametrize("src_dtype,dst_dtype", PAIRS, ids=PAIR_IDS)
def test_host_to_device(src_dtype, dst_dtype):
    src = source_values(src_dtype, dst_dtype)
    _copied(src, E0, dst_dtype, src)
    exact(src, source_values(src_dtype, dst_dtype))  # the source is untouched


@pytest.mark.parametrize("src_dtype,dst_dtype", PAIRS, ids=PAIR_IDS)
def test_device_to_host(src_dtype, dst_dtype):
    src = source_values(src_dtype, dst_dtype)
    dev = src.to(E0)
    _copied(dev, CPU, dst_dtype, src)
    exact(dev, src)  # the device source is untouched


@pytest.mark.parametrize("src_dtype,dst_dtype", PAIRS, ids=PAIR_IDS)
def test_device_to_device_same(src_dtype, dst_dtype):
    src = source_values(src_dtype, dst_dtype)
    dev = src.to(E0)
    out = dev.to(dst_dtype)
    assert out.device == E0
    exact(out, src.to(dst_dtype))
    # copy_ into an existing destination of the other dtype.
    dst = torch.empty(src.shape, dtype=dst_dtype, device=E0)
    dst.copy_(dev)
    exact(dst, src.to(dst_dtype))


@pytest.mark.parametrize("src_dtype,dst_dtype", PAIRS, ids=PAIR_IDS)
def test_device_to_peer_and_back(src_dtype, dst_dtype):
    src = source_values(src_dtype, dst_dtype)
    out1 = _copied(src.to(E0), E1, dst_dtype, src)
    back = out1.to(E0, src_dtype) if dst_dtype == src_dtype else out1.to(E0)
    assert back.device == E0
    exact(back, src.to(dst_dtype).to(back.dtype))
    # emu:1 -> emu:0 with the conversion on the way back.
    _copied(src.to(E1), E0, dst_dtype, src)


# ------------------------------------------------------------- layouts

def _layouts(base: torch.Tensor):
    """name -> a (3, 4)-shaped view of ``base`` (6x8 storage) with an interesting layout."""
    return {
        "contig": base.view(-1)[20:32].view(3, 4),
        "transposed": base[:4, :3].t(),
        "stepped": base[::2, ::2],
        "offset": base[2:5, 3:7],
        "transposed_offset": base[1:5, 1:4].t(),
    }


LAYOUTS = ["contig", "transposed", "stepped", "offset", "transposed_offset"]
DIRECTIONS = ["h2d", "d2h", "d2d", "peer"]


def _devices(direction):
    return {"h2d": (CPU, E0), "d2h": (E0, CPU), "d2d": (E0, E0), "peer": (E0, E1)}[direction]


@pytest.mark.parametrize("convert", [False, True], ids=["same_dtype", "float32->bf16"])
@pytest.mark.parametrize("dst_layout", LAYOUTS)
@pytest.mark.parametrize("src_layout", LAYOUTS)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_non_contiguous_copy(direction, src_layout, dst_layout, convert):
    src_dev, dst_dev = _devices(direction)
    dst_dtype = torch.bfloat16 if convert else torch.float32
    src_base = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    src = _layouts(src_base.to(src_dev))[src_layout]
    ref_src = _layouts(src_base)[src_layout]
    dst_base_cpu = torch.full((6, 8), -1.0, dtype=dst_dtype)
    dst_base = dst_base_cpu.to(dst_dev)
    dst = _layouts(dst_base)[dst_layout]
    ref_dst = _layouts(dst_base_cpu)[dst_layout]
    assert dst.stride() == ref_dst.stride() and dst.storage_offset() == ref_dst.storage_offset()
    dst.copy_(src)
    ref_dst.copy_(ref_src)
    # The destination's untouched elements keep their value: compare the whole base.
    exact(dst_base, dst_base_cpu)
    exact(dst, ref_dst)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_broadcasting_copy(direction):
    src_dev, dst_dev = _devices(direction)
    row = torch.tensor([1.0, 2.0, 3.0, 4.0])
    col = torch.tensor([[10.0], [20.0], [30.0]])
    scalar = torch.tensor(7.0)
    for src in (row, col, scalar, row.expand(3, 4), col.expand(3, 4), scalar.expand(2, 3, 4)[0]):
        dst = torch.zeros(3, 4, device=dst_dev)
        dst.copy_(src.to(src_dev))
        exact(dst, torch.zeros(3, 4).copy_(src))
    # Broadcast into a non-contiguous destination, with a conversion.
    dst = torch.zeros(4, 3, dtype=torch.int32, device=dst_dev).t()
    dst.copy_(row.to(src_dev))
    exact(dst, torch.zeros(4, 3, dtype=torch.int32).t().copy_(row))
    with pytest.raises(RuntimeError):
        torch.zeros(3, 4, device=dst_dev).copy_(torch.zeros(5).to(src_dev))  # not broadcastable


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_expanded_source_stride_zero(direction):
    src_dev, dst_dev = _devices(direction)
    src = torch.tensor([3, 1, 4], dtype=torch.int64).to(src_dev).expand(5, 3)
    assert src.stride() == (0, 1)
    out = src.to(dst_dev)
    # .to() of an expanded tensor gives a dense result, as on CPU.
    ref = torch.tensor([3, 1, 4], dtype=torch.int64).expand(5, 3).to(torch.int32)
    exact(src.to(dst_dev, torch.int32), ref)
    exact(out, ref.long())


@st.composite
def _dense_view(draw, shape):
    """(base numel, fn base -> view of ``shape``): a permuted, stepped, offset view of a 1-D base
    that never maps two elements to one address (a legal copy_ destination)."""
    nd = len(shape)
    perm = draw(st.permutations(range(nd)))
    steps = [draw(st.integers(1, 2)) for _ in range(nd)]
    pads = [draw(st.integers(0, 1)) for _ in range(nd)]
    offset = draw(st.integers(0, 3))
    # Lay the permuted dims out contiguously with padding, then step/select back to shape.
    full = [shape[p] * steps[i] + pads[i] for i, p in enumerate(perm)]
    numel = offset + (torch.Size(full).numel() if full else 1)

    def make(base):
        v = base[offset:offset + (torch.Size(full).numel() if full else 1)].view(full) if full \
            else base[offset]
        v = v[tuple(slice(0, shape[p] * steps[i], steps[i]) for i, p in enumerate(perm))]
        inv = [perm.index(d) for d in range(nd)]
        return v.permute(inv) if nd else v
    return numel, make


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.lists(st.integers(0, 4), max_size=3).map(tuple),
       direction=st.sampled_from(DIRECTIONS), src_dtype=st.sampled_from(DTYPES),
       dst_dtype=st.sampled_from(DTYPES), data=st.data())
def test_random_strided_copy_matches_cpu(shape, direction, src_dtype, dst_dtype, data):
    """copy_ between random dense layouts (permuted, stepped, offset), any dtype pair and
    direction, optionally broadcasting the source: the whole destination base matches CPU."""
    src_dev, dst_dev = _devices(direction)
    src_shape = tuple(1 if data.draw(st.booleans()) else s for s in shape) if shape else shape
    s_numel, s_make = data.draw(_dense_view(src_shape))
    d_numel, d_make = data.draw(_dense_view(shape))
    pool = source_values(src_dtype, dst_dtype)
    src_base = pool[torch.arange(s_numel) % pool.numel()]
    dst_base = torch.full((d_numel,), 9, dtype=dst_dtype) if dst_dtype != torch.bool \
        else torch.ones(d_numel, dtype=torch.bool)
    src_base_dev, dst_base_dev = src_base.to(src_dev), dst_base.to(dst_dev)
    d_make(dst_base_dev).copy_(s_make(src_base_dev))
    d_make(dst_base).copy_(s_make(src_base))
    exact(dst_base_dev, dst_base)


# ------------------------------------------------------- overlap / errors

@pytest.mark.parametrize("src_dev", [CPU, E0, E1], ids=str)
def test_copy_into_internally_overlapping_dst_raises(src_dev):
    base = torch.arange(3, dtype=torch.float32).to(E0)
    dst = base.expand(4, 3)  # every row is the same memory
    with pytest.raises(RuntimeError, match="more than one element"):
        dst.copy_(torch.ones(4, 3).to(src_dev))
    # Nothing was written.
    assert base.cpu().tolist() == [0.0, 1.0, 2.0]
    # Same on CPU, so the contract is PyTorch's.
    with pytest.raises(RuntimeError, match="more than one element"):
        torch.arange(3.0).expand(4, 3).copy_(torch.ones(4, 3))


def test_copy_into_as_strided_overlap_raises():
    """A stride-0 dimension made with as_strided is detected like an expand (ATen only
    detects stride-0 overlap; other overlapping as_strided layouts are "too hard" on CPU too)."""
    base = torch.zeros(6, device=E0)
    dst = base.as_strided((3, 3), (2, 0))
    with pytest.raises(RuntimeError, match="more than one element"):
        dst.copy_(torch.ones(3, 3))
    assert base.cpu().tolist() == [0.0] * 6


def test_copy_into_overlapping_host_dst_raises():
    """The internal-overlap check also guards a host destination of a device->host copy."""
    host = torch.zeros(3)
    with pytest.raises(RuntimeError, match="more than one element"):
        host.expand(4, 3).copy_(torch.ones(4, 3).to(E0))
    assert host.tolist() == [0.0, 0.0, 0.0]


PARTIAL = {
    "self_transposed": lambda x: (x, x.t()),
    "shifted_rows": lambda x: (x[1:], x[:-1]),
    "shifted_flat": lambda x: (x.view(-1)[2:7], x.view(-1)[:5]),
    "dtype_view": lambda x: (x.view(-1)[1:5], x.view(-1).view(torch.int32)[:4]),
    "overlapping_windows": lambda x: (x.view(-1)[:9], x.view(-1)[1:10]),
}


@pytest.mark.parametrize("case", sorted(PARTIAL))
def test_copy_partial_overlap_rejected_like_cpu(case):
    """Dense source and destination that overlap in part: CPU's copy_ rejects them, and so must
    emu (a DMA through overlapping bytes would give silently wrong values, e.g. x.copy_(x.t()))."""
    c = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    e = c.to(E0)
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        dst, src = PARTIAL[case](c)
        dst.copy_(src)
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        dst, src = PARTIAL[case](e)
        dst.copy_(src)
    exact(e, torch.arange(16, dtype=torch.float32).reshape(4, 4))  # untouched


def test_copy_self_and_partial_overlap_same_storage():
    """copy_ between views of one storage: exact alias is a no-op, disjoint parts work."""
    c = torch.arange(10.0)
    e = c.to(E0)
    e.copy_(e)
    exact(e, c)
    e[:5].copy_(e[5:])
    c[:5].copy_(c[5:])
    exact(e, c)
    e[::2].copy_(e[1::2])
    c[::2].copy_(c[1::2])
    exact(e, c)


# ------------------------------------------------------------ negated views

NEG_DTYPES = [torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int8, torch.uint8]


@pytest.mark.parametrize("dtype", NEG_DTYPES, ids=str)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_negated_view_copies(direction, dtype):
    """torch._neg_view tensors reach _copy_from with the negative bit set (DESIGN.md: it must
    be carried over, not recursed on): reading one gives the negated values, writing into one
    stores the negation, and neg -> neg copies the stored values."""
    src_dev, dst_dev = _devices(direction)
    c = torch.tensor([0, 1, 2, 5, 100, 127], dtype=dtype)
    src = c.to(src_dev)
    ref = torch._neg_view(c).resolve_neg()
    exact(torch._neg_view(src).to(dst_dev), ref)
    exact(torch._neg_view(src).resolve_neg(), ref)
    exact(torch._neg_view(src).to(dst_dev, torch.float64), ref.double())
    dst = torch.zeros(6, dtype=dtype, device=dst_dev)
    torch._neg_view(dst).copy_(src)  # stored: -src
    exact(dst, ref)
    dst2 = torch.zeros(6, dtype=dtype, device=dst_dev)
    torch._neg_view(dst2).copy_(torch._neg_view(src))  # both negated: stored values copied
    exact(dst2, c)
    # Strided negated view, non-blocking (a D2H lands in pinned memory: synchronize first).
    m = torch.arange(12, dtype=dtype).reshape(3, 4)
    out = torch._neg_view(m.to(src_dev).t()).to(dst_dev, non_blocking=True)
    torch.emu.synchronize(0)
    exact(out, torch._neg_view(m.t()).resolve_neg())


def test_negated_bool_copy_rejected():
    b = torch.tensor([True, False]).to(E0)
    with pytest.raises(RuntimeError, match="bool"):
        torch.zeros(2, dtype=torch.float32, device=E0).copy_(torch._neg_view(b))


# --------------------------------------------------------- stream ordering

@pytest.mark.parametrize("convert", [False, True], ids=["same_dtype", "float32->float64"])
def test_peer_copy_ordered_on_destination_current_stream(convert):
    """A peer copy is ordered after the work already queued on the destination device's current
    stream and before the work queued there next, also when that stream is not the default one.
    (Regression: the copy was only ordered against the peer's default stream, so the queued
    add_s landed after it and the result was silently wrong.)"""
    n = 1 << 20
    dtype = torch.float64 if convert else torch.float32
    a = torch.arange(n, dtype=torch.float32).to(E0)
    torch.emu.synchronize(0)
    s1 = torch.emu.Stream(1)
    with torch.emu.stream(s1):
        b = torch.zeros(n, dtype=dtype, device=E1)
        for _ in range(4):
            b.add_(5)  # slow pending writes on emu:1's current stream
        b.copy_(a)
        b.mul_(2)  # must see the copied values
        result = b.cpu()
    assert torch.equal(result, torch.arange(n, dtype=dtype) * 2)


def test_copies_follow_current_stream_on_each_device():
    n = 1 << 18
    s0 = torch.emu.Stream(0)
    with torch.emu.stream(s0):
        a = torch.zeros(n, device=E0)
        for _ in range(3):
            a.add_(1)
        host = a.cpu()  # D2H on the current stream sees the queued writes
        c = a.to(E1)  # peer copy from a non-default source stream
        h2d = torch.full((n,), 2.0).to(E0)
        h2d.mul_(3)
        assert h2d.cpu()[0].item() == 6.0
    assert torch.equal(host, torch.full((n,), 3.0))
    assert torch.equal(c.cpu(), torch.full((n,), 3.0))


# ---------------------------------------------------------- zero elements

@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4, 2)], ids=str)
def test_zero_element_copies(direction, shape):
    src_dev, dst_dev = _devices(direction)
    src = torch.empty(shape, dtype=torch.float32).to(src_dev)
    out = src.to(dst_dev, torch.float16)
    assert out.shape == shape and out.device == dst_dev and out.dtype == torch.float16
    dst = torch.empty(shape, dtype=torch.int32, device=dst_dev)
    dst.copy_(src)
    assert dst.shape == shape
    assert out.cpu().shape == shape


# ------------------------------------------------------------- pinned memory

def test_pin_memory_and_non_blocking_h2d():
    src = torch.arange(1000, dtype=torch.float32).pin_memory()
    assert src.is_pinned()
    pinned_empty = torch.empty(10, pin_memory=True)
    assert pinned_empty.is_pinned()
    out = src.to(E0, non_blocking=True)
    torch.emu.synchronize()
    exact(out, torch.arange(1000, dtype=torch.float32))
    # Stream order: an op queued after the async copy sees its data without a sync.
    out2 = src.to(E0, non_blocking=True)
    exact(out2 + 1, torch.arange(1000, dtype=torch.float32) + 1)
    # With a conversion on the way.
    out3 = src.to(E0, torch.float16, non_blocking=True)
    torch.emu.synchronize()
    exact(out3, torch.arange(1000, dtype=torch.float32).half())
    # A pinned slice is still pinned memory.
    assert src[10:].is_pinned()
    out4 = src[10::3].to(E1, non_blocking=True)
    torch.emu.synchronize(1)
    exact(out4, torch.arange(1000, dtype=torch.float32)[10::3])


def test_non_blocking_d2h_into_pinned():
    dev = torch.arange(2000, dtype=torch.int32).to(E0)
    dev.mul_(3)
    dst = torch.empty(2000, dtype=torch.int32, pin_memory=True)
    dst.copy_(dev, non_blocking=True)
    torch.emu.synchronize()
    assert torch.equal(dst, torch.arange(2000, dtype=torch.int32) * 3)
    # With conversion, into a strided pinned destination.
    dst2 = torch.zeros(2, 2000, dtype=torch.float64, pin_memory=True)
    dst2[1].copy_(dev, non_blocking=True)
    torch.emu.synchronize()
    assert torch.equal(dst2[1], (torch.arange(2000) * 3).double())
    assert torch.equal(dst2[0], torch.zeros(2000, dtype=torch.float64))


def test_to_cpu_non_blocking_gives_pinned_and_correct_after_sync():
    dev = torch.arange(500, dtype=torch.float32).to(E1)
    host = dev.to("cpu", non_blocking=True)
    torch.emu.synchronize(1)
    assert host.device == CPU
    exact(host, torch.arange(500, dtype=torch.float32))
    # As with CUDA, a non-blocking D2H copy lands in pinned memory.
    assert host.is_pinned()


def test_non_blocking_without_pinned_is_synchronous():
    src = torch.arange(100, dtype=torch.float32)
    out = src.to(E0, non_blocking=True)
    exact(out, src)
    dev = torch.arange(100, dtype=torch.float32).to(E0)
    host = torch.empty(100)
    host.copy_(dev, non_blocking=True)  # pageable: the copy completes before returning
    assert torch.equal(host, src)


def test_pin_memory_on_emu_tensor_rejected():
    with pytest.raises(RuntimeError):
        torch.empty(3, device=E0, pin_memory=True)


# ------------------------------------------------------------ to(), item()

def test_to_device_index_and_identity():
    c = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    e0 = c.to("emu")
    assert e0.device == E0  # current device
    e1 = c.to("emu:1")
    assert e1.device == E1
    exact(e1, c)
    assert e1.to("emu:1") is e1  # no-op
    assert e0.to(E0, torch.float32) is e0
    assert e0.to(E0, copy=True) is not e0
    e01 = e0.to("emu:1")
    assert e01.device == E1 and e01.untyped_storage().data_ptr() != e0.untyped_storage().data_ptr()
    exact(e01, c)
    with torch.emu.device(1):
        assert c.to("emu").device == E1
        assert torch.empty(2, device="emu").device == E1
    assert c.to("emu").device == E0
    exact(e1.to(torch.device("emu", 0)), c)


def test_item_and_tolist():
    for dtype in DTYPES:
        vals = [1, 0, 3] if dtype != torch.bool else [True, False, True]
        c = torch.tensor(vals, dtype=dtype)
        for dev in (E0, E1):
            e = c.to(dev)
            assert e.tolist() == c.tolist()
            assert e[2].item() == c[2].item()
            assert type(e[0].item()) is type(c[0].item())
    assert torch.tensor(2.5, device=E0).item() == 2.5
    assert torch.tensor(-7, dtype=torch.int8).to(E1).item() == -7
    assert torch.tensor(2.0**40 + 1, dtype=torch.float64).to(E0).item() == 2.0**40 + 1
    assert torch.tensor(2**62 + 1, dtype=torch.int64).to(E0).item() == 2**62 + 1
    # Strided/ offset views.
    e = torch.arange(12, dtype=torch.int32).to(E0).reshape(3, 4)
    assert e.t().tolist() == torch.arange(12, dtype=torch.int32).reshape(3, 4).t().tolist()
    assert e[1:, ::2].tolist() == [[4, 6], [8, 10]]
    assert e[2, 3].item() == 11
    assert torch.empty(0, device=E0).tolist() == []
    assert torch.empty(2, 0, device=E0).tolist() == [[], []]
    with pytest.raises(RuntimeError):
        e.item()  # more than one element
    # float() / int() / bool() go through item().
    assert float(torch.tensor(1.5).to(E0)) == 1.5
    assert int(torch.tensor(9).to(E1)) == 9
    assert bool(torch.tensor(True).to(E0)) is True


def test_item_sees_pending_writes():
    e = torch.zeros((), device=E0)
    for _ in range(5):
        e.add_(2)
    assert e.item() == 10.0


def test_clone_and_contiguous():
    c = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    e = c.to(E0)
    for view in (lambda x: x.transpose(0, 2), lambda x: x[:, ::2], lambda x: x.permute(2, 0, 1)):
        ce, cc = view(e).contiguous(), view(c).contiguous()
        assert ce.is_contiguous() and ce.stride() == cc.stride()
        exact(ce, cc)
        cl, clc = view(e).clone(), view(c).clone()
        assert cl.stride() == clc.stride()  # preserve_format, like CPU
        exact(cl, clc)
        assert cl.untyped_storage().data_ptr() != e.untyped_storage().data_ptr()


def test_large_copy_roundtrip_peer():
    """A ~1 MiB copy through both devices keeps every byte."""
    c = torch.randint(-2**31, 2**31 - 1, (256 * 1024,), dtype=torch.int32)
    e0 = c.to(E0)
    e1 = e0.to(E1)
    e0b = e1.to(E0)
    assert torch.equal(e0b.cpu(), c)
