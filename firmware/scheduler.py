"""Firmware running on a device's command processor.

One SimPy process per submission ring reads commands in order and books each on
an engine (DMA engines, vector or matrix engine) for its modelled time; its
functional effect on device memory happens once that time has passed, before the
ring's next command starts. While no other event is due first, a ring books its
commands ahead of the simulation clock, so a burst costs one DES event. Signals
write fence semaphores and raise a completion interrupt. Hardware faults and
kernel argument errors become ``ErrorRecord``s raised as error interrupts. A command the
firmware rejects (a kernel's ``KernelArgumentError``, an unknown kernel, an invalid opcode) is
operation scope: only that command did not run. After a hardware fault, the later commands of
its scope (abi.STATUS_SCOPE: the context, the ring, or the whole device) are not executed
(status ABORTED, their outputs noted as poisoned) but fences are still signalled so the host
never waits forever, and the driver reports the error at the next synchronisation. Either way
the spans the command should have written are remembered (``poison_ranges``): a command queued
before the host learnt of it that reads one is skipped too, its outputs poisoned in turn, so no
later result is computed from data that was never written. Any other exception is an emulator
bug: an ``InternalErrorRecord`` with its traceback, and the ring goes on.

Injected faults (emulator/faults.py) are consulted once per command while one is armed
(``faults.armed``). The watchdog works in simulated time: a hung engine or a DMA that never
completes is declared so ``watchdog.timeout_ns`` later; a crashed firmware stalls every ring
until the watchdog notices the missing heartbeat. ``begin_reset``/``finish_reset`` are the
firmware's half of the driver's reset sequence.
"""
from __future__ import annotations

import logging
import traceback
from collections import deque
from math import prod

from emulator import collectives
from emulator.errors import EmulatorBug, FaultRecord, HardwareFault, InjectedFault, KernelArgumentError
from emulator.faults import COPY_HOST, COPY_LOCAL, COPY_PEER, FILL, LAUNCH, FaultInjector
from emulator.kernels import dtypes
from emulator.kernels.library import KERNELS, Operand
from emulator.memory import alias_key
from emulator.power import PowerManagement, first_input_dtype
from firmware import abi
from firmware.image import FirmwareImage
from firmware.lru import LRUCache

log = logging.getLogger("seed.firmware")

TRACE_ENTRIES = 200_000
_SIGNAL, _WAIT = int(abi.Opcode.SIGNAL), int(abi.Opcode.WAIT)
_COPY, _FILL, _LAUNCH = int(abi.Opcode.COPY), int(abi.Opcode.FILL), int(abi.Opcode.LAUNCH)
_COLLECTIVE = int(abi.Opcode.COLLECTIVE)
_DEVICE = int(abi.MemorySpace.DEVICE)
_RESOLVED_ENTRIES = _DECODED_ENTRIES = 4096  # LRU-bounded caches of the hot path
_new_tuple = tuple.__new__  # builds trace records without their Python-level namedtuple __new__
_TRACE_ENTRY = abi.TraceEntry


def check_element_types() -> None:
    """The kernel library must number element types as the ABI does: dtype codes reach kernels
    unchanged, both in descriptors and as plain launch arguments."""
    if dtypes.ITEMSIZE != abi.ELEMENT_SIZE or dtypes.NAMES != abi.ELEMENT_NAMES:
        raise EmulatorBug("the kernel library's element-type codes differ from the firmware ABI's "
                          f"({dtypes.NAMES} vs {abi.ELEMENT_NAMES})")


class KernelStats:
    __slots__ = ("count", "busy_ns", "nbytes", "flops", "energy_j", "throttled")

    def __init__(self):
        self.count, self.busy_ns, self.nbytes, self.flops = 0, 0.0, 0, 0
        self.energy_j, self.throttled = 0.0, 0   # joules; commands the power cap slowed down


class Trace:
    """The firmware's command trace: its last ``entries`` records, oldest first. Each is kept as
    the references the command's booked work already holds, in the order ``_complete`` appends
    them, and becomes an ``abi.TraceEntry`` when read (iteration, ``reversed``, ``list``): the
    20-field record, its cycle count and the eviction of a full trace's oldest one cost every
    command otherwise."""

    __slots__ = ("_records", "append", "_device", "_clock_ghz")

    def __init__(self, entries: int, device: int, clock_ghz: float, old: "Trace | None" = None):
        self._records = deque(old._records if old is not None else (), maxlen=entries)
        self.append = self._records.append
        self._device = device
        self._clock_ghz = clock_ghz

    def _entry(self, record) -> abi.TraceEntry:
        ring, seq, start, end, launch_start, launch_end, energy, label, unit, nbytes, flops, static, power = record
        bound, cores, tiling, engines, dtype = static
        return _new_tuple(_TRACE_ENTRY, (
            self._device, ring, seq, label, unit, start, end, nbytes, flops, bound,
            round((end - start) * self._clock_ghz), cores, tiling, engines, dtype, launch_start, launch_end,
            energy, power[1], power[2]))

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self):
        return map(self._entry, self._records)

    def __reversed__(self):
        return map(self._entry, reversed(self._records))

    @property
    def maxlen(self) -> int:
        return self._records.maxlen


class FirmwareInstance:
    def __init__(self, device, image: FirmwareImage):
        check_element_types()
        self.device = device
        self.env = device.env
        self.image = image
        self.faulted_asids: dict[int, abi.ErrorRecord] = {}
        self.trace: Trace | None = Trace(TRACE_ENTRIES, device.index, device.config.clock_ghz)
        self.kernel_stats: dict[str, KernelStats] = {}
        self.commands_executed = 0
        self._resolved = LRUCache(_RESOLVED_ENTRIES)  # TensorDescriptor -> (MMU generation, Operand)
        self._launches = LRUCache(_DECODED_ENTRIES)   # (kernel, launch args) -> decoded launch
        self._costs = LRUCache(_DECODED_ENTRIES)      # (kernel, operand types/shapes/strides) -> KernelPower
        self._mmu = device.mmu
        self._projection = getattr(device, "projection", False)  # kernels timed, not run
        self._launch_timeline = device.launch_timeline   # launch overhead: the command processor's
        self._hbm_timeline = device.hbm.timeline         # HBM bandwidth, shared by every engine
        self._clock_ghz = device.config.clock_ghz
        self._hbm_bytes = 0                              # kernel operand bytes (copies: hbm counters)
        # Energy and the power mode's cap (emulator/power.py): a kernel's clock is chosen when its
        # launch is decoded; copies run at the mode's top clock.
        self.power = PowerManagement(device.config, device.fidelity, None, device.index)
        self._unthrottled = (0.0, self.power.static_w(self.power.grid[0][1]), self.power.top_clock_ghz, False)
        # Faults (see _ring_process's fault checks and the methods after _record_error).
        self.faults = FaultInjector(device.index)
        self.ring_faults: dict[int, abi.ErrorRecord] = {}   # stream scope: ring id -> record
        self.device_fault: abi.ErrorRecord | None = None     # device scope: needs a reset
        self.error_log: list = []            # every ErrorRecord (bounded; the first is always kept)
        self.events: list = []               # every hardware event fired by an injected fault
        self.poisoned_writes: list = []      # (device, asid, va, seq, record) a skipped/faulted command should have written
        # [device, asid, lo, hi, record, marks]: byte spans a skipped/faulted command did not write. A
        # command reading one is skipped (its outputs poisoned in turn) while it was queued before the
        # host collected the poison (``marks``: each ring's submitted count then; None: not collected
        # yet); later commands are the host's to check (runtime: PoisonedDataError at the launch).
        self.poison_ranges: list = []
        self._idle_rings: set = set()        # rings waiting on their doorbell (every command checked)
        self.crashed_at: float | None = None
        self.resets = 0
        self._aborting = False               # any of faulted_asids, ring_faults, device_fault, crashed_at
        self._revive = self.env.event()      # rings of a crashed firmware stall on it
        self._abort_waits = self.env.event() # fires at a reset: blocked WAITs give up

    def configure_trace(self, entries: int) -> None:
        """Keeps the last ``entries`` trace records (the newest ones are kept); 0 switches it off."""
        if entries < 0:
            raise ValueError(f"trace entries must be >= 0, got {entries}")
        old = self.trace
        self.trace = Trace(entries, self.device.index, self._clock_ghz, old) if entries else None

    def trace_entries(self) -> list:
        return list(self.trace) if self.trace is not None else []

    # -- ring processing -------------------------------------------------
    def start_ring(self, ring) -> None:
        self.env.process(self._ring_process(ring))

    def _ring_process(self, ring):
        decode_ns = self.device.command_processor.config.decode_ns
        env = self.env
        events = env._queue  # the DES's event heap: Environment.peek inlined, as a list test
        faults = self.faults
        # Work booked on an engine whose effect on memory is due at its end: (command, work, end).
        # It completes when the ring's next command may start (nothing can observe memory in
        # between: other rings only see it after a SIGNAL, which this ring executes after completing
        # the work, and the host only after a synchronisation on such a signal).
        pending = None
        ring_time = 0.0  # when the ring's last command was booked (>= env.now while booking ahead)
        # Launch pipelining: the command processor launches a ring's next kernel while the ring's
        # current work runs; its engines start once its launch and that work are done. launch_free
        # is when the ring's next launch may start (the previous launch's end, or the time of a
        # non-launch command: a launch after a signal, a wait or a copy starts after it).
        launch_free = 0.0
        launch_ns = self.device.command_processor.config.launch_ns
        cp = self._launch_timeline
        while True:
            if not len(ring):
                if pending is not None:
                    if pending[2] > env.now:
                        yield env.timeout(pending[2] - env.now)
                    self._complete(ring, pending)
                    pending = None
                    continue  # more may have arrived meanwhile
                self._idle_rings.add(ring.ring_id)
                yield ring.doorbell()
                self._idle_rings.discard(ring.ring_id)
            submit_ns, command = ring.read()
            # The command cannot start before the host wrote it, plus fetch and decode, nor
            # before the ring's previous command completed. Nothing about it (not even a fault)
            # happens earlier. Decode is pipelined: it overlaps the previous command of the ring,
            # so a backlog of commands pays it only once.
            wake = submit_ns + decode_ns
            op = command[0]
            launched = None
            if (op == _LAUNCH and launch_ns and not self._aborting and type(command.kernel) is str
                    and command.kernel != "fill" and command.kernel in KERNELS):
                # Launched as soon as it is decoded and the command processor is free, even while
                # the ring's previous work still runs (never before the ring's previous launch).
                launched = wake if wake > launch_free else launch_free
                if cp.free_at > launched:
                    launched = cp.free_at
                wake = launch_free = cp.free_at = launched + launch_ns
                cp.busy_ns += launch_ns
                cp.jobs += 1
            if pending is not None and pending[2] > wake:
                wake = pending[2]
            if ring_time > wake:
                wake = ring_time
            now = env._now  # Environment.now without its property call (once per command)
            if wake > now:
                if op == _SIGNAL or op == _WAIT or (events and events[0][0] < wake):
                    # Signals and waits act at their own time. Other commands are booked ahead of
                    # the simulation clock only while no other event can happen before they start,
                    # so engines still serve requests in the order of their simulated time, and a
                    # busy ring costs no DES event per command.
                    yield env.timeout(wake - now)
                now = wake
            ring_time = now
            if launched is None:
                launch_free = now
            if pending is not None:
                self._complete(ring, pending)
                pending = None
            if self._aborting:  # one check while nothing faulted
                if self.crashed_at is not None:
                    yield self._revive  # a dead firmware runs nothing until the watchdog or a reset
                    now = ring_time = max(now, env.now)
                if op == _WAIT and self.device_fault is not None:
                    continue  # a device being aborted waits for nothing: no fence waits forever
                if op != _SIGNAL and op != _WAIT and self._skip(ring, command):
                    continue  # ABORTED: skip the work (its outputs are poisoned), keep fences moving
            if op == _SIGNAL or op == _WAIT:
                if op == _SIGNAL:
                    self._signal(ring, command)
                else:
                    sems = self.device.peers[command.device].command_processor.semaphores
                    if sems.value(command.semaphore) < command.value:
                        yield sems.wait(command.semaphore, command.value) | self._abort_waits
                        launch_free = env.now  # the ring's next launch waits for the wait too
                continue
            effect = None
            if faults.armed:  # one check while no fault is armed
                try:
                    effect = yield from self._inject(ring, command, op, now)
                except Exception as err:  # a bug of the injection itself: reported, the ring goes on
                    self._report_bug(ring, command, err, env.now)
                    effect = None
                if effect is _SKIPPED:
                    continue
                if env.now > now:  # the fault took simulated time (a retry, a timeout)
                    now = ring_time = env.now
            try:
                # Book the engine (faults in operand translation surface here); the effect on
                # memory happens when the work ends in simulated time (_complete).
                if op == _LAUNCH:
                    end, work = self._book_kernel(command.kernel, command.args, now, launched)
                elif op == _COPY:
                    end, work = self._book_copy(command, now)
                elif op == _FILL:
                    end, work = self._book_kernel("fill", (command.dst, command.value), now)
                elif op == _COLLECTIVE:
                    end, work = self._book_collective(command, now)
                else:
                    raise HardwareFault(FaultRecord("invalid_command", "command_processor", self.device.index,
                                                    None, now, f"invalid opcode {op!r}"))
                pending = (command, work, end)
                if effect is not None:
                    pending = effect(pending, now)
            except (HardwareFault, KernelArgumentError) as fault:  # its scope: abi.STATUS_SCOPE
                self._record_error(ring, command, fault, now)
            except Exception as err:  # anything else is a bug in the emulator, not the user's fault
                self._report_bug(ring, command, err, now)

    def _complete(self, ring, pending) -> None:
        """Performs booked work's effect on device memory (the Cython kernel runs now). In
        projection mode (``device.projection``) nothing computes or moves: the work is accounted
        exactly as it would have been, so the timeline is the functional one."""
        command, work, end = pending
        run, operands, label, unit, start, end, nbytes, flops, meta = work
        try:
            if not self._projection:
                run(*operands)
            # _account, inlined (every command completes here): meta is
            # ((bound, cores, tiling, engines, dtype), launch_start_ns, launch_end_ns, power)
            static, launch_start, launch_end, power = meta
            dynamic, static_w, clock_ghz, throttled = power
            energy = dynamic + static_w * (end - start) * 1e-9
            trace = self.trace
            if trace is not None:  # compact: made into an abi.TraceEntry when read (Trace)
                trace.append((ring.ring_id, command.seq, start, end, launch_start, launch_end, energy,
                              label, unit, nbytes, flops, static, power))
            if unit != "dma" and unit != "interconnect":
                self._hbm_bytes += nbytes
            stats = self.kernel_stats.get(label)
            if stats is None:
                stats = self.kernel_stats[label] = KernelStats()
            stats.count += 1
            stats.busy_ns += end - start
            stats.nbytes += nbytes
            stats.flops += flops
            stats.energy_j += energy
            if throttled:
                stats.throttled += 1
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
            status = _KIND_STATUS.get(rec.kind, abi.Status.KERNEL_FAULT)
            unit, address, detail = rec.unit, rec.address, rec.detail
        else:  # KernelArgumentError: a kernel rejected its launch arguments (operation scope)
            status, unit, address = abi.Status.INVALID_ARGUMENT, self._unit_of(command), None
            detail = f"{type(err).__name__}: {err}"
        record = abi.ErrorRecord(status, self.device.index, ring.ring_id, command.seq, command.asid,
                                 unit, address, when, detail)
        self._raise_error(ring, command, record)

    def _raise_error(self, ring, command, record) -> None:
        """Applies ``record``'s scope (operation: that command only; context: sticky for the asid;
        stream: the ring's queued work is aborted until the driver acknowledges; device: every ring
        until a reset), poisons what the command should have written, logs it and raises the error
        interrupt."""
        scope = abi.STATUS_SCOPE.get(record.status, "context")
        if scope == "operation":
            pass
        elif scope == "device":
            if self.device_fault is None:
                self.device_fault = record
        elif scope == "stream":
            self.ring_faults.setdefault(ring.ring_id, record)
        else:
            self.faulted_asids[command.asid] = record
        self._aborting = True
        if command is not None:
            self._poison(command, record)
        self._log(record)
        log.info("device %d: %s", self.device.index, record)
        self.device.interrupts.raise_irq(abi.Irq.ERROR, record)

    def _log(self, record) -> None:
        if len(self.error_log) >= ERROR_LOG_ENTRIES:
            del self.error_log[1]  # the first error is kept in full, the oldest others go
        self.error_log.append(record)

    # -- faults: aborted work, injection, watchdog, reset ---------------------
    def _skip(self, ring, command) -> bool:
        """True (and the command's outputs poisoned) when its context, ring or device faulted, or
        when it reads a span that a failed command did not write (``poison_ranges``)."""
        record = self.device_fault or self.ring_faults.get(ring.ring_id) or self.faulted_asids.get(command.asid)
        if record is None:
            if not self.poison_ranges:
                return False
            record = self._reads_poison(ring, command)
            if record is None:
                return False
            self._poison(command, record)
            self.device.interrupts.raise_irq(abi.Irq.POISONED, abi.PoisonNotice(
                self.device.index, ring.ring_id, command.seq, self.env.now))
            return True
        self._poison(command, record)
        return True

    def _poison(self, command, record) -> None:
        """Notes the device operands ``command`` should have written (the driver marks them) and
        remembers their spans (``poison_ranges``)."""
        for desc in _written(command):
            if desc.space == _DEVICE:
                self.poisoned_writes.append((desc.device, desc.asid, desc.address, command.seq, record))
                lo, hi = _span(desc)
                if hi > lo:
                    self.poison_ranges.append([desc.device, desc.asid, lo, hi, record, None])
        if len(self.poisoned_writes) > POISON_ENTRIES:  # the driver collects at each synchronisation
            del self.poisoned_writes[:len(self.poisoned_writes) - POISON_ENTRIES]
        if len(self.poison_ranges) > POISON_ENTRIES:
            del self.poison_ranges[:len(self.poison_ranges) - POISON_ENTRIES]
        if self.poison_ranges:
            self._aborting = True

    def _reads_poison(self, ring, command):
        """The record of a poisoned span that ``command`` reads (None if none). A pure writer (a
        fill, a copy's destination) that covers a span makes it valid again: the span is dropped."""
        self._prune_poison_ranges()
        op = command[0]
        if op == _COPY:
            reads, writes = (command.src,), (command.dst,)
        elif op == _FILL:
            reads, writes = (), (command.dst,)
        elif op == _COLLECTIVE:
            reads, writes = tuple(src for _, src in command.pairs), tuple(dst for dst, _ in command.pairs)
        elif op == _LAUNCH and isinstance(command.args, tuple):
            # Any other kernel's operands all count as read: an output may be updated in place.
            args = command.args
            if command.kernel == "fill" and args:
                reads, writes = (), args[:1]
            elif command.kernel == "copy" and args:
                reads, writes = args[1:], args[:1]
            else:
                reads, writes = args, ()
        else:
            return None
        position = ring.consumed  # this command's place in its ring, plus one
        ranges = self.poison_ranges
        for desc in reads:
            if type(desc) is not abi.TensorDescriptor or desc.space != _DEVICE:
                continue
            lo, hi = _span(desc)
            for device, asid, plo, phi, record, marks in ranges:
                if (lo < phi and plo < hi and device == desc.device and asid == desc.asid
                        and (marks is None or position <= marks.get(ring.ring_id, 0))):
                    return record
        for desc in writes:
            if type(desc) is abi.TensorDescriptor and desc.space == _DEVICE and _dense(desc):
                lo, hi = _span(desc)
                ranges[:] = [r for r in ranges if not (r[0] == desc.device and r[1] == desc.asid
                                                       and lo <= r[2] and r[3] <= hi)]
        self._update_aborting()
        return None

    def _prune_poison_ranges(self) -> None:
        """Drops the spans the host collected once every ring has checked all the commands queued
        before it did (the host checks later ones itself)."""
        rings = self.device.command_processor.rings
        idle = self._idle_rings

        def done(marks):
            for ring_id, submitted in marks.items():
                ring = rings.get(ring_id)
                if ring is not None and not (ring.consumed > submitted
                                             or (ring.consumed == submitted and ring_id in idle)):
                    return False
            return True
        self.poison_ranges[:] = [r for r in self.poison_ranges if r[5] is None or not done(r[5])]

    def _inject(self, ring, command, op, now: float):
        """Fires an armed fault at this command (a generator: hangs and timeouts take simulated
        time). Returns _SKIPPED (the fault aborted the command), None, or an effect
        ``effect(pending, now) -> pending`` applied to the booked work."""
        faults = self.faults
        cls, engine, operands = self._describe(command, op)
        hit = faults.match(cls, engine, now, operands)
        if hit is None:
            return self._throttled if faults.clock_factor != 1.0 else None
        kind, spec = hit.spec.kind, hit.spec
        va = hit.operand[2] if hit.operand else None
        physical = self._physical(hit.operand)
        unit = "dma" if engine == "dma" or kind.startswith("dma") else engine + "_engine"
        if cls == COPY_HOST and kind.startswith("link"):
            unit = "host_link"
        elif cls == COPY_PEER and kind == "peer_link_error":
            unit = "interconnect"
        if len(self.events) >= ERROR_LOG_ENTRIES:
            del self.events[1]  # the first event is always kept
        self.events.append((kind, self.device.index, unit, va, now, command.seq, hit.handle))
        log.info("device %d: injected %s at command %d (t=%.0f ns)", self.device.index, kind, command.seq, now)
        watchdog = self.device.config.watchdog
        if kind == "ecc_correctable":
            self.device.hbm.ecc_corrected(physical or 0)
            return self._throttled if faults.clock_factor != 1.0 else None
        if kind == "bit_flip":
            return self._bit_flipper(hit, physical, command)
        if kind == "thermal_throttle":
            faults.clock_factor = spec.factor
            faults.armed = True
            return self._throttled
        if kind == "link_flaky":
            retries = 1 + hit.rng().randrange(3)
            faults.link_retries += retries
            return lambda pending, t: self._stretched(pending, t, 1.0 + retries)
        if kind == "ecc_uncorrectable":
            if physical is not None:
                page = self.device.hbm.ecc_uncorrected(physical, self._mmu.page_size)
                detail = f"uncorrectable ECC error in physical page 0x{page:x} (address 0x{physical:x})"
            else:
                detail = "uncorrectable ECC error (no physical address: the operand is not mapped)"
            unit = "hbm"
        elif kind == "dma_timeout":
            yield self.env.timeout(watchdog.timeout_ns)
            detail = f"DMA transfer did not complete within {watchdog.timeout_ns:.0f} ns"
        elif kind == "engine_hang":
            # The engine is stuck: nothing else runs on it until the watchdog declares it hung.
            self.device.engine(engine).timeline.hold_all(now, watchdog.timeout_ns)  # every core
            yield self.env.timeout(watchdog.timeout_ns)
            detail = f"{unit} busy for {watchdog.timeout_ns:.0f} ns without completing: the watchdog declared it hung"
        elif kind == "firmware_crash":
            detail = yield from self._crash(now, watchdog)
            unit = "firmware"
        elif kind == "page_fault":
            self._mmu.page_faults += 1
            detail = "injected page fault: the command touched an unmapped address"
            unit = "mmu"
        elif kind == "link_down":
            faults.link_down = True
            faults.armed = True
            detail = "the host link is down"
        elif kind == "ring_corruption":
            detail = (f"malformed command in ring {ring.ring_id}: opcode field 0x{(op ^ 0xA5) & 0xff:02x} "
                      f"is no valid opcode")
            unit = "command_processor"
        else:  # dma_error, peer_link_error
            detail = f"{kind.replace('_', ' ')} during the transfer"
        fault = InjectedFault(FaultRecord(kind, unit, self.device.index, va, self.env.now,
                                          f"{detail} [injected {kind}, fault handle {hit.handle}]"))
        self._record_error(ring, command, fault, self.env.now)
        return _SKIPPED

    def _crash(self, now: float, watchdog):
        """The firmware stops; the watchdog notices the missing heartbeat. Its detection time is
        computed, not polled: the last beat, plus the timeout, at the watchdog's next check."""
        self.crashed_at = now
        self._aborting = True
        beat = watchdog.heartbeat_ns
        last_beat = (now // beat) * beat
        detect = last_beat + watchdog.timeout_ns
        detect = -(-detect // beat) * beat
        if detect <= now:
            detect = now + beat
        yield self.env.timeout(detect - now)
        if self.crashed_at is not None:  # not reset meanwhile
            self.crashed_at = None
            if not self._revive.triggered:
                self._revive.succeed()
        return (f"firmware heartbeat lost: the last beat was at t={last_beat:.0f} ns, none for "
                f"{watchdog.timeout_ns:.0f} ns (watchdog timeout); the firmware crashed at t={now:.0f} ns")

    def _describe(self, command, op):
        """(command class, engine, [(device, asid, va, nbytes)]) for the injector."""
        if op == _COPY:
            dst, src = command.dst, command.src
            if dst.space != _DEVICE or src.space != _DEVICE:
                cls = COPY_HOST
            elif dst.device != src.device:
                cls = COPY_PEER
            else:
                cls = COPY_LOCAL
            return cls, "dma", _operands((dst, src))
        if op == _FILL:
            return FILL, "vector", _operands((command.dst,))
        if op == _LAUNCH:
            kernel = KERNELS.get(command.kernel) if isinstance(command.kernel, str) else None
            engine = kernel.engine if kernel is not None else "vector"
            written = _written(command)
            rest = [a for a in command.args if type(a) is abi.TensorDescriptor and a not in written]
            return LAUNCH, engine, _operands((*written, *rest))
        return None, None, []

    def _physical(self, operand):
        if operand is None:
            return None
        device, asid, va, _ = operand
        try:
            return self.device.peers[device].mmu.translate(asid, va, 1)
        except (HardwareFault, IndexError, KeyError):
            return None

    def _throttled(self, pending, now: float):
        return self._stretched(pending, now, 1.0 / self.faults.clock_factor)

    @staticmethod
    def _stretched(pending, now: float, factor: float):
        """The work's effect (and the ring's next command) comes ``factor`` times later: a slower
        clock or retried transfers. The engines' own bookings are not lengthened."""
        command, work, end = pending
        return command, work, now + (end - now) * factor

    def _bit_flipper(self, hit, physical, command):
        """The flip lands in the hit operand: after the command wrote it (an output), or before the
        command reads it (an input), so the corruption reaches what the command produced."""
        nbytes = max(hit.operand[3], 1) if hit.operand else 1
        rng = hit.rng()
        offset, bit = rng.randrange(nbytes), rng.randrange(8)
        hbm = self.device.peers[hit.operand[0]].hbm if hit.operand else None
        written = hit.operand is not None and any(
            d.space == _DEVICE and d.address == hit.operand[2] for d in _written(command))

        def flip():
            if hbm is not None and physical is not None:
                hbm.flip_bit(physical + offset, bit)

        def effect(pending, now):
            command, work, end = pending
            run = work[0]

            def run_and_flip(*operands):
                if not written:
                    flip()
                run(*operands)
                if written:
                    flip()
            return command, (run_and_flip, *work[1:]), end
        return effect

    def inject(self, spec) -> int:
        return self.faults.arm(spec)

    def health(self) -> dict:
        """Counters of the device's health (plain values, for the driver's mailbox)."""
        watchdog = self.device.config.watchdog
        now = self.env.now
        alive = self.crashed_at is None
        last_beat = (now if alive else self.crashed_at) // watchdog.heartbeat_ns * watchdog.heartbeat_ns
        return {**self.device.hbm.ecc_counters(),
                "throttled": self.faults.clock_factor != 1.0, "clock_factor": self.faults.clock_factor,
                "clock_ghz": self.device.config.clock_ghz * self.faults.clock_factor,
                "link_down": self.faults.link_down, "link_retries": self.faults.link_retries,
                "firmware_alive": alive, "last_heartbeat_ns": float(last_beat),
                "needs_reset": self.device_fault is not None, "firmware_resets": self.resets,
                "faults_armed": self.faults.active(), "errors_logged": len(self.error_log)}

    def begin_reset(self) -> None:
        """Reset, step 1: abort everything in flight. Every queued command is skipped (its outputs
        poisoned), every WAIT gives up and every SIGNAL still runs, so no fence waits forever."""
        if self.device_fault is None:
            self.device_fault = abi.ErrorRecord(abi.Status.DEVICE_RESET, self.device.index, -1, 0, 0,
                                                "firmware", None, self.env.now, "aborted by a device reset")
        self._aborting = True
        self.crashed_at = None
        if not self._revive.triggered:
            self._revive.succeed()
        if not self._abort_waits.triggered:
            self._abort_waits.succeed()

    def finish_reset(self) -> None:
        """Reset, step 2 (after the aborted work drained): the firmware and engines start clean.
        Armed faults stay armed; the state they left (clock, link) is reset."""
        self.faulted_asids.clear()
        self.ring_faults.clear()
        self.device_fault = None
        self._aborting = False
        self.crashed_at = None
        self._revive = self.env.event()
        self._abort_waits = self.env.event()
        self._resolved = LRUCache(_RESOLVED_ENTRIES)
        self._launches = LRUCache(_DECODED_ENTRIES)
        self.poison_ranges = []  # the host treats every allocation of a reset device as it must
        self.faults.reset_state()
        self.resets += 1

    def clear_context_fault(self, asid: int) -> None:
        self.faulted_asids.pop(asid, None)
        self._update_aborting()

    def clear_ring_fault(self, ring_id: int) -> None:
        self.ring_faults.pop(ring_id, None)
        self._update_aborting()

    def _update_aborting(self) -> None:
        self._aborting = bool(self.faulted_asids or self.ring_faults or self.device_fault is not None
                              or self.crashed_at is not None or self.poison_ranges)

    def take_poisoned_writes(self) -> list:
        """The outputs noted as not written since the last call. The host knows of them from now
        on: the spans apply only to the commands queued so far (each ring's submitted count)."""
        writes, self.poisoned_writes = self.poisoned_writes, []
        if self.poison_ranges:
            marks = None
            for r in self.poison_ranges:
                if r[5] is None:
                    if marks is None:
                        marks = {ring_id: ring.submitted
                                 for ring_id, ring in self.device.command_processor.rings.items()}
                    r[5] = marks
            self._prune_poison_ranges()
            self._update_aborting()
        return writes

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
        if command.opcode == abi.Opcode.COLLECTIVE:
            return "interconnect"
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
        # A copy holds one DMA engine, every link (direction) on its route, and HBM bandwidth for
        # the bytes it reads and writes on this device, all from the same start.
        dst, src = command.dst, command.src
        dev = self.device
        hbm = dev.hbm
        nbytes = prod(src.shape) * dtypes.ITEMSIZE[src.dtype]
        out = self._resolve(dst, "dma")   # translation faults first: a faulting copy moves nothing
        inp = self._resolve(src, "dma")
        if src.space == abi.MemorySpace.HOST:
            host = dev.host_link
            links, cfg, counter, lanes = (host.to_device,), host.config, "h2d", (host.lane_h2d,)
            host.bytes_to_device += nbytes
            read, written = 0, nbytes
        elif dst.space == abi.MemorySpace.HOST:
            host = dev.host_link
            links, cfg, counter, lanes = (host.to_host,), host.config, "d2h", (host.lane_d2h,)
            host.bytes_to_host += nbytes
            read, written = nbytes, 0
        elif dst.device != src.device:
            net = dev.interconnect
            links = net.route(src.device, dst.device)
            cfg, counter, lanes = net.config, "p2p", tuple(link.name for link in links)
            net.count(nbytes, links)
            read, written = nbytes, 0   # this device's HBM; the peer's is written through the link
        else:
            links, cfg, counter, lanes = (), None, "d2d", ()
            read, written = nbytes, nbytes
        hbm_ns = hbm.stream_ns(read + written)
        if not links:  # read and write through HBM
            duration = dev.dma.copy_ns(nbytes, hbm)
        else:
            bandwidth = cfg.bandwidth_gb_per_s * getattr(cfg, "links_per_pair", 1)
            duration = dev.dma.copy_ns(nbytes, hbm, bandwidth, cfg.latency_ns, len(links))
        hbm.bytes_read += read
        hbm.bytes_written += written
        pool = dev.dma.engines
        engine = pool.first_free()
        start = engine.earliest_start(now)
        for link in links:
            start = link.earliest_start(start)
        # HBM is shared with the cores and the other DMA engines: the copy's bytes queue there.
        hstart = hbm.timeline.free_at if hbm.timeline.free_at > start else start
        hbm.timeline.hold(hstart, hbm_ns)
        if hstart + hbm_ns > start + duration - dev.dma.config.setup_ns:
            duration = hstart + hbm_ns - start + dev.dma.config.setup_ns
        for link in links:
            link.hold(start, duration)
        end = engine.hold(start, duration)
        lane = dev.dma.lane_names[pool.lanes.index(engine)]
        engines = (lane, *lanes, hbm.lane)
        fixed = dev.dma.config.setup_ns + (cfg.latency_ns * len(links) if links else hbm.config.latency_ns)
        bound = "memory" if duration - fixed >= fixed else "latency"
        link = "host" if counter in ("h2d", "d2h") else "interconnect" if links else ""
        power = (self.power.copy_energy_j(read + written, nbytes * len(links), link), *self._unthrottled[1:])
        meta = ((bound, 0, "", engines, abi.ELEMENT_NAMES.get(int(dst.dtype), "")), start, start, power)
        return end, (KERNELS["copy"].run, (out, inp), f"memcpy_{counter}", "dma", start, end, nbytes, 0, meta)

    def _book_collective(self, command, now: float):
        # Its time is the device's interconnect model (emulator/collectives.py) for the op, size,
        # group shape and algorithm hint the command carries: the links and network port of this
        # device are held from max(now, not_before_ns, the links' free time) for that time; its
        # copies (the functional path through the host) take no time. op "" holds nothing.
        pairs = command.pairs
        operands, nbytes = [], 0
        for dst, src in pairs:
            operands.append(self._resolve(dst, "dma"))   # translation faults first: nothing moves
            operands.append(self._resolve(src, "dma"))
            nbytes += prod(src.shape) * dtypes.ITEMSIZE[src.dtype]
        start = command.not_before_ns if command.not_before_ns > now else now
        duration, lanes, bound, link_bytes = 0.0, (), "latency", 0
        if command.op:
            net = self.device.interconnect
            cost = collectives.collective_cost(command.op, command.nbytes, command.ranks, net.config,
                                               command.nodes, command.hops, command.algorithm)
            duration, link_bytes = cost.time_ns, cost.link_bytes
        if duration > 0:
            links = net.collective_links(self.device.index)
            for link in links:
                start = link.earliest_start(start)
            for link in links:
                link.hold(start, duration)
                link.bytes += link_bytes
            lanes, bound = tuple(link.name for link in links), "interconnect"
        end = start + duration
        dtype = abi.ELEMENT_NAMES.get(int(pairs[0][0].dtype), "") if pairs else ""
        meta = ((bound, 0, "", lanes, dtype), start, start,   # energy: its bytes over each link it held
                (self.power.copy_energy_j(0, link_bytes * len(lanes), "interconnect"), *self._unthrottled[1:]))
        return end, (_copy_pairs, operands, f"collective.{command.name}", "interconnect", start, end, nbytes, 0,
                     meta)

    def _book_kernel(self, name, args, now: float, launched=None):
        # A launch's operands and cost depend only on its arguments and the page tables, so
        # a repeated launch (a training loop's) is decoded once (the TLB's and the command
        # processor's job; invalidated by any page-table change).
        # 0 == -0.0 == False: launches whose arguments differ only in a zero's sign or type would
        # share a cache entry (and -0.0 would fill +0.0), so the key of a launch with a zero
        # argument also spells out each zero (its position, type and repr).
        key = (name, args) if 0 not in args else (name, args, _zeros_of(args))
        generation = self._mmu.generation
        launches = self._launches
        decoded = launches._data.get(key)  # LRUCache.get, inlined (the hot path)
        if decoded is None or decoded[0] != generation:
            decoded = self._decode_launch(name, args, generation)
            launches.put(key, decoded)
        else:
            launches._data.move_to_end(key)
        _, run, timeline, unit, label, operands, duration, nbytes, flops, launch_ns, hbm_ns, static, power = decoded
        if launched is not None:  # launched ahead by _ring_process (while the ring's previous kernel ran)
            launch_start, launch_end = launched, launched + launch_ns
        elif launch_ns:  # the command processor launches the kernel, then the engines run it
            cp = self._launch_timeline   # (Timeline.hold, inlined: this is the hot path)
            launch_start = cp.free_at if cp.free_at > now else now
            now = launch_end = cp.free_at = launch_start + launch_ns
            cp.busy_ns += launch_ns
            cp.jobs += 1
        else:
            launch_start = launch_end = now
        # The kernel takes the cores free first (CoreTimelines.reserve, inlined for the common case:
        # every core free, it runs on cores 0..k-1 and the trace's lanes are the decoded ones).
        cores = static[1]
        if timeline.all_free_at <= now:
            start, chosen = now, None
        else:
            start, chosen = timeline.reserve(now, cores)
            static = _on_cores(static, chosen, self.device.engine(timeline_kind(unit)).lane_names)
        end = start + duration
        if hbm_ns:  # its HBM traffic queues behind other streams' and copies' (contention)
            hbm = self._hbm_timeline
            hstart = hbm.free_at if hbm.free_at > start else start
            hbm.free_at = hstart + hbm_ns
            hbm.busy_ns += hbm_ns
            hbm.jobs += 1
            if hstart > start:  # HBM was busy: a memory-bound kernel waits it out, a compute-bound
                # one needs only its own traffic done by its end
                end = hstart + duration if static[0] != "compute" else max(end, hstart + hbm_ns)
        timeline.hold(chosen, cores, start, end)
        return end, (run, operands, label, unit, start, end, nbytes, flops, (static, launch_start, launch_end, power))

    def _decode_launch(self, name, args, generation):
        kernel = KERNELS.get(name)
        if kernel is None:
            raise HardwareFault(_unknown_kernel(self, name))
        unit = kernel.engine + "_engine"
        operands = self._resolve_args(args, unit)
        device = self.device
        # The cost depends on the operands' types, shapes and strides, and of their addresses only
        # on which overlap (aliased operands are read once, emulator/memory.py): a launch decoded
        # again (new buffers, or page tables changed) reuses it.
        cost_key = (name, *[(o.dtype, o.shape, o.strides) if type(o) is Operand else (type(o), o)
                             for o in operands], alias_key(operands))
        decided = self._costs.get(cost_key)
        if decided is None:
            # The power management picks the clock under the mode's cap (the cost model's own cost
            # when the kernel fits at the top clock) and prices the kernel's energy.
            decided = self.power.kernel(kernel, operands, kernel.cost(device, *operands),
                                        first_input_dtype(operands) if kernel.engine == "matrix" else "")
            self._costs.put(cost_key, decided)
        cost = decided.cost
        launch_ns = device.command_processor.config.launch_ns if name != "fill" else 0.0
        label = f"{name}.{args[0]}" if isinstance(args[0], str) else name
        out = next((o for o in operands if type(o) is Operand), None)
        dtype = dtypes.NAMES.get(out.dtype, "") if out is not None else ""
        hbm_ns = 0.0 if device.config.scratchpad.operands_resident else device.hbm.stream_ns(cost.nbytes)
        engines = ((device.launch_lane,) if launch_ns else ()) + tuple(cost.engines)
        static = (cost.bound, max(1, min(cost.cores, device.config.cores)), cost.tiling, engines, dtype)
        power = (decided.dynamic_j, decided.static_w, decided.clock_ghz, decided.throttled)
        operands = tuple(operands)
        run = kernel.run
        bind = getattr(run, "bind", None)
        if bind is not None:  # the kernel reads its operands' fields once, here
            run, operands = bind(*operands), ()
        return (generation, run, device.engine(kernel.engine).timeline, unit, label,
                operands, cost.ns, cost.nbytes, cost.flops, launch_ns, hbm_ns, static, power)

    def byte_counters(self) -> dict:
        """Bytes moved so far: HBM (kernels' operand traffic, and copies' reads and writes), this
        device's host link per direction, and the interconnect (every device's traffic)."""
        dev = self.device
        return {"hbm_kernel_bytes": self._hbm_bytes, "hbm_copy_read_bytes": dev.hbm.bytes_read,
                "hbm_copy_written_bytes": dev.hbm.bytes_written,
                "host_link_h2d_bytes": dev.host_link.bytes_to_device,
                "host_link_d2h_bytes": dev.host_link.bytes_to_host,
                "interconnect_bytes": dev.interconnect.bytes_moved,
                "links": {link.name: link.bytes for link in dev.interconnect.all_links()}}


ERROR_LOG_ENTRIES = 10_000
POISON_ENTRIES = 100_000
_SKIPPED = object()  # _inject's answer: the fault aborted the command
_KIND_STATUS = {"page_fault": abi.Status.PAGE_FAULT, "bus_error": abi.Status.BUS_ERROR,
                "unknown_kernel": abi.Status.UNKNOWN_KERNEL, "invalid_command": abi.Status.INVALID_COMMAND,
                "kernel_fault": abi.Status.KERNEL_FAULT, **abi.KIND_STATUS,
                "firmware_crash": abi.Status.HEARTBEAT_LOST}


def timeline_kind(unit: str) -> str:
    """"matrix" for "matrix_engine", "vector" for "vector_engine"."""
    return unit[:-7]


def _on_cores(static, chosen, lane_names) -> tuple:
    """The decoded launch's static trace fields with its engine lanes moved to the cores it got."""
    bound, cores, tiling, engines, dtype = static
    moved = [lane for lane in engines if ".core" not in lane]
    at = next((i for i, lane in enumerate(engines) if ".core" in lane), len(moved))
    moved[at:at] = [lane_names[i] for i in chosen]
    return bound, cores, tiling, tuple(moved), dtype


def _zeros_of(args) -> tuple:
    """(position, type, repr) of each zero number in ``args`` (0, 0.0, -0.0 and False compare equal)."""
    return tuple((i, type(a), repr(a)) for i, a in enumerate(args) if type(a) in _NUMBER_TYPES and a == 0)


_NUMBER_TYPES = (bool, int, float)


def _written(command) -> tuple:
    """The tensor descriptors ``command`` writes (abi.LAUNCH_WRITES for launches)."""
    op = command[0]
    if op == _COPY or op == _FILL:
        return (command.dst,) if type(command.dst) is abi.TensorDescriptor else ()
    if op == _COLLECTIVE:
        return tuple(dst for dst, _ in command.pairs if type(dst) is abi.TensorDescriptor)
    if op != _LAUNCH or not isinstance(command.args, tuple):
        return ()
    writes = abi.LAUNCH_WRITES.get(command.kernel) if isinstance(command.kernel, str) else None
    args = command.args
    if writes is None:
        first = next((a for a in args if type(a) is abi.TensorDescriptor), None)
        return (first,) if first is not None else ()
    if writes == "all":
        return tuple(a for a in args if type(a) is abi.TensorDescriptor)
    return tuple(args[i] for i in writes if i < len(args) and type(args[i]) is abi.TensorDescriptor)


def _span(desc) -> tuple:
    """[lo, hi) bytes of a device descriptor (strides are non-negative: the driver checks them)."""
    if 0 in desc.shape:
        return desc.address, desc.address
    span = 1
    for n, st in zip(desc.shape, desc.strides):
        span += (n - 1) * st
    return desc.address, desc.address + span * dtypes.ITEMSIZE[desc.dtype]


def _dense(desc) -> bool:
    """Whether the descriptor's elements fill its span (C-contiguous, or a single element)."""
    step = 1
    for n, st in zip(reversed(desc.shape), reversed(desc.strides)):
        if n != 1 and st != step:
            return False
        step *= n
    return True


def _copy_pairs(*operands) -> None:
    """A COLLECTIVE's effect: copies operands[1] into operands[0], [3] into [2], ..."""
    copy = KERNELS["copy"].run
    for i in range(0, len(operands), 2):
        copy(operands[i], operands[i + 1])


def _operands(descs) -> list:
    """(device, asid, va, nbytes) of each device descriptor."""
    out = []
    for d in descs:
        if type(d) is not abi.TensorDescriptor or d.space != _DEVICE:
            continue
        try:
            span = 1
            for n, st in zip(d.shape, d.strides):
                span += (n - 1) * st
            nbytes = 0 if 0 in d.shape else span * dtypes.ITEMSIZE[d.dtype]
        except (TypeError, KeyError):
            nbytes = 0
        out.append((d.device, d.asid, d.address, nbytes))
    return out


def _unknown_kernel(instance, name):
    return FaultRecord("unknown_kernel", "command_processor", instance.device.index, None,
                       instance.env.now, f"no kernel named {name!r} in the device kernel library")
