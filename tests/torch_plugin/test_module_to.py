"""nn.Module.to("emu") keeps each Parameter object, as it does for CUDA (it assigns
``param.data``, which needs aten::_has_compatible_shallow_copy_type to accept CPU <-> emu).
Regression: before, .to("emu") made a new Parameter per module, so weights tied between modules
(a language model's embedding and output layer) silently stopped sharing their gradient."""
import copy

import pytest
import torch
from torch import nn

import torch_plugin  # noqa: F401

EMU = "emu"


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(64, 16)
        nn.init.normal_(self.wte.weight, std=0.02)
        self.ln = nn.LayerNorm(16)
        self.head = nn.Linear(16, 64, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, ids):
        return self.head(self.ln(self.wte(ids)))


def test_to_keeps_parameter_objects_and_ties():
    model = TiedLM()
    params = {name: p for name, p in model.named_parameters()}
    model.to(EMU)
    assert model.wte.weight is model.head.weight
    assert all(p is params[name] for name, p in model.named_parameters())
    assert model.wte.weight.device.type == EMU
    model.to("cpu")
    assert model.wte.weight is model.head.weight and model.wte.weight.device.type == "cpu"


def test_tied_weights_get_both_gradient_contributions():
    cpu = TiedLM()
    emu = copy.deepcopy(cpu).to(EMU)
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    for model, x in ((cpu, ids), (emu, ids.to(EMU))):
        logits = model(x)
        nn.functional.cross_entropy(logits.reshape(-1, 64), x.reshape(-1)).backward()
    torch.testing.assert_close(emu.wte.weight.grad.cpu(), cpu.wte.weight.grad, rtol=1e-5, atol=1e-7)


def test_data_assignment_across_devices():
    p = nn.Parameter(torch.arange(4.0))
    p.data = torch.full((4,), 2.0, device=EMU)
    assert p.device.type == EMU and p.cpu().tolist() == [2.0] * 4
    p.data = torch.zeros(3)
    assert p.device.type == "cpu" and p.shape == (3,)


@pytest.mark.parametrize("other", [lambda: torch.zeros(4).to_sparse(),
                                   lambda: torch.quantize_per_tensor(torch.zeros(4), 0.1, 0, torch.qint8)],
                         ids=["sparse", "quantized"])
def test_other_layouts_are_not_shallow_copy_compatible(other):
    assert not torch._has_compatible_shallow_copy_type(torch.zeros(4, device=EMU), other())
