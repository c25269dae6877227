"""Firmware <-> driver ABI: versions, command formats, status codes, interrupts.

Declarative only: no logic lives here. The driver refuses a firmware whose major
version differs from ``ABI_MAJOR`` (see driver/firmware_loader.py).

A ring slot holds ``(submit_ns, command)``: the host time at which the driver
wrote it (the device cannot start it earlier) and one of the command tuples
below. Commands of one ring run in order.
"""
from collections import namedtuple
from enum import IntEnum

ABI_MAJOR = 1
ABI_MINOR = 0
FIRMWARE_VERSION = (ABI_MAJOR, ABI_MINOR, 0)


class Opcode(IntEnum):
    COPY = 1      # DMA: dst <- src, same element type, any strides, host or device memory
    FILL = 2      # write one value to every element of dst
    SIGNAL = 3    # semaphore <- value once every earlier command of the ring completed
    WAIT = 4      # stall the ring until a semaphore (of any device) reaches value
    LAUNCH = 5    # run a kernel of the device's kernel library


class ElementType(IntEnum):
    """Element types of tensor descriptors and of dtype launch arguments. The device's kernel
    library numbers its types the same way (the firmware checks it at boot)."""
    BOOL = 0
    UINT8 = 1
    INT8 = 2
    INT16 = 3
    INT32 = 4
    INT64 = 5
    FLOAT16 = 6
    BFLOAT16 = 7
    FLOAT32 = 8
    FLOAT64 = 9
    # Storage types: copies, conversions and fills only (no arithmetic kernels take them).
    UINT16 = 10
    UINT32 = 11
    UINT64 = 12
    COMPLEX64 = 13     # two float32: real, imaginary
    COMPLEX128 = 14    # two float64: real, imaginary


# Bytes per element, and the name of each type (the torch dtype it carries has the same name).
# Keyed by plain ints: descriptors and launch arguments carry the codes as ints.
ELEMENT_SIZE = {int(ElementType.BOOL): 1, int(ElementType.UINT8): 1, int(ElementType.INT8): 1,
                int(ElementType.INT16): 2, int(ElementType.INT32): 4, int(ElementType.INT64): 8,
                int(ElementType.FLOAT16): 2, int(ElementType.BFLOAT16): 2, int(ElementType.FLOAT32): 4,
                int(ElementType.FLOAT64): 8, int(ElementType.UINT16): 2, int(ElementType.UINT32): 4,
                int(ElementType.UINT64): 8, int(ElementType.COMPLEX64): 8, int(ElementType.COMPLEX128): 16}
ELEMENT_NAMES = {int(t): t.name.lower() for t in ElementType}


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
    INTERNAL_ERROR = 3  # payload: InternalErrorRecord (an emulator bug, not a device fault; not sticky)


TensorDescriptor = namedtuple("TensorDescriptor", "space device asid address dtype shape strides")
CopyCommand = namedtuple("CopyCommand", "opcode seq asid dst src")
FillCommand = namedtuple("FillCommand", "opcode seq asid dst value")
SignalCommand = namedtuple("SignalCommand", "opcode seq asid semaphore value")
WaitCommand = namedtuple("WaitCommand", "opcode seq asid device semaphore value")
LaunchCommand = namedtuple("LaunchCommand", "opcode seq asid kernel args")

Completion = namedtuple("Completion", "device ring seq semaphore value sim_time_ns")
ErrorRecord = namedtuple("ErrorRecord", "status device ring seq asid unit address sim_time_ns detail")
TraceEntry = namedtuple("TraceEntry", "device ring seq name engine start_ns end_ns nbytes flops")
# An exception the firmware raised while executing a command that is neither a hardware fault
# nor a kernel argument error: a bug in the emulator. ``traceback`` is the formatted traceback.
InternalErrorRecord = namedtuple("InternalErrorRecord", "device ring seq asid unit sim_time_ns detail traceback")
