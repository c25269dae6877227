"""Adversarial scalar arguments (issue 18): no valid or invalid argument poisons the device.

For every OpInfo of PyTorch's database whose float32 sample runs on the device without the host
fallback, the scalar arguments of its first sample (ints, floats, bools, lists of ints, positional
or keyword) are replaced, one at a time, by adversarial values (negative, zero, huge, NaN, inf,
empty or too-long lists), chosen by a generator seeded with the op's name, so every run draws the
same cases. Each case runs on CPU and on emu, then asserts:

(a) the device stays usable: a small op, ``torch.emu.synchronize()`` and ``.cpu()`` work, and
    the device's health is unchanged (no reset needed, firmware alive);
(b) where CPU raises, emu raises, before the launch;
(c) where CPU returns values, emu returns equal values or raises a clear error before the launch.

A case breaking (b) or (c) in a way not yet fixed is data: tests/torch_plugin/data/
argument_fuzz_expected.json maps its id to the outcome and the reason. A case must have exactly
its listed outcome (an entry that now passes must be taken off); (a) has no exceptions.
Regenerate the list from a run (then write each reason by hand):

    EMU_FUZZ_RECORD=/tmp/fuzz.tsv python -m pytest -q tests/torch_plugin/test_argument_fuzz.py

Outcomes: ``async`` (emu raised only at the synchronisation: the device rejected the command,
so the op layer lacks the check), ``emu_returned`` (CPU raised, emu returned), ``mismatch``
(values differ), ``device_fault`` (a context/device-scope error: never expected).
"""
import json
import math
import os
import random
import re
import warnings
import zlib
from pathlib import Path

import pytest
import torch
from torch.utils._pytree import tree_map

from torch_plugin import conformance
from torch_plugin.errors import HostFallbackError

DATA = Path(__file__).parent / "data" / "argument_fuzz_expected.json"
EXPECTED = json.loads(DATA.read_text())["cases"] if DATA.exists() else {}
SLOTS_PER_OP = 3      # scalar arguments replaced per OpInfo (the seeded generator picks them)
VALUES_PER_SLOT = 2   # adversarial values tried per argument
RECORD = os.environ.get("EMU_FUZZ_RECORD")   # a file: every finding is appended, none fails

HUGE = 2 ** 40        # any size made of it fails to allocate at once, on CPU too
INT_VALUES = (-1, 0, -3, HUGE, -HUGE, 3)
FLOAT_VALUES = (math.nan, math.inf, -math.inf, -1.0, 0.0, 1e300)
PASS, ASYNC, EMU_RETURNED, MISMATCH, DEVICE_FAULT = "pass", "async", "emu_returned", "mismatch", "device_fault"

# OpInfos not fuzzed, with the reason: what they take is not an argument of the op itself.
NOT_FUZZED = {
    "empty": "uninitialised values: nothing to compare",
    "empty_like": "uninitialised values: nothing to compare",
    "empty_strided": "uninitialised values: nothing to compare",
    "new_empty": "uninitialised values: nothing to compare",
    "new_empty_strided": "uninitialised values: nothing to compare",
}


def _int_list(v) -> bool:
    return isinstance(v, (list, tuple, torch.Size)) and len(v) > 0 and all(type(x) is int for x in v)


def _adversarial(value, rng) -> list:
    if type(value) is bool:
        return [not value]
    if type(value) is int:
        return rng.sample(INT_VALUES, VALUES_PER_SLOT)
    if type(value) is float:
        return rng.sample(FLOAT_VALUES, VALUES_PER_SLOT)
    if _int_list(value):
        n = len(value)
        options = [[], [-1] * n, [0] * n, [HUGE] * n, [*value, 1], [-HUGE] * n]
        return [type(value)(v) if not isinstance(value, torch.Size) else tuple(v)
                for v in rng.sample(options, VALUES_PER_SLOT)]
    return []


def _slots(sample) -> list:
    """("arg", i) / ("kw", name) of the sample's scalar arguments."""
    slots = [("arg", i) for i, a in enumerate(sample.args) if _adversarial(a, random.Random(0))]
    slots += [("kw", k) for k, v in sorted(sample.kwargs.items()) if _adversarial(v, random.Random(0))]
    return slots


def _replaced(sample_parts, slot, value):
    inp, args, kwargs = sample_parts
    args, kwargs = list(args), dict(kwargs)
    if slot[0] == "arg":
        args[slot[1]] = value
    else:
        kwargs[slot[1]] = value
    return inp, tuple(args), kwargs


def _clone(x):
    return x.clone() if isinstance(x, torch.Tensor) else x


def _to_emu(x):
    return x.detach().to("emu") if isinstance(x, torch.Tensor) else x


def _scope(err):
    return getattr(err, "scope", None) or getattr(err.__cause__, "scope", None)


def _health():
    h = torch.emu.get_device_health()
    return {k: h.get(k) for k in ("needs_reset", "firmware_alive")}


def _device_is_usable():
    """(a): a small op, a synchronisation and a read all work."""
    x = torch.arange(4.0, device="emu") + 1
    torch.emu.synchronize()
    assert x.cpu().tolist() == [1.0, 2.0, 3.0, 4.0]


def _run_case(op, parts, nondeterministic, tol):
    """The outcome of one case (PASS or a finding) and its detail."""
    cpu_parts = tree_map(_clone, parts)
    emu_parts = tree_map(_to_emu, parts)
    try:
        torch.manual_seed(0)
        expected = op(cpu_parts[0], *cpu_parts[1], **cpu_parts[2])
        cpu_error = None
    except Exception as err:  # noqa: BLE001 (any CPU error: emu must raise too)
        expected, cpu_error = None, err
    try:
        torch.manual_seed(0)
        with torch.emu.host_fallback("allow"):
            actual = op(emu_parts[0], *emu_parts[1], **emu_parts[2])
    except Exception as err:  # noqa: BLE001 raised before the launch: fine either way, unless a fault
        if _scope(err) in ("context", "device"):
            return DEVICE_FAULT, f"{type(err).__name__}: {err}"
        if cpu_error is None and not conformance._explicit(err):
            return MISMATCH, f"CPU returned, emu raised a {type(err).__name__}: {err}"
        return PASS, ""
    try:
        torch.emu.synchronize()
    except Exception as err:  # noqa: BLE001 the device rejected it: the op layer lacks the check
        if _scope(err) in ("context", "device"):
            return DEVICE_FAULT, f"{type(err).__name__}: {err}"
        first = str(err).split(": ")[-1][:200]
        return ASYNC, f"{'CPU raised' if cpu_error is not None else 'CPU returned'}; emu at the sync: {first}"
    if cpu_error is not None:
        return EMU_RETURNED, f"CPU raised {type(cpu_error).__name__}: {str(cpu_error).splitlines()[0][:200]}"
    try:
        conformance._compare(actual, expected, nondeterministic, tol)
    except AssertionError as err:
        return MISMATCH, " ".join(str(err).split())[:300]
    except Exception as err:  # noqa: BLE001 the result cannot be read back
        if _scope(err) in ("context", "device"):
            return DEVICE_FAULT, f"{type(err).__name__}: {err}"
        return MISMATCH, f"reading the result: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
    return PASS, ""


def _device_ops():
    """The OpInfos with float32 samples on CPU (the test skips those that do not run on the device)."""
    for op in conformance.op_db():
        name = conformance.full_name(op)
        if name in NOT_FUZZED or not op.supports_dtype(torch.float32, "cpu"):
            continue
        yield op


_CASE_IDS = sorted(conformance.full_name(op) for op in _device_ops())


@pytest.mark.parametrize("name", _CASE_IDS)
def test_adversarial_scalars(name):
    op = next(o for o in conformance.op_db() if conformance.full_name(o) == name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            samples = conformance._make_samples(op, torch.float32, "allow", 1)
        except Exception as err:  # noqa: BLE001
            pytest.skip(f"the OpInfo cannot make its float32 sample on emu ({type(err).__name__})")
        if not samples:
            pytest.skip("the OpInfo has no float32 sample")
        sample = samples[0]
        slots = _slots(sample)
        if not slots:
            pytest.skip("the first sample has no scalar argument")
        try:
            parts = tree_map(conformance._on_cpu, (sample.input, sample.args, sample.kwargs))
        except NotImplementedError as err:  # a sparse sample: the device rejects the layout by name
            pytest.skip(f"the sample cannot be copied to the host with its layout: {err}")
        nondeterministic = bool(getattr(op, "has_nondeterministic_output", False)) or conformance._is_random(op, sample)
        del samples, sample
        try:
            with torch.emu.host_fallback("forbid"):
                emu_parts = tree_map(_to_emu, parts)
                op(emu_parts[0], *emu_parts[1], **emu_parts[2])
                torch.emu.synchronize()
        except HostFallbackError:
            pytest.skip("the unmodified sample needs the host fallback: no device code to fuzz")
        except Exception as err:  # noqa: BLE001
            torch.emu.synchronize()
            pytest.skip(f"the unmodified sample fails on emu (test_opinfo's business): {type(err).__name__}")
        tol = conformance.tolerance(name, torch.float32)
        rng = random.Random(zlib.crc32(name.encode()))
        health = _health()
        problems = []
        for slot in sorted(rng.sample(slots, min(SLOTS_PER_OP, len(slots)))):
            original = parts[1][slot[1]] if slot[0] == "arg" else parts[2][slot[1]]
            for value in _adversarial(original, rng):
                case = f"{name}/{slot[0]}:{slot[1]}={value!r}"
                outcome, detail = _run_case(op, _replaced(parts, slot, value), nondeterministic, tol)
                try:
                    _device_is_usable()
                except Exception as err:  # noqa: BLE001
                    raise AssertionError(f"{case}: the device is not usable afterwards: {err}") from err
                assert _health() == health, f"{case}: the device's health changed: {_health()} vs {health}"
                want = EXPECTED.get(case, {}).get("outcome", PASS)
                if RECORD and outcome != PASS:
                    with open(RECORD, "a") as f:
                        f.write(f"{case}\t{outcome}\t{' '.join(detail.split())}\n")
                    continue
                if outcome != want:
                    problems.append(f"{case}: expected {want}, got {outcome} {detail}")
    assert not problems, "\n".join(problems)


def test_expected_findings_name_a_reason():
    for case, entry in EXPECTED.items():
        assert entry["outcome"] in (ASYNC, EMU_RETURNED, MISMATCH), case
        assert entry["reason"].strip(), f"{case} has no reason"


# The op-layer checks the fuzz found missing, as plain regressions: CPU's error type and message,
# raised before anything is launched (and round's huge decimals, which hung the host).
FIXED = [
    ("glu_dim", lambda x: torch.nn.functional.glu(x, 3)),
    ("renorm_dim", lambda x: torch.renorm(x, 2, -HUGE, 1.0)),
    ("hardtanh_max", lambda x: torch.nn.functional.hardtanh(x, max_val=1e300)),
    ("threshold", lambda x: torch.nn.functional.threshold(x, 1e300, 0.0)),
    ("softplus_threshold", lambda x: torch.nn.functional.softplus(x, threshold=1e300)),
    ("softshrink_lambd", lambda x: torch.nn.functional.softshrink(x, 1e300)),
]


@pytest.mark.parametrize("name,fn", FIXED, ids=[f[0] for f in FIXED])
def test_fixed_checks_raise_what_cpu_raises(name, fn):
    x = torch.arange(12.0).reshape(3, 4)
    with pytest.raises(Exception) as cpu:
        fn(x)
    with pytest.raises(type(cpu.value), match=re.escape(str(cpu.value).split("(")[0].strip())):
        fn(x.to("emu"))
    _device_is_usable()


def test_round_with_huge_decimals_is_nan_like_cpu():
    x = torch.tensor([1.25, -5.5, 0.0, 100.0])
    for decimals in (HUGE, -HUGE, 400):
        torch.testing.assert_close(torch.round(x.to("emu"), decimals=decimals).cpu(),
                                   torch.round(x, decimals=decimals), equal_nan=True)
