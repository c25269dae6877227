"""Firmware running on a device's command processor.

One SimPy process per submission ring reads commands in order and books each on
an engine (DMA engines, vector or matrix engine) for its modelled time; its
functional effect on device memory happens once that time has passed, before the
ring's next command starts. While no other event is due first, a ring books its
commands ahead of the simulation clock, so a burst costs one DES event. Signals
write fence semaphores and raise a completion interrupt. Hardware faults and
kernel argument errors become ``ErrorRecord``s raised as error interrupts; after
one, the context's later commands are not executed (status ABORTED) but its fences
are still signalled so the host never waits forever, and the driver reports the
error at the next synchronisation. Any other exception is an emulator bug: an
``InternalErrorRecord`` with its traceback, and the ring goes on.
"""
from __future__ import annotations

import logging
import traceback
from collections import deque
from math import prod

from emulator.errors import EmulatorBug, FaultRecord, HardwareFault, KernelArgumentError
from emulator.kernels import dtypes
from emulator.kernels.library import KERNELS, Operand
from firmware import abi
from firmware.image import FirmwareImage
from firmware.lru import LRUCache

log = logging.getLogger("seed.firmware")

TRACE_ENTRIES = 200_000
_SIGNAL, _WAIT = int(abi.Opcode.SIGNAL), int(abi.Opcode.WAIT)
_COPY, _FILL, _LAUNCH = int(abi.Opcode.COPY), int(abi.Opcode.FILL), int(abi.Opcode.LAUNCH)
_DEVICE = int(abi.MemorySpace.DEVICE)
_RESOLVED_ENTRIES = _DECODED_ENTRIES = 4096  # LRU-bounded caches of the hot path
_new_tuple = tuple.__new__  # builds trace records without their Python-level namedtuple __new__


def check_element_types() -> None:
    """The kernel library must number element types as the ABI does: dtype codes reach kernels
    unchanged, both in descriptors and as plain launch arguments."""
    if dtypes.ITEMSIZE != abi.ELEMENT_SIZE or dtypes.NAMES != abi.ELEMENT_NAMES:
        raise EmulatorBug("the kernel library's element-type codes differ from the firmware ABI's "
                          f"({dtypes.NAMES} vs {abi.ELEMENT_NAMES})")


class KernelStats:
    __slots__ = ("count", "busy_ns", "nbytes", "flops")

    def __init__(self):
        self.count, self.busy_ns, self.nbytes, self.flops = 0, 0.0, 0, 0


class FirmwareInstance:
    def __init__(self, device, image: FirmwareImage):
        check_element_types()
        self.device = device
        self.env = device.env
        self.image = image
        self.faulted_asids: dict[int, abi.ErrorRecord] = {}
        self.trace: deque | None = deque(maxlen=TRACE_ENTRIES)
        self.kernel_stats: dict[str, KernelStats] = {}
        self.commands_executed = 0
        self._resolved = LRUCache(_RESOLVED_ENTRIES)  # TensorDescriptor -> (MMU generation, Operand)
        self._launches = LRUCache(_DECODED_ENTRIES)   # (kernel, launch args) -> decoded launch
        self._mmu = device.mmu

    def configure_trace(self, entries: int) -> None:
        """Keeps the last ``entries`` trace records (the newest ones are kept); 0 switches it off."""
        if entries < 0:
            raise ValueError(f"trace entries must be >= 0, got {entries}")
        old = self.trace or ()
        self.trace = deque(old, maxlen=entries) if entries else None

    def trace_entries(self) -> list:
        return list(self.trace) if self.trace is not None else []

    # -- ring processing -------------------------------------------------
    def start_ring(self, ring) -> None:
        self.env.process(self._ring_process(ring))

    def _ring_process(self, ring):
        decode_ns = self.device.command_processor.config.decode_ns
        env = self.env
        peek = env.peek
        # Work booked on an engine whose effect on memory is due at its end: (command, work, end).
        # It completes when the ring's next command may start (nothing can observe memory in
        # between: other rings only see it after a SIGNAL, which this ring executes after completing
        # the work, and the host only after a synchronisation on such a signal).
        pending = None
        ring_time = 0.0  # when the ring's last command was booked (>= env.now while booking ahead)
        while True:
            if not len(ring):
                if pending is not None:
                    if pending[2] > env.now:
                        yield env.timeout(pending[2] - env.now)
                    self._complete(ring, pending)
                    pending = None
                    continue  # more may have arrived meanwhile
                yield ring.doorbell()
            submit_ns, command = ring.read()
            # The command cannot start before the host wrote it, plus fetch and decode, nor
            # before the ring's previous command completed. Nothing about it (not even a fault)
            # happens earlier. Decode is pipelined: it overlaps the previous command of the ring,
            # so a backlog of commands pays it only once.
            wake = submit_ns + decode_ns
            if pending is not None and pending[2] > wake:
                wake = pending[2]
            if ring_time > wake:
                wake = ring_time
            op = command[0]
            now = env.now
            if wake > now:
                if op == _SIGNAL or op == _WAIT or peek() < wake:
                    # Signals and waits act at their own time. Other commands are booked ahead of
                    # the simulation clock only while no other event can happen before they start,
                    # so engines still serve requests in the order of their simulated time, and a
                    # busy ring costs no DES event per command.
                    yield env.timeout(wake - now)
                now = wake
            ring_time = now
            if pending is not None:
                self._complete(ring, pending)
                pending = None
            if op == _SIGNAL or op == _WAIT:
                if op == _SIGNAL:
                    self._signal(ring, command)
                else:
                    sems = self.device.peers[command.device].command_processor.semaphores
                    if sems.value(command.semaphore) < command.value:
                        yield sems.wait(command.semaphore, command.value)
                continue
            if command.asid in self.faulted_asids:
                continue  # ABORTED: the context is poisoned, skip the work, keep fences moving
            try:
                # Book the engine (faults in operand translation surface here); the effect on
                # memory happens when the work ends in simulated time (_complete).
                if op == _LAUNCH:
                    end, work = self._book_kernel(command.kernel, command.args, now)
                elif op == _COPY:
                    end, work = self._book_copy(command, now)
                elif op == _FILL:
                    end, work = self._book_kernel("fill", (command.dst, command.value), now)
                else:
                    raise HardwareFault(FaultRecord("invalid_command", "command_processor", self.device.index,
                                                    None, now, f"invalid opcode {op!r}"))
                pending = (command, work, end)
            except (HardwareFault, KernelArgumentError) as fault:  # a device fault: sticky for the context
                self._record_error(ring, command, fault, now)
            except Exception as err:  # anything else is a bug in the emulator, not the user's fault
                self._report_bug(ring, command, err, now)

    def _complete(self, ring, pending) -> None:
        """Performs booked work's effect on device memory (the Cython kernel runs now)."""
        command, work, end = pending
        run, operands, label, unit, start, end, nbytes, flops = work
        try:
            run(*operands)
            self._account(ring, command, label, unit, start, end, nbytes, flops)
        except (HardwareFault, KernelArgumentError) as fault:
            self._record_error(ring, command, fault, end)
        except Exception as err:
            self._report_bug(ring, command, err, end)
        self.commands_executed += 1

    def _signal(self, ring, command):
        sems = self.device.command_processor.semaphores
        sems.signal(command.semaphore, command.value)
        self.device.interrupts.raise_irq(abi.Irq.COMPLETION, abi.Completion(
            self.device.index, ring.ring_id, command.seq, command.semaphore, command.value, self.env.now))

    def _record_error(self, ring, command, err, when: float):
        if isinstance(err, HardwareFault):
            rec = err.record
            status = {"page_fault": abi.Status.PAGE_FAULT, "bus_error": abi.Status.BUS_ERROR,
                      "unknown_kernel": abi.Status.UNKNOWN_KERNEL,
                      "invalid_command": abi.Status.INVALID_COMMAND}.get(
                rec.kind, abi.Status.KERNEL_FAULT)
            unit, address, detail = rec.unit, rec.address, rec.detail
        else:  # KernelArgumentError: a kernel rejected its launch arguments
            status, unit, address = abi.Status.KERNEL_FAULT, self._unit_of(command), None
            detail = f"{type(err).__name__}: {err}"
        record = abi.ErrorRecord(status, self.device.index, ring.ring_id, command.seq, command.asid,
                                 unit, address, when, detail)
        self.faulted_asids[command.asid] = record
        log.info("device %d: %s", self.device.index, record)
        self.device.interrupts.raise_irq(abi.Irq.ERROR, record)

    def _report_bug(self, ring, command, err, when: float):
        """An exception that is neither a hardware fault nor a kernel argument error: an emulator
        bug. Reported as an INTERNAL_ERROR interrupt with the traceback; the context is NOT
        faulted, and the ring goes on with its next command."""
        text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
        record = abi.InternalErrorRecord(self.device.index, ring.ring_id, command.seq, command.asid,
                                         self._unit_of(command), when,
                                         f"{type(err).__name__}: {err}", text)
        log.error("device %d: emulator bug while executing command %d on ring %d:\n%s",
                  self.device.index, command.seq, ring.ring_id, text)
        self.device.interrupts.raise_irq(abi.Irq.INTERNAL_ERROR, record)

    @staticmethod
    def _unit_of(command) -> str:
        if command.opcode == abi.Opcode.COPY:
            return "dma"
        if command.opcode == abi.Opcode.LAUNCH:
            return KERNELS[command.kernel].engine + "_engine" if command.kernel in KERNELS else "command_processor"
        return "vector_engine"

    # -- execution ---------------------------------------------------------
    def _resolve(self, desc: abi.TensorDescriptor, unit: str) -> Operand:
        if desc.space == _DEVICE:
            # Descriptor cache (the TLB's job): valid while the page tables are unchanged.
            hit = self._resolved.get(desc)
            if hit is not None and hit[0] == self.device.peers[desc.device].mmu.generation:
                return hit[1]
        shape, strides = desc.shape, desc.strides
        if desc.space == abi.MemorySpace.HOST or 0 in shape:
            return Operand(desc.address if 0 not in shape else 0, desc.dtype, shape, strides)
        span = 1
        for n, s in zip(shape, strides):
            span += (n - 1) * s
        span *= dtypes.ITEMSIZE[desc.dtype]
        device = self.device.peers[desc.device]
        physical = device.mmu.translate(desc.asid, desc.address, span, unit)
        operand = Operand(device.hbm.host_address(physical, span), desc.dtype, shape, strides)
        self._resolved.put(desc, (device.mmu.generation, operand))
        return operand

    def _resolve_args(self, args, unit):
        return [self._resolve(a, unit) if type(a) is abi.TensorDescriptor else a for a in args]

    def _book_copy(self, command, now: float):
        dst, src = command.dst, command.src
        dev = self.device
        nbytes = prod(src.shape) * dtypes.ITEMSIZE[src.dtype]
        if src.space == abi.MemorySpace.HOST:
            link, cfg, counter = dev.host_link.to_device, dev.host_link.config, "h2d"
        elif dst.space == abi.MemorySpace.HOST:
            link, cfg, counter = dev.host_link.to_host, dev.host_link.config, "d2h"
        elif dst.device != src.device:
            link, cfg, counter = dev.interconnect.link, dev.interconnect.config, "p2p"
        else:
            link, cfg, counter = None, None, "d2d"
        if link is None:  # read and write through HBM
            duration = dev.dma.config.setup_ns + 2 * dev.hbm.transfer_ns(nbytes)
        else:
            bandwidth = min(cfg.bandwidth_gb_per_s, dev.hbm.config.bandwidth_gb_per_s)
            duration = dev.dma.transfer_ns(nbytes, bandwidth, cfg.latency_ns)
        out = self._resolve(dst, "dma")
        inp = self._resolve(src, "dma")
        engine = dev.dma.engines.first_free()
        start = engine.earliest_start(now)
        if link is not None:
            start = link.earliest_start(start)
            link.hold(start, duration)
        end = engine.hold(start, duration)

        return end, (KERNELS["copy"].run, (out, inp), f"memcpy_{counter}", "dma", start, end, nbytes, 0)

    def _book_kernel(self, name, args, now: float):
        # A launch's operands and cost depend only on its arguments and the page tables, so
        # a repeated launch (a training loop's) is decoded once (the TLB's and the command
        # processor's job; invalidated by any page-table change).
        key = (name, args)
        generation = self._mmu.generation
        # 0 == -0.0 == False: launches whose arguments differ only in a zero's sign or type would
        # share a cache entry (and -0.0 would fill +0.0), so a zero argument is never cached.
        decoded = self._launches.get(key) if 0 not in args else None
        if decoded is None or decoded[0] != generation:
            decoded = self._decode_launch(name, args, generation)
            if 0 not in args:
                self._launches.put(key, decoded)
        _, run, timeline, unit, label, operands, duration, nbytes, flops = decoded
        start = timeline.free_at if timeline.free_at > now else now
        end = timeline.hold(start, duration)
        return end, (run, operands, label, unit, start, end, nbytes, flops)

    def _decode_launch(self, name, args, generation):
        kernel = KERNELS.get(name)
        if kernel is None:
            raise HardwareFault(_unknown_kernel(self, name))
        unit = kernel.engine + "_engine"
        operands = self._resolve_args(args, unit)
        duration, nbytes, flops = kernel.cost(self.device, *operands)
        if name != "fill":
            duration += self.device.command_processor.config.launch_ns
        label = f"{name}.{args[0]}" if isinstance(args[0], str) else name
        return (generation, kernel.run, self.device.engine(kernel.engine).timeline, unit, label,
                tuple(operands), duration, nbytes, flops)

    def _account(self, ring, command, name, engine, start, end, nbytes, flops):
        if self.trace is not None:
            self.trace.append(_new_tuple(abi.TraceEntry, (self.device.index, ring.ring_id, command.seq, name,
                                                          engine, start, end, nbytes, flops)))
        stats = self.kernel_stats.get(name)
        if stats is None:
            stats = self.kernel_stats[name] = KernelStats()
        stats.count += 1
        stats.busy_ns += end - start
        stats.nbytes += nbytes
        stats.flops += flops


def _unknown_kernel(instance, name):
    return FaultRecord("unknown_kernel", "command_processor", instance.device.index, None,
                       instance.env.now, f"no kernel named {name!r} in the device kernel library")
