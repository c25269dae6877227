"""What one op costs in commands and runtime calls: Python scalars and CPU 0-dim operands travel
as immediate launch arguments, never as device tensors filled by an extra command."""
import pytest
import torch

import runtime
from plugin_testing import make


class Counted:
    """Runtime API calls and device commands made inside the block (after a synchronisation)."""

    def __enter__(self):
        torch.emu.synchronize()
        rt = runtime.get_runtime()
        self._rt, self._calls, self._allocs = rt, rt.clock.api_calls, rt.clock.cached_allocs
        self._commands = self._executed()
        return self

    def _executed(self):
        return sum(d.firmware.commands_executed for d in self._rt.driver.transport.devices)

    def __exit__(self, *exc):
        self.calls = self._rt.clock.api_calls - self._calls
        self.cached_allocs = self._rt.clock.cached_allocs - self._allocs
        torch.emu.synchronize()
        self.commands = self._executed() - self._commands
        return False


@pytest.mark.parametrize("scalar", [2.0, 3, True, torch.tensor(0.5), torch.tensor(7, dtype=torch.int32)],
                         ids=["float", "int", "bool", "cpu-0-dim-float", "cpu-0-dim-int32"])
def test_scalar_operand_is_one_command_and_two_runtime_calls(scalar):
    x = make(torch.float32, (64,)).to("emu")
    y = x * scalar
    with Counted() as c:
        y = x * scalar                       # a cached malloc of the output + one launch
    assert (c.calls, c.cached_allocs, c.commands) == (1, 1, 1)
    torch.testing.assert_close(y.cpu(), x.cpu() * scalar, rtol=0, atol=0)
    with Counted() as c:
        x.add_(scalar)                       # in place: one launch, no allocation
    assert (c.calls, c.commands) == (1, 1)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.float16, torch.bfloat16, torch.bool])
def test_immediates_cast_like_cpu(dtype):
    x = make(dtype, (33,))
    for scalar in (300, -7, 0.1, True, torch.tensor(2.5, dtype=torch.float64)):
        for op in (torch.add, torch.mul):
            if dtype == torch.bool and op is torch.add and isinstance(scalar, float):
                continue
            expected = op(x, scalar)
            got = op(x.to("emu"), scalar)
            assert got.dtype == expected.dtype
            torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)
            got = op(scalar, x.to("emu"))        # the scalar first
            torch.testing.assert_close(got.cpu(), op(scalar, x), rtol=0, atol=0)
