"""Helpers shared by the tests/compile tests."""
import torch

import torch_plugin  # noqa: F401
from torch_plugin.compile import compile_stats, reset_compile_stats


def kernels_launched(fn):
    """(result, {kernel name: launches}) of fn() under torch.emu.telemetry()."""
    with torch.emu.telemetry() as t:
        result = fn()
        torch.emu.synchronize()
    launched = {}
    for row in t.as_dict()["ops"]:
        for name, n in row["kernels"].items():
            launched[name] = launched.get(name, 0) + n
    return result, launched


DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def emu_randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype).to("emu")


def llama_rms_norm(x, weight, eps=1e-6):
    """transformers' LlamaRMSNorm, written out: float32 inside, cast back, weight on the left."""
    dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return weight * h.to(dtype)


def compiled_equals_eager(fn, *args):
    """Compiles fn, calls it three times (capture, then replays), each call equal to eager
    exactly; returns (compile_stats, kernels of the last call)."""
    torch._dynamo.reset()
    reset_compile_stats()
    compiled = torch.compile(fn, backend="emu")
    expected = fn(*args)
    for _ in range(3):
        got, launched = kernels_launched(lambda: compiled(*args))
        torch.testing.assert_close(got.cpu(), expected.cpu(), atol=0, rtol=0)
    return compile_stats(), launched


def check_zoo_models_train_compiled_as_eager() -> list[str]:
    """For each zoo model: a compiled training step (backend "emu") equals eager, loss and every
    gradient, with nothing outside a device program. Returns the names checked. Run in a child
    process by the test: transformers keeps small per-model device buffers for the process's life,
    and those would pin allocator segments that later tests expect to be free."""
    from torch_plugin.compile import compile_stats, reset_compile_stats
    from torch_plugin.zoo import MODELS
    checked = []
    for name, spec in MODELS.items():
        torch._dynamo.reset()
        reset_compile_stats()
        eager, model = spec.build(0).to("emu"), spec.build(0).to("emu")
        batch = {k: v.to("emu") if isinstance(v, torch.Tensor) else v for k, v in spec.batch(0).items()}
        compiled = torch.compile(model, backend="emu")
        loss = spec.loss(compiled, batch)
        loss.backward()
        expected = spec.loss(eager, batch)
        expected.backward()
        torch.testing.assert_close(loss.cpu(), expected.cpu(), **spec.loss_tol, msg=name)
        for (pname, p), q in zip(eager.named_parameters(), model.parameters()):
            if p.grad is not None:
                torch.testing.assert_close(q.grad.cpu(), p.grad.cpu(), rtol=1e-3, atol=1e-4, msg=f"{name}: {pname}")
        stats = compile_stats()
        assert stats["graphs_compiled"] >= 2 and stats["outside_program"] == 0, (name, stats)
        checked.append(name)
    return checked
