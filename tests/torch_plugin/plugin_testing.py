"""Helpers shared by the torch_plugin tests: dtypes, deterministic inputs, tolerances."""
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


@pytest.fixture(autouse=True)
def forbid_fallback():
    """Autouse where imported: the module's tests run with the host fallback forbidden, and none was counted."""
    torch.emu.reset_op_stats()
    with warnings.catch_warnings(), torch.emu.host_fallback("forbid"):
        warnings.simplefilter("ignore")
        yield
    assert not torch.emu.op_stats()["host_fallback"], torch.emu.op_stats()["host_fallback"]
