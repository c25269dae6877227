import pytest

import runtime


@pytest.fixture
def rt():
    """A private runtime on the tiny preset (never the process-global one)."""
    return runtime.Runtime(settings=runtime.Settings(preset="tiny"))


@pytest.fixture
def rt_blocking():
    return runtime.Runtime(settings=runtime.Settings(preset="tiny", launch_blocking=True))
