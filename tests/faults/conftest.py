"""Shared helpers of the fault-injection tests (docs/faults.md).

Most tests run on a private runtime (``rt``: its own emulated system on the tiny preset), so a
device-scope fault never touches the process-wide device the torch tests share. Torch-level
tests use emu:1 of the process runtime and reset it afterwards (``emu1`` fixture).
"""
import pytest

import runtime


@pytest.fixture
def rt():
    return runtime.Runtime(settings=runtime.Settings(preset="tiny"))
