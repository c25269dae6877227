"""The model zoo on emu against the CPU reference (issue #7).

Per model of ``torch_plugin.zoo.MODELS``: the fp32 forward matches CPU within the spec's stated
tolerance; 3 AdamW steps (foreach=False) follow CPU's losses and BatchNorm-style buffers;
decoders generate 8 tokens greedily with a KV cache (or recurrent state) exactly as CPU does;
a strict run (forward, a training step, generation) needs no host fallback, and a failure names
every op that fell back; a repeated training iteration does not grow device memory; under bf16
autocast the forward and the losses follow CPU's autocast. The foreach and fused AdamW follow
the per-parameter one. Peak device memory, errors and fallbacks are printed in the "model zoo on
emu" summary at the end of the run.

The sweep runs causal-LM families of the installed transformers from shrunken configs:
``SWEEP_QUICK`` by default, every family with ``EMU_ZOO_SWEEP=all`` (several minutes).
"""
import os

import pytest
import torch
from torch import nn

from torch_plugin.zoo import MODELS, harness, sweep

NAMES = sorted(MODELS)
DECODERS = [n for n in NAMES if MODELS[n].is_decoder]
STEPS = 3
NEW_TOKENS = 8

# Families beyond the main table, each for a feature of its own: parallel attention/MLP with
# partial rotary (gpt_neox), ALiBi (bloom), a state-space model (mamba), multi-query attention
# with parallel blocks (falcon), sliding-window attention (mistral), QK-norm (qwen3),
# a gated-GELU decoder with soft-capping (gemma2), a mixture of experts (mixtral), OPT's
# learned positions, local attention (gpt_neo), a linear-attention RNN (rwkv).
SWEEP_QUICK = ["bloom", "falcon", "gemma2", "gpt_neo", "gpt_neox", "mamba", "mistral", "mixtral", "opt", "qwen3",
               "rwkv"]
SWEEP = sweep.decoder_families() if os.environ.get("EMU_ZOO_SWEEP") == "all" else SWEEP_QUICK


def _check_ties(name, cpu_model, emu_model):
    untied = harness.untied_parameters(cpu_model, emu_model)
    assert not untied, (f"{name}: module.to('emu') untied the shared parameters {untied}, so they train apart "
                        "(see test_module_to_device_keeps_tied_parameters)")


def _tied_pair(name):
    """MODELS[name]'s spec, its CPU model and emu copy (harness.pair) and its batch 0; the copy
    must keep the model's shared parameters tied."""
    spec = MODELS[name]
    cpu_model, emu_model = harness.pair(spec)
    batch = spec.batch(0)
    _check_ties(name, cpu_model, emu_model)
    return spec, cpu_model, emu_model, batch


def _fallback_message(name, fell):
    return f"{name}: these aten ops fell back to the host (no device path): {dict(sorted(fell.items()))}"


@pytest.mark.parametrize("name", NAMES)
def test_forward_matches_cpu(name, zoo_report):
    spec = MODELS[name]
    cpu_model, emu_model = harness.pair(spec)
    batch = spec.batch(0)
    got = harness.forward(spec, emu_model, batch)
    expected = harness.forward(spec, cpu_model, batch)
    torch.testing.assert_close(got, expected, **spec.forward_tol)
    zoo_report(name, "forward_max_abs_err", f"{(got - expected).abs().max().item():.1e}")


@pytest.mark.parametrize("name", NAMES)
def test_training_follows_cpu(name, zoo_report):
    spec, cpu_model, emu_model, batch = _tied_pair(name)
    got = [s.loss for s in harness.train(spec, emu_model, batch, STEPS)]
    expected = [s.loss for s in harness.train(spec, cpu_model, batch, STEPS)]
    torch.testing.assert_close(torch.tensor(got), torch.tensor(expected), **spec.loss_tol,
                               msg=lambda m: f"{name}: AdamW losses emu {got} vs cpu {expected}\n{m}")
    assert expected[-1] < expected[0], f"{name}: the reference loss does not fall, the test would prove nothing"
    for (key, buf), emu_buf in zip(cpu_model.named_buffers(), emu_model.buffers()):
        tol = spec.loss_tol if buf.is_floating_point() else dict(rtol=0, atol=0)
        torch.testing.assert_close(emu_buf.cpu(), buf, **tol, msg=lambda m: f"{name}: buffer {key}\n{m}")
    zoo_report(name, "losses", "/".join(f"{v:.4f}" for v in got))


@pytest.mark.parametrize("impl", ["foreach", "fused"])
@pytest.mark.parametrize("name", ["mlp", "resnet18", "llama"])
def test_adamw_foreach_and_fused_follow_cpu(name, impl):
    """The multi-tensor (``_foreach_*``) and fused AdamW on emu against CPU's per-parameter AdamW."""
    spec = MODELS[name]
    cpu_model, emu_model = harness.pair(spec)
    batch = spec.batch(0)
    with torch.emu.host_fallback("forbid"):
        got = [s.loss for s in harness.train(spec, emu_model, batch, STEPS,
                                             harness.optimizer_for(spec, emu_model, impl))]
    expected = [s.loss for s in harness.train(spec, cpu_model, batch, STEPS)]
    torch.testing.assert_close(torch.tensor(got), torch.tensor(expected), **spec.loss_tol,
                               msg=lambda m: f"{name}: AdamW({impl}) losses emu {got} vs cpu {expected}\n{m}")


@pytest.mark.parametrize("name", NAMES)
def test_second_iteration_does_not_grow_device_memory(name, zoo_report):
    spec = MODELS[name]
    _, emu_model = harness.pair(spec)
    # step 1 creates AdamW's state; steps 2 and 3 are identical iterations
    steps = harness.train(spec, emu_model, spec.batch(0), 3)
    second, third = steps[1], steps[2]
    zoo_report(name, "peak_device_MiB", f"{max(s.peak_bytes for s in steps) / 2**20:.2f}")
    assert third.allocated_bytes <= second.allocated_bytes, \
        f"{name}: device memory after an identical iteration grew {second.allocated_bytes} -> {third.allocated_bytes}"
    assert third.peak_bytes <= second.peak_bytes, \
        f"{name}: peak of an identical iteration grew {second.peak_bytes} -> {third.peak_bytes}"
    assert second.peak_bytes > 0 and second.allocated_bytes > 0


@pytest.mark.parametrize("name", DECODERS)
def test_greedy_generation_matches_cpu(name, zoo_report):
    spec = MODELS[name]
    cpu_model, emu_model = harness.pair(spec)
    prompt = spec.prompt(0)
    got = harness.generate(spec, emu_model, prompt, NEW_TOKENS)
    expected = harness.generate(spec, cpu_model, prompt, NEW_TOKENS)
    assert got.shape[-1] >= NEW_TOKENS
    assert got.tolist() == expected.tolist(), f"{name}: emu generated {got.tolist()}, cpu {expected.tolist()}"
    zoo_report(name, "generated", NEW_TOKENS)


@pytest.mark.parametrize("name", NAMES)
def test_strict_mode_needs_no_host_fallback(name, zoo_report):
    spec = MODELS[name]
    _, emu_model = harness.pair(spec)
    _, fell = harness.host_fallbacks(harness.full_run, spec, emu_model)
    zoo_report(name, "host_fallback_ops", sorted(fell) or "none")
    assert not fell, _fallback_message(name, fell)
    with torch.emu.host_fallback("forbid"):
        harness.full_run(spec, emu_model, seed=1)


@pytest.mark.parametrize("name", NAMES)
def test_spec_is_reproducible_from_its_seed(name):
    spec = MODELS[name]
    a, b, c = spec.build(0), spec.build(0), spec.build(1)
    for (key, p), q, r in zip(a.state_dict().items(), b.state_dict().values(), c.state_dict().values()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=lambda m: f"{name}: {key} differs for one seed")
    assert any(not torch.equal(p, r) for p, r in zip(a.parameters(), c.parameters())), f"{name}: seed ignored"


def test_module_to_device_keeps_tied_parameters():
    """GPT-2, BERT and T5 tie the LM head to the embedding. ``module.to("emu")`` must keep one
    Parameter, or the two copies train apart and the losses leave CPU's after step 1."""
    model = nn.Sequential(nn.Embedding(8, 4), nn.Linear(4, 8, bias=False))
    model[1].weight = model[0].weight
    model.to("emu")
    assert model[1].weight is model[0].weight, (
        "module.to('emu') untied a shared Parameter: torch._has_compatible_shallow_copy_type(cpu, emu) is "
        f"{torch._has_compatible_shallow_copy_type(torch.empty(1), torch.empty(1, device='emu'))}, so "
        "Module._apply makes a new Parameter per use (pytorch/pytorch#116255)")


@pytest.mark.parametrize("model_type", SWEEP)
def test_transformers_decoder_family(model_type, zoo_report):
    why = sweep.buildable(model_type)
    if why is not None:
        if model_type in SWEEP_QUICK:
            pytest.fail(f"{model_type} no longer builds from a small config: {why}")
        pytest.skip(f"{model_type} does not build from a small config here: {why}")
    spec = sweep.sweep_spec(model_type)
    cpu_model, emu_model = harness.pair(spec)
    batch = spec.batch(0)

    def run():
        out = harness.forward(spec, emu_model, batch)
        losses = [s.loss for s in harness.train(spec, emu_model, batch, 2)]
        return out, losses, harness.generate(spec, emu_model, spec.prompt(0), NEW_TOKENS)

    (out, losses, tokens), fell = harness.host_fallbacks(run)
    zoo_report(f"sweep:{model_type}", "host_fallback_ops", sorted(fell) or "none")
    assert not fell, _fallback_message(model_type, fell)
    _check_ties(model_type, cpu_model, emu_model)
    reference = harness.forward(spec, cpu_model, batch)
    # families differ in logit scale (CPM-Ant's reach ~30): atol follows the largest logit
    scale = max(1.0, reference.abs().max().item())
    torch.testing.assert_close(out, reference, rtol=spec.forward_tol["rtol"], atol=spec.forward_tol["atol"] * scale)
    expected = [s.loss for s in harness.train(spec, cpu_model, batch, 2)]
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(expected), **spec.loss_tol)
    assert tokens.tolist() == harness.generate(spec, cpu_model, spec.prompt(0), NEW_TOKENS).tolist()


# bf16 autocast against CPU's autocast. The policies differ by design (emu runs softmax, norms and
# scaled_dot_product_attention in float32, CPU runs SDPA in bfloat16), so results agree to
# bfloat16's rounding scale, not bit for bit: the forward's relative (Frobenius) error is at most
# 3e-2, and losses of 3 AdamW steps agree within rtol 2e-2 + atol 1e-2.
AMP_FORWARD_REL = 3e-2
AMP_LOSS_TOL = dict(rtol=2e-2, atol=1e-2)


def _cpu_autocast_reference():
    """CPU's reference runs without oneDNN. torch picks oneDNN's bfloat16 RNN by the CPU's features
    as cpuinfo reads them, and where oneDNN then has no bfloat16 primitive for the host (a host with
    AVX2 only, or oneDNN capped below AVX-512 by EMU_CPU_ISA, tests/conftest.py) the LSTM raises
    "could not create a primitive descriptor"; torch's own loops run on every host."""
    return torch.backends.mkldnn.flags(enabled=False)


@pytest.mark.parametrize("name", NAMES)
def test_bf16_autocast_follows_cpu_autocast(name, zoo_report):
    spec, cpu_model, emu_model, batch = _tied_pair(name)

    def run():
        out = harness.forward(spec, emu_model, batch, autocast=torch.bfloat16)
        return out, [s.loss for s in harness.train(spec, emu_model, batch, STEPS, autocast=torch.bfloat16)]

    fp32 = harness.forward(spec, emu_model, batch)
    (got, losses), fell = harness.host_fallbacks(run)
    assert not fell, _fallback_message(name, fell)
    with _cpu_autocast_reference():
        expected = harness.forward(spec, cpu_model, batch, autocast=torch.bfloat16)
    rel = ((got - expected).norm() / expected.norm()).item()
    zoo_report(name, "bf16_autocast_rel_err", f"{rel:.1e}")
    assert rel <= AMP_FORWARD_REL, f"{name}: bf16 autocast forward relative error {rel:.2e} vs CPU autocast"
    assert not torch.equal(got, fp32), f"{name}: the output under bf16 autocast equals the float32 one"
    with _cpu_autocast_reference():
        cpu_losses = [s.loss for s in harness.train(spec, cpu_model, batch, STEPS, autocast=torch.bfloat16)]
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses), **AMP_LOSS_TOL,
                               msg=lambda m: f"{name}: bf16 autocast losses emu {losses} vs cpu {cpu_losses}\n{m}")
