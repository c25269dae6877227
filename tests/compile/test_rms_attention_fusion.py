"""Issue 22, what was left: RMS norm as one ``row`` step (``fused_rms_norm``) and SDPA lowered to
the fused attention kernel (torch_plugin/compile/__init__.py ``_sdpa``, lowering.py
``_rms_fusion_of``). Compiled equals eager exactly (atol=rtol=0): the RMS kernel evaluates eager's
ops with one rounding each and sums the squares with eager's own mean kernel; compiled attention
runs eager's kernel, forward and backward."""
import pytest
import torch
import torch.nn.functional as F

import torch_plugin  # noqa: F401
from torch_plugin.compile import compile_stats, reset_compile_stats

from compile_testing import DTYPES, compiled_equals_eager, kernels_launched, llama_rms_norm
from compile_testing import emu_randn as _emu


def plain_rms_norm(x, weight, eps=1e-5):
    """No casts, the weight on the right, eps added on the left."""
    return x * (eps + x.pow(2).mean(dim=-1, keepdim=True)).rsqrt() * weight


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm", (llama_rms_norm, plain_rms_norm))
def test_rms_norm_is_one_row_kernel(norm, dtype):
    torch.manual_seed(0)
    stats, launched = compiled_equals_eager(norm, _emu(3, 5, 129, dtype=dtype), _emu(129, dtype=dtype))
    assert launched == {"fused_rms_norm": 1}, launched
    assert stats["rms_norm_fusions"] == 1 and stats["row_fusions"] == 1


def test_rms_norm_with_its_consumer_and_a_long_row():
    """The following activation joins the epilogue; a row longer than the reduction's blocks."""
    def fn(x, w):
        return F.silu(llama_rms_norm(x, w)) * 2.0
    torch.manual_seed(1)
    stats, launched = compiled_equals_eager(fn, _emu(4, 3000, dtype=torch.bfloat16), _emu(3000, dtype=torch.bfloat16))
    assert launched == {"fused_rms_norm": 1}, launched


@pytest.mark.parametrize("kind", ("rms", "layer_norm", "softmax"))
def test_row_steps_under_dynamic_shapes(kind):
    """The recompile after a shape changes has a symbolic row count (dynamo's automatic dynamic
    shapes); its row steps run at each call's sizes: equal to eager at every shape."""
    fns = {"rms": plain_rms_norm,
           "layer_norm": lambda x, w: F.gelu(F.layer_norm(x * 2.0, (x.shape[-1],), w)),
           "softmax": lambda x, w: torch.softmax(x + w, dim=-1) * 3.0}
    fn = fns[kind]
    torch._dynamo.reset()
    reset_compile_stats()
    compiled = torch.compile(fn, backend="emu")
    w = _emu(64)
    for i, rows in enumerate((4, 32, 7, 32)):
        if i == 1:
            reset_compile_stats()   # what follows: the graph with the symbolic row count
        x = _emu(rows, 64)
        torch.testing.assert_close(compiled(x, w).cpu(), fn(x, w).cpu(), atol=0, rtol=0)
    stats = compile_stats()
    assert stats["row_fusions"] >= 1, stats


def test_a_mean_that_is_not_a_row_norm_stays_apart():
    """A mean over another dimension than the last, or without keepdim, is not fused (the kernel
    reduces whole rows); the result still equals eager."""
    def over_rows(x):
        return x * torch.rsqrt(x.pow(2).mean(0, keepdim=True) + 1e-6)

    def no_keepdim(x):
        return x.pow(2).mean(-1) + 1.0
    torch.manual_seed(2)
    for fn in (over_rows, no_keepdim):
        stats, launched = compiled_equals_eager(fn, _emu(6, 10))
        assert stats["rms_norm_fusions"] == 0 and "fused_rms_norm" not in launched, launched


def test_rms_norm_transposed_input_is_not_fused():
    """A strided input to the square: eager's pow keeps the strides and its mean sums another order."""
    def fn(x, w):
        return plain_rms_norm(x.t(), w)
    torch.manual_seed(3)
    stats, _ = compiled_equals_eager(fn, _emu(16, 8), _emu(16))
    assert stats["rms_norm_fusions"] == 0


def test_fused_rms_norm_cost_is_one_pass():
    """fused_rms_norm reads each input once and writes out once: fewer bytes than the square,
    the mean and the epilogue apart."""
    from emulator.config import load_preset
    from emulator.device import CostDevice
    import emulator.kernels.library as library
    from emulator.kernels import dtypes
    device = CostDevice(load_preset("default").device, fidelity="kernel")
    rows, n, F32 = 256, 256, dtypes.FLOAT32
    x = library.Operand(1 << 30, F32, (rows, n), (n, 1))
    w = library.Operand(2 << 30, F32, (rows, n), (0, 1))
    out = library.Operand(3 << 30, F32, (rows, n), (n, 1))
    fused = library.KERNELS["fused_rms_norm"].cost(device, out, F32, F32, "L0 C2.0 pow round_f32",
                                                   "L1 L0 C1e-06 add round_f32 rsqrt round_f32 mul round_f32 L2 mul "
                                                   "round_f32", x, w)
    assert fused.nbytes == 2 * rows * n * 4 + n * 4
    square = library.KERNELS["fused_pointwise"].cost(device, out, "L0 C2.0 pow round_f32", x)
    assert fused.nbytes < 2 * square.nbytes


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", ("causal", "float", "bool", None))
def test_sdpa_runs_the_fused_attention_kernel(dtype, mask):
    torch.manual_seed(4)
    q, k, v = _emu(2, 4, 9, 16, dtype=dtype), _emu(2, 4, 11, 16, dtype=dtype), _emu(2, 4, 11, 16, dtype=dtype)
    bias = None
    if mask == "float":
        bias = _emu(9, 11, dtype=dtype)
    elif mask == "bool":
        bias = (torch.rand(2, 1, 9, 11) > 0.3).to("emu")

    def fn(q, k, v, bias):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=mask == "causal")
    stats, launched = compiled_equals_eager(fn, q, k, v, bias)
    assert launched.get("attention") == 1 and "bmm" not in launched, launched
    assert stats["fused_attention"] == 1


def test_sdpa_with_grouped_heads_and_a_3d_input():
    torch.manual_seed(5)
    q, k, v = _emu(1, 4, 6, 8), _emu(1, 2, 6, 8), _emu(1, 2, 6, 8)
    stats, launched = compiled_equals_eager(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True, scale=0.3), q, k, v)
    assert launched.get("attention") == 1, launched
    stats, launched = compiled_equals_eager(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), _emu(3, 5, 8), _emu(3, 5, 8),
        _emu(3, 5, 8))
    assert launched.get("attention") == 1, launched


def test_sdpa_the_fused_kernel_does_not_take_runs_the_math_path_as_eager():
    """A mask beside is_causal is an error in eager (math path); one the fused kernel cannot take
    (batch dims that broadcast) runs the math path compiled too."""
    torch.manual_seed(6)
    q, k, v = _emu(2, 3, 5, 8), _emu(1, 3, 5, 8), _emu(1, 3, 5, 8)
    stats, launched = compiled_equals_eager(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), q, k, v)
    assert stats["fused_attention"] == 0 and "attention" not in launched, launched


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_sdpa_backward_is_the_fused_kernels_and_equals_eager(dtype):
    torch.manual_seed(7)
    q, k, v = (_emu(2, 4, 8, 16, dtype=dtype).requires_grad_() for _ in range(3))
    grad = _emu(2, 4, 8, 16, dtype=dtype)

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch._dynamo.reset()
    reset_compile_stats()
    compiled = torch.compile(fn, backend="emu")
    expected = fn(q, k, v)
    eager_grads = torch.autograd.grad(expected, (q, k, v), grad)
    for _ in range(2):
        (got, grads), launched = kernels_launched(lambda: (lambda y: (y, torch.autograd.grad(y, (q, k, v), grad)))(
            compiled(q, k, v)))
        torch.testing.assert_close(got.cpu(), expected.cpu(), atol=0, rtol=0)
        for g, e in zip(grads, eager_grads):
            torch.testing.assert_close(g.cpu(), e.cpu(), atol=0, rtol=0)
        assert launched.get("attention") == 1 and launched.get("attention_backward") == 1, launched
    assert compile_stats()["fused_attention"] == 2
