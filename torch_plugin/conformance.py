"""PyTorch's own OpInfo database as the judge of the emu device.

For every OpInfo in ``torch.testing._internal.common_methods_invocations.op_db`` that
supports a dtype on CPU, each sample input is run on CPU and on emu, and the results are
compared with ``torch.testing.assert_close`` (the dtype's default tolerances, NaNs equal,
dtypes exact). Three modes:

- ``allow``: host fallback allowed. A sample passes when it matches CPU; an explicit error
  (an op, dtype or layout emu rejects) is an ``error``; a wrong value without an error is a
  ``mismatch``, the worst outcome.
- ``forbid``: host fallback forbidden. This counts what the device really covers: a sample
  that needs the fallback is ``fallback``.
- ``backward``: gradients of the differentiable float samples, emu vs CPU (fallback allowed).

An OpInfo passes a mode when every sample passes. Samples whose CPU call raises are skipped
(there is nothing to compare), and ops with nondeterministic output (random sampling) are
checked for dtype and shape only.

``python -m torch_plugin.conformance`` runs the suite and writes the per-op outcomes and the
pass rates as JSON (see ``--help``); ``tests/torch_plugin/test_opinfo.py`` runs it under
pytest against the expected failures in ``tests/torch_plugin/data/opinfo_expected.json``.
"""
from __future__ import annotations

import argparse
import gc
import itertools
import json
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field

import torch
from torch.utils._pytree import tree_flatten, tree_map

import torch_plugin  # noqa: F401  (registers emu before the OpInfo machinery builds its device list)
from torch_plugin.errors import HostFallbackError

PASS, ERROR, MISMATCH, FALLBACK, SKIP = "pass", "error", "mismatch", "fallback", "skip"
MODES = ("allow", "forbid", "backward")


@dataclass
class Outcome:
    op: str                      # OpInfo name, with its variant ("name.variant")
    dtype: str
    mode: str
    status: str                  # pass | error | mismatch | fallback | skip
    samples: int = 0             # samples compared
    detail: str = ""             # the first failing sample's message
    seconds: float = 0.0
    paths: dict = field(default_factory=dict)   # op_stats() paths seen on emu: {path: {op: count}}


def op_db():
    from torch.testing._internal.common_methods_invocations import op_db as database
    return database


def full_name(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def _to_emu(x):
    if isinstance(x, torch.Tensor):
        y = x.detach().to("emu")
        if x.requires_grad:
            y.requires_grad_(True)
        return y
    return x


def _to_cpu(x):
    return x.detach().cpu() if isinstance(x, torch.Tensor) else x


def _plain(x):
    return tuple(x) if isinstance(x, torch.Size) else x


def _compare(actual, expected, nondeterministic: bool, tol=None) -> None:
    a_leaves, a_spec = tree_flatten(tree_map(_plain, tree_map(_to_cpu, actual)))
    e_leaves, e_spec = tree_flatten(tree_map(_plain, expected))
    if a_spec != e_spec:
        raise AssertionError(f"result structure differs: {a_spec} vs {e_spec}")
    for a, e in zip(a_leaves, e_leaves):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise AssertionError(f"expected a tensor, got {type(a).__name__}")
            if nondeterministic:
                if a.shape != e.shape or a.dtype != e.dtype:
                    raise AssertionError(f"shape/dtype {tuple(a.shape)}/{a.dtype} vs {tuple(e.shape)}/{e.dtype}")
                continue
            torch.testing.assert_close(a, e, equal_nan=True, **_tolerance_for(e, tol))
        elif isinstance(e, float) and e != e:
            if not (isinstance(a, float) and a != a):
                raise AssertionError(f"{a!r} != nan")
        elif not nondeterministic and a != e:
            raise AssertionError(f"{a!r} != {e!r}")


def _on_cpu(x):
    """A CPU copy of an emu tensor that keeps its layout: the whole storage is copied and the same
    view (offset, sizes, strides) taken of it, so ops that look past a view (as_strided) or at
    strides see what they see on emu."""
    if isinstance(x, torch.Tensor) and x.device.type == "emu":
        storage = x.untyped_storage()
        data = torch.empty(0, dtype=torch.uint8, device=x.device).set_(storage)
        host = data.cpu()
        y = torch.empty(0, dtype=x.dtype).set_(host.untyped_storage(), x.storage_offset(), x.shape, x.stride())
        return y.requires_grad_(True) if x.requires_grad else y
    if isinstance(x, torch.device) and x.type == "emu":
        return torch.device("cpu")
    if isinstance(x, str) and (x == "emu" or x.startswith("emu:")):
        return "cpu"
    return x


def _run(fn, sample, on_emu: bool):
    """(result, the inputs that require grad) of ``fn`` on the sample: as made on emu, or a CPU copy
    of it (samples are made on emu, so each tensor sits where the OpInfo puts it, and the CPU
    reference sees exactly the same values)."""
    inp, args, kwargs = sample.input, sample.args, sample.kwargs
    if not on_emu:
        inp, args, kwargs = tree_map(_on_cpu, (inp, args, kwargs))
    leaves = [t for t in tree_flatten((inp, args, kwargs))[0] if isinstance(t, torch.Tensor) and t.requires_grad]
    # The sample's own output map, applied to both results as PyTorch's test_compare_cpu does: it
    # keeps what the op defines (e.g. |eigenvectors|: their signs and phases are free).
    return sample.output_process_fn_grad(fn(inp, *args, **kwargs)), leaves


# Ops whose result sums long rows (matrix products, convolutions, attention, norms, scans,
# decompositions): the device's summation order is not CPU's, so float32 compares at
# rtol = atol = 1e-4 rather than the default 1.3e-6 / 1e-5. Matched by OpInfo name prefix.
LONG_SUM_PREFIXES = ("matmul", "__rmatmul__", "mm", "bmm", "addmm", "addbmm", "baddbmm", "addmv", "mv", "dot",
                     "vdot", "inner", "tensordot", "einsum", "linalg.", "fft.", "nn.functional.conv", "conv",
                     "nn.functional.scaled_dot_product_attention", "nn.functional.multi_head_attention",
                     "nn.functional.linear", "nn.functional.bilinear", "svd", "pca_lowrank", "cdist", "pdist",
                     "cumsum", "cumprod", "cumulative_trapezoid", "trapz", "trapezoid", "var", "std",
                     "nn.functional.layer_norm", "nn.functional.group_norm", "nn.functional.batch_norm",
                     "nn.functional.instance_norm", "nn.functional.rms_norm", "native_layer_norm",
                     "native_batch_norm", "_native_batch_norm_legit", "nn.functional.local_response_norm",
                     "norm", "renorm", "logsumexp", "nn.functional.cosine_similarity", "nn.functional.pairwise_distance",
                     "nn.functional.embedding_bag", "nn.functional.unfold", "nn.functional.fold", "kron", "chain_matmul",
                     "triangular_solve", "cholesky", "lu", "qr", "pinverse", "matrix_exp", "geqrf", "ormqr", "corrcoef",
                     "cov", "nn.functional.softmin", "softmax", "log_softmax", "nn.functional.cross_entropy",
                     "nn.functional.nll_loss", "nn.functional.kl_div", "mean", "sum", "nansum", "prod", "masked.")
LONG_SUM_TOLERANCE = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float64: dict(rtol=1e-7, atol=1e-7)}


# float16/bfloat16: the device computes in float32 and rounds once, where some CPU kernels round
# intermediate results to the reduced dtype; results then differ by a few ulps of the largest
# magnitude involved. Reduced floats compare at rtol = the dtype's default and an absolute
# tolerance of REDUCED_ULPS ulps of the expected result's largest magnitude (at least 1).
REDUCED_ULPS = 4


def tolerance(op_name: str, dtype: torch.dtype) -> dict:
    """The assert_close tolerances used for an OpInfo (empty: the dtype's defaults). For
    float16/bfloat16 the absolute part scales with the expected values (see REDUCED_ULPS)."""
    if dtype in (torch.float16, torch.bfloat16):
        return {"reduced_ulps": REDUCED_ULPS}
    if op_name.startswith(LONG_SUM_PREFIXES):
        return dict(LONG_SUM_TOLERANCE.get(dtype, {}))
    return {}


def _tolerance_for(expected: torch.Tensor, tol: dict | None) -> dict:
    tol = dict(tol or {})
    ulps = tol.pop("reduced_ulps", None)
    if ulps is not None and expected.dtype in (torch.float16, torch.bfloat16) and expected.numel():
        finite = expected[torch.isfinite(expected)]
        scale = max(1.0, float(finite.abs().max())) if finite.numel() else 1.0
        tol = {"rtol": 1.6e-2 if expected.dtype == torch.bfloat16 else 1e-3,
               "atol": ulps * torch.finfo(expected.dtype).eps * scale}
    return tol


def _explicit(err: Exception) -> bool:
    return isinstance(err, (NotImplementedError, RuntimeError, TypeError, ValueError, IndexError))


def _make_samples(op, dtype, mode, max_samples):
    import torch_plugin.device_module as emu
    torch.manual_seed(0)
    with emu.host_fallback("allow"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # Only the samples that will run are made (some OpInfos make hundreds of MiB of them).
        return list(itertools.islice(op.sample_inputs("emu", dtype, requires_grad=(mode == "backward")),
                                     max_samples))


def check_op(op, dtype: torch.dtype, mode: str, max_samples: int | None = None) -> Outcome:
    """Runs one OpInfo's samples of ``dtype`` in ``mode`` and returns the outcome."""
    from torch_plugin.ops import registry
    name = full_name(op)
    start = time.perf_counter()
    outcome = Outcome(name, str(dtype).replace("torch.", ""), mode, PASS)
    if mode == "backward" and not (op.supports_autograd and dtype.is_floating_point):
        outcome.status = SKIP
        outcome.detail = "the OpInfo has no autograd support in this dtype"
        return outcome
    import torch_plugin.device_module as emu
    try:
        samples = _make_samples(op, dtype, mode, max_samples)
    except torch.OutOfMemoryError:  # earlier ops' tensors may sit in reference cycles: collect, retry once
        gc.collect()
        emu.empty_cache()
        try:
            samples = _make_samples(op, dtype, mode, max_samples)
        except Exception as err:
            outcome.status, outcome.detail = ERROR, f"making the samples on emu: {type(err).__name__}: {err}"[:400]
            return outcome
    except Exception as err:  # the OpInfo cannot make its samples on emu
        _recover_if_faulted(err)
        outcome.status = ERROR if _explicit(err) else MISMATCH
        outcome.detail = f"making the samples on emu: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:400]
        return outcome
    nondeterministic = bool(getattr(op, "has_nondeterministic_output", False)) or (
        bool(samples) and _is_random(op, samples[0]))
    registry.reset_op_stats()
    policy = "forbid" if mode == "forbid" else "allow"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for index, sample in enumerate(samples):
            verdict = _check_sample(op, sample, mode, policy, nondeterministic, tolerance(name, dtype))
            if verdict is None:
                continue
            status, detail = verdict
            if status == PASS:
                outcome.samples += 1
                continue
            outcome.status = status
            outcome.detail = f"sample {index}: {detail}"[:400]
            break
    if outcome.samples == 0 and outcome.status == PASS:
        outcome.status = SKIP
        outcome.detail = outcome.detail or "no sample runs on CPU"
    outcome.paths = {path: counts for path, counts in registry.op_stats().items() if counts}
    outcome.seconds = round(time.perf_counter() - start, 3)
    return outcome


def _check_sample(op, sample, mode, policy, nondeterministic, tol=None):
    """None (skipped: CPU raised, or nothing to differentiate) or (status, detail)."""
    import torch_plugin.device_module as emu
    try:
        torch.manual_seed(0)
        expected, leaves = _run(op, sample, on_emu=False)
        if mode == "backward":
            expected = _grads(expected, leaves)
            if expected is None:
                return None
    except Exception:
        return None
    try:
        try:
            actual = _emu_result(op, sample, mode, policy)
        except torch.OutOfMemoryError:  # earlier ops' tensors may sit in reference cycles: collect, retry once
            gc.collect()
            emu.empty_cache()
            actual = _emu_result(op, sample, mode, policy)
    except HostFallbackError as err:
        return FALLBACK, str(err).splitlines()[0]
    except Exception as err:
        _recover_if_faulted(err)
        message = str(err).splitlines()[0] if str(err) else ""
        return (ERROR if _explicit(err) else MISMATCH), f"{type(err).__name__}: {message}"
    if mode != "backward":
        actual, expected = _tie_free(op, sample, actual, expected)
    try:
        _compare(actual, expected, nondeterministic, tol)
    except AssertionError as err:
        return MISMATCH, " ".join(str(err).split())[:300]
    except Exception as err:  # the result cannot be read back (e.g. a dtype emu does not store)
        _recover_if_faulted(err)
        return ERROR, f"reading the result: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return PASS, ""


# Ops whose index output leaves the order of equal keys unspecified unless stable=True (CPU's
# sort is not stable for every dtype; the device's is): their indices are compared by the values
# they select along the sorted dim, which is what the op defines. (op name, where dim is in args)
_UNSPECIFIED_TIE_ORDER = {"sort": 0, "argsort": 0, "topk": 1}


def _tie_free(op, sample, actual, expected):
    """(actual, expected) with the index result of an unstable sort/argsort/topk replaced by the
    input values it selects; other ops' results unchanged."""
    where = _UNSPECIFIED_TIE_ORDER.get(op.name)
    if where is None or sample.kwargs.get("stable", False) or not isinstance(sample.input, torch.Tensor):
        return actual, expected
    dim = sample.kwargs.get("dim", sample.args[where] if len(sample.args) > where else -1)
    source = _on_cpu(sample.input).detach()
    if source.dim() == 0:
        return actual, expected

    def by_value(result):
        # sort/topk return (values, indices); argsort returns the indices alone
        if isinstance(result, (tuple, list)) and len(result) == 2:
            return type(result)((result[0], source.gather(dim, _to_cpu(result[1]))))
        if isinstance(result, torch.Tensor):
            return source.gather(dim, _to_cpu(result))
        return result
    return by_value(actual), by_value(expected)


def _recover_if_faulted(err: Exception) -> None:
    """A device fault is sticky for the context: recover, or every later sample would fail too."""
    if getattr(err, "scope", None) in ("context", "device"):
        import torch_plugin.device_module as emu
        emu.recover()


def _is_random(op, sample) -> bool:
    """An op whose CPU result depends on the RNG (random sampling): compared by shape and dtype.
    OpInfo wraps most of them in ``wrapper_set_seed`` (which reseeds: the emu generator is not
    CPU's, so the values differ by design); others are found by running CPU with two seeds."""
    code = getattr(op.op, "__code__", None)
    if code is not None and "wrapper_set_seed" in code.co_names:
        return True
    try:
        torch.manual_seed(0)
        first, _ = _run(op, sample, on_emu=False)
        torch.manual_seed(1)
        second, _ = _run(op, sample, on_emu=False)
        _compare(second, first, False)
    except AssertionError:
        return True
    except Exception:
        return False
    return False


def _emu_result(op, sample, mode, policy):
    import torch_plugin.device_module as emu
    with emu.host_fallback(policy):
        torch.manual_seed(0)
        actual, leaves = _run(op, sample, on_emu=True)
        return _grads(actual, leaves) if mode == "backward" else actual


def _grads(result, leaves):
    """Gradients of ``leaves`` for a fixed random cotangent on every differentiable output."""
    outputs = [t for t in tree_flatten(result)[0]
               if isinstance(t, torch.Tensor) and t.requires_grad and t.dtype.is_floating_point]
    if not outputs or not leaves:
        return None
    generator = torch.Generator().manual_seed(1)
    cotangents = [torch.randn(o.shape, generator=generator, dtype=o.dtype).to(o.device) for o in outputs]
    grads = torch.autograd.grad(outputs, leaves, cotangents, allow_unused=True)
    return [g if g is not None else torch.zeros(()) for g in grads]


def run_suite(dtypes=(torch.float32,), modes=MODES, max_samples=None, names=None, progress=None) -> list[Outcome]:
    outcomes = []
    ops = [op for op in op_db() if names is None or full_name(op) in names or op.name in names]
    for op in ops:
        for dtype in dtypes:
            if not op.supports_dtype(dtype, "cpu"):
                continue
            for mode in modes:
                outcome = check_op(op, dtype, mode, max_samples)
                outcomes.append(outcome)
                if progress:
                    progress(outcome)
    return outcomes


def pass_rates(outcomes) -> dict:
    """{dtype: {mode: {"ops": n, "pass": n, "rate": fraction, status: n...}}} over judged ops."""
    rates: dict = {}
    for o in outcomes:
        if o.status == SKIP:
            continue
        entry = rates.setdefault(o.dtype, {}).setdefault(o.mode, {"ops": 0, PASS: 0})
        entry["ops"] += 1
        entry[o.status] = entry.get(o.status, 0) + 1
    for modes in rates.values():
        for entry in modes.values():
            entry["rate"] = round(entry[PASS] / entry["ops"], 4) if entry["ops"] else 0.0
    return rates


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Run PyTorch's OpInfo samples on emu and on CPU.")
    parser.add_argument("--dtypes", default="float32", help="comma-separated, e.g. float32,bfloat16,float16")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--max-samples", type=int, default=None, help="first N samples of each OpInfo")
    parser.add_argument("--ops", default=None, help="comma-separated OpInfo names (default: all)")
    parser.add_argument("--out", default=None, help="write the outcomes and pass rates as JSON here")
    parser.add_argument("--write-expected", default=None, metavar="PATH",
                        help="write the expected failures (tests/torch_plugin/data/opinfo_expected.json) from this run")
    args = parser.parse_args(argv)
    dtypes = [getattr(torch, d) for d in args.dtypes.split(",")]
    names = set(args.ops.split(",")) if args.ops else None

    def progress(o):
        if o.status not in (PASS, SKIP):
            print(f"{o.status:9s} {o.op:40s} {o.dtype:9s} {o.mode:8s} {o.detail[:120]}", file=sys.stderr)
    start = time.perf_counter()
    outcomes = run_suite(dtypes, args.modes.split(","), args.max_samples, names, progress)
    rates = pass_rates(outcomes)
    summary = {"torch": torch.__version__, "seconds": round(time.perf_counter() - start, 1),
               "max_samples": args.max_samples, "pass_rates": rates, "outcomes": [asdict(o) for o in outcomes]}
    for dtype, modes in rates.items():
        for mode, entry in modes.items():
            print(f"{dtype:9s} {mode:9s} {entry[PASS]:4d}/{entry['ops']:4d} OpInfos pass every sample "
                  f"({100 * entry['rate']:.1f}%)  " + ", ".join(f"{k} {v}" for k, v in sorted(entry.items())
                                                             if k not in ("ops", PASS, "rate")))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1, sort_keys=True)
    if args.write_expected:
        # Replace the (dtype, mode) runs this invocation made; keep the file's others.
        try:
            with open(args.write_expected) as f:
                expected = json.load(f)
        except FileNotFoundError:
            expected = {}
        for dtype in {o.dtype for o in outcomes}:
            for mode in {o.mode for o in outcomes if o.dtype == dtype}:
                expected.setdefault(dtype, {}).pop(mode, None)
        for dtype, modes in expected_failures(outcomes).items():
            expected.setdefault(dtype, {}).update(modes)
        with open(args.write_expected, "w") as f:
            json.dump(expected, f, indent=1, sort_keys=True)
            f.write("\n")
    return 0


def expected_failures(outcomes) -> dict:
    """{dtype: {mode: {op: {"status", "reason"}}}} for every outcome that is not a pass or a skip."""
    expected: dict = {}
    for o in outcomes:
        if o.status in (PASS, SKIP):
            continue
        expected.setdefault(o.dtype, {}).setdefault(o.mode, {})[o.op] = {"status": o.status, "reason": o.detail}
    return expected


if __name__ == "__main__":
    sys.exit(main())
