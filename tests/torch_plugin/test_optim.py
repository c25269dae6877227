"""Optimizers on the device: torch.optim SGD (momentum, dampening, nesterov, weight decay, maximize),
Adam and AdamW (amsgrad, weight decay, maximize, capturable) with foreach=True and fused=True, on a
small MLP, against the same optimizer on CPU; gradient clipping (clip_grad_norm_ with foreach),
zero_grad (set_to_none either way), lr_scheduler, a tensor learning rate, reproducibility, and
the _foreach_* ops one by one against CPU (functional and in-place, mixed shapes, non-contiguous
and empty tensors, bad lists rejected before any tensor changes).

Every run forbids the host fallback and checks that the foreach ops ran on the device (their
composites, each a native per-tensor op) and that the fused ops ran as device kernels.
Tolerances (parameters after 4 steps, float32): foreach rtol=1e-5, atol=1e-6 (the same per-tensor
ops as CPU's slow path); fused rtol=1e-5, atol=1e-5 (CUDA's element formula in float32 against CPU's
vectorised fused kernel). Single foreach ops: float32 rtol=1.3e-6, atol=1e-5, float64 1e-12,
float16 rtol=atol=1e-3, bfloat16 rtol=atol=1.6e-2.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import torch_plugin  # noqa: F401

TOL = {torch.float32: dict(rtol=1.3e-6, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12),
       torch.float16: dict(rtol=1e-3, atol=1e-3), torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}
FOREACH_TOL = dict(rtol=1e-5, atol=1e-6)
FUSED_TOL = dict(rtol=1e-5, atol=1e-5)


pytestmark = pytest.mark.usefixtures("no_host_fallback")


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 6, generator=g), torch.randn(8, 3, generator=g)


def _train(device, cls, kwargs, steps=4, clip=0.5, scheduler=None):
    model = copy.deepcopy(_model()).to(device)
    opt = cls(model.parameters(), **kwargs)
    sched = scheduler(opt) if scheduler else None
    x, y = _data()
    lrs = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        F.mse_loss(model(x.to(device)), y.to(device)).backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip, foreach=True)
        opt.step()
        if sched:
            sched.step()
            lrs.append(opt.param_groups[0]["lr"])
    return [p.detach().cpu() for p in model.parameters()], opt, lrs


def _matches_cpu(cls, kwargs, tol=FUSED_TOL, cpu_kwargs=None, **train):
    """Trains with cls on the device (kwargs) and on CPU (cpu_kwargs, by default the same); the
    parameters agree within tol. Returns the device's optimizer and both runs' learning rates."""
    emu, opt, lrs_emu = _train("emu", cls, kwargs, **train)
    cpu, _, lrs_cpu = _train("cpu", cls, kwargs if cpu_kwargs is None else cpu_kwargs, **train)
    for a, b in zip(emu, cpu):
        torch.testing.assert_close(a, b, **tol)
    return opt, lrs_emu, lrs_cpu


CONFIGS = {
    "sgd": (torch.optim.SGD, dict(lr=0.1)),
    "sgd_momentum": (torch.optim.SGD, dict(lr=0.1, momentum=0.9)),
    "sgd_dampening_wd": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.01)),
    "sgd_nesterov": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    "sgd_maximize": (torch.optim.SGD, dict(lr=0.05, momentum=0.5, maximize=True)),
    "adam": (torch.optim.Adam, dict(lr=1e-2)),
    "adam_amsgrad_wd": (torch.optim.Adam, dict(lr=1e-2, amsgrad=True, weight_decay=0.1)),
    "adam_maximize": (torch.optim.Adam, dict(lr=1e-2, maximize=True, betas=(0.8, 0.95))),
    "adamw": (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
    "adamw_amsgrad": (torch.optim.AdamW, dict(lr=1e-2, amsgrad=True, eps=1e-6)),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_foreach_matches_cpu(name):
    cls, kwargs = CONFIGS[name]
    opt, _, _ = _matches_cpu(cls, {**kwargs, "foreach": True}, FOREACH_TOL)
    composite = torch.emu.op_stats()["composite"]
    assert composite.get("aten::_foreach_norm.Scalar", 0) > 0  # clip_grad_norm_
    assert composite.get("aten::_foreach_mul_.Tensor", 0) > 0
    if cls is not torch.optim.SGD:
        assert composite.get("aten::_foreach_addcdiv_.ScalarList", 0) > 0
        assert composite.get("aten::_foreach_lerp_.Scalar", 0) > 0
    # the state lives on the device
    for state in opt.state.values():
        for key, value in state.items():
            if key != "step":
                assert value.device.type == "emu"


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_fused_matches_cpu(name):
    cls, kwargs = CONFIGS[name]
    _matches_cpu(cls, {**kwargs, "fused": True})
    fused = {torch.optim.SGD: "aten::_fused_sgd_", torch.optim.Adam: "aten::_fused_adam_",
             torch.optim.AdamW: "aten::_fused_adamw_"}[cls]
    assert torch.emu.op_stats()["native"].get(fused, 0) == 4


def test_fused_and_foreach_agree_on_emu():
    fused, _, _ = _train("emu", torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1, fused=True))
    foreach, _, _ = _train("emu", torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1, foreach=True))
    for a, b in zip(fused, foreach):
        torch.testing.assert_close(a, b, **FUSED_TOL)


def test_capturable_adam_matches_cpu():
    opt, _, _ = _matches_cpu(torch.optim.Adam, dict(lr=1e-2, foreach=True, capturable=True),
                             cpu_kwargs=dict(lr=1e-2, foreach=True))
    assert all(s["step"].device.type == "emu" for s in opt.state.values())


def test_fused_tensor_lr_is_read_on_the_device():
    _matches_cpu(torch.optim.Adam, dict(lr=torch.tensor(0.02), fused=True), cpu_kwargs=dict(lr=0.02, fused=True))
    _matches_cpu(torch.optim.SGD, dict(lr=torch.tensor(0.05), momentum=0.9, fused=True),
                 cpu_kwargs=dict(lr=0.05, momentum=0.9, fused=True))


@pytest.mark.parametrize("mode", ["foreach", "fused"])
def test_lr_scheduler_unchanged(mode):
    def sched(opt):
        return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=5)
    _, lr_emu, lr_cpu = _matches_cpu(torch.optim.AdamW, {"lr": 0.01, mode: True}, steps=5, scheduler=sched)
    assert lr_emu == lr_cpu


def test_clip_grad_norm_foreach_matches_cpu():
    grads = []
    for device in ("cpu", "emu"):
        model = copy.deepcopy(_model()).to(device)
        x, y = _data()
        F.mse_loss(model(x.to(device)), y.to(device)).backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1, foreach=True)
        grads.append((norm.cpu(), [p.grad.cpu() for p in model.parameters()]))
    torch.testing.assert_close(grads[1][0], grads[0][0], **TOL[torch.float32])
    for a, b in zip(grads[1][1], grads[0][1]):
        torch.testing.assert_close(a, b, **TOL[torch.float32])
    assert grads[0][0] > 0.1  # the clip did something


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad(set_to_none):
    model = _model().to("emu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)
    model(torch.randn(2, 6, device="emu")).sum().backward()
    opt.zero_grad(set_to_none=set_to_none)
    for p in model.parameters():
        if set_to_none:
            assert p.grad is None
        else:
            assert p.grad.device.type == "emu" and not p.grad.cpu().any()


@pytest.mark.parametrize("mode", ["foreach", "fused"])
def test_training_twice_with_the_same_seed_is_bit_identical(mode):
    def run():
        torch.manual_seed(3)
        model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Dropout(0.3), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 3)).to("emu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, **{mode: True})
        x = torch.randn(8, 6, device="emu")  # device generator
        for _ in range(3):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
            opt.step()
        return [p.detach().cpu() for p in model.parameters()]
    first, second = run(), run()
    for a, b in zip(first, second):
        assert torch.equal(a, b)


def test_fused_rejects_what_it_does_not_support():
    p = torch.zeros(4, 4, device="emu").t()  # non-contiguous
    g = torch.ones(4, 4, device="emu").t()
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    step = torch.ones((), device="emu")
    with pytest.raises(NotImplementedError, match="_fused_adam_.*contiguous"):
        torch._fused_adam_([p], [g], [m], [v], [], [step], lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.0,
                           eps=1e-8, amsgrad=False, maximize=False)
    ints = torch.zeros(4, dtype=torch.int64, device="emu")
    with pytest.raises(RuntimeError, match="_fused_sgd_: not implemented for torch.int64"):
        torch._fused_sgd_([ints], [ints], [], weight_decay=0.0, momentum=0.0, lr=0.1, dampening=0.0,
                          nesterov=False, maximize=False, is_first_step=True)
    assert not p.cpu().any()


# -- the _foreach_* ops one by one --------------------------------------------------------------
def _lists(dtype, seed=0, positive=False):
    """Mixed shapes: contiguous, a transposed view, a slice, an empty tensor and a 0-dim one."""
    g = torch.Generator().manual_seed(seed)
    base = [torch.randn(3, 4, generator=g), torch.randn(5, 3, generator=g).t(), torch.randn(7, generator=g)[1::2],
            torch.randn(0, 3, generator=g), torch.randn((), generator=g)]
    if positive:
        base = [t.abs() + 0.5 for t in base]
    cpu = [t.to(dtype) for t in base]
    cpu[1] = base[1].to(dtype).t().contiguous().t()  # keep the transposed layout
    dev = [t.to("emu") for t in cpu]
    dev[1] = cpu[1].t().to("emu").t()
    return cpu, dev


def _check(got, want, dtype):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.device.type == "emu" and a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a.cpu(), b, **TOL.get(b.dtype, TOL[dtype]))


FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
UNARY = ["sqrt", "neg", "exp", "abs", "reciprocal", "sigmoid", "log", "tanh", "sign", "rsqrt"]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", UNARY)
def test_foreach_unary(name, dtype):
    cpu, dev = _lists(dtype, positive=name in ("sqrt", "log", "rsqrt", "reciprocal"))
    op, op_ = getattr(torch, f"_foreach_{name}"), getattr(torch, f"_foreach_{name}_")
    _check(op(dev), op(cpu), dtype)
    op_(dev)
    op_(cpu)
    _check(dev, cpu, dtype)
    assert dev[1].stride() == cpu[1].stride()  # in-place keeps the layout


BINARY_CASES = {
    "add.List": lambda op, a, b: op(a, b, alpha=0.5),
    "add.Scalar": lambda op, a, b: op(a, 1.5),
    "add.ScalarList": lambda op, a, b: op(a, [1.0, -2.0, 0.5, 3.0, 2.0]),
    "add.Tensor": lambda op, a, b: op(a, torch.tensor(2.0, device=a[0].device), alpha=2),
    "sub.List": lambda op, a, b: op(a, b),
    "sub.Scalar": lambda op, a, b: op(a, 0.25),
    "mul.List": lambda op, a, b: op(a, b),
    "mul.Scalar": lambda op, a, b: op(a, -3.0),
    "mul.ScalarList": lambda op, a, b: op(a, [1.0, 2.0, 3.0, 4.0, 5.0]),
    "mul.Tensor": lambda op, a, b: op(a, torch.tensor(0.5, device=a[0].device)),
    "div.List": lambda op, a, b: op(a, b),
    "div.Scalar": lambda op, a, b: op(a, 4.0),
    "div.ScalarList": lambda op, a, b: op(a, [1.0, 2.0, 3.0, 4.0, 5.0]),
    "maximum.List": lambda op, a, b: op(a, b),
    "maximum.Scalar": lambda op, a, b: op(a, 0.1),
    "minimum.List": lambda op, a, b: op(a, b),
    "clamp_min.Scalar": lambda op, a, b: op(a, -0.5),
    "clamp_max.List": lambda op, a, b: op(a, b),
    "pow.Scalar": lambda op, a, b: op(a, 2.0),
    "pow.List": lambda op, a, b: op([t.abs() for t in a], b),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", sorted(BINARY_CASES))
def test_foreach_binary(case, dtype):
    name, _ = case.split(".")
    cpu_a, dev_a = _lists(dtype)
    cpu_b, dev_b = _lists(dtype, seed=1)
    call = BINARY_CASES[case]
    _check(call(getattr(torch, f"_foreach_{name}"), dev_a, dev_b),
           call(getattr(torch, f"_foreach_{name}"), cpu_a, cpu_b), dtype)
    if case.startswith("pow.List"):
        return
    call(getattr(torch, f"_foreach_{name}_"), dev_a, dev_b)
    call(getattr(torch, f"_foreach_{name}_"), cpu_a, cpu_b)
    _check(dev_a, cpu_a, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("overload", ["Scalar", "ScalarList", "Tensor"])
@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
def test_foreach_addcmul_addcdiv(name, overload, dtype):
    (ca, da), (cb, db), (cc, dc) = _lists(dtype), _lists(dtype, 1), _lists(dtype, 2, positive=True)
    scalars = {"Scalar": 0.5, "ScalarList": [0.5, 1.0, -1.0, 2.0, 0.25],
               "Tensor": torch.tensor([0.5, 1.0, -1.0, 2.0, 0.25])}[overload]
    op, op_ = getattr(torch, f"_foreach_{name}"), getattr(torch, f"_foreach_{name}_")
    _check(op(da, db, dc, scalars), op(ca, cb, cc, scalars), dtype)
    op_(da, db, dc, scalars)
    op_(ca, cb, cc, scalars)
    _check(da, ca, dtype)


@pytest.mark.parametrize("overload", ["List", "Scalar", "ScalarList"])
def test_foreach_lerp(overload):
    (ca, da), (cb, db), (cw, dw) = _lists(torch.float32), _lists(torch.float32, 1), _lists(torch.float32, 2)
    weights = {"List": (cw, dw), "Scalar": (0.3, 0.3), "ScalarList": ([0.1, 0.2, 0.3, 0.4, 0.5],) * 2}[overload]
    _check(torch._foreach_lerp(da, db, weights[1]), torch._foreach_lerp(ca, cb, weights[0]), torch.float32)
    torch._foreach_lerp_(da, db, weights[1])
    torch._foreach_lerp_(ca, cb, weights[0])
    _check(da, ca, torch.float32)


@pytest.mark.parametrize("ord", [2, 1, float("inf")])
def test_foreach_norm_max_zero_copy(ord):
    cpu, dev = _lists(torch.float32)
    nonempty_cpu, nonempty_dev = cpu[:3] + cpu[4:], dev[:3] + dev[4:]
    if ord == float("inf"):  # no identity: an empty tensor is an error on both
        for lst in (cpu, dev):
            with pytest.raises(RuntimeError, match="infinity norm|inf norm"):
                torch._foreach_norm(lst, ord)
        cpu, dev = nonempty_cpu, nonempty_dev
    _check(torch._foreach_norm(dev, ord), torch._foreach_norm(cpu, ord), torch.float32)
    _check(torch._foreach_max(nonempty_dev), torch._foreach_max(nonempty_cpu), torch.float32)
    _check(torch._foreach_norm(dev, 2, dtype=torch.float64), torch._foreach_norm(cpu, 2, dtype=torch.float64),
           torch.float64)
    src_cpu, src_dev = _lists(torch.float32, seed=5)
    if len(dev) < len(src_dev):
        src_cpu, src_dev = src_cpu[:3] + src_cpu[4:], src_dev[:3] + src_dev[4:]
    torch._foreach_copy_(dev, src_dev)
    _check(dev, src_cpu, torch.float32)
    torch._foreach_zero_(dev)
    assert all(not t.cpu().any() for t in dev)


def test_foreach_ops_run_on_the_device(stats):
    cpu, dev = _lists(torch.float32)
    torch._foreach_add_(dev, 1.0)
    torch._foreach_sqrt(dev)
    assert torch.emu.op_stats()["composite"]["aten::_foreach_add_.Scalar"] == 1
    assert torch.emu.op_stats()["composite"]["aten::_foreach_sqrt"] == 1
    assert stats.native("aten::add_.Tensor") + stats.native("aten::add_.Scalar") > 0
    stats.no_fallback()


def test_foreach_bad_lists_change_nothing():
    _, dev = _lists(torch.float32)
    before = [t.cpu() for t in dev]
    with pytest.raises(RuntimeError, match="at least one tensor"):
        torch._foreach_add_([], 1.0)
    with pytest.raises(RuntimeError, match="same number of tensors"):
        torch._foreach_add_(dev, dev[:2])
    with pytest.raises(RuntimeError, match="same number of elements as scalar list"):
        torch._foreach_mul_(dev, [1.0, 2.0])
    # the last pair would broadcast self: rejected before the first tensor is written
    others = [torch.ones_like(t) for t in dev[:-1]] + [torch.ones(2, device="emu")]
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        torch._foreach_add_(dev, others)
    with pytest.raises(RuntimeError, match="same device"):
        torch._foreach_add_(dev, [t.cpu() for t in dev])
    for a, b in zip(dev, before):
        assert torch.equal(a.cpu(), b)


FUSED_DTYPE_TOL = {torch.float64: dict(rtol=1e-12, atol=1e-12), torch.float16: dict(rtol=2e-3, atol=2e-3),
                   torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ["sgd_nesterov", "adam_amsgrad_wd", "adamw"])
def test_fused_dtypes_against_a_float64_reference(name, dtype):
    """Fused steps on float64/float16/bfloat16 parameters: the float32 (float64) element math rounds once
    per stored value, so 3 steps stay within a few units in the last place of the float64 algorithm
    (torch.optim's single-tensor path on float64 copies of the same values). CPU's own fused kernel is
    not the reference for the half types: torch 2.13's CPU _fused_sgd_ on float16/bfloat16 with
    momentum misses the algorithm by ~0.3 in one step (its momentum buffer is not p's recurrence)."""
    cls, kwargs = CONFIGS[name]
    g = torch.Generator().manual_seed(4)
    values = torch.randn(3, 37, generator=g).to(dtype)
    grads = [torch.randn(3, 37, generator=g).to(dtype) for _ in range(3)]
    dev = torch.nn.Parameter(values.to("emu"))
    ref = torch.nn.Parameter(values.double())
    opt_dev = cls([dev], **kwargs, fused=True)
    opt_ref = cls([ref], **kwargs, foreach=False)
    for grad in grads:
        dev.grad, ref.grad = grad.to("emu"), grad.double()
        opt_dev.step()
        opt_ref.step()
    assert dev.dtype == dtype
    torch.testing.assert_close(dev.detach().cpu().double(), ref.detach(), **FUSED_DTYPE_TOL[dtype])
