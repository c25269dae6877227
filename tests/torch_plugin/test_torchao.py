"""torchao's quantization configs on emu: a small transformers Llama (random weights) quantized with
Int8WeightOnlyConfig, Int8DynamicActivationInt8WeightConfig, Float8WeightOnlyConfig and
Float8DynamicActivationFloat8WeightConfig, run on emu with the host fallback forbidden, against
the same quantized model on CPU, with torchao's own SQNR measure (compute_error, in dB).

Which device kernels they reach: int8 weight-only dequantizes (int8 -> bf16 copy, mul) and runs
mm; int8 dynamic runs _int_mm through torch's out_dtype higher-order op (torch takes _int_mm
there for CUDA/XPU only; ops/quantized.py registers the same choice for emu) (plus the activation's amax/round/clamp); float8 weight-only copies
float8 -> bf16 and runs mm; float8 dynamic runs _scaled_mm (row-wise scales by default).

torchao gates Float8DynamicActivationFloat8WeightConfig on a CUDA capability >= 8.9, MI300 or XPU
(``torchao.float8.inference._check_hardware_support``): a check of the host's CUDA/XPU runtime,
not of the tensors' device. emu is none of those, so the test lifts that check while quantizing
(the quantized model is the same on every device); nothing else of torchao is touched.

torchao is an optional test dependency (``pip install --no-deps torchao==0.18.0``).
"""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

import torch_plugin  # noqa: F401

torchao = pytest.importorskip("torchao", reason="torchao is not installed (pip install --no-deps torchao==0.18.0)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")

from torchao.quantization import (  # noqa: E402
    Float8DynamicActivationFloat8WeightConfig,
    Float8WeightOnlyConfig,
    Int8DynamicActivationInt8WeightConfig,
    Int8WeightOnlyConfig,
    quantize_,
)
from torchao.quantization.utils import compute_error  # noqa: E402

EMU = "emu"
# SQNR (dB) of emu's logits against the CPU run of the same quantized model. Both compute the same
# quantized arithmetic with float32 accumulation and bf16 rounding; they differ where a bf16 value
# lands on the other side of a quantization step (measured: 46/39/47/31 dB for the four configs, the
# float8-dynamic one lowest: its activations are re-quantized to float8 per layer). torchao's own
# tests ask >= 20 dB of a quantized model against the float one; we ask that of both runs, that
# emu's quantization error equals CPU's within 1 dB, and >= 30 dB of emu against CPU.
EMU_VS_CPU_DB = 30.0
QUANTIZED_VS_FLOAT_DB = 20.0
SAME_QUANTIZATION_ERROR_DB = 1.0

CONFIGS = {
    "int8_weight_only": lambda: Int8WeightOnlyConfig(),
    "int8_dynamic": lambda: Int8DynamicActivationInt8WeightConfig(),
    "float8_weight_only": lambda: Float8WeightOnlyConfig(),
    "float8_dynamic": lambda: Float8DynamicActivationFloat8WeightConfig(),
}
EXPECTED_KERNEL = {"int8_dynamic": "aten::_int_mm", "float8_dynamic": "aten::_scaled_mm"}


def tiny_llama():
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      bos_token_id=1, eos_token_id=None, pad_token_id=0,
                                      attn_implementation="sdpa")
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval().to(torch.bfloat16)


def quantize(model, name, monkeypatch):
    if name == "float8_dynamic":
        import torchao.float8.inference as inference
        import torchao.quantization.quant_api as quant_api
        # the host-CUDA gate only (see the module docstring)
        monkeypatch.setattr(inference, "_check_hardware_support", lambda granularities: None)
        monkeypatch.setattr(quant_api, "_check_hardware_support", lambda granularities: None)
    quantize_(model, CONFIGS[name]())
    return model


@pytest.mark.parametrize("name", list(CONFIGS))
def test_torchao_config_runs_on_emu(name, monkeypatch):
    warnings.simplefilter("ignore")
    float_model = tiny_llama()
    tokens = torch.randint(3, 128, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        float_logits = float_model(tokens).logits.float()
    cpu_model = quantize(copy.deepcopy(float_model), name, monkeypatch)
    emu_model = copy.deepcopy(cpu_model).to(EMU)
    with torch.no_grad():
        want = cpu_model(tokens).logits.float()
        torch.emu.reset_op_stats()
        with torch.emu.host_fallback("forbid"):
            got = emu_model(tokens.to(EMU)).logits.float().cpu()
    stats = torch.emu.op_stats()
    assert not stats["host_fallback"], stats["host_fallback"]
    assert not stats["rejection"], stats["rejection"]
    if name in EXPECTED_KERNEL:
        assert stats["native"].get(EXPECTED_KERNEL[name], 0) >= 1, stats["native"]
    emu_db = compute_error(want, got).item()
    assert emu_db >= EMU_VS_CPU_DB, f"{name}: emu vs CPU SQNR {emu_db:.1f} dB"
    emu_float, cpu_float = compute_error(float_logits, got).item(), compute_error(float_logits, want).item()
    assert emu_float >= QUANTIZED_VS_FLOAT_DB and cpu_float >= QUANTIZED_VS_FLOAT_DB
    assert abs(emu_float - cpu_float) <= SAME_QUANTIZATION_ERROR_DB, (emu_float, cpu_float)
