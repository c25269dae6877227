"""Issue 22: a norm whose input chain has other users (a transformer's residual sum ``h = x + attn``,
read by the norm and by the next residual add) is one launch: the row kernel computes ``h`` for its
other readers and reads it itself (``fused_keep``, lowering.py ``_keep_of``). Compiled equals eager
exactly, every output."""
import pytest
import torch
import torch.nn.functional as F

import torch_plugin  # noqa: F401
from emulator.errors import KernelArgumentError
from torch_plugin.compile import compile_stats, reset_compile_stats

from compile_testing import DTYPES, kernels_launched, llama_rms_norm
from compile_testing import emu_randn as _emu


def _compiled_equals_eager(fn, *args):
    """As compile_testing.compiled_equals_eager, for functions that return several tensors."""
    torch._dynamo.reset()
    reset_compile_stats()
    compiled = torch.compile(fn, backend="emu")
    expected = fn(*args)
    for _ in range(3):   # the capture, then two replays
        got, launched = kernels_launched(lambda: compiled(*args))
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g.cpu(), e.cpu(), atol=0, rtol=0)
    return compile_stats(), launched


@pytest.mark.parametrize("dtype", DTYPES)
def test_residual_sum_and_rms_norm_are_one_launch(dtype):
    def block(x, attn, w):
        h = x + attn
        n = llama_rms_norm(h, w)
        return h + n * 2.0, h   # the next residual add, and the residual stream itself
    torch.manual_seed(0)
    stats, launched = _compiled_equals_eager(block, _emu(2, 7, 96, dtype=dtype), _emu(2, 7, 96, dtype=dtype),
                                             _emu(96, dtype=dtype))
    assert launched == {"fused_keep": 1}, launched
    assert stats["kept_values"] == 1 and stats["rms_norm_fusions"] == 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_residual_chain_and_layer_norm_are_one_launch(dtype):
    def block(x, r, w, b):
        h = x * 0.5 + r
        return F.gelu(F.layer_norm(h, (h.shape[-1],), w, b)) + h
    torch.manual_seed(1)
    stats, launched = _compiled_equals_eager(lambda *a: (block(*a),), _emu(5, 33, dtype=dtype),
                                             _emu(5, 33, dtype=dtype), _emu(33, dtype=dtype), _emu(33, dtype=dtype))
    assert launched == {"fused_keep": 1}, launched
    assert stats["kept_values"] == 1


def test_a_norm_with_nothing_else_to_fuse_still_takes_its_shared_input_along():
    """layer_norm(h) alone (no prologue of its own, no epilogue): the kept h is what fuses."""
    def fn(x, r, w):
        h = x + r
        return F.layer_norm(h, (8,), w), h * 3.0
    torch.manual_seed(2)
    stats, launched = _compiled_equals_eager(fn, _emu(4, 8), _emu(4, 8), _emu(8))
    assert launched.get("fused_keep") == 1 and stats["kept_values"] == 1, launched


def test_softmax_keeps_its_shared_input():
    def fn(s, mask):
        scores = s * 0.125 + mask
        return torch.softmax(scores, dim=-1) * 2.0, scores
    torch.manual_seed(3)
    stats, launched = _compiled_equals_eager(fn, _emu(2, 4, 16, 16), _emu(16, 16))
    assert launched == {"fused_keep": 1}, launched


def test_a_value_read_before_its_norm_is_not_kept():
    """A step before the norm reads h (a sum over it): h must exist before the row kernel runs,
    so it keeps its own step (the lowering is redone without keeping it); results still equal."""
    def fn(x, r, w):
        h = x + r
        total = h.sum(-1, keepdim=True)
        return llama_rms_norm(h, w) + total, h
    torch.manual_seed(4)
    stats, launched = _compiled_equals_eager(fn, _emu(3, 16), _emu(3, 16), _emu(16))
    assert stats["kept_values"] == 0 and "fused_keep" not in launched, launched


def test_residual_block_trains_compiled_as_eager():
    """Forward and backward through two residual blocks: loss and every gradient equal eager's.
    (The residual sum is elementwise here: ``x + linear(x)`` is the matmul's epilogue instead.)"""
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(32))
            self.gamma = torch.nn.Parameter(torch.randn(32))
            self.proj = torch.nn.Linear(32, 32)

        def forward(self, x):
            h = x * self.gamma + torch.tanh(x)
            y = self.proj(F.layer_norm(h, (32,), self.w))
            return y + h.mean(-1, keepdim=True)   # h read after the norm by a reduction: kept
    torch.manual_seed(5)
    model = torch.nn.Sequential(Block(), Block()).to("emu")
    twin = torch.nn.Sequential(Block(), Block()).to("emu")
    twin.load_state_dict(model.state_dict())
    x = _emu(6, 32)
    torch._dynamo.reset()
    reset_compile_stats()
    compiled = torch.compile(twin, backend="emu")
    model(x).square().mean().backward()
    compiled(x).square().mean().backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad.cpu(), atol=1e-6, rtol=1e-5)
    assert compile_stats()["kept_values"] >= 2


def test_fused_keep_cost_is_the_two_passes_and_refuses_other_kernels():
    from emulator.config import load_preset
    from emulator.device import CostDevice
    from emulator.kernels import dtypes, library
    device = CostDevice(load_preset("h200").device, fidelity="kernel")
    F32 = dtypes.FLOAT32
    op = library.Operand
    keep = op(1 << 20, F32, (64, 1024), (1024, 1))
    x = op(2 << 20, F32, (64, 1024), (1024, 1))
    out = op(3 << 20, F32, (64, 1024), (1024, 1))
    row_args = (out, 0, False, "L0", 1, "", keep)
    pre = library.KERNELS["fused_pointwise"].cost(device, keep, "L0 L1 add round_f32", x, x)
    row = library.KERNELS["fused_softmax"].cost(device, *row_args)
    both = library.KERNELS["fused_keep"].cost(device, keep, "L0 L1 add round_f32", 2, "fused_softmax", x, x, *row_args)
    assert both.ns == pytest.approx(pre.ns + row.ns) and both.nbytes == pre.nbytes + row.nbytes
    with pytest.raises(KernelArgumentError, match="not a row kernel"):
        library.KERNELS["fused_keep"].cost(device, keep, "L0", 1, "matmul_epilogue", x, *row_args)
