"""Reduced-precision (float16 / bfloat16) checks that hold on any x86-64 host.

CPU's own float16/bfloat16 kernels (ATen's vectorised loops, oneDNN, MKL) round differently on
AVX2, AVX-512 and AMX, so a check against CPU's bits in the reduced dtype holds on one machine
only. These checks compare with a float64 reference instead, computed on CPU from the same,
already-rounded inputs, and a bound derived from the dtype (docs/numerics.md):

    |got - ref64| <= ulps * eps(dtype) * max(|ref64|, tiny(dtype))      one rounding of the output
                     + terms * eps(acc) * scale                          the accumulation
    or |got - ref64| <= cpu_factor * |cpu - ref64|                       no worse than CPU itself

element by element, where eps is the spacing of the dtype at 1 (so eps * |x| is at least one unit
in the last place at x), ``acc`` the dtype the op accumulates in (float32: the device's contract
for float16/bfloat16 matrix and reduction work), ``terms`` the number of terms summed into one
output (K of a GEMM, C_in * kernel size of a convolution) and ``scale`` the same op on the
magnitudes of the operands (the sum of |terms|: the classical bound of a floating-point dot
product), or |ref64| for ops without a cancelling sum. A result of the wrong value (a missing
term, a wrong index, a second rounding through the reduced dtype) is many such units off and
fails; tests/torch_plugin/test_precision.py checks that the bound catches perturbed results.
"""
from __future__ import annotations

import torch

REDUCED = (torch.float16, torch.bfloat16)


def map_tensors(fn, value):
    """fn on every tensor of value (a tensor, or lists/tuples of them, nested); others unchanged."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(map_tensors(fn, v) for v in value)
    return value


def as_float64(value):
    """Floating tensors (in lists/tuples too) as float64 CPU copies; others unchanged."""
    return map_tensors(lambda t: t.detach().cpu().double() if t.is_floating_point() else t, value)


def magnitudes(value):
    """|x| of every floating tensor, as float64 (for the ``scale`` of a bilinear op)."""
    return map_tensors(lambda t: t.detach().cpu().double().abs() if t.is_floating_point() else t, value)


def reference64(fn, *args, **kwargs):
    """fn on float64 CPU copies of the (already rounded) floating arguments."""
    return fn(*as_float64(list(args)), **{k: as_float64(v) for k, v in kwargs.items()})


def bound(ref64, dtype, *, ulps=1.0, terms=0, scale=None, acc=torch.float32, atol=0.0):
    """The allowed |got - ref64| per element (see the module docstring)."""
    ref64 = ref64.double()
    finfo = torch.finfo(dtype)
    allowed = ulps * finfo.eps * ref64.abs().clamp_min(finfo.tiny)
    if terms:
        allowed = allowed + terms * torch.finfo(acc).eps * (ref64.abs() if scale is None else scale.double())
    return allowed + atol


def assert_reduced_close(got, ref64, dtype=None, *, cpu=None, cpu_factor=2.0, ulps=1.0, terms=0, scale=None,
                         acc=torch.float32, atol=0.0, what=""):
    """got (a float16/bfloat16 result, any device; a float32 one is held to the same rule) against
    the float64 reference ``ref64``.

    ``cpu``: CPU's own result in the reduced dtype, if any: an element no further from ref64
    than ``cpu_factor`` times CPU's own error passes too. Non-finite elements must match ref64's
    class (NaN where it is NaN, the same infinity)."""
    dtype = dtype or got.dtype
    assert got.dtype == dtype, f"{what}: dtype {got.dtype}, expected {dtype}"
    got64 = got.detach().cpu().double()
    ref64 = ref64.detach().cpu().double()
    assert got64.shape == ref64.shape, f"{what}: shape {tuple(got64.shape)}, expected {tuple(ref64.shape)}"
    # The reference rounded to the dtype decides where the output must be non-finite.
    ref_rounded = ref64.to(dtype).double()
    finite = torch.isfinite(ref_rounded)
    same_class = torch.where(finite, torch.isfinite(got64),
                             (torch.isnan(got64) & torch.isnan(ref_rounded)) | (got64 == ref_rounded))
    assert bool(same_class.all()), (f"{what}: non-finite mismatch at {_first(~same_class)}: got "
                                    f"{got64[~same_class][:4].tolist()}, reference {ref_rounded[~same_class][:4].tolist()}")
    err = torch.where(finite, (got64 - ref64).abs(), torch.zeros_like(got64))
    allowed = bound(ref64, dtype, ulps=ulps, terms=terms, scale=scale, acc=acc, atol=atol)
    if cpu is not None:
        cpu_err = torch.where(finite, (cpu.detach().cpu().double() - ref64).abs(), torch.zeros_like(got64))
        allowed = torch.maximum(allowed, cpu_factor * cpu_err)
    bad = err > allowed
    if bool(bad.any()):
        ratio = torch.where(bad, err / allowed.clamp_min(1e-300), torch.zeros_like(err))
        i = _first(ratio == ratio.max())
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.numel()} {dtype} elements outside the float64-reference "
            f"bound (ulps={ulps}, terms={terms}, acc={acc}); worst at {i}: got {got64[i].item()!r}, "
            f"reference {ref64[i].item()!r}, |error| {err[i].item():.3g} > allowed {allowed[i].item():.3g}"
            + (f" (CPU's own: {cpu.detach().cpu().double()[i].item()!r})" if cpu is not None else ""))


def _first(mask):
    index = torch.nonzero(mask)[0]
    return tuple(int(v) for v in index)


def assert_no_worse_than_cpu(got, cpu, ref64, *, factor=2.0, ulps=1.0, what=""):
    """For chains of ops that round between steps (a model under autocast, attention): got may be no
    further from the float64 reference than ``factor`` times CPU's own reduced-precision result is,
    in the largest and in the root-mean-square error, plus ``ulps`` units of the dtype at the
    reference's scale (CPU may happen to be exact)."""
    dtype = got.dtype
    assert cpu.dtype == dtype, f"{what}: dtype {got.dtype}, CPU's {cpu.dtype}"
    got64, cpu64, ref64 = (t.detach().cpu().double() for t in (got, cpu, ref64))
    assert got64.shape == ref64.shape == cpu64.shape, f"{what}: shapes {got64.shape}, {cpu64.shape}, {ref64.shape}"
    assert bool(torch.isfinite(got64).all() == torch.isfinite(cpu64).all()), f"{what}: non-finite values differ"
    floor = ulps * torch.finfo(dtype).eps * float(ref64.abs().max())
    for name, measure in (("largest", lambda e: float(e.abs().max())), ("rms", lambda e: float(e.pow(2).mean().sqrt()))):
        mine, theirs = measure(got64 - ref64), measure(cpu64 - ref64)
        assert mine <= factor * theirs + floor, (
            f"{what}: {name} error against the float64 reference {mine:.3g} > {factor} x CPU's own {theirs:.3g} "
            f"+ {floor:.3g} ({dtype})")
