"""PyTorch's out= and variant contracts, run over the OpInfo database on emu.

PyTorch states these contracts in its device-generic TestCommon suite (test/test_ops.py:
``test_out``, ``test_out_warning``, ``test_variant_consistency_eager``); that file is not in the
wheel, so this module checks the same rules, written for this project, over every OpInfo of
``op_db``, with the first samples of one dtype (float32 where the op has it):

out= (ops whose OpInfo says ``supports_out``; the others must refuse an out=):

- ``poisoned``: an out of the right shape, dtype and device filled with NaN (integers: their
  maximum) gets the function's values; its strides and storage are kept.
- ``strided``: a non-contiguous out of the right shape gets the values and keeps its strides.
- ``empty``: a zero-element out is resized without the resize warning.
- ``wrong_shape``: a non-empty out of the wrong shape is resized with CPU's warning ("An output
  with one or more elements was resized") and gets the values.
- ``wrong_device``: a CPU out for emu inputs is a RuntimeError (factory functions called
  without ``device`` excepted).
- ``unsafe_dtype``: an int64 out for a floating result is a RuntimeError (TypeError for the
  cat family, as PyTorch's own test expects; factories without ``dtype`` excepted).

variants: the function, the method, the in-place method, the operator and every alias give
the function's values, and (for float samples that require grad) the same gradients.

``python -m torch_plugin.conformance_contracts`` writes the outcome of every (op, check) as
JSON; ``tests/torch_plugin/test_out_contract.py`` runs it under pytest against
``tests/torch_plugin/data/contracts_expected.json`` (the failures that remain, each with its
reason) and docs/conformance.md records the counts.
"""
from __future__ import annotations

import argparse
import copy
import itertools
import json
import sys
import warnings
from dataclasses import asdict, dataclass

import torch
from torch.utils._pytree import tree_flatten

import torch_plugin  # noqa: F401  (registers emu before the OpInfo machinery builds its device list)

PASS, FAIL, SKIP, DECLARED = "pass", "fail", "skip", "declared"
# Which of PyTorch's TestCommon tests states each check: an OpInfo's own decorators for that test
# (an expectedFailure or a skip on every device, or on this one) make the check "declared": PyTorch
# itself does not hold the op to it (random ops' variants, Python composites such as torch.lu).
TEST_OF = {"no_out": "test_out", "poisoned": "test_out", "strided": "test_out", "empty": "test_out",
           "wrong_device": "test_out", "unsafe_dtype": "test_out", "wrong_shape": "test_out_warning",
           "variants": "test_variant_consistency_eager", "variants_backward": "test_variant_consistency_eager"}
OUT_CHECKS = ("no_out", "poisoned", "strided", "empty", "wrong_shape", "wrong_device", "unsafe_dtype")
VARIANT_CHECKS = ("variants", "variants_backward")
_RESIZE_WARNING = "An output with one or more elements"
_CAT_FAMILY = ("_chunk_cat", "cat", "column_stack", "dstack", "hstack", "vstack", "stack")


@dataclass
class Outcome:
    op: str
    check: str
    status: str        # pass | fail | skip
    detail: str = ""


def op_db():
    from torch.testing._internal.common_methods_invocations import op_db as database
    return database


def full_name(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def declared(op, check: str, device_type: str, dtype) -> str | None:
    """The OpInfo's own decorator that exempts ``check`` on this device and dtype, described, or None."""
    test = TEST_OF.get(check)
    for info in op.decorators:
        if getattr(info, "cls_name", None) != "TestCommon" or info.test_name != test:
            continue
        if info.device_type not in (None, device_type) or (info.dtypes is not None and dtype not in info.dtypes):
            continue
        if not info.active_if:
            continue
        kinds = {getattr(d, "__name__", type(d).__name__) for d in info.decorators}
        if kinds & {"expectedFailure", "decorator", "skip"} or any("skip" in k.lower() for k in kinds):
            return f"OpInfo declares {'/'.join(sorted(kinds))} for TestCommon.{test}"
    return None


def _dtype_for(op, device: str = "emu"):
    supported = op.supported_dtypes("privateuse1" if device == "emu" else device) or op.supported_dtypes("cpu")
    if not supported:
        return None
    return torch.float32 if torch.float32 in supported else sorted(supported, key=str)[0]


def _samples(op, dtype, count, requires_grad=False, device="emu"):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(itertools.islice(op.sample_inputs(device, dtype, requires_grad=requires_grad), count))


def _tensors(result):
    if isinstance(result, torch.Tensor):
        return True
    return isinstance(result, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in result)


def _map_out(fn, expected):
    return fn(expected) if isinstance(expected, torch.Tensor) else tuple(fn(t) for t in expected)


def _leaves(out):
    return [out] if isinstance(out, torch.Tensor) else list(out)


def _equal(actual, expected, what):
    for a, e in zip(_leaves(actual), _leaves(expected)):
        torch.testing.assert_close(a.cpu(), e.cpu(), equal_nan=True, msg=lambda m: f"{what}: {m}")


def _poison(t):
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return torch.full_like(t, float("nan"))
    if t.dtype == torch.bool:
        return torch.ones_like(t)
    return torch.full_like(t, torch.iinfo(t.dtype).max)


def _strided(t):
    """A non-contiguous tensor of t's shape and dtype (every other element of a wider buffer)."""
    shape = list(t.shape)
    if not shape:
        return torch.empty((), dtype=t.dtype, device=t.device)
    wide = torch.zeros(shape[:-1] + [shape[-1] * 2], dtype=t.dtype, device=t.device)
    return wide[..., ::2]


def _wrong_shape(t):
    shape = list(t.shape)
    if shape:
        shape[-1] += 1
    else:
        shape = [2]
    return torch.zeros(shape, dtype=t.dtype, device=t.device)


def _out_checks(op, sample, expected, device="emu"):
    """[(check, status, detail)] of the out= rules for one sample."""
    call = lambda **kw: op(sample.input, *sample.args, **sample.kwargs, **kw)  # noqa: E731
    results = []

    def run(check, body):
        try:
            body()
            results.append((check, PASS, ""))
        except Exception as err:  # noqa: BLE001 (the failing check's message is the outcome)
            results.append((check, FAIL, f"{type(err).__name__}: {err}"[:300]))

    if not op.supports_out:
        def refuse():
            try:
                result = call(out=expected)
            except Exception:  # noqa: BLE001 (refusing is what is asked)
                return
            if result is NotImplemented:
                return
            raise AssertionError("an op without out= accepted one")
        run("no_out", refuse)
        return results

    def keeps_layout(transform, check):
        def body():
            out = _map_out(transform, expected)
            strides = [t.stride() for t in _leaves(out)]
            ptrs = [t.data_ptr() for t in _leaves(out)]
            call(out=out)
            _equal(out, expected, check)
            if strides != [t.stride() for t in _leaves(out)]:
                raise AssertionError(f"{check}: strides changed from {strides} to {[t.stride() for t in _leaves(out)]}")
            if ptrs != [t.data_ptr() for t in _leaves(out)]:
                raise AssertionError(f"{check}: the out's storage was replaced")
        run(check, body)

    keeps_layout(_poison, "poisoned")
    keeps_layout(_strided, "strided")

    def empty():
        out = _map_out(lambda t: torch.empty(0, dtype=t.dtype, device=t.device), expected)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call(out=out)
        _equal(out, expected, "empty")
        if any(_RESIZE_WARNING in str(w.message) for w in caught):
            raise AssertionError("resizing a zero-element out warned")
    run("empty", empty)

    def wrong_shape():
        out = _map_out(_wrong_shape, expected)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call(out=out)
        _equal(out, expected, "wrong_shape")
        if any(t.numel() for t in _leaves(_map_out(_wrong_shape, expected))) and \
                not any(_RESIZE_WARNING in str(w.message) for w in caught):
            raise AssertionError("a non-empty out was resized without CPU's warning")
    run("wrong_shape", wrong_shape)

    def wrong_device():
        if device == "cpu":
            return  # PyTorch's test_out does not hold CPU to it (CPU scalars mix with any device)
        out = _map_out(lambda t: torch.zeros(t.shape, dtype=t.dtype), expected)
        if op.is_factory_function and sample.kwargs.get("device") is None:
            call(out=out)
            return
        try:
            call(out=out)
        except RuntimeError:
            return
        raise AssertionError("a CPU out= for emu inputs was accepted")
    run("wrong_device", wrong_device)

    floating = [t for t in _leaves(expected) if t.dtype.is_floating_point or t.dtype.is_complex]
    if floating:
        def unsafe_dtype():
            out = _map_out(lambda t: torch.zeros(t.shape, dtype=torch.long, device=t.device), expected)
            if op.is_factory_function and sample.kwargs.get("dtype") is None:
                call(out=out)
                return
            kind = TypeError if op.name in _CAT_FAMILY else RuntimeError
            try:
                call(out=out)
            except kind:
                return
            raise AssertionError(f"an int64 out for a {floating[0].dtype} result did not raise {kind.__name__}")
        run("unsafe_dtype", unsafe_dtype)
    return results


def _variants(op):
    found = [("method", op.method_variant), ("inplace", op.inplace_variant), ("operator", op.operator_variant)]
    for alias in op.aliases:
        found += [(f"alias {alias.name}", alias.op), (f"alias {alias.name} method", alias.method_variant),
                  (f"alias {alias.name} inplace", alias.inplace_variant)]
    return [(name, fn) for name, fn in found if fn is not None]


def _clone(sample):
    return sample.transform(lambda t: t.detach().clone().requires_grad_(t.requires_grad)
                            if isinstance(t, torch.Tensor) else t)


def _variant_checks(op, sample, dtype):
    results = []
    variants = _variants(op)
    if not variants:
        return results
    expected = op.op(sample.input, *sample.args, **sample.kwargs)
    failures = []
    for name, fn in variants:
        s = _clone(sample)
        inplace = "inplace" in name
        if inplace and (sample.broadcasts_input or not isinstance(s.input, torch.Tensor)
                        or not _tensors(expected) or _leaves(expected)[0].dtype != s.input.dtype):
            continue
        try:
            with torch.no_grad() if inplace else _null():
                inp = s.input.clone() if inplace and isinstance(s.input, torch.Tensor) else s.input
                got = fn(inp, *s.args, **s.kwargs)
            flat_e, _ = tree_flatten(expected)
            flat_g, _ = tree_flatten(got)
            for e, g in zip(flat_e, flat_g):
                if isinstance(e, torch.Tensor):
                    torch.testing.assert_close(g.detach().cpu(), e.detach().cpu(), equal_nan=True)
                elif e != g and not (isinstance(e, float) and e != e):
                    raise AssertionError(f"{g!r} != {e!r}")
        except Exception as err:  # noqa: BLE001
            failures.append(f"{name}: {type(err).__name__}: {err}"[:300])
    results.append(("variants", FAIL if failures else PASS, "; ".join(failures)))
    return results


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _variant_backward(op, dtype, device="emu"):
    """The gradients of the function and of its method/operator/alias variants agree."""
    if not (op.supports_autograd and dtype.is_floating_point):
        return []
    variants = [(n, f) for n, f in _variants(op) if "inplace" not in n]
    if not variants:
        return []
    samples = _samples(op, dtype, 1, requires_grad=True, device=device)
    if not samples:
        return []
    sample = samples[0]
    failures = []

    def grads(fn):
        s = _clone(sample)
        leaves = [t for t in tree_flatten((s.input, s.args, s.kwargs))[0]
                  if isinstance(t, torch.Tensor) and t.requires_grad]
        out = s.output_process_fn_grad(fn(s.input, *s.args, **s.kwargs))
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
        if not outs or not leaves:
            return None
        total = sum((t.float().sum() if not t.is_complex() else t.abs().sum()) for t in outs)
        return torch.autograd.grad(total, leaves, allow_unused=True)

    try:
        expected = grads(op.op)
    except Exception as err:  # noqa: BLE001
        return [("variants_backward", SKIP, f"the function's backward raised: {type(err).__name__}: {err}"[:300])]
    if expected is None:
        return []
    for name, fn in variants:
        try:
            got = grads(fn)
            for g, e in zip(got, expected):
                if e is None or g is None:
                    if (e is None) != (g is None):
                        raise AssertionError("a gradient is missing")
                    continue
                torch.testing.assert_close(g.cpu(), e.cpu(), equal_nan=True)
        except Exception as err:  # noqa: BLE001
            failures.append(f"{name}: {type(err).__name__}: {err}"[:300])
    return [("variants_backward", FAIL if failures else PASS, "; ".join(failures))]


def check_op(op, samples_per_op: int = 1, device: str = "emu") -> list[Outcome]:
    """Every contract check of one OpInfo on ``device`` ("emu", or "cpu" for PyTorch's own
    baseline); a check fails when any of its samples fails."""
    from torch_plugin import device_module as emu
    name = full_name(op)
    dtype = _dtype_for(op, device)
    if dtype is None:
        return [Outcome(name, "all", SKIP, "no dtype on this device")]
    status: dict = {}
    with emu.host_fallback("allow"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            samples = _samples(op, dtype, samples_per_op, device=device)
        except Exception as err:  # noqa: BLE001
            return [Outcome(name, "all", SKIP, f"sample inputs raised: {type(err).__name__}: {err}"[:300])]
        for index, sample in enumerate(samples):
            try:
                expected = op(sample.input, *sample.args, **sample.kwargs)
            except Exception as err:  # noqa: BLE001
                status.setdefault("call", (SKIP, f"the function raised: {type(err).__name__}: {err}"[:300]))
                continue
            if not _tensors(expected):
                continue
            found = _out_checks(op, sample, expected, device) + _variant_checks(op, sample, dtype)
            for check, result, detail in found:
                if check == "no_out" and index > 0:
                    continue  # as PyTorch's test_out: an op without out= is asked on its first sample
                if status.get(check, (PASS,))[0] != FAIL:
                    status[check] = (result, detail)
        for check, result, detail in _variant_backward(op, dtype, device):
            status[check] = (result, detail)
        if device == "emu":
            _recover()
    device_type = "privateuse1" if device == "emu" else device
    outcomes = []
    for check, (result, detail) in status.items():
        exempt = declared(op, check, device_type, dtype) if check in TEST_OF else None
        if exempt is not None:
            result, detail = DECLARED, f"{exempt} ({result} here{': ' + detail[:150] if detail else ''})"
        outcomes.append(Outcome(name, check, result, detail))
    return outcomes


def _recover():
    """A device fault in one op must not fail the next one's checks."""
    from torch_plugin import device_module as emu
    try:
        emu.synchronize()
    except Exception:  # noqa: BLE001
        emu.recover()


def run_suite(names=None, samples_per_op: int = 1, progress=None, device: str = "emu") -> list[Outcome]:
    outcomes = []
    ops = [op for op in op_db() if names is None or full_name(op) in names or op.name in names]
    for i, op in enumerate(ops):
        outcomes.extend(check_op(op, samples_per_op, device))
        if progress:
            progress(i + 1, len(ops), full_name(op))
    return outcomes


def counts(outcomes) -> dict:
    table: dict = {}
    for o in outcomes:
        row = table.setdefault(o.check, {PASS: 0, FAIL: 0, SKIP: 0, DECLARED: 0})
        row[o.status] += 1
    return table


def failures(outcomes) -> dict:
    return {f"{o.op}:{o.check}": o.detail for o in outcomes if o.status == FAIL}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", nargs="*", help="OpInfo names (default: all of op_db)")
    parser.add_argument("--samples", type=int, default=1, help="samples per op (default 1)")
    parser.add_argument("--json", default="out/contracts.json", help="where to write the outcomes")
    parser.add_argument("--device", default="emu", choices=("emu", "cpu"),
                        help="emu, or cpu for PyTorch's own baseline of the same checks")
    args = parser.parse_args(argv)
    outcomes = run_suite(set(args.ops) if args.ops else None, args.samples,
                         progress=lambda i, n, name: print(f"[{i}/{n}] {name}", file=sys.stderr, flush=True),
                         device=args.device)
    import os
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"counts": counts(outcomes), "outcomes": [asdict(o) for o in outcomes]}, f, indent=1)
    for check, row in counts(outcomes).items():
        print(f"{check:18s} pass {row[PASS]:4d}  fail {row[FAIL]:4d}  declared by OpInfo {row[DECLARED]:4d}  "
              f"skip {row[SKIP]:4d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
