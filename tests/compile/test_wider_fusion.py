"""Issue 22's wider fusion: softmax and layer norm with their elementwise producers and
consumers, bmm epilogues (torch_plugin/compile/lowering.py, the row kernels of library.py).
Compiled equals eager exactly (atol=rtol=0): the fused kernels round as eager's ops do and run
the reductions' own row code."""
import pytest
import torch
import torch.nn.functional as F

import torch_plugin  # noqa: F401
from torch_plugin.compile import compile_stats, reset_compile_stats

from compile_testing import DTYPES, compiled_equals_eager

def _emu(*shape, dtype):
    return torch.randn(*shape, dtype=dtype).to("emu")


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_fuses_its_scale_and_mask(dtype):
    def attention_probs(scores, mask):
        return torch.softmax(scores * 0.125 + mask, dim=-1)
    torch.manual_seed(0)
    mask = torch.triu(torch.full((8, 8), float("-inf")), 1).to(dtype).to("emu")
    stats, launched = compiled_equals_eager(attention_probs, _emu(2, 3, 8, 8, dtype=dtype), mask)
    assert launched == {"fused_softmax": 1}, launched
    assert stats["row_fusions"] == 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_fuses_its_consumer(dtype):
    def fn(x):
        return torch.softmax(x, dim=1) * 3.0 - 1.0
    torch.manual_seed(1)
    stats, launched = compiled_equals_eager(fn, _emu(5, 37, dtype=dtype))
    assert launched == {"fused_softmax": 1}, launched


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_fuses_residual_add_and_activation(dtype):
    def block(x, residual, w, b):
        return F.gelu(F.layer_norm(x + residual, (x.shape[-1],), w, b, 1e-5))
    torch.manual_seed(2)
    stats, launched = compiled_equals_eager(block, _emu(4, 33, dtype=dtype), _emu(4, 33, dtype=dtype),
                                             _emu(33, dtype=dtype), _emu(33, dtype=dtype))
    assert launched == {"fused_layer_norm": 1}, launched
    assert stats["row_fusions"] == 1


def test_softmax_prologue_fuses_in_training_and_gradients_equal():
    """softmax's backward reads its output, not its input: the scaled, masked scores have one
    user and fuse into the softmax in the training graph too; the gradient equals eager's."""
    torch.manual_seed(3)
    mask = torch.triu(torch.full((8, 8), float("-inf")), 1).to("emu")
    def fn(scores, mask):
        return torch.softmax(scores * 0.125 + mask, dim=-1)
    x = _emu(2, 8, 8, dtype=torch.float32).requires_grad_()
    grad = _emu(2, 8, 8, dtype=torch.float32)
    torch._dynamo.reset()
    reset_compile_stats()
    got = torch.compile(fn, backend="emu")(x, mask)
    got.backward(grad)
    gx, x.grad = x.grad.clone(), None
    assert compile_stats()["row_fusions"] == 1
    expected = fn(x, mask)
    expected.backward(grad)
    torch.testing.assert_close(got.cpu(), expected.cpu(), atol=0, rtol=0)
    # the backward graph's softmax gradient is aot's decomposition (mul, sum, sub), not eager's
    # kernel: it rounds differently in float32 (also without this fusion), hence a tolerance
    torch.testing.assert_close(gx.cpu(), x.grad.cpu(), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_bmm_gets_an_epilogue(dtype):
    def fn(a, b, bias):
        return torch.relu(torch.bmm(a, b) + bias)
    torch.manual_seed(4)
    stats, launched = compiled_equals_eager(fn, _emu(3, 5, 7, dtype=dtype), _emu(3, 7, 6, dtype=dtype),
                                             _emu(6, dtype=dtype))
    assert launched == {"bmm_epilogue": 1}, launched
    assert stats["bmm_epilogues"] == 1


def test_row_kernel_cost_is_one_pass():
    """fused_softmax reads its prologue's inputs once and writes out once: fewer bytes than the
    pointwise chain and the softmax apart (which write and re-read the scores)."""
    from emulator.config import load_preset
    from emulator.device import CostDevice
    import emulator.kernels.library as library
    from emulator.kernels import dtypes
    device = CostDevice(load_preset("default").device, fidelity="kernel")
    n, F32 = 1 << 16, dtypes.FLOAT32
    slots = iter(range(1, 100))
    op = lambda: library.Operand(next(slots) << 30, F32, (n // 256, 256), (256, 1))  # noqa: E731
    fused = library.KERNELS["fused_softmax"].cost(device, op(), 1, False, "L0 C0.125 mul L1 add", 2, "", op(), op())
    assert fused.nbytes == 3 * n * 4
    chain = library.KERNELS["fused_pointwise"].cost(device, op(), "L0 C0.125 mul L1 add", op(), op())
    softmax = library.KERNELS["softmax"].cost(device, op(), op(), 1)
    assert fused.nbytes < chain.nbytes + softmax.nbytes


def test_recompute_rule_inlines_a_shared_value_only_when_it_moves_fewer_bytes():
    """fusion.recompute_pays: n * bytes(inputs) < bytes(value) * (1 + n). ``x * 2`` (one input of
    its size, two users): 2N < 3N, recomputed in both, one kernel. ``a + b`` (two inputs):
    4N > 3N, written once and read by both."""
    def one_input(x):
        y = x * 2.0
        return torch.exp(y) + torch.sin(y)

    def two_inputs(a, b):
        y = a + b
        return torch.exp(y) + torch.sin(y)
    torch.manual_seed(5)
    x, b = _emu(64, 32, dtype=torch.float32), _emu(64, 32, dtype=torch.float32)
    _, launched = compiled_equals_eager(one_input, x)
    assert launched == {"fused_pointwise": 1}, launched
    _, launched = compiled_equals_eager(two_inputs, x, b)
    assert sum(launched.values()) == 2, launched    # y, then one chain reading it



def test_a_recomputed_value_keeps_the_matmul_its_copies_read():
    # transformers' llama decode step: the residual h = r + view(mm(...)) is recomputed inside one of
    # its users, so that user's kernel reads the matmul's view; the view must not also vanish into h's
    # own epilogue (it did: KeyError at the first compiled decode step).
    transformers = pytest.importorskip("transformers", reason="transformers builds the llama decode step")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=256)
    model = transformers.LlamaForCausalLM(config).eval().to("emu", torch.bfloat16)   # bf16: the recompute
    compiled = torch.compile(model, backend="emu")                                  # rule's bytes pay there
    ids = torch.randint(0, 256, (1, 12)).to("emu")
    token = torch.tensor([[7]]).to("emu")
    with torch.no_grad():
        eager_cache = model(input_ids=ids, use_cache=True).past_key_values
        compiled_cache = model(input_ids=ids, use_cache=True).past_key_values
        for _ in range(3):
            eager = model(input_ids=token, past_key_values=eager_cache, use_cache=True)
            fused = compiled(input_ids=token, past_key_values=compiled_cache, use_cache=True)
            eager_cache, compiled_cache = eager.past_key_values, fused.past_key_values
            # both run the fused attention kernel (compiled SDPA is lowered to it) and the RMS norms'
            # arithmetic of eager's ops: bit equality
            torch.testing.assert_close(fused.logits.float().cpu(), eager.logits.float().cpu(), rtol=0, atol=0)
