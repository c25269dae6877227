import pytest

from driver import Driver
from emulator.config import load_preset
from runtime.host_clock import HostClock


@pytest.fixture
def tiny():
    return load_preset("tiny")


@pytest.fixture
def clock():
    return HostClock(api_call_ns=0.0)


@pytest.fixture
def drv(tiny, clock):
    return Driver(tiny, host_clock=clock)
