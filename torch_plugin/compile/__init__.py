"""``torch.compile(model, backend="emu")``: dynamo + aot_autograd + the core-aten decompositions,
each FX graph lowered to a device program (lowering.py: fused elementwise chains, matmul
epilogues, row reductions, planned buffers). SDPA calls are first rewritten to the op eager's SDPA
calls on emu, the fused attention kernel (``_lower_attention``). docs/compile.md.

Registered at ``import torch_plugin`` (the backend name "emu"); ``compile_stats()`` counts what
compilation did. The default Inductor backend cannot generate code for emu: inductor.py makes
``torch.compile(model)`` on emu tensors fail at compile time with an error naming ``backend="emu"``.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys

import torch

from torch_plugin.compile.stats import compile_stats, reset_compile_stats

__all__ = ["emu_backend", "compile_stats", "reset_compile_stats", "lower"]


def lower(gm: torch.fx.GraphModule, example_inputs=None):
    """One aten-level FX graph -> its DeviceProgram (called by aot_autograd for the forward and
    the backward graphs)."""
    from torch_plugin.compile.lowering import DeviceProgram
    from torch_plugin.compile import stats
    program = DeviceProgram(gm)
    compile_id = torch._guards.CompileContext.current_compile_id()
    recompile = compile_id is not None and (compile_id.frame_compile_id or 0) > 0
    stats.note_graph({k: v for k, v in program.stats.items()}, recompile)
    return program


_SDPA_TARGETS = None


def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """F.scaled_dot_product_attention as eager runs it on emu: the fused attention kernel
    (``_scaled_dot_product_fused_attention_overrideable``, whose backward is its own op) where the
    device's ``_fused_sdp_choice`` takes it, else the math path (decomposed as before). aot's
    functionalization would decompose SDPA (CompositeImplicitAutograd) and its fake tensors answer
    the meta device's choice, the math path; eager's choice reads only metadata, so it is made here
    on the traced tensors."""
    from torch_plugin.ops.attention import _OVERRIDEABLE, fused_sdp_choice
    if fused_sdp_choice(query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
                        enable_gqa=enable_gqa) == _OVERRIDEABLE:
        if attn_mask is not None and attn_mask.dtype == torch.bool:   # as ATen's SDPA converts it
            attn_mask = torch.where(attn_mask.logical_not(), float("-inf"),
                                    torch.scalar_tensor(0.0, dtype=query.dtype, device=attn_mask.device))
        return torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default(
            query, key, value, attn_mask, dropout_p, is_causal, False, scale=scale)[0]
    return torch._C._nn.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal,
                                                     scale=scale, enable_gqa=enable_gqa)


def _lower_attention(gm: torch.fx.GraphModule) -> None:
    """Dynamo's SDPA calls -> ``_sdpa`` (in place)."""
    global _SDPA_TARGETS
    if _SDPA_TARGETS is None:
        import torch.nn.functional as F
        _SDPA_TARGETS = {torch._C._nn.scaled_dot_product_attention, F.scaled_dot_product_attention}
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _SDPA_TARGETS:
            node.target = _sdpa
            changed = True
    if changed:
        gm.recompile()


def _aot_backend():
    from torch._dynamo.backends.common import aot_autograd
    from torch._decomp import core_aten_decompositions
    return aot_autograd(fw_compiler=lower, bw_compiler=lower, decompositions=core_aten_decompositions())


def emu_backend(gm: torch.fx.GraphModule, example_inputs):
    """The dynamo backend ``"emu"``."""
    _lower_attention(gm)
    return _aot_backend()(gm, example_inputs)


def _register_backend() -> None:
    from torch._dynamo.backends import registry
    if "emu" not in registry._COMPILER_FNS:
        registry.register_backend(compiler_fn=emu_backend, name="emu")


def _register_inductor() -> None:
    from torch_plugin.compile import inductor
    inductor.register()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a registration right after one module has been imported. Importing torch._dynamo
    costs seconds, and ``import torch`` (which autoloads this plugin) must stay cheap; dynamo's
    backend registry and Inductor's device tables are filled when they are first imported."""

    def __init__(self, name: str, callback):
        self.name, self.callback = name, callback

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader, callback = spec.loader, self.callback
        exec_module = loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            callback()
        loader.exec_module = exec_then_register
        return spec


def _when_imported(name: str, callback) -> None:
    if name in sys.modules:
        callback()
    else:
        sys.meta_path.insert(0, _AfterImport(name, callback))


def _register() -> None:
    _when_imported("torch._dynamo.backends.registry", _register_backend)
    _when_imported("torch._inductor.codegen.common", _register_inductor)


_register()
