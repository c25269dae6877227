"""Fixtures of the compiled-execution, export and custom-operator tests."""
import pytest
import torch

import torch_plugin  # noqa: F401
from torch_plugin.compile import reset_compile_stats


@pytest.fixture
def fresh_dynamo():
    """A clean dynamo cache and compile counters for the test."""
    torch._dynamo.reset()
    reset_compile_stats()
    yield
    torch._dynamo.reset()
