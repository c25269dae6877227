"""Host fallback: an op without a device kernel runs on the CPU, correctly but slowly.

Every emu tensor argument is copied to the host (a synchronising copy; the same emu
tensor passed twice becomes one host tensor, so the CPU op sees the aliasing), the
CPU kernel runs, and results are copied back: outputs into new emu tensors, and
every mutated argument back into its emu original (resized first when the CPU op
resized it). Mutated arguments are found from the schema (``alias_info.is_write``):
``Tensor(a!)``, ``Tensor(a!)?``, ``Tensor(a!)[]`` and ``Tensor(a!)?[]``. An op with
a mutable argument of any other kind is rejected before anything runs, never run
with its write lost. Returns that alias a mutated argument (in-place and out= ops)
are the caller's emu originals. Ops that return views of their inputs cannot be
emulated this way and are rejected.

Policy (registry.host_fallback_policy(): ``EMU_HOST_FALLBACK``, ``torch.emu.host_fallback(...)``,
``torch.emu.set_host_fallback``): "allow" runs it silently, "warn" warns once per op name,
"forbid" raises ``HostFallbackError`` naming the op before anything is copied or run.

Accounting: each op instance is counted under ``host_fallback`` in
``torch.emu.op_stats()`` (a forbidden or impossible one under ``rejection``); the fallback's own copies
(``aten::_copy_from``) are counted under ``host_fallback_copies``, not ``native``.
The CPU work is charged to the modelled host clock by the host cost model
(``Runtime.charge_host_work``): never free, never wall time. See docs/host_fallback.md.
"""
from __future__ import annotations

import functools
import threading
import warnings

import torch
from torch.utils._pytree import tree_leaves, tree_map
from torch.utils.flop_counter import FlopCounterMode, flop_registry

import runtime
from torch_plugin.errors import AROUND_FALLBACK, HostFallbackError, projection_error
from torch_plugin.ops import registry

_warned: set[str] = set()
_CPU = torch.device("cpu")

# Kinds of mutable argument the fallback writes back.
TENSOR = "Tensor"
OPTIONAL_TENSOR = "Tensor?"
TENSOR_LIST = "Tensor[]"
OPTIONAL_TENSOR_LIST = "Tensor?[]"
_LIST_KINDS = (TENSOR_LIST, OPTIONAL_TENSOR_LIST)


# The name tests and users knew before HostFallbackError; the same class.
HostFallbackDisabled = HostFallbackError


class UnsupportedMutableArgument(RuntimeError):
    """A mutable argument the host fallback could not write back (so the op must not run)."""


def _is_tensor_type(t) -> bool:
    return isinstance(t, torch._C.TensorType)


def _is_optional_tensor_type(t) -> bool:
    return isinstance(t, torch._C.OptionalType) and _is_tensor_type(t.getElementType())


def _kind(t) -> str | None:
    if _is_tensor_type(t):
        return TENSOR
    if _is_optional_tensor_type(t):
        return OPTIONAL_TENSOR
    if isinstance(t, torch._C.ListType):
        element = t.getElementType()
        if _is_tensor_type(element):
            return TENSOR_LIST
        if _is_optional_tensor_type(element):
            return OPTIONAL_TENSOR_LIST
    return None


def _op_name(schema) -> str:
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def mutable_arguments(schema) -> list[tuple[int, str, str]]:
    """(position, name, kind) of every argument ``schema`` writes (``alias_info.is_write``).

    kind is TENSOR, OPTIONAL_TENSOR, TENSOR_LIST or OPTIONAL_TENSOR_LIST. Any other mutable
    argument (a Generator, a list of ints, a dict...) raises UnsupportedMutableArgument naming
    the op and the argument: the fallback could not write it back.
    """
    found = []
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        kind = _kind(arg.type)
        if kind is None:
            raise UnsupportedMutableArgument(
                f"{_op_name(schema)} has no emu kernel, and the host fallback cannot run it: its argument "
                f"'{arg.name}' is a mutable {arg.type}, and the fallback writes back only Tensor, Tensor?, "
                f"Tensor[] and Tensor?[] arguments (the write would be lost)")
        found.append((i, arg.name, kind))
    return found


def aliased_returns(schema) -> dict[int, int]:
    """{return index: position of the mutated argument it is} for returns like ``Tensor(a!)``
    (in-place and out= ops): the fallback returns the caller's original for them."""
    alias_sets = {}
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            for alias in arg.alias_info.before_set:
                alias_sets[alias] = i
    found = {}
    for j, ret in enumerate(schema.returns):
        if ret.alias_info is not None and ret.alias_info.is_write:
            for alias in ret.alias_info.before_set:
                if alias in alias_sets:
                    found[j] = alias_sets[alias]
    return found


_plans: dict = {}  # op -> (mutable_arguments, aliased_returns)


def _plan(op, schema):
    plan = _plans.get(op)
    if plan is None:
        plan = _plans[op] = (mutable_arguments(schema), aliased_returns(schema))
    return plan


def _argument(schema, i, args, kwargs):
    arg = schema.arguments[i]
    if not arg.kwarg_only and i < len(args):
        return args[i]
    return kwargs.get(arg.name)


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _distinct_tensors(tree) -> list:
    seen, out = set(), []
    for leaf in tree_leaves(tree):
        if isinstance(leaf, torch.Tensor) and id(leaf) not in seen:
            seen.add(id(leaf))
            out.append(leaf)
    return out


def _device_of(args, kwargs):
    for value in list(args) + list(kwargs.values()):
        for t in (value if isinstance(value, (list, tuple)) else [value]):
            if isinstance(t, torch.Tensor) and t.device.type == "emu":
                return t.device
    return torch.device("emu", torch.emu.current_device())


def _operands(args, kwargs) -> str:
    """"float32[3, 4], int64[3]": the tensor operands, for messages."""
    return ", ".join(f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"
                     for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)) or "no tensors"


def run_on_host(op, *args, **kwargs):
    """Runs ``op`` on the host for a kernel that has no device path for these operands (the
    kernel's op instance is then counted as host fallback, not as the kernel's path)."""
    try:
        return _run_on_host(op, args, kwargs, delegated=True)
    finally:
        registry.mark_fell_back()


def _run_on_host(op, args, kwargs, delegated=False):
    name = str(op.name()) if hasattr(op, "name") else str(op)
    if registry._observers is None:
        return _run_counted(op, name, args, kwargs, delegated)
    record = registry.begin_op(name, args, kwargs)  # a telemetry block is open
    path = registry.HOST_FALLBACK
    _rejected.flag = False
    try:
        return _run_counted(op, name, args, kwargs, delegated)
    except Exception:
        if _rejected.flag:
            path = registry.REJECTION
        raise  # otherwise it fell back (counted) and the CPU op raised the program's error
    finally:
        _rejected.flag = False
        registry.end_op(record, path)


class _Rejected(threading.local):
    flag = False  # the last _run_counted on this thread rejected its op (telemetry's path)


_rejected = _Rejected()


def _reject(name: str, err: Exception) -> Exception:
    registry.count(name, registry.REJECTION)
    _rejected.flag = True
    return err


def _run_counted(op, name, args, kwargs, delegated):
    schema = op._schema
    if any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
        raise _reject(name, RuntimeError(f"{name} returns a view of its input; it has no emu kernel and a view "
                                         f"cannot be emulated through the host fallback"))
    try:
        mutable, aliased_returns = _plan(op, schema)  # rejects a write it could not carry back
    except UnsupportedMutableArgument as err:
        raise _reject(name, err) from None
    if runtime.is_initialized() and runtime.get_runtime().projection:
        raise _reject(name, projection_error(name, "has no emu kernel" + (" for these operands" if delegated else "")
                                             + f" ({_operands(args, kwargs)}) and would run on the host from the "
                                             "device's values", AROUND_FALLBACK))
    policy = registry.host_fallback_policy()
    if policy == registry.FORBID:
        detail = " for these operands" if delegated else ""
        raise _reject(name, HostFallbackError(
            f"{name} has no emu kernel{detail} and host fallback is disabled (operands: {_operands(args, kwargs)}); "
            f"it would run on the CPU. Allow it with torch.emu.host_fallback(\"allow\"), "
            f"torch.emu.set_host_fallback(True) or EMU_HOST_FALLBACK=warn", op=name))
    registry.count(name, registry.HOST_FALLBACK)
    if policy == registry.WARN and name not in _warned:
        _warned.add(name)
        warnings.warn(f"{name} has no emu kernel: it ran on the host (counted in torch.emu.op_stats())",
                      stacklevel=4)
    device = _device_of(args, kwargs)
    host_of = {}  # id(emu tensor) -> its host copy: one copy per tensor, so aliasing survives

    def to_host(x):
        if isinstance(x, torch.Tensor) and x.device.type == "emu":
            host = host_of.get(id(x))
            if host is None:
                host = host_of[id(x)] = x.cpu()
            return host
        if isinstance(x, torch.device) and x.type == "emu":
            return _CPU  # a factory's device argument: the CPU kernel builds on the host (and the
        return x        # result is copied back), or the op would come straight back here
    with registry.in_host_fallback():
        cpu_args, cpu_kwargs = tree_map(to_host, args), tree_map(to_host, kwargs)
    inputs = _distinct_tensors((cpu_args, cpu_kwargs))
    input_bytes = _nbytes(inputs)
    with torch.device("cpu"):
        if getattr(op, "overloadpacket", None) in flop_registry:  # mm, bmm, conv, attention...
            with FlopCounterMode(display=False) as counter:
                result = op(*cpu_args, **cpu_kwargs)
            flops = counter.get_total_flops()
        else:
            result = op(*cpu_args, **cpu_kwargs)
            flops = None

    # Pairs (emu original, host copy) of every mutated emu tensor, each once.
    written = {}
    for i, _, kind in mutable:
        original = _argument(schema, i, args, kwargs)
        host = _argument(schema, i, cpu_args, cpu_kwargs)
        pairs = zip(original, host) if kind in _LIST_KINDS and original is not None else [(original, host)]
        for o, h in pairs:
            if isinstance(o, torch.Tensor) and o.device.type == "emu":
                written[id(o)] = (o, h)

    # Charge the CPU work to the modelled host clock (the host cost model, never wall time).
    outputs = _distinct_tensors((result, [h for _, h in written.values()]))
    if flops is None:
        flops = sum(t.numel() for t in outputs)  # one flop per output element
    runtime.get_runtime().charge_host_work(flops, input_bytes + _nbytes(outputs))

    with registry.in_host_fallback():
        mutated = {}
        for original, host in written.values():
            if original.shape != host.shape:
                original.resize_(host.shape)
            original.copy_(host)
            mutated[id(host)] = original

        def to_device(x):
            if isinstance(x, torch.Tensor):
                if id(x) in mutated:
                    return mutated[id(x)]
                return x.to(device)
            return x
        if len(schema.returns) == 1:
            if 0 in aliased_returns:
                result = _argument(schema, aliased_returns[0], args, kwargs)
            else:
                result = tree_map(to_device, result)
        elif schema.returns:
            result = tuple(_argument(schema, aliased_returns[j], args, kwargs) if j in aliased_returns
                           else tree_map(to_device, r) for j, r in enumerate(result))
    return result


def boxed_fallback(op, *args, **kwargs):
    """The dispatcher's PrivateUse1 fallback: ops with no emu kernel at all. Their out= and
    in-place contract is checked as for native kernels (ops/contract.py), before any host copy."""
    runner = _guarded_runners.get(op)
    if runner is None:
        from torch_plugin.ops import contract
        terms = contract.contract_of(op)
        plain = functools.partial(_run_on_host_args, op)
        runner = plain if terms is None else contract.guarded(op, terms, plain)
        _guarded_runners[op] = runner
    return runner(*args, **kwargs)


_guarded_runners: dict = {}


def _run_on_host_args(op, *args, **kwargs):
    return _run_on_host(op, args, kwargs)
