"""Fixtures shared by the torch_plugin tests."""
import pytest
import torch

import torch_plugin  # noqa: F401


@pytest.fixture
def no_host_fallback():
    """The test runs with the host fallback forbidden (op stats reset at its start) and nothing
    fell back to the host; a module takes it with ``pytestmark = pytest.mark.usefixtures(...)``."""
    torch.emu.reset_op_stats()
    with torch.emu.host_fallback("forbid"):
        yield
    assert not torch.emu.op_stats()["host_fallback"]


@pytest.fixture
def stats():
    """torch.emu.op_stats() collected during the test (reset at its start)."""
    torch.emu.reset_op_stats()

    class Stats:
        def native(self, op):
            return torch.emu.op_stats()["native"].get(op, 0)

        def fallback(self, op):
            return torch.emu.op_stats()["host_fallback"].get(op, 0)

        def no_fallback(self):
            fell = torch.emu.op_stats()["host_fallback"]
            assert not fell, f"fell back to the host: {fell}"
    return Stats()
