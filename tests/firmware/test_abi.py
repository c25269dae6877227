"""Firmware ABI (firmware/abi.py): versions, unique codes, declarative only."""
import ast
import inspect
from enum import IntEnum

import pytest

from driver import SUPPORTED_FIRMWARE_MAJOR
from firmware import FirmwareImage, abi


def test_version_tuple():
    v = abi.FIRMWARE_VERSION
    assert isinstance(v, tuple) and len(v) == 3
    assert all(isinstance(x, int) and x >= 0 for x in v)
    assert v[:2] == (abi.ABI_MAJOR, abi.ABI_MINOR)


def test_driver_speaks_this_abi_major():
    assert SUPPORTED_FIRMWARE_MAJOR == abi.ABI_MAJOR


def test_default_image_carries_the_abi_version():
    assert FirmwareImage().version == abi.FIRMWARE_VERSION
    assert FirmwareImage.build().version == abi.FIRMWARE_VERSION
    image = FirmwareImage.build(version=[2, 1, 3])
    assert image.version == (2, 1, 3) and image.version_string == "2.1.3"


@pytest.mark.parametrize("enum", [abi.Opcode, abi.MemorySpace, abi.Status, abi.Irq])
def test_codes_are_unique(enum):
    assert issubclass(enum, IntEnum)
    values = [member.value for member in enum.__members__.values()]  # aliases included
    assert len(values) == len(set(values)), f"{enum.__name__} has duplicate codes"


def test_expected_opcodes_and_statuses_exist():
    assert {op.name for op in abi.Opcode} == {"COPY", "FILL", "SIGNAL", "WAIT", "LAUNCH", "COLLECTIVE"}
    assert abi.Status.OK == 0
    assert {"PAGE_FAULT", "BUS_ERROR", "KERNEL_FAULT", "UNKNOWN_KERNEL", "INVALID_COMMAND", "ABORTED"} <= {
        s.name for s in abi.Status}


@pytest.mark.parametrize("command", [abi.CopyCommand, abi.FillCommand, abi.SignalCommand, abi.WaitCommand,
                                     abi.LaunchCommand, abi.CollectiveCommand])
def test_every_command_starts_with_opcode_seq_asid(command):
    # The firmware reads command[0], command.seq and command.asid of any command.
    assert command._fields[:3] == ("opcode", "seq", "asid")


def test_error_record_fields():
    assert abi.ErrorRecord._fields == ("status", "device", "ring", "seq", "asid", "unit", "address",
                                       "sim_time_ns", "detail")


def test_module_is_declarative():
    tree = ast.parse(inspect.getsource(abi))
    logic = [type(node).__name__ for node in ast.walk(tree)
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    assert logic == [], f"abi.py defines code: {logic}"
    own_functions = [name for name, obj in vars(abi).items()
                     if inspect.isfunction(obj) and obj.__module__ == abi.__name__]
    assert own_functions == []
