"""Helpers shared by the torch_plugin tests: dtypes, deterministic inputs, tolerances."""
import io
import warnings

import pytest
import torch

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool]
EXACT = dict(rtol=0, atol=0)


def make(dtype, shape, seed=0):
    """A deterministic CPU tensor of ``dtype``: |values| up to ~16 for floats, <= 1000 for ints."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 4).to(dtype)
    if dtype == torch.uint8:
        return torch.randint(0, 256, shape, generator=g, dtype=dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), shape, generator=g, dtype=dtype)


def saved_and_loaded(obj, map_location=None, **save_kwargs):
    """obj through torch.save into memory (save_kwargs: torch.save's options) and back through
    torch.load(map_location=map_location)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer, **save_kwargs)
    buffer.seek(0)
    return torch.load(buffer, map_location=map_location)


def same(got, expected, **tol):
    """got (a device tensor, or lists/tuples of them) equals expected (CPU): dtype, shape and the
    values, exactly or within tol, NaN equal to NaN."""
    if isinstance(expected, (tuple, list)):
        for g, e in zip(got, expected):
            same(g, e, **tol)
        return
    got = got.cpu()
    assert got.dtype == expected.dtype and got.shape == expected.shape, (got.dtype, got.shape, expected.dtype,
                                                                          expected.shape)
    torch.testing.assert_close(got, expected, equal_nan=True, **(tol or EXACT))


def check_operation_scope_fault(name, fn, message):
    """fn(e), e a device copy of a 4x5 float32 tensor, launches the op ``name`` with a bad index
    value that the kernel rejects when the device runs it: an operation-scope INVALID_ARGUMENT whose
    text holds message, not sticky (the next op runs), and nothing written: e, the rejected
    command's output if name is an in-place op's, holds no valid data (issue #9), else is
    unchanged; another tensor on the device is untouched."""
    x = make(torch.float32, (4, 5))
    e, keep = x.to("emu"), torch.arange(6.0).to("emu")
    torch.emu.synchronize()
    fn(e)  # launches; the kernel rejects the index when the device runs it
    with pytest.raises(torch.AcceleratorError, match="INVALID_ARGUMENT") as info:
        torch.emu.synchronize()
    assert message in str(info.value) and info.value.scope == "operation"
    assert torch.ones(2, device="emu").sum().item() == 2.0  # not sticky: no recovery needed
    if name.endswith("_"):  # e is the rejected command's output: reading it names the error (issue #9)
        with pytest.raises(torch.AcceleratorError, match="holds no valid data.*INVALID_ARGUMENT"):
            e.cpu()
    else:
        same(e, x)  # an input: nothing was written
    same(keep, torch.arange(6.0))


@pytest.fixture(autouse=True)
def forbid_fallback():
    """Autouse where imported: the module's tests run with the host fallback forbidden, and none was counted."""
    torch.emu.reset_op_stats()
    with warnings.catch_warnings(), torch.emu.host_fallback("forbid"):
        warnings.simplefilter("ignore")
        yield
    assert not torch.emu.op_stats()["host_fallback"], torch.emu.op_stats()["host_fallback"]
