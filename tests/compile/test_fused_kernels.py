"""The fused kernels of emulator/kernels/fused.pyx and their cost models (library.py)."""
import pytest
import torch

import emulator.kernels.library as library
from emulator.errors import KernelArgumentError
from emulator.kernels import dtypes

fused = library._module("fused")


def _triple(t):
    return (t.data_ptr(), {torch.float32: dtypes.FLOAT32, torch.float16: dtypes.FLOAT16,
                           torch.bfloat16: dtypes.BFLOAT16, torch.bool: dtypes.BOOL}[t.dtype], t.stride())


def test_program_over_broadcast_and_strided_operands():
    a = torch.randn(6, 5)
    b = torch.randn(5)
    c = torch.randn(5, 6).t()                 # strided
    out = torch.empty(6, 5)
    code, consts, _, _ = library.parse_fused_program("L0 L1 C2.0 mul add L2 sub exp")
    bcast = (b.data_ptr(), dtypes.FLOAT32, (0, 1))
    fused.pointwise_program(_triple(out), [_triple(a), bcast, _triple(c)], (6, 5), code, consts)
    torch.testing.assert_close(out, torch.exp(a + b * 2.0 - c))


def test_where_and_comparisons_and_bool_output():
    a, b = torch.randn(4, 7), torch.randn(4, 7)
    out = torch.empty(4, 7)
    code, consts, _, _ = library.parse_fused_program("L0 L1 gt L0 L1 where")
    fused.pointwise_program(_triple(out), [_triple(a), _triple(b)], (4, 7), code, consts)
    torch.testing.assert_close(out, torch.where(a > b, a, b))
    mask = torch.empty(4, 7, dtype=torch.bool)
    code, consts, _, _ = library.parse_fused_program("L0 C0.0 ge not")
    fused.pointwise_program(_triple(mask), [_triple(a)], (4, 7), code, consts)
    assert torch.equal(mask, ~(a >= 0))


@pytest.mark.parametrize("program", ["L0 add", "L0 L0", "L3 exp", "L0 frobnicate", "Cx"])
def test_bad_programs_are_rejected(program):
    a, out = torch.randn(3), torch.empty(3)
    with pytest.raises(KernelArgumentError):
        code, consts, _, _ = library.parse_fused_program(program)
        fused.pointwise_program(_triple(out), [_triple(a)], (3,), code, consts)
    assert torch.isfinite(a).all()


def test_fused_cost_is_one_pass_and_beats_the_separate_ops():
    from emulator.config import load_preset
    from emulator.device import CostDevice
    device = CostDevice(load_preset("default").device, fidelity="kernel")
    n = 1 << 16
    F32 = dtypes.FLOAT32
    slots = iter(range(1, 100))   # distinct addresses: operands at one address are read once
    op = lambda: library.Operand(next(slots) << 30, F32, (n,), (1,))  # noqa: E731
    chain = library.KERNELS["fused_pointwise"].cost(device, op(), "L0 L1 add C0.5 mul exp", op(), op())
    assert chain.nbytes == 3 * n * 4        # two inputs read once, one output written once
    separate = [library.KERNELS["binary_op"].cost(device, name, op(), op(), op(), F32, F32) for name in ("add", "mul")]
    separate.append(library.KERNELS["unary_op"].cost(device, "exp", op(), op(), F32, F32))
    assert sum(c.nbytes for c in separate) == 8 * n * 4
    assert chain.ns < sum(c.ns for c in separate)
    # an epilogue adds its vector work to the GEMM, never a second pass over the product
    a, b, out = (library.Operand(next(slots) << 30, F32, (256, 256), (256, 1)) for _ in range(3))
    plain = library.KERNELS["matmul"].cost(device, out, a, b, None, 0.0, 1.0)
    epilogue = library.KERNELS["matmul_epilogue"].cost(device, out, a, b, None, 0.0, 1.0, "L0 gelu", out)
    assert epilogue.nbytes == plain.nbytes and plain.ns < epilogue.ns
