"""The emu autocast policy (torch_plugin/csrc/autocast.cpp, docs/autocast.md) op by op.

- Ops whose policy CPU defines the same way (lower precision: mm, bmm, addmm, baddbmm, addbmm,
  matmul, linear, conv1d/2d/3d, conv_transpose1d/2d, prelu, scaled_dot_product_attention;
  float32: the losses, cdist, prod): result dtype equal to ``torch.autocast("cpu")``'s and values
  within the autocast dtype's tolerance of CPU's.
- Ops on CUDA's lists only (CPU autocast leaves them alone): checked against the CPU op on
  inputs cast as the policy says (float32 ops: on float32 inputs, exactly as a float32 op;
  lower-precision ops: on inputs cast to the autocast dtype).
- promote (dot/addcmul/index_put of mixed dtypes), the banned binary_cross_entropy, the fp32
  weight cast cache with backward, a training step under autocast, unsupported dtypes rejected
  when entering the block, and nothing changed outside autocast.
Tolerances: a float16/bfloat16 result is compared with the float64 reference (the op on float64
copies of the inputs as the policy rounds them), never with CPU's own float16/bfloat16 bits, which
differ between AVX2, AVX-512 and AMX hosts (precision.py, docs/numerics.md): single ops within one
unit in the last place plus the float32 accumulation bound K * eps(float32) * (the op on |inputs|);
chains that round between steps (attention, chain_matmul, the models) no worse than twice CPU's own
error against that reference. Float32 results: bfloat16-policy losses etc. rtol=1.6e-2, atol=1e-2
(float16 2e-3) against CPU; float32-policy ops: float32 rtol=1.3e-6, atol=1e-5.
Every case runs with the host fallback forbidden.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import torch_plugin  # noqa: F401
from precision import as_float64, assert_no_worse_than_cpu, assert_reduced_close, magnitudes

LOW = [torch.bfloat16, torch.float16]
TOL = {torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2), torch.float16: dict(rtol=2e-3, atol=2e-3),
       torch.float32: dict(rtol=1.3e-6, atol=1e-5)}


def randn(*shape, seed=0, scale=1.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(dtype)


def emu(tensors):
    return [t.to("emu") if isinstance(t, torch.Tensor) else t for t in tensors]


@pytest.fixture(autouse=True)
def strict():
    with torch.emu.host_fallback("forbid"):
        yield


def _close(actual, expected, dtype):
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    torch.testing.assert_close(actual.cpu(), expected, **TOL[expected.dtype if expected.dtype in TOL else dtype])


# Ops linear in each operand (the op on |inputs| is the sum of |terms|), with an upper bound of the
# terms summed into one output; the others are chains compared as "no worse than CPU".
BILINEAR_TERMS = {"mm": 16, "bmm": 16, "addmm": 17, "baddbmm": 17, "addbmm": 33, "matmul": 16, "linear": 17,
                  "conv1d": 10, "conv2d": 28, "conv3d": 54, "conv_transpose1d": 9, "conv_transpose2d": 27,
                  "prelu": 1, "addmv": 17, "mv": 16, "addr": 2, "einsum": 16}


def _close_reduced(name, fn, args, actual, cpu, dtype):
    """actual (emu, under autocast) against the float64 reference of fn on args rounded to dtype."""
    rounded = [a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    ref64 = fn(*as_float64(rounded))
    if name in BILINEAR_TERMS:
        assert_reduced_close(actual, ref64, dtype, scale=fn(*magnitudes(rounded)), terms=BILINEAR_TERMS[name],
                             cpu=cpu, what=name)
    else:
        assert_no_worse_than_cpu(actual, cpu, ref64, what=name)


def _run(fn, args, device, dtype):
    with torch.autocast(device, dtype=dtype):
        return fn(*args)


# -- policies CPU shares: compared with torch.autocast("cpu") ------------------------------------
SAME_AS_CPU = {
    "mm": (torch.mm, lambda: [randn(8, 16), randn(16, 4, seed=1)]),
    "bmm": (torch.bmm, lambda: [randn(2, 8, 16), randn(2, 16, 4, seed=1)]),
    "addmm": (torch.addmm, lambda: [randn(8, 4, seed=2), randn(8, 16), randn(16, 4, seed=1)]),
    "baddbmm": (torch.baddbmm, lambda: [randn(2, 8, 4, seed=2), randn(2, 8, 16), randn(2, 16, 4, seed=1)]),
    "addbmm": (torch.addbmm, lambda: [randn(8, 4, seed=2), randn(2, 8, 16), randn(2, 16, 4, seed=1)]),
    "matmul": (torch.matmul, lambda: [randn(3, 8, 16), randn(16, 4, seed=1)]),
    "linear": (F.linear, lambda: [randn(5, 16), randn(4, 16, seed=1), randn(4, seed=2)]),
    "conv1d": (F.conv1d, lambda: [randn(2, 3, 12), randn(4, 3, 3, seed=1), randn(4, seed=2)]),
    "conv2d": (F.conv2d, lambda: [randn(2, 3, 8, 8), randn(4, 3, 3, 3, seed=1), randn(4, seed=2)]),
    "conv3d": (F.conv3d, lambda: [randn(1, 2, 5, 5, 5), randn(3, 2, 3, 3, 3, seed=1)]),
    "conv_transpose1d": (F.conv_transpose1d, lambda: [randn(2, 3, 7), randn(3, 4, 3, seed=1)]),
    "conv_transpose2d": (F.conv_transpose2d, lambda: [randn(2, 3, 5, 5), randn(3, 2, 3, 3, seed=1)]),
    "prelu": (F.prelu, lambda: [randn(2, 3, 4), torch.tensor([0.25, 0.1, 0.5])]),
    "scaled_dot_product_attention": (F.scaled_dot_product_attention,
                                     lambda: [randn(1, 2, 6, 8), randn(1, 2, 6, 8, seed=1), randn(1, 2, 6, 8, seed=2)]),
    # float32 on both
    "mse_loss": (F.mse_loss, lambda: [randn(4, 5, dtype=torch.bfloat16), randn(4, 5, seed=1, dtype=torch.bfloat16)]),
    "l1_loss": (F.l1_loss, lambda: [randn(4, 5, dtype=torch.bfloat16), randn(4, 5, seed=1, dtype=torch.bfloat16)]),
    "smooth_l1_loss": (F.smooth_l1_loss, lambda: [randn(4, 5, dtype=torch.float16), randn(4, 5, seed=1, dtype=torch.float16)]),
    "huber_loss": (F.huber_loss, lambda: [randn(4, 5, dtype=torch.bfloat16), randn(4, 5, seed=1, dtype=torch.bfloat16)]),
    "nll_loss": (F.nll_loss, lambda: [randn(6, 5, dtype=torch.bfloat16).log_softmax(1), torch.tensor([0, 4, 2, 1, 3, 0])]),
    "binary_cross_entropy_with_logits": (F.binary_cross_entropy_with_logits,
                                         lambda: [randn(4, 5, dtype=torch.bfloat16), torch.rand(4, 5).to(torch.bfloat16)]),
    "kl_div": (lambda a, b: F.kl_div(a, b, reduction="batchmean"),
               lambda: [randn(4, 5, dtype=torch.bfloat16).log_softmax(1), randn(4, 5, seed=1).softmax(1).to(torch.bfloat16)]),
    "prod": (torch.prod, lambda: [(1 + 0.1 * randn(3, 4)).to(torch.bfloat16)]),
    "cdist": (torch.cdist, lambda: [randn(5, 3, dtype=torch.bfloat16), randn(4, 3, seed=1, dtype=torch.bfloat16)]),
}


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("name", sorted(SAME_AS_CPU))
def test_policy_matches_cpu_autocast(name, dtype):
    fn, make = SAME_AS_CPU[name]
    args = make()
    expected = _run(fn, args, "cpu", dtype)
    actual = _run(fn, emu(args), "emu", dtype)
    if expected.dtype in LOW:
        assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
        _close_reduced(name, fn, args, actual, expected, expected.dtype)
    else:
        _close(actual, expected, dtype)


# -- CUDA's lists where CPU autocast has no policy: the CPU op on the inputs the policy makes -----
LOWER_PRECISION_ONLY_CUDA = {
    "addmv": (torch.addmv, lambda: [randn(8, seed=2), randn(8, 16), randn(16, seed=1)]),
    "mv": (torch.mv, lambda: [randn(8, 16), randn(16, seed=1)]),
    "addr": (torch.addr, lambda: [randn(8, 4, seed=2), randn(8), randn(4, seed=1)]),
    "einsum": (lambda a, b: torch.einsum("ij,jk->ik", a, b), lambda: [randn(8, 16), randn(16, 4, seed=1)]),
    "chain_matmul": (lambda a, b, c: torch.linalg.multi_dot([a, b, c]),
                     lambda: [randn(4, 8), randn(8, 6, seed=1), randn(6, 3, seed=2)]),
}

FP32_ONLY_CUDA = {
    "softmax": (lambda x: torch.softmax(x, -1), lambda: [randn(4, 7, dtype=torch.bfloat16)]),
    "log_softmax": (lambda x: torch.log_softmax(x, -1), lambda: [randn(4, 7, dtype=torch.float16)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (7,), w, b),
                   lambda: [randn(4, 7, dtype=torch.bfloat16), randn(7, seed=1), randn(7, seed=2)]),
    "group_norm": (lambda x: F.group_norm(x, 2), lambda: [randn(2, 4, 3, dtype=torch.bfloat16)]),
    "exp": (torch.exp, lambda: [randn(4, 7, dtype=torch.float16)]),
    "log": (torch.log, lambda: [randn(4, 7, dtype=torch.bfloat16).abs() + 0.5]),
    "rsqrt": (torch.rsqrt, lambda: [randn(4, 7, dtype=torch.bfloat16).abs() + 0.5]),
    "pow": (lambda x: torch.pow(x, 3), lambda: [randn(4, 7, dtype=torch.float16)]),
    "sum": (torch.sum, lambda: [randn(4, 7, dtype=torch.bfloat16)]),
    "sum_dim": (lambda x: x.sum(1), lambda: [randn(4, 7, dtype=torch.float16)]),
    "cumsum": (lambda x: x.cumsum(0), lambda: [randn(4, 7, dtype=torch.bfloat16)]),
    "logsumexp": (lambda x: x.logsumexp(1), lambda: [randn(4, 7, dtype=torch.bfloat16)]),
    "norm": (lambda x: x.norm(), lambda: [randn(4, 7, dtype=torch.bfloat16)]),
    "linalg_vector_norm": (lambda x: torch.linalg.vector_norm(x, 3), lambda: [randn(4, 7, dtype=torch.float16)]),
}


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("name", sorted(LOWER_PRECISION_ONLY_CUDA))
def test_lower_precision_ops(name, dtype):
    fn, make = LOWER_PRECISION_ONLY_CUDA[name]
    args = make()
    expected = fn(*[a.to(dtype) for a in args])  # the policy: cast every float input, run in dtype
    actual = _run(fn, emu(args), "emu", dtype)
    assert actual.dtype == expected.dtype == dtype, (actual.dtype, expected.dtype)
    _close_reduced(name, fn, args, actual, expected, dtype)


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("name", sorted(FP32_ONLY_CUDA))
def test_fp32_ops(name, dtype):
    fn, make = FP32_ONLY_CUDA[name]
    args = make()
    expected = fn(*[a.float() for a in args])
    actual = _run(fn, emu(args), "emu", dtype)
    assert actual.dtype == torch.float32
    _close(actual, expected, torch.float32)


def test_explicit_dtype_wins_over_fp32_policy():
    x = randn(4, 7).to("emu")
    with torch.autocast("emu", dtype=torch.bfloat16):
        assert torch.softmax(x, -1, dtype=torch.float64).dtype == torch.float64
        assert x.sum(dtype=torch.float16).dtype == torch.float16


def test_promote_mixed_inputs():
    a, b = randn(6), randn(6, seed=1, dtype=torch.bfloat16)
    ea, eb = a.to("emu"), b.to("emu")
    with pytest.raises(RuntimeError, match="dot"):
        torch.dot(ea, eb)  # outside autocast: the same error as CPU
    with torch.autocast("emu", dtype=torch.bfloat16):
        out = torch.dot(ea, eb)
        mixed = torch.addcmul(ea, eb, eb)
    assert out.dtype == torch.float32 and mixed.dtype == torch.float32
    torch.testing.assert_close(out.cpu(), torch.dot(a, b.float()), **TOL[torch.float32])
    torch.testing.assert_close(mixed.cpu(), torch.addcmul(a, b.float(), b.float()), **TOL[torch.float32])
    # index_put of bfloat16 values into a float32 tensor: promoted, so accepted
    t = torch.zeros(5, device="emu")
    with torch.autocast("emu", dtype=torch.bfloat16):
        r = torch.index_put(t, (torch.tensor([1, 3], device="emu"),), torch.tensor([2.5, -1.0], dtype=torch.bfloat16, device="emu"))
    assert r.dtype == torch.float32
    assert r.cpu().tolist() == [0.0, 2.5, 0.0, -1.0, 0.0]


def test_binary_cross_entropy_is_banned():
    p, y = torch.rand(4, device="emu"), torch.rand(4, device="emu")
    with torch.autocast("emu", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(p, y)
    assert F.binary_cross_entropy(p, y).dtype == torch.float32  # fine outside autocast


def test_ops_without_policy_run_in_their_dtype():
    x = randn(4, 5).to("emu")
    with torch.autocast("emu", dtype=torch.bfloat16):
        assert (x + x).dtype == torch.float32
        assert torch.relu(x.to(torch.bfloat16)).dtype == torch.bfloat16
        assert (x @ x.t()).dtype == torch.bfloat16  # the policy applies inside the block...
        with torch.autocast("emu", enabled=False):
            assert (x @ x.t()).dtype == torch.float32  # ...and nested disabled blocks turn it off
    assert (x @ x.t()).dtype == torch.float32  # base promotion unchanged outside autocast
    assert not torch.is_autocast_enabled("emu")


def test_float64_and_integer_inputs_are_not_cast():
    d = randn(4, 4, dtype=torch.float64).to("emu")
    i = torch.arange(16, device="emu").reshape(4, 4)
    with torch.autocast("emu", dtype=torch.bfloat16):
        assert (d @ d).dtype == torch.float64  # is_eligible: float64 is left alone, as on CUDA
        assert (i @ i).dtype == torch.int64


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.int32])
def test_unsupported_autocast_dtype_is_an_error(dtype):
    with pytest.raises(RuntimeError, match=r"emu.*not supported.*float16.*bfloat16"):
        with torch.autocast("emu", dtype=dtype):
            pass
    assert not torch.is_autocast_enabled("emu")
    with torch.autocast("emu", dtype=dtype, enabled=False):  # disabled blocks need no check
        pass


def test_default_dtype_and_amp_module():
    assert torch.emu.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.amp.is_autocast_available("emu")
    with torch.autocast("emu"):
        assert torch.get_autocast_dtype("emu") in (torch.float16, torch.bfloat16)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_mlp_training_step_matches_cpu_autocast(dtype):
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    dev = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to("emu")
    dev.load_state_dict(cpu.state_dict())
    x, y = randn(8, 16), torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    results = []
    for model, device in ((cpu, "cpu"), (dev, "emu")):
        with torch.autocast(device, dtype=dtype):
            logits = model(x.to(device))
            loss = F.cross_entropy(logits, y.to(device))
        assert logits.dtype == dtype and loss.dtype == torch.float32
        loss.backward()
        results.append((logits, loss, [p.grad for p in model.parameters()]))
    (lc, sc, gc), (le, se, ge) = results
    with torch.no_grad():
        ref64 = copy.deepcopy(cpu).double()(x.double())
    assert_no_worse_than_cpu(le, lc, ref64, what="logits")
    torch.testing.assert_close(se.cpu(), sc, **TOL[dtype])
    for a, b in zip(ge, gc):
        assert a.dtype == torch.float32  # gradients of the float32 weights stay float32
        torch.testing.assert_close(a.cpu(), b, rtol=5e-2, atol=2e-2 if dtype == torch.bfloat16 else 2e-3)


def test_weight_cast_is_cached_within_a_block(stats):
    w = torch.randn(8, 8, device="emu", requires_grad=True)
    x = torch.randn(4, 8, device="emu")
    with torch.autocast("emu", dtype=torch.bfloat16):
        torch.mm(x, w)
        casts = torch.emu.op_stats()["native"].get("aten::_copy_from", 0)
        torch.mm(x, w)
        # second use: only x is cast again, the leaf weight's bfloat16 copy is reused
        assert torch.emu.op_stats()["native"].get("aten::_copy_from", 0) == casts + 1
    stats.no_fallback()


def test_cnn_with_batch_norm_matches_cpu_autocast():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 2))
    dev = copy.deepcopy(model).to("emu")
    x = randn(2, 3, 8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(x)
    with torch.autocast("emu", dtype=torch.bfloat16):
        actual = dev(x.to("emu"))
    with torch.no_grad():
        ref64 = copy.deepcopy(model).double()(x.double())   # train mode: batch statistics, as above
    assert_no_worse_than_cpu(actual, expected, ref64, what="cnn output")
    expected.float().sum().backward()
    actual.float().sum().backward()
    for a, b in zip(dev.parameters(), model.parameters()):
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=5e-2, atol=5e-2)
    torch.testing.assert_close(dev[1].running_mean.cpu(), model[1].running_mean, **TOL[torch.bfloat16])
