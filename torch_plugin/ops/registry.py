"""The one place that lists which aten ops the emu device registers, and how.

Kernels live in the sibling modules; this file only wires them to the
dispatcher and keeps the per-path op counters. Metadata ops (empty, views,
resize_, set_) are registered by the C++ core.
"""
from __future__ import annotations

import contextlib
import threading
from collections import Counter

import torch

NATIVE = "native"
HOST_FALLBACK = "host_fallback"
# Device ops the host fallback itself runs (its operand and result copies, aten::_copy_from):
# they belong to the fallback's path, not to "native".
HOST_FALLBACK_COPIES = "host_fallback_copies"
_counts: dict[str, Counter] = {NATIVE: Counter(), HOST_FALLBACK: Counter(), HOST_FALLBACK_COPIES: Counter()}
_counts_lock = threading.Lock()
_fallback_allowed = True
_libraries = []  # keep Library objects alive, or their registrations vanish
class _ThreadState(threading.local):
    """Per-thread path state (class attributes are each thread's defaults)."""
    fallbacks = 0         # host fallbacks this thread ran: a native kernel that saw it grow fell back
    in_fallback = False   # the host fallback is copying operands or results (see in_host_fallback())


_local = _ThreadState()


def count(op: str, path: str) -> None:
    with _counts_lock:
        _counts[path][op] += 1


def op_stats() -> dict:
    with _counts_lock:
        return {path: dict(c) for path, c in _counts.items()}


def reset_op_stats() -> None:
    with _counts_lock:
        for c in _counts.values():
            c.clear()


def mark_fell_back() -> None:
    """The host fallback ran an op: the native kernel it ran inside (if any) is not counted native."""
    _local.fallbacks += 1


@contextlib.contextmanager
def in_host_fallback():
    """Native kernels run inside this block are the host fallback's copies: they are counted
    under op_stats()["host_fallback_copies"], not "native" (thread-local, nests)."""
    saved = _local.in_fallback
    _local.in_fallback = True
    try:
        yield
    finally:
        _local.in_fallback = saved


def host_fallback_allowed() -> bool:
    return _fallback_allowed


def set_host_fallback(allowed: bool) -> None:
    global _fallback_allowed
    _fallback_allowed = bool(allowed)


def _native(name: str, fn):
    """Wraps a kernel so each call is counted and runtime errors surface as torch errors."""
    import runtime
    from torch_plugin.errors import translate
    op = f"aten::{name}"
    native = _counts[NATIVE]
    copies = _counts[HOST_FALLBACK_COPIES]

    # One flat wrapper (it runs on every op: each frame costs). Exactly one path is counted
    # per op instance: a kernel that hands its op to the host fallback is not counted native.
    def kernel(*args, **kwargs):
        local = _local
        before = local.fallbacks
        try:
            result = fn(*args, **kwargs)
        except runtime.EmuError as err:
            raise translate(err) from err
        if local.fallbacks == before:  # no host fallback ran inside this kernel
            counter = copies if local.in_fallback else native
            with _counts_lock:
                counter[op] += 1
        return result
    kernel.__name__ = f"emu_{name.replace('.', '_')}"
    return kernel


def native_kernels() -> dict:
    from torch_plugin.ops import copy, elementwise, factories, linalg, loss, random, reduction
    return {
        "_copy_from": copy.copy_from,
        "_local_scalar_dense": copy.local_scalar_dense,
        "add.Tensor": elementwise.add,
        "add_.Tensor": elementwise.add_,
        "add.out": elementwise.add_out,
        "sub.Tensor": elementwise.sub,
        "sub_.Tensor": elementwise.sub_,
        "sub.out": elementwise.sub_out,
        "div.Tensor": elementwise.div,
        "div_.Tensor": elementwise.div_,
        "div.out": elementwise.div_out,
        "mul.Tensor": elementwise.mul,
        "mul_.Tensor": elementwise.mul_,
        "mul.out": elementwise.mul_out,
        "relu": elementwise.relu,
        "relu_": elementwise.relu_,
        "threshold_backward": elementwise.threshold_backward,
        "threshold_backward.grad_input": elementwise.threshold_backward_out,
        "sum.dim_IntList": reduction.sum_dim,
        "sum.IntList_out": reduction.sum_out,
        "_log_softmax": loss.log_softmax,
        "_log_softmax.out": loss.log_softmax_out,
        "_log_softmax_backward_data": loss.log_softmax_backward_data,
        "_log_softmax_backward_data.out": loss.log_softmax_backward_data_out,
        "nll_loss_forward": loss.nll_loss_forward,
        "nll_loss_forward.output": loss.nll_loss_forward_output,
        "nll_loss_backward": loss.nll_loss_backward,
        "nll_loss_backward.grad_input": loss.nll_loss_backward_grad_input,
        "mm": linalg.mm,
        "mm.out": linalg.mm_out,
        "addmm": linalg.addmm,
        "addmm.out": linalg.addmm_out,
        "fill_.Scalar": factories.fill_scalar,
        "fill_.Tensor": factories.fill_tensor,
        "zero_": factories.zero_,
        "arange.start_out": factories.arange_out,
        "linspace.out": factories.linspace_out,
        "eye.out": factories.eye_out,
        "eye.m_out": factories.eye_m_out,
        "uniform_": random.uniform_,
        "normal_": random.normal_,
        "random_.from": random.random_from,
        "random_.to": random.random_to,
        "random_": random.random_,
        "bernoulli_.float": random.bernoulli_float,
        "bernoulli_.Tensor": random.bernoulli_tensor,
        "bernoulli": random.bernoulli,
        # -- convolution, pooling, upsampling (ops/conv.py)
        # -- normalization (ops/normalization.py)
        # -- indexing and data movement (ops/indexing.py)
        # -- reductions (ops/reduction.py)
        # -- matrix engine (ops/linalg.py)
        # -- losses (ops/loss.py)
    }


def register_all() -> None:
    from torch_plugin.ops import fallback
    impl = torch.library.Library("aten", "IMPL")
    for name, fn in native_kernels().items():
        impl.impl(name, _native(name, fn), "PrivateUse1")
    # Conjugate/negated views reach _copy_from with their bits set; copy_from rejects them
    # clearly instead of recursing through the Conjugate/Negative fallbacks forever.
    impl.impl("_copy_from", torch.library.fallthrough_kernel, "Conjugate")
    impl.impl("_copy_from", torch.library.fallthrough_kernel, "Negative")
    everything = torch.library.Library("_", "IMPL")
    everything.fallback(fallback.boxed_fallback, "PrivateUse1")
    # Autocast for emu: ops without a policy run unchanged (no default fallthrough in 2.13).
    everything.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    _libraries.extend([impl, everything])
