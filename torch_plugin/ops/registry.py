"""Wires the op modules' kernels to the dispatcher, keeps the per-path op counters and holds the
host fallback policy.

Each op module of this package declares the aten overloads it implements beside its kernels (its
``OVERLOADS`` table, ops/_overloads.py; the pointwise op table's generated rows are its
``GENERATED_OVERLOADS``); native_kernels() collects them, so there is no list here to keep in step.
Metadata ops (empty, views, resize_, set_) are registered by the C++ core.

Paths (one per op instance, see docs/operators.md#paths-and-telemetry):
``native`` (a kernel in native_kernels() that launched device kernels itself),
``composite`` (a kernel marked with ``composite`` that runs other device ops),
``decomposition`` (a torch._decomp decomposition, ops/decompositions.py),
``host_fallback`` (ops/fallback.py) and ``rejection`` (the op is not supported:
a NotImplementedError from its kernel, a forbidden fallback, or an op the fallback
cannot run). An error of the program itself (a bad shape, as CPU raises) is no path.
"""
from __future__ import annotations

import contextlib
import threading
from collections import Counter

import torch

NATIVE = "native"
COMPOSITE = "composite"
DECOMPOSITION = "decomposition"
HOST_FALLBACK = "host_fallback"
REJECTION = "rejection"
# Device ops the host fallback itself runs (its operand and result copies, aten::_copy_from):
# they belong to the fallback's path, not to "native".
HOST_FALLBACK_COPIES = "host_fallback_copies"
PATHS = (NATIVE, COMPOSITE, DECOMPOSITION, HOST_FALLBACK, REJECTION)
# Op counts: each thread counts into a dict of its own ({(path, op): n}, only ever growing), with
# no lock on the hot path; op_stats() sums them (a dict's copy is atomic under the GIL) and
# reset_op_stats() sets the baseline the sums are read against.
_thread_counts: list[dict] = []
_baseline: dict = {}
_counts_lock = threading.Lock()
_libraries = []  # keep Library objects alive, or their registrations vanish
TYPED: dict = {}  # {aten overload: kernel} of the ops registered through a typed C++ entry point
# The telemetry blocks active now (torch_plugin.telemetry.Telemetry), or None. The only thing the
# hot path reads for telemetry: one module-global load per op while no block is active.
_observers: tuple | None = None


class _ThreadState(threading.local):
    """Per-thread path state (class attributes are each thread's defaults)."""
    fallbacks = 0         # grows when a kernel hands its own op to the host (fallback.run_on_host)
    in_fallback = False   # the host fallback is copying operands or results (see in_host_fallback())
    records = ()          # telemetry: the op records open on this thread (outermost first)

    def __init__(self):   # runs once in each thread, at its first use
        self.counts = {}  # {(path, op): n}: this thread's op counts
        with _counts_lock:
            _thread_counts.append(self.counts)


_local = _ThreadState()


def count(op: str, path: str) -> None:
    counts = _local.counts
    key = (path, op)
    counts[key] = counts.get(key, 0) + 1


def _totals() -> Counter:
    with _counts_lock:
        per_thread = list(_thread_counts)
    totals = Counter()
    for counts in per_thread:
        totals.update(counts.copy())
    return totals


def op_stats() -> dict:
    out = {path: {} for path in (*PATHS, HOST_FALLBACK_COPIES)}
    baseline = _baseline
    for (path, op), n in _totals().items():
        n -= baseline.get((path, op), 0)
        if n:
            out[path][op] = n
    return out


def reset_op_stats() -> None:
    global _baseline
    _baseline = dict(_totals())


def mark_fell_back() -> None:
    """A kernel handed its own op to the host fallback: its wrapper must not count it again."""
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


# -- the host fallback policy --------------------------------------------------
ALLOW, WARN, FORBID = "allow", "warn", "forbid"
_POLICIES = (ALLOW, WARN, FORBID)
_base_policy: str | None = None   # EMU_HOST_FALLBACK, or set_host_fallback(); read on first need
_policy_stack: list[str] = []     # torch.emu.host_fallback(...) blocks, innermost last
_policy_lock = threading.Lock()


def _environment_policy() -> str:
    import runtime
    from runtime.settings import host_fallback_policy
    from torch_plugin.errors import translate
    try:
        return host_fallback_policy()
    except runtime.EmuError as err:
        raise translate(err) from err


def host_fallback_policy() -> str:
    """The policy in force: the innermost ``host_fallback(...)`` block, else
    ``set_host_fallback``'s, else ``EMU_HOST_FALLBACK`` (default "warn")."""
    global _base_policy
    if _policy_stack:
        return _policy_stack[-1]
    if _base_policy is None:
        _base_policy = _environment_policy()
    return _base_policy


def host_fallback_allowed() -> bool:
    return host_fallback_policy() != FORBID


def set_host_fallback(allowed: bool) -> None:
    """True: allow the fallback (EMU_HOST_FALLBACK's allow or warn; warn if it said forbid);
    False: forbid it. ``host_fallback(...)`` blocks still win while they are open."""
    global _base_policy
    if allowed:
        environment = _environment_policy()
        _base_policy = environment if environment != FORBID else WARN
    else:
        _base_policy = FORBID


@contextlib.contextmanager
def host_fallback(policy: str):
    """Runs the block under ``policy`` ("allow", "warn" or "forbid"); blocks nest. The policy
    is process-wide (backward runs on autograd's worker thread and must see it too)."""
    if policy not in _POLICIES:
        raise ValueError(f"torch.emu.host_fallback: policy {policy!r} is not one of {', '.join(_POLICIES)}")
    with _policy_lock:
        _policy_stack.append(policy)
    try:
        yield policy
    finally:
        with _policy_lock:
            # Remove this block's entry (the last one equal to it), even if blocks of other
            # threads closed out of order.
            for i in range(len(_policy_stack) - 1, -1, -1):
                if _policy_stack[i] == policy:
                    del _policy_stack[i]
                    break


# -- telemetry hooks (torch_plugin/telemetry.py) -------------------------------
def add_observer(observer) -> None:
    global _observers
    with _counts_lock:
        _observers = (*(_observers or ()), observer)


def remove_observer(observer) -> None:
    global _observers
    with _counts_lock:
        remaining = tuple(o for o in (_observers or ()) if o is not observer)
        _observers = remaining or None


def begin_op(op: str, args, kwargs):
    """Opens a telemetry record for an op instance on this thread (only while observed)."""
    from torch_plugin.telemetry import OpRecord
    record = OpRecord.of(op, args, kwargs)
    _local.records = (*_local.records, record)
    return record


def end_op(record, path: str | None) -> None:
    """Closes ``record``; path None: the op instance was counted elsewhere (its own fallback)."""
    records = _local.records
    _local.records = tuple(r for r in records if r is not record)
    observers = _observers
    if path is not None and observers:
        record.path = path
        for observer in observers:
            observer.add_op(record)


def note_kernel(name: str) -> None:
    """A device kernel (or copy) ran for the op records open on this thread."""
    for record in _local.records:
        record.kernels.append(name)


def composite(fn):
    """Marks an op kernel as a composite of other device ops: its op instances are counted
    under "composite" (the ops it runs are counted as what they are)."""
    fn._emu_path = COMPOSITE
    return fn


def _on_host(name: str, args, kwargs, why: Exception):
    """A native kernel that has no device path for a dtype (it raised UnsupportedDtypeError
    before changing anything) hands the op to the host fallback: counted there. Under the forbid
    policy it is refused with a HostFallbackError that keeps the kernel's reason (the op, the
    dtype and what the device supports)."""
    from torch_plugin.errors import HostFallbackError
    from torch_plugin.ops import fallback
    if host_fallback_policy() == FORBID:  # (the wrapper counts the rejection)
        raise HostFallbackError(f"{why}; the host fallback that would run it is disabled "
                                f"(torch.emu.host_fallback(\"allow\") allows it)", op=f"aten::{name}") from why
    base, _, overload = name.partition(".")
    return fallback.run_on_host(getattr(getattr(torch.ops.aten, base), overload or "default"), *args, **kwargs)


def _cpu_can_run(name: str) -> bool:
    """Whether the CPU has a kernel of its own for the op (convolution_overrideable, for one, has
    only an error stub off PrivateUse1: handing it to the host would not help)."""
    qualified = f"aten::{name}"
    if torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "CPU"):
        return True
    return "overrideable" not in name and torch._C._dispatch_has_kernel_for_dispatch_key(
        qualified, "CompositeExplicitAutograd")


def _wrap(name: str, fn, path: str = NATIVE, op: str | None = None, inplace: str | None = None):
    """Wraps a kernel so each call is counted under ``path`` and runtime errors surface as torch
    errors. A kernel that hands its op to the host fallback is counted there instead; a kernel
    that rejects its op (NotImplementedError, HostFallbackError) is counted under "rejection".
    ``op``: the counted name (default ``aten::<name>``; custom operators pass their own).
    ``inplace``: an in-place overload's qualified name; the wrapper then checks the contract's
    rule that the kernel never resizes self (ops/contract.py; here rather than in a second
    wrapper, a frame and an argument pass less on every in-place op)."""
    import runtime
    from torch_plugin.errors import HostFallbackError, UnsupportedDtypeError, translate
    from torch_plugin.ops.contract import resized_self
    aten_op = op is None
    op = op or f"aten::{name}"
    path_key, copies_key, rejected_key = (path, op), (HOST_FALLBACK_COPIES, op), (REJECTION, op)

    # One flat wrapper (it runs on every op: each frame costs), the same logic whether a telemetry
    # block is open (``record``: the op record it fills) or not. Exactly one path is counted per op
    # instance. Nested op instances (a composite's, a decomposition's) count their own.
    def kernel(*args, **kwargs):
        local = _local
        before = local.fallbacks
        if inplace is not None:
            shape = args[0].shape
        record = None if _observers is None else begin_op(op, args, kwargs)
        try:
            try:
                result = fn(*args, **kwargs)
            except UnsupportedDtypeError as why:
                if not aten_op or not _cpu_can_run(name):
                    raise
                result = _on_host(name, args, kwargs, why)  # counted as host fallback (or refused)
        except runtime.EmuError as err:
            if record is not None:
                end_op(record, None)
            raise translate(err) from err
        except (NotImplementedError, HostFallbackError):
            path_taken = None
            if local.fallbacks == before:  # the kernel rejected its op (its own fallback counted it otherwise)
                path_taken = REJECTION
                counts = local.counts
                counts[rejected_key] = counts.get(rejected_key, 0) + 1
            else:
                local.fallbacks = before
            if record is not None:
                end_op(record, path_taken)
            raise
        except BaseException:
            if record is not None:
                end_op(record, None)
            raise
        if local.fallbacks == before:  # no host fallback ran for this op instance
            in_fallback = local.in_fallback
            key = copies_key if in_fallback else path_key
            counts = local.counts
            counts[key] = counts.get(key, 0) + 1
            if record is not None:
                end_op(record, HOST_FALLBACK_COPIES if in_fallback else path)
        else:
            local.fallbacks = before  # this op ran on the host; an enclosing op still counts its own path
            if record is not None:
                end_op(record, None)
        if inplace is not None and args[0].shape != shape:
            raise resized_self(inplace, shape, args[0].shape)
        return result
    kernel.__name__ = f"emu_{name.replace('.', '_')}"
    return kernel


def _guarded(name: str, fn, path: str):
    """``fn`` wrapped (_wrap) behind the out= / in-place contract of its overload
    (ops/contract.py): out= is checked before it launches, in place by the wrapper itself;
    overloads that write nothing but their result are only wrapped."""
    from torch_plugin.ops import contract
    base, _, overload = name.partition(".")
    op = getattr(getattr(torch.ops.aten, base), overload or "default")
    terms = contract.contract_of(op)
    if terms is None:
        return _wrap(name, fn, path)
    if terms.out_names:
        return contract.guarded(op, terms, _wrap(name, fn, path))
    return _wrap(name, fn, path, inplace=terms.qualified)


def _native(name: str, fn):
    return _guarded(name, fn, getattr(fn, "_emu_path", NATIVE))


def native_kernels() -> dict:
    """{aten overload: kernel} for every native kernel: the op modules' generated rows, then their
    hand-written kernels, which win where both name an overload (ops/_overloads.py)."""
    from torch_plugin.ops import _overloads
    return _overloads.collect(op_modules())


def op_modules() -> list:
    """Every module of torch_plugin.ops, imported (those with an OVERLOADS table register kernels)."""
    import importlib
    import pkgutil

    import torch_plugin.ops as package
    return [importlib.import_module(f"{package.__name__}.{info.name}")
            for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name)
            if not info.name.startswith("_")]


def register_all() -> None:
    from torch_plugin.ops import fallback
    from torch_plugin.ops import decompositions
    from torch_plugin import _compat
    impl = torch.library.Library("aten", "IMPL")
    absent = _compat.aten_ops_absent(torch.__version__)   # aten ops this torch no longer defines
    natives = {name: fn for name, fn in native_kernels().items() if name not in absent}
    from torch_plugin import _C
    for name, fn in natives.items():
        kernel = _native(name, fn)
        # The binary arithmetic ops enter through a typed C++ entry point (csrc/trampoline.cpp):
        # the same kernel, without torch's boxed argument conversion on every call.
        if _C._impl_typed(name, kernel):
            TYPED[name] = kernel
        else:
            impl.impl(name, kernel, "PrivateUse1")
    # Decompositions only for ops without a kernel, and only where every op they produce has a
    # device path (ops/decompositions.py decides which rows are active).
    for name, fn in decompositions.active(natives).items():
        impl.impl(name, _guarded(name, fn, DECOMPOSITION), "PrivateUse1")
    # Conjugate/negated views reach _copy_from with their bits set; copy_from rejects them
    # clearly instead of recursing through the Conjugate/Negative fallbacks forever.
    impl.impl("_copy_from", torch.library.fallthrough_kernel, "Conjugate")
    impl.impl("_copy_from", torch.library.fallthrough_kernel, "Negative")
    from torch_plugin.ops import quantized
    ao = torch.library.Library("quantized", "IMPL")   # torch.ao's dynamic kernels: refused, not host work
    for name in quantized.AO_DYNAMIC_OPS:
        short = name.split("::")[1]
        ao.impl(short, _wrap(short, quantized.refuse_ao(name), NATIVE, op=name), "PrivateUse1")
    _libraries.append(ao)
    quantized.register_out_dtype()
    everything = torch.library.Library("_", "IMPL")
    everything.fallback(fallback.boxed_fallback, "PrivateUse1")
    # Autocast for emu: ops without a policy run unchanged (no default fallthrough in 2.13).
    everything.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    # Sparse and quantized layouts: a clear rejection that names the op and the layout, counted.
    for key, layout in _UNSUPPORTED_LAYOUTS.items():
        everything.fallback(_reject_layout(layout), key)
    _libraries.extend([impl, everything])


_UNSUPPORTED_LAYOUTS = {"SparsePrivateUse1": "sparse COO", "SparseCsrPrivateUse1": "sparse compressed (CSR/CSC/BSR/BSC)",
                        "QuantizedPrivateUse1": "quantized"}


def _reject_layout(layout: str):
    def reject(op, *args, **kwargs):
        name = str(op.name()) if hasattr(op, "name") else str(op)
        count(name, REJECTION)
        raise NotImplementedError(f"{name}: {layout} tensors are not supported on emu (supported: strided, "
                                  f"dense tensors; convert with .to_dense() / .dequantize() on the CPU first)")
    return reject
