"""GradScaler on the device: the two AMP kernels against CPU's (_amp_foreach_non_finite_check_and_unscale_
on float16/bfloat16/float32/float64 grads, strided and empty, with inf and NaN; _amp_update_scale_ through
growth, backoff and a non-finite growth), their argument checks, and fp16 training with
torch.amp.GradScaler("emu") (SGD foreach, Adam fused with the scaler's grad_scale/found_inf) against
torch.amp.GradScaler("cpu"), including an inf step that must be skipped.

The kernels are exact (one float32 multiply per element, as CPU's): compared with rtol=atol=0.
Training (float16 autocast, 4 steps): parameters rtol=2e-3, atol=2e-3 against CPU autocast.
Host fallback is forbidden throughout.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import torch_plugin  # noqa: F401

EXACT = dict(rtol=0, atol=0)


pytestmark = pytest.mark.usefixtures("no_host_fallback")


def _grads(seed=0, bad=None):
    g = torch.Generator().manual_seed(seed)
    cpu = [(torch.randn(4, 5, generator=g) * 1000).half(), torch.randn(3, 6, generator=g).t(),
           torch.randn(9, generator=g).to(torch.bfloat16)[::2], torch.randn(2, 3, generator=g).double(),
           torch.empty(0, 2)]
    if bad is not None:
        cpu[1][2, 1] = bad
    dev = [t.to("emu") for t in cpu]
    dev[1] = cpu[1].t().to("emu").t()  # the same transposed layout on the device
    return cpu, dev


@pytest.mark.parametrize("bad", [None, float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("inv_scale", [1 / 1024, 1.0])
def test_unscale_matches_cpu(bad, inv_scale, stats):
    cpu, dev = _grads(bad=bad)
    found_cpu, found_dev = torch.zeros(1), torch.zeros(1, device="emu")
    strides = [t.stride() for t in dev]
    torch._amp_foreach_non_finite_check_and_unscale_(cpu, found_cpu, torch.full((1,), inv_scale))
    torch._amp_foreach_non_finite_check_and_unscale_(dev, found_dev, torch.full((1,), inv_scale, device="emu"))
    assert found_dev.item() == found_cpu.item() == (0.0 if bad is None else 1.0)
    assert [t.stride() for t in dev] == strides and dev[1].stride() == cpu[1].stride()
    for a, b in zip(dev, cpu):
        torch.testing.assert_close(a.cpu(), b, equal_nan=True, **EXACT)
    assert stats.native("aten::_amp_foreach_non_finite_check_and_unscale_") == 1


def test_found_inf_is_sticky_and_only_set():
    _, dev = _grads()
    found = torch.ones(1, device="emu")  # a previous list had an inf: stays 1
    torch._amp_foreach_non_finite_check_and_unscale_(dev, found, torch.ones(1, device="emu"))
    assert found.item() == 1.0


def test_unscale_checks_arguments():
    cpu, dev = _grads()
    before = [t.cpu() for t in dev]
    inv = torch.ones(1, device="emu")
    with pytest.raises(RuntimeError, match="found_inf must be a float tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(dev, torch.zeros(1, dtype=torch.float64, device="emu"), inv)
    with pytest.raises(RuntimeError, match="inv_scale must be a 1-element tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(dev, torch.zeros(1, device="emu"), torch.ones(2, device="emu"))
    with pytest.raises(RuntimeError, match="same device"):
        torch._amp_foreach_non_finite_check_and_unscale_(dev + [torch.ones(2)], torch.zeros(1, device="emu"), inv)
    with pytest.raises(RuntimeError, match="not implemented for torch.int64"):
        torch._amp_foreach_non_finite_check_and_unscale_([dev[0], torch.ones(2, dtype=torch.int64, device="emu")],
                                                         torch.zeros(1, device="emu"), inv * 0.5)
    for a, b in zip(dev, before):  # nothing was unscaled by the rejected calls
        assert torch.equal(a.cpu(), b)


def test_update_scale_matches_cpu(stats):
    # growth every 2 clean steps, backoff on an inf; a growth that overflows float32 keeps the scale
    found_seq = [0, 0, 1, 0, 0, 0, 1, 1, 0, 0]
    states = {}
    for device in ("cpu", "emu"):
        scale = torch.full((1,), 2.0 ** 16, device=device)
        tracker = torch.zeros(1, dtype=torch.int32, device=device)
        seen = []
        for f in found_seq:
            out = torch._amp_update_scale_(scale, tracker, torch.full((1,), float(f), device=device), 2.0, 0.5, 2)
            assert out is scale
            seen.append((scale.item(), tracker.item()))
        big = torch.full((1,), 3e38, device=device)
        tracker.fill_(1)
        torch._amp_update_scale_(big, tracker, torch.zeros(1, device=device), 2.0, 0.5, 2)
        seen.append((big.item(), tracker.item()))
        states[device] = seen
    assert states["emu"] == states["cpu"]
    assert stats.native("aten::_amp_update_scale_") == len(found_seq) + 1


def test_update_scale_checks_arguments():
    scale, found = torch.ones(1, device="emu"), torch.zeros(1, device="emu")
    with pytest.raises(RuntimeError, match="growth_tracker must be an int tensor"):
        torch._amp_update_scale_(scale, torch.zeros(1, device="emu"), found, 2.0, 0.5, 2)
    with pytest.raises(RuntimeError, match="current_scale must be a float tensor"):
        torch._amp_update_scale_(scale.double(), torch.zeros(1, dtype=torch.int32, device="emu"), found, 2.0, 0.5, 2)
    assert scale.item() == 1.0


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def _train_fp16(device, opt_cls, opt_kwargs, inf_step=2, steps=4):
    model = copy.deepcopy(_model()).to(device)
    opt = opt_cls(model.parameters(), **opt_kwargs)
    scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 12, growth_interval=2)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 8, generator=g), torch.randint(0, 4, (16,), generator=g)
    history = []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.float16):
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
        if step == inf_step:
            loss = loss * float("inf")  # an overflowing step: skipped, scale backs off
        before = [p.detach().cpu().clone() for p in model.parameters()]
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        after = [p.detach().cpu() for p in model.parameters()]
        history.append((scaler.get_scale(), all(torch.equal(a, b) for a, b in zip(before, after))))
    return [p.detach().cpu() for p in model.parameters()], history


@pytest.mark.parametrize("opt_cls, opt_kwargs", [
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, foreach=True)),
    (torch.optim.Adam, dict(lr=1e-2, foreach=True)),
    (torch.optim.Adam, dict(lr=1e-2, fused=True)),
    (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1, fused=True)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, fused=True)),
], ids=["sgd-foreach", "adam-foreach", "adam-fused", "adamw-fused", "sgd-fused"])
def test_grad_scaler_fp16_training_matches_cpu(opt_cls, opt_kwargs):
    emu, emu_history = _train_fp16("emu", opt_cls, opt_kwargs)
    cpu, cpu_history = _train_fp16("cpu", opt_cls, opt_kwargs)
    assert emu_history == cpu_history
    assert emu_history[1][0] == 2.0 ** 13  # grown after growth_interval=2 clean steps
    assert emu_history[2] == (2.0 ** 12, True)  # the inf step: skipped, scale halved
    assert not emu_history[0][1] and not emu_history[3][1]  # clean steps update the parameters
    for a, b in zip(emu, cpu):
        torch.testing.assert_close(a, b, rtol=2e-3, atol=2e-3)
    native = torch.emu.op_stats()["native"]
    assert native.get("aten::_amp_update_scale_", 0) == 4
    # once per step: unscale_ for foreach; for fused steps (which take grad_scale/found_inf and
    # unscale themselves) the scaler's inf check with inv_scale=1
    assert native.get("aten::_amp_foreach_non_finite_check_and_unscale_", 0) == 4


def test_fused_step_skips_on_found_inf_without_the_host():
    p = torch.ones(4, device="emu")
    g = torch.full((4,), 2.0, device="emu")
    m, v = torch.zeros(4, device="emu"), torch.zeros(4, device="emu")
    step = torch.ones((), device="emu")
    kwargs = dict(lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    torch._fused_adam_([p], [g], [m], [v], [], [step], **kwargs, grad_scale=torch.full((1,), 2.0, device="emu"),
                       found_inf=torch.ones(1, device="emu"))
    assert torch.equal(p.cpu(), torch.ones(4)) and torch.equal(g.cpu(), torch.full((4,), 2.0))
    torch._fused_adam_([p], [g], [m], [v], [], [step], **kwargs, grad_scale=torch.full((1,), 2.0, device="emu"),
                       found_inf=torch.zeros(1, device="emu"))
    assert torch.equal(g.cpu(), torch.ones(4))  # unscaled in place, as CUDA
    torch.testing.assert_close(p.cpu(), torch.full((4,), 0.9), rtol=1e-6, atol=1e-6)  # first Adam step: lr * sign
