"""Real and fake metadata agree: for ops that run natively on emu, the output metadata under
FakeTensor (shape, dtype, strides, storage offset, aliasing of an input) equals the real emu
output's, over a few OpInfo conformance samples per op (torch_plugin/conformance.py's database)."""
import warnings

import pytest
import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode
from torch.utils._pytree import tree_flatten, tree_map

from torch_plugin import conformance

# A cross-section of the native kernels: pointwise, reductions, matmuls, normalization, indexing,
# data movement and views (a few samples each keep this test fast).
OPS = ("add", "mul", "div", "exp", "tanh", "sigmoid", "clamp", "where", "pow", "sum", "mean", "amax",
       "argmax", "cumsum", "softmax", "log_softmax", "mm", "addmm", "bmm", "matmul", "nn.functional.layer_norm",
       "nn.functional.linear", "nn.functional.relu", "nn.functional.gelu", "cat", "index_select", "gather",
       "masked_fill", "sort", "topk", "transpose", "permute", "t", "narrow", "expand", "flip", "tril",
       "nn.functional.embedding", "nn.functional.max_pool2d", "nn.functional.conv2d")
SAMPLES = 3


def _cases():
    by_name = {}
    for op in conformance.op_db():
        if conformance.full_name(op) in OPS and op.name not in by_name:
            by_name[op.name] = op
    return [by_name[n] for n in OPS if n in by_name]


def _metadata(t: torch.Tensor, inputs) -> tuple:
    aliases = tuple(i for i, x in enumerate(inputs) if torch._C._is_alias_of(t, x))
    return tuple(t.shape), t.dtype, t.stride(), t.storage_offset(), aliases


@pytest.mark.parametrize("op", _cases(), ids=lambda op: conformance.full_name(op))
def test_fake_metadata_matches_real(op):
    checked = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = list(conformance._make_samples(op, torch.float32, "forward", SAMPLES))
    for sample in samples:
        args = (sample.input, *sample.args)
        inputs = [x for x in tree_flatten((args, sample.kwargs))[0] if isinstance(x, torch.Tensor)]
        torch.emu.reset_op_stats()
        with torch.emu.host_fallback("forbid"):
            try:
                real = op.op(*args, **sample.kwargs)
            except Exception:   # not native for this sample (a rejection or a fallback): not this test's
                continue
        stats = torch.emu.op_stats()
        counted = any(stats[p] for p in ("native", "composite", "decomposition", "host_fallback"))
        # native: a Python kernel counted "native", or the C++ core's metadata ops (views), which
        # the op counters do not see
        if stats["host_fallback"] or (counted and not stats["native"]):
            continue
        real_out = [t for t in tree_flatten(real)[0] if isinstance(t, torch.Tensor)]
        with FakeTensorMode(allow_non_fake_inputs=False) as mode:
            memo = {}

            def fake(x):
                if isinstance(x, torch.Tensor):
                    if id(x) not in memo:
                        memo[id(x)] = mode.from_tensor(x)
                    return memo[id(x)]
                return x
            fake_args, fake_kwargs = tree_map(fake, args), tree_map(fake, sample.kwargs)
            fake_inputs = [memo[id(x)] for x in inputs]
            try:
                fake_out = op.op(*fake_args, **fake_kwargs)
            except DataDependentOutputException:   # (narrow with a tensor start): no static metadata
                continue
            fake_out = [t for t in tree_flatten(fake_out)[0] if isinstance(t, torch.Tensor)]
        assert len(fake_out) == len(real_out)
        for r, f in zip(real_out, fake_out):
            if r.device.type != "emu":
                continue
            assert _metadata(r, inputs) == _metadata(f, fake_inputs), (conformance.full_name(op), sample)
        checked += 1
    assert checked, f"{conformance.full_name(op)}: no sample ran natively on emu"
