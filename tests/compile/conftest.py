"""Fixtures of the compiled-execution, export and custom-operator tests."""
import gc

import pytest
import torch

import torch_plugin  # noqa: F401
from torch_plugin.compile import reset_compile_stats


@pytest.fixture
def fresh_dynamo():
    """A clean dynamo cache and compile counters for the test. Afterwards the compiled graphs go,
    and so do the reference cycles among them (FX modules, guards, saved tensors): collected now,
    so the device memory they hold is free for the tests that follow (Python's collector does not
    see device memory, so it would run too late)."""
    torch._dynamo.reset()
    reset_compile_stats()
    yield
    torch._dynamo.reset()
    gc.collect()
