"""Tensors of more than 12 dimensions (issue 18): the device takes up to 64, torch's own limit for
dim lists (``only tensors with up to 64 dims are supported``), compared with CPU.

Every kernel with per-rank arrays sizes them by MAX_RANK (emulator/kernels/_common.pxi) and checks
the rank first; size-1 dims are dropped and contiguous dims merged before iterating, so a 64-d
tensor of a few elements walks as a 1- or 2-d one.
"""
import pytest
import torch

from plugin_testing import make

RANKS = [13, 25, 64]


def _shape(rank, big=(2, 3, 2)):
    """A rank-``rank`` shape with a few non-1 extents spread over it (so dims neither all merge
    nor all drop)."""
    shape = [1] * rank
    for i, n in enumerate(big):
        shape[(i * 7 + 1) % rank] = n
    shape[-1] = 2
    return tuple(shape)


def emu(t):
    return t.to("emu")


def same(got, expected):
    torch.testing.assert_close(got.cpu(), expected, rtol=1.3e-6, atol=1e-6)


@pytest.mark.parametrize("rank", RANKS)
def test_pointwise(rank):
    x, y = make(torch.float32, _shape(rank)), make(torch.float32, _shape(rank), seed=1)
    same(emu(x) + emu(y), x + y)
    same(torch.exp(emu(x)), torch.exp(x))
    same(torch.where(emu(x) > 0, emu(x), emu(y)), torch.where(x > 0, x, y))


@pytest.mark.parametrize("rank", RANKS)
def test_pointwise_broadcast_and_strided(rank):
    x = make(torch.float32, _shape(rank))
    row = make(torch.float32, (2,), seed=2)
    same(emu(x) * emu(row), x * row)
    t = x.transpose(1, rank - 1)              # a non-contiguous operand
    same(emu(x).transpose(1, rank - 1) - 1.0, t - 1.0)


@pytest.mark.parametrize("rank", RANKS)
def test_reductions(rank):
    x = make(torch.float32, _shape(rank))
    e = emu(x)
    same(e.sum(), x.sum())
    same(e.sum(rank - 1), x.sum(rank - 1))
    same(e.amax(dim=(1, rank - 1), keepdim=True), x.amax(dim=(1, rank - 1), keepdim=True))
    same(e.mean(dim=list(range(rank))), x.mean(dim=list(range(rank))))
    values, indices = e.max(dim=rank - 1)
    ev, ei = x.max(dim=rank - 1)
    same(values, ev)
    assert torch.equal(indices.cpu(), ei)


@pytest.mark.parametrize("rank", RANKS)
def test_copy_and_dtype_conversion(rank):
    x = make(torch.float32, _shape(rank))
    e = emu(x)
    same(e.clone(), x)
    assert torch.equal(e.to(torch.float64).cpu(), x.to(torch.float64))
    assert torch.equal(e.cpu(), x)


@pytest.mark.parametrize("rank", RANKS)
def test_cat(rank):
    x, y = make(torch.float32, _shape(rank)), make(torch.float32, _shape(rank), seed=3)
    same(torch.cat([emu(x), emu(y)], dim=rank - 1), torch.cat([x, y], dim=rank - 1))
    same(torch.cat([emu(x), emu(y)], dim=0), torch.cat([x, y], dim=0))


@pytest.mark.parametrize("rank", RANKS)
def test_permute_contiguous(rank):
    x = make(torch.float32, _shape(rank))
    order = list(reversed(range(rank)))
    same(emu(x).permute(order).contiguous(), x.permute(order).contiguous())


@pytest.mark.parametrize("rank", RANKS)
def test_index_ops(rank):
    x = make(torch.float32, _shape(rank))
    e = emu(x)
    idx = torch.tensor([1, 0, 1])
    same(e.index_select(rank - 1, emu(idx)), x.index_select(rank - 1, idx))
    g = torch.zeros(_shape(rank), dtype=torch.int64)
    same(torch.gather(e, rank - 1, emu(g)), torch.gather(x, rank - 1, g))
    mask = x > 0
    same(e[emu(mask)], x[mask])
    out, expected = e.clone(), x.clone()
    out.masked_fill_(emu(mask), 7.0)
    expected.masked_fill_(mask, 7.0)
    same(out, expected)


def test_more_than_64_dims_is_a_clear_error_and_changes_nothing():
    keep = emu(torch.arange(4.0))
    x = torch.ones([1] * 65)
    with pytest.raises(RuntimeError, match="rank <= 64"):
        emu(x)
    same(keep + 1, torch.arange(4.0) + 1)
