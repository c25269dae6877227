"""Training contracts on emu (issue #7, "Autograd and training"): gradcheck in float64 for the
matrix, norm, softmax, conv and loss kernels; activation checkpointing with the device RNG
state restored; state_dict round trips between emu and CPU. Every check runs with the host
fallback forbidden, so the gradients come from device kernels."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

import torch_plugin  # noqa: F401
from plugin_testing import saved_and_loaded

EMU = "emu"


def _leaf(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(EMU).requires_grad_()


CASES = {
    "mm": lambda: ((_leaf(3, 4, seed=0), _leaf(4, 2, seed=1)), torch.mm),
    "addmm": lambda: ((_leaf(3, 2, seed=0), _leaf(3, 4, seed=1), _leaf(4, 2, seed=2)), torch.addmm),
    "bmm": lambda: ((_leaf(2, 3, 4, seed=0), _leaf(2, 4, 2, seed=1)), torch.bmm),
    "linear": lambda: ((_leaf(2, 5, seed=0), _leaf(3, 5, seed=1), _leaf(3, seed=2)), F.linear),
    "softmax": lambda: ((_leaf(3, 5, seed=0),), lambda x: F.softmax(x, -1)),
    "log_softmax": lambda: ((_leaf(3, 5, seed=0),), lambda x: F.log_softmax(x, 0)),
    "layer_norm": lambda: ((_leaf(3, 6, seed=0), _leaf(6, seed=1), _leaf(6, seed=2)),
                           lambda x, w, b: F.layer_norm(x, (6,), w, b)),
    "group_norm": lambda: ((_leaf(2, 4, 3, seed=0), _leaf(4, seed=1), _leaf(4, seed=2)),
                           lambda x, w, b: F.group_norm(x, 2, w, b)),
    "batch_norm_train": lambda: ((_leaf(4, 3, 2, seed=0), _leaf(3, seed=1), _leaf(3, seed=2)),
                                 lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True)),
    "rms_norm": lambda: ((_leaf(3, 6, seed=0), _leaf(6, seed=1)), lambda x, w: F.rms_norm(x, (6,), w)),
    "conv2d": lambda: ((_leaf(1, 2, 5, 5, seed=0), _leaf(3, 2, 3, 3, seed=1), _leaf(3, seed=2)),
                       lambda x, w, b: F.conv2d(x, w, b, padding=1, stride=2)),
    "conv_transpose1d": lambda: ((_leaf(1, 2, 5, seed=0), _leaf(2, 3, 3, seed=1)),
                                 lambda x, w: F.conv_transpose1d(x, w, stride=2)),
    "cross_entropy": lambda: ((_leaf(4, 5, seed=0),),
                              lambda x: F.cross_entropy(x, torch.tensor([0, 3, 1, 4], device=EMU), label_smoothing=0.1)),
    "mse_loss": lambda: ((_leaf(3, 4, seed=0), _leaf(3, 4, seed=1)), F.mse_loss),
    "smooth_l1_loss": lambda: ((_leaf(3, 4, seed=0), _leaf(3, 4, seed=1)), F.smooth_l1_loss),
    "bce_with_logits": lambda: ((_leaf(3, 4, seed=0),),
                                lambda x, t=torch.rand(3, 4, dtype=torch.float64).to(EMU):
                                F.binary_cross_entropy_with_logits(x, t)),
    "sdpa": lambda: ((_leaf(1, 2, 4, 3, seed=0), _leaf(1, 2, 4, 3, seed=1), _leaf(1, 2, 4, 3, seed=2)),
                     lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradcheck_float64(name):
    inputs, fn = CASES[name]()
    with torch.emu.host_fallback("forbid"):
        assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-4)


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 8)

    def forward(self, x):
        return self.b(F.dropout(torch.tanh(self.a(x)), p=0.3, training=True))


def test_checkpoint_recomputes_with_the_device_rng_state_restored():
    """torch.utils.checkpoint recomputes the forward in backward; with preserve_rng_state the
    recomputed dropout mask is the forward's, so the gradients equal the plain run's."""
    torch.manual_seed(0)
    block = _Block().to(EMU)
    x = torch.randn(4, 8).to(EMU).requires_grad_()
    grads = []
    with torch.emu.host_fallback("forbid"):
        for use_checkpoint in (False, True):
            block.zero_grad()
            x.grad = None
            torch.emu.manual_seed(123)
            out = checkpoint(block, x, use_reentrant=False) if use_checkpoint else block(x)
            out.square().sum().backward()
            grads.append([x.grad.cpu()] + [p.grad.cpu() for p in block.parameters()])
    for plain, recomputed in zip(*grads):
        torch.testing.assert_close(recomputed, plain, rtol=0, atol=0)


def test_state_dict_round_trip_emu_cpu_emu():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2)).to(EMU)
    model.train()
    model(torch.randn(5, 4).to(EMU)).sum().backward()          # moves the BatchNorm statistics
    on_cpu = saved_and_loaded(model.state_dict(), "cpu")
    cpu_model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    cpu_model.load_state_dict(on_cpu)
    back = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2)).to(EMU)
    back.load_state_dict(cpu_model.state_dict())
    for (key, a), b, c in zip(model.state_dict().items(), cpu_model.state_dict().values(),
                              back.state_dict().values()):
        assert b.device.type == "cpu" and c.device.type == EMU, key
        torch.testing.assert_close(b, a.cpu(), rtol=0, atol=0)
        torch.testing.assert_close(c.cpu(), a.cpu(), rtol=0, atol=0)
