"""PyTorch's OpInfo database as the judge (torch_plugin/conformance.py).

One test per (OpInfo, dtype, mode): float32 in the modes allow (host fallback allowed: every
sample must match CPU or fail with an explicit error), forbid (what the device covers
itself) and backward (gradients vs CPU); bfloat16 and float16 in allow and forbid. An
OpInfo passes when every sample of it passes.

The expected failures are data: tests/torch_plugin/data/opinfo_expected.json maps each
dtype and mode to the OpInfos that do not pass yet, with the outcome and the reason (the
first failing sample's message). A test fails when an OpInfo that should pass does not,
when an expected failure changes kind (a fallback that becomes a mismatch), and when an
expected failure passes (take it off the list): so the pass rate is visible and cannot
silently shrink. Regenerate the file from runs with the CI's sample count:

    python -m torch_plugin.conformance --max-samples 4 --write-expected tests/torch_plugin/data/opinfo_expected.json
    python -m torch_plugin.conformance --max-samples 4 --dtypes bfloat16,float16 --modes allow,forbid \
        --write-expected tests/torch_plugin/data/opinfo_expected.json

(each replaces the dtypes and modes it ran). The pass rates are recorded in the README and in
docs/support_matrix.md.

Time: CI runs the first ``EMU_OPINFO_SAMPLES`` samples of each OpInfo (default 4; the
sample order is the OpInfo's own, so the choice is deterministic). Set it to 0 for every
sample, as the recorded pass rates are measured.
"""
import json
import os
from pathlib import Path

import pytest
import torch

from torch_plugin import conformance

DATA = Path(__file__).parent / "data" / "opinfo_expected.json"
EXPECTED = json.loads(DATA.read_text())
SAMPLES = int(os.environ.get("EMU_OPINFO_SAMPLES", "4")) or None
RUNS = [(torch.float32, mode) for mode in conformance.MODES] + \
       [(dtype, mode) for dtype in (torch.bfloat16, torch.float16) for mode in ("allow", "forbid")]


def _cases():
    for op in conformance.op_db():
        for dtype, mode in RUNS:
            if op.supports_dtype(dtype, "cpu") and (mode != "backward" or op.supports_autograd):
                yield pytest.param(op, dtype, mode,
                                   id=f"{conformance.full_name(op)}-{str(dtype).replace('torch.', '')}-{mode}")


@pytest.mark.parametrize("op, dtype, mode", list(_cases()))
def test_opinfo(op, dtype, mode):
    outcome = conformance.check_op(op, dtype, mode, SAMPLES)
    expected = EXPECTED.get(outcome.dtype, {}).get(mode, {}).get(outcome.op)
    if outcome.status == conformance.SKIP:
        pytest.skip(f"nothing to compare: {outcome.detail or 'no sample of this dtype runs on CPU'}")
    if expected is None:
        assert outcome.status == conformance.PASS, f"{outcome.status}: {outcome.detail}"
    else:
        assert outcome.status != conformance.PASS, (
            f"now passes; take {outcome.op} off {DATA.name}[{outcome.dtype}][{mode}] (was: {expected['reason']})")
        assert outcome.status == expected["status"], (
            f"expected {expected['status']} ({expected['reason']}), got {outcome.status}: {outcome.detail}")


def test_expected_failures_name_a_reason():
    for dtype, modes in EXPECTED.items():
        for mode, entries in modes.items():
            for name, entry in entries.items():
                assert entry["status"] in (conformance.ERROR, conformance.MISMATCH, conformance.FALLBACK), name
                assert entry["reason"].strip(), f"{dtype}/{mode}/{name} has no reason"
