"""Firmware <-> driver ABI: versions, command formats, status codes, interrupts.

Declarative only: no logic lives here. The driver refuses a firmware whose major
version differs from ``ABI_MAJOR`` (see driver/firmware_loader.py).

A ring slot holds ``(submit_ns, command)``: the host time at which the driver
wrote it (the device cannot start it earlier) and one of the command tuples
below. Commands of one ring run in order.
"""
from collections import namedtuple
from enum import IntEnum

# 1.1: COLLECTIVE; 1.2: INVALID_ARGUMENT, Irq.POISONED, operation-scope statuses; 2.0: COLLECTIVE
# carries the op and the group's shape instead of a duration, and the device models its time.
ABI_MAJOR = 2
ABI_MINOR = 0
FIRMWARE_VERSION = (ABI_MAJOR, ABI_MINOR, 0)


class Opcode(IntEnum):
    COPY = 1      # DMA: dst <- src, same element type, any strides, host or device memory
    FILL = 2      # write one value to every element of dst
    SIGNAL = 3    # semaphore <- value once every earlier command of the ring completed
    WAIT = 4      # stall the ring until a semaphore (of any device) reaches value
    LAUNCH = 5    # run a kernel of the device's kernel library
    COLLECTIVE = 6  # a collective's part on this device: it holds the device's network port and
                    # links from max(ready, not_before_ns) for the time the device's interconnect
                    # model gives the op (emulator/collectives.py), then copies each (dst, src)
                    # pair. The copies are the functional data path (the data crosses the host,
                    # the emulated fabric only carries the time): no DMA engine, host link or HBM
                    # time is charged for them. op == "" holds nothing.


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
    COMPLEX32 = 15     # two float16: real, imaginary (torch.chalf)
    # float8 (one byte): storage and conversions; the quantized matrix kernels read them.
    FLOAT8_E4M3FN = 16     # 4 exponent bits, 3 mantissa, no inf (saturating conversion)
    FLOAT8_E5M2 = 17       # IEEE-like: inf and NaN
    FLOAT8_E4M3FNUZ = 18   # no inf, no -0: 0x80 is the only NaN
    FLOAT8_E5M2FNUZ = 19


# Bytes per element, and the name of each type (the torch dtype it carries has the same name).
# Keyed by plain ints: descriptors and launch arguments carry the codes as ints.
ELEMENT_SIZE = {int(ElementType.BOOL): 1, int(ElementType.UINT8): 1, int(ElementType.INT8): 1,
                int(ElementType.INT16): 2, int(ElementType.INT32): 4, int(ElementType.INT64): 8,
                int(ElementType.FLOAT16): 2, int(ElementType.BFLOAT16): 2, int(ElementType.FLOAT32): 4,
                int(ElementType.FLOAT64): 8, int(ElementType.UINT16): 2, int(ElementType.UINT32): 4,
                int(ElementType.UINT64): 8, int(ElementType.COMPLEX64): 8, int(ElementType.COMPLEX128): 16,
                int(ElementType.COMPLEX32): 4, int(ElementType.FLOAT8_E4M3FN): 1,
                int(ElementType.FLOAT8_E5M2): 1, int(ElementType.FLOAT8_E4M3FNUZ): 1,
                int(ElementType.FLOAT8_E5M2FNUZ): 1}
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
    # Hardware faults (emulator/faults.py kinds); their scope is STATUS_SCOPE below.
    ECC_UNCORRECTABLE = 7
    DMA_ERROR = 8
    DMA_TIMEOUT = 9
    ENGINE_HANG = 10      # the watchdog found an engine busy past its timeout
    HEARTBEAT_LOST = 11   # the watchdog found the firmware heartbeat stopped
    RING_CORRUPTED = 12
    LINK_DOWN = 13
    PEER_LINK_ERROR = 14
    DEVICE_RESET = 15     # not executed: the device was reset while it was queued
    INVALID_ARGUMENT = 16  # a kernel rejected its launch arguments (KernelArgumentError): nothing ran


class Irq(IntEnum):
    COMPLETION = 1    # payload: Completion
    ERROR = 2         # payload: ErrorRecord
    INTERNAL_ERROR = 3  # payload: InternalErrorRecord (an emulator bug, not a device fault; not sticky)
    POISONED = 4      # payload: PoisonNotice, a command skipped because it read data a failed command
                      # never wrote; its own outputs are noted as not written too (take_poisoned_writes)


TensorDescriptor = namedtuple("TensorDescriptor", "space device asid address dtype shape strides")
CopyCommand = namedtuple("CopyCommand", "opcode seq asid dst src")
FillCommand = namedtuple("FillCommand", "opcode seq asid dst value")
SignalCommand = namedtuple("SignalCommand", "opcode seq asid semaphore value")
WaitCommand = namedtuple("WaitCommand", "opcode seq asid device semaphore value")
LaunchCommand = namedtuple("LaunchCommand", "opcode seq asid kernel args")
# ``name``: the trace shows "collective.<name>". ``pairs``: a tuple of (dst, src) TensorDescriptors of
# one dtype and shape each. What the device models: ``op`` (emulator.collectives.OPS, or "" for a
# command that only copies, e.g. staging the inputs), ``nbytes`` (the message size), the group's
# shape: ``ranks``, ``nodes`` it spans, ``hops`` (links a send/recv crosses inside a node), and
# ``algorithm`` ("" lets the model choose, else emulator.collectives.ALGORITHMS).
CollectiveCommand = namedtuple("CollectiveCommand", "opcode seq asid name pairs not_before_ns op nbytes ranks nodes "
                                                    "hops algorithm")

Completion = namedtuple("Completion", "device ring seq semaphore value sim_time_ns")
PoisonNotice = namedtuple("PoisonNotice", "device ring seq sim_time_ns")
ErrorRecord = namedtuple("ErrorRecord", "status device ring seq asid unit address sim_time_ns detail")
# One executed command, as the firmware booked it. ``seq`` is the driver's global command seq (the
# correlation id). ``engine`` is the unit class ("dma", "matrix_engine", "vector_engine",
# "interconnect" for a COLLECTIVE).
# ``start_ns``/``end_ns`` span the command's work on its engines (a kernel's launch overhead is
# NOT inside it: the command processor holds that, [launch_start_ns, launch_end_ns], which ends at
# or before start_ns; both equal start_ns for copies and fills, which pay no launch). The cost
# model's terms, fixed when the launch is decoded:
#   bound    "compute" | "memory" | "latency": the term that limited the cost model's max()
#            ("interconnect" for a COLLECTIVE that held links)
#            ("latency": fixed latencies (HBM/link latency, DMA setup, pipeline fill) dominate)
#   cycles   device clock cycles of [start_ns, end_ns] (int)
#   cores    cores the kernel ran on (0 for a copy: DMA engines only)
#   tiling   human-readable work split, e.g. "gemm 2x2 cores, 128x128 tiles, 64 tiles"
#   engines  tuple of lane names it occupied: "dev0.cp" (launch), "dev0.core0.matrix",
#            "dev0.core1.vector", "dev0.dma2", "dev0.host_link.h2d", "dev0.host_link.d2h",
#            "dev0-dev1.link" (a link from device 0 to device 1), "dev0.net" (device 0's
#            network port, which a collective holds), "dev0.hbm"
#   dtype    element type name of the command's output (``ELEMENT_NAMES`` values), "" if none
#   energy_j   the command's energy in joules: its dynamic energy plus static_w x its duration
#              (emulator/power.py)
#   static_w   the device's static power while it ran (W, at its voltage)
#   clock_ghz  the core clock it ran at (below the power mode's top clock: the cap throttled it)
# Ceilings for a roofline: ``DeviceConfig.peak_flops(engine, dtype)`` and ``.hbm_bytes_per_s``.
TraceEntry = namedtuple("TraceEntry", "device ring seq name engine start_ns end_ns nbytes flops "
                                      "bound cycles cores tiling engines dtype launch_start_ns launch_end_ns "
                                      "energy_j static_w clock_ghz")
# An exception the firmware raised while executing a command that is neither a hardware fault
# nor a kernel argument error: a bug in the emulator. ``traceback`` is the formatted traceback.
InternalErrorRecord = namedtuple("InternalErrorRecord", "device ring seq asid unit sim_time_ns detail traceback")


# What each error status poisons: "operation" (only that command: it did not run and its outputs hold
# no valid data; the ring and the context go on: a command the firmware rejects, never a hardware
# event), "context" (sticky for the asid), "stream" (that ring's queued work is aborted until the
# driver acknowledges), "device" (every ring aborted until a reset).
STATUS_SCOPE = {
    Status.INVALID_COMMAND: "operation", Status.UNKNOWN_KERNEL: "operation", Status.INVALID_ARGUMENT: "operation",
    Status.PAGE_FAULT: "context", Status.BUS_ERROR: "context", Status.KERNEL_FAULT: "context",
    Status.ECC_UNCORRECTABLE: "device", Status.DMA_ERROR: "stream", Status.DMA_TIMEOUT: "stream",
    Status.ENGINE_HANG: "device", Status.HEARTBEAT_LOST: "device", Status.RING_CORRUPTED: "stream",
    Status.LINK_DOWN: "device", Status.PEER_LINK_ERROR: "stream", Status.DEVICE_RESET: "device",
}

# The hardware event behind a status (the fault kind of emulator/faults.py where there is one).
STATUS_KIND = {
    Status.INVALID_COMMAND: "invalid_command", Status.PAGE_FAULT: "page_fault", Status.BUS_ERROR: "bus_error",
    Status.KERNEL_FAULT: "kernel_fault", Status.UNKNOWN_KERNEL: "unknown_kernel",
    Status.ECC_UNCORRECTABLE: "ecc_uncorrectable", Status.DMA_ERROR: "dma_error", Status.DMA_TIMEOUT: "dma_timeout",
    Status.ENGINE_HANG: "engine_hang", Status.HEARTBEAT_LOST: "firmware_crash",
    Status.RING_CORRUPTED: "ring_corruption", Status.LINK_DOWN: "link_down",
    Status.PEER_LINK_ERROR: "peer_link_error", Status.DEVICE_RESET: "device_reset",
    Status.INVALID_ARGUMENT: "invalid_argument",
}
KIND_STATUS = {kind: status for status, kind in STATUS_KIND.items()}

# Which launch arguments a kernel writes (positions in the argument tuple); a kernel not listed
# writes its first tensor argument (the library's convention: output first). "all": every tensor
# argument may be written. A skipped or faulted command poisons what it should have written.
LAUNCH_WRITES = {
    "sort": (0, 1), "max_pool": (0, 1), "adaptive_max_pool": (0, 1),
    "fractional_max_pool": (0, 1), "order_stat": (1, 2), "cum_select": (1, 2),
    "norm_forward": (0, 4, 5, 8, 9), "norm_backward": (0, 1, 2), "amp_unscale": (0, 1),
    "amp_update_scale": (0, 1), "fused_adam": (0, 2, 3, 4), "fused_sgd": (0, 2),
    "unique": "all", "unique_dim": "all", "getrf": "all", "sytrf": "all", "qr": "all", "orgqr": "all",
    "ormqr": "all", "syevd": "all", "gesdd": "all", "geev": "all", "gels": "all", "lu_unpack": "all",
    "potrf": "all", "potri": "all", "getrs": "all", "potrs": "all", "sytrs": "all", "trsm": "all",
}
