"""Firmware <-> driver ABI: versions, command formats, status codes, interrupts.

Declarative only: no logic lives here. The driver refuses a firmware whose major
version differs from ``ABI_MAJOR`` (see driver/firmware_loader.py).

A ring slot holds ``(submit_ns, command)``: the host time at which the driver
wrote it (the device cannot start it earlier) and one of the command tuples
below. Commands of one ring run in order.
"""
from collections import namedtuple
from enum import IntEnum

# Element types of tensor descriptors: the codes the device's kernel library defines.
from emulator.kernels.dtypes import ITEMSIZE as ELEMENT_SIZE  # noqa: F401
from emulator.kernels.dtypes import NAMES as ELEMENT_NAMES  # noqa: F401

ABI_MAJOR = 1
ABI_MINOR = 0
FIRMWARE_VERSION = (ABI_MAJOR, ABI_MINOR, 0)


class Opcode(IntEnum):
    COPY = 1      # DMA: dst <- src, same element type, any strides, host or device memory
    FILL = 2      # write one value to every element of dst
    SIGNAL = 3    # semaphore <- value once every earlier command of the ring completed
    WAIT = 4      # stall the ring until a semaphore (of any device) reaches value
    LAUNCH = 5    # run a kernel of the device's kernel library


class MemorySpace(IntEnum):
    HOST = 0      # address is a host pointer (pinned or staged host memory)
    DEVICE = 1    # address is a virtual address in (device, asid)


class Status(IntEnum):
    OK = 0
    INVALID_COMMAND = 1
    PAGE_FAULT = 2
    BUS_ERROR = 3
    KERNEL_FAULT = 4
    UNKNOWN_KERNEL = 5
    ABORTED = 6       # not executed: its context had already faulted


class Irq(IntEnum):
    COMPLETION = 1    # payload: Completion
    ERROR = 2         # payload: ErrorRecord


TensorDescriptor = namedtuple("TensorDescriptor", "space device asid address dtype shape strides")
CopyCommand = namedtuple("CopyCommand", "opcode seq asid dst src")
FillCommand = namedtuple("FillCommand", "opcode seq asid dst value")
SignalCommand = namedtuple("SignalCommand", "opcode seq asid semaphore value")
WaitCommand = namedtuple("WaitCommand", "opcode seq asid device semaphore value")
LaunchCommand = namedtuple("LaunchCommand", "opcode seq asid kernel args")

Completion = namedtuple("Completion", "device ring seq semaphore value sim_time_ns")
ErrorRecord = namedtuple("ErrorRecord", "status device ring seq asid unit address sim_time_ns detail")
TraceEntry = namedtuple("TraceEntry", "device ring seq name engine start_ns end_ns nbytes flops")
