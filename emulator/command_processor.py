"""Command processor: submission rings, doorbells and fence semaphores.

This is the hardware the firmware runs on and the driver writes to. A ring is a
fixed number of command slots with a write pointer (advanced by the driver) and a
read pointer (advanced by the firmware); the doorbell wakes the firmware's ring
process. Semaphores are 64-bit fence words in device memory that commands signal
and wait on; a waiter is released when the word reaches its target.

Left out: the command fetch over the host link (commands sit in device-visible
memory already), priorities between rings.
"""
from __future__ import annotations

from collections import deque

from emulator.config import CommandProcessorConfig
from emulator.errors import EmulatorBug


class CommandRing:
    def __init__(self, env, ring_id: int, entries: int):
        self.env = env
        self.ring_id = ring_id
        self.entries = entries
        self._slots: deque = deque()
        # Each event with its own "triggered" flag: SimPy's Event.triggered is a Python property,
        # and push and read (every command) test it.
        self._doorbell = env.event()
        self._rung = False
        self._space = env.event()
        self._space_freed = False
        self._space_needed = 1
        self.submitted = 0
        self.consumed = 0

    def free_slots(self) -> int:
        return self.entries - len(self._slots)

    def write(self, command) -> None:
        if len(self._slots) >= self.entries:
            raise EmulatorBug(f"ring {self.ring_id} overflow: the driver must wait for space")
        self._slots.append(command)
        self.submitted += 1

    def push(self, command) -> bool:
        """write() and ring_doorbell() in one call; False (nothing written) when the ring is full."""
        slots = self._slots
        if len(slots) >= self.entries:
            return False
        slots.append(command)
        self.submitted += 1
        if not self._rung:
            self._rung = True
            self._doorbell.succeed()
        return True

    def ring_doorbell(self) -> None:
        if not self._rung:
            self._rung = True
            self._doorbell.succeed()

    def doorbell(self):
        """Event the firmware waits on while the ring is empty."""
        if self._rung:
            self._doorbell = self.env.event()
            self._rung = False
        return self._doorbell

    def read(self):
        command = self._slots.popleft()
        self.consumed += 1
        if not self._space_freed and self.entries - len(self._slots) >= self._space_needed:
            self._space_freed = True
            self._space.succeed()
        return command

    def space_available(self, min_free: int = 1):
        """Event that fires once the firmware has freed ``min_free`` slots."""
        if self._space_freed:
            self._space = self.env.event()
            self._space_freed = False
        self._space_needed = min_free
        return self._space

    def __len__(self) -> int:
        return len(self._slots)


class SemaphoreBank:
    """Fence words: monotonically increasing values with waiters."""

    def __init__(self, env):
        self.env = env
        self._values: dict[int, int] = {}
        self._waiters: dict[int, list] = {}
        self._times: dict[int, float] = {}

    def value(self, sem_id: int) -> int:
        return self._values.get(sem_id, 0)

    def signalled_at(self, sem_id: int) -> float:
        return self._times.get(sem_id, 0.0)

    def signal(self, sem_id: int, value: int) -> None:
        if value <= self._values.get(sem_id, 0):
            return
        self._values[sem_id] = value
        self._times[sem_id] = self.env.now
        waiters = self._waiters.get(sem_id)
        if waiters:
            keep = []
            for target, event in waiters:
                if target <= value:
                    event.succeed(value)
                else:
                    keep.append((target, event))
            self._waiters[sem_id] = keep

    def wait(self, sem_id: int, target: int):
        event = self.env.event()
        if self._values.get(sem_id, 0) >= target:
            event.succeed(self._values[sem_id])
        else:
            self._waiters.setdefault(sem_id, []).append((target, event))
        return event


class CommandProcessor:
    def __init__(self, env, config: CommandProcessorConfig, device_index: int):
        self.env = env
        self.config = config
        self.device_index = device_index
        self.rings: dict[int, CommandRing] = {}
        self.semaphores = SemaphoreBank(env)
        self._next_ring = 0

    def create_ring(self) -> CommandRing:
        ring = CommandRing(self.env, self._next_ring, self.config.ring_entries)
        self.rings[ring.ring_id] = ring
        self._next_ring += 1
        return ring
