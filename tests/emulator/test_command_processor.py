"""Command processor (emulator/command_processor.py): rings, doorbells, fence semaphores."""
import pytest
import simpy

from emulator.command_processor import CommandProcessor, CommandRing, SemaphoreBank
from emulator.config import CommandProcessorConfig
from emulator.errors import EmulatorBug


@pytest.fixture
def env():
    return simpy.Environment()


# -- rings -------------------------------------------------------------------

def test_ring_is_fifo_and_counts(env):
    ring = CommandRing(env, 0, entries=4)
    assert ring.free_slots() == 4 and len(ring) == 0
    for cmd in ("a", "b", "c"):
        ring.write(cmd)
    assert ring.free_slots() == 1 and len(ring) == 3
    assert [ring.read(), ring.read()] == ["a", "b"]
    ring.write("d")
    assert [ring.read(), ring.read()] == ["c", "d"]
    assert (ring.submitted, ring.consumed, ring.free_slots()) == (4, 4, 4)


def test_ring_overflow_raises(env):
    ring = CommandRing(env, 3, entries=2)
    ring.write(1)
    ring.write(2)
    with pytest.raises(EmulatorBug, match="ring 3 overflow"):
        ring.write(3)
    assert len(ring) == 2
    ring.read()
    ring.write(3)  # a read made room
    assert ring.submitted == 3


def _consumed_ring(env):
    """A ring of 8 entries and the list of (time, command) its consumer process reads, the
    consumer following the firmware's protocol: wait on the doorbell while the ring is empty."""
    ring = CommandRing(env, 0, entries=8)
    seen = []

    def firmware():
        while True:
            if not len(ring):
                yield ring.doorbell()
            seen.append((env.now, ring.read()))

    env.process(firmware())
    return ring, seen


def test_doorbell_wakes_the_consumer(env):
    ring, seen = _consumed_ring(env)

    def host():
        yield env.timeout(10)
        ring.write("x")
        ring.ring_doorbell()
        yield env.timeout(5)
        ring.write("y")
        ring.write("z")
        ring.ring_doorbell()

    env.process(host())
    env.run(until=100)
    assert seen == [(10, "x"), (15, "y"), (15, "z")]


def test_written_but_not_rung_commands_wait_for_the_doorbell(env):
    ring, seen = _consumed_ring(env)
    env.run(until=5)

    def host():
        ring.write("late")     # nobody rings yet
        yield env.timeout(20)
        ring.ring_doorbell()

    env.process(host())
    env.run(until=100)
    assert seen == [(25, "late")]


def test_doorbell_event_fires_only_when_rung(env):
    ring = CommandRing(env, 0, entries=8)
    bell = ring.doorbell()
    ring.write("a")
    assert not bell.triggered          # writing alone does not ring
    ring.ring_doorbell()
    assert bell.triggered
    ring.ring_doorbell()               # ringing twice is harmless
    ring.read()
    again = ring.doorbell()            # a fresh event for the next wait
    assert again is not bell and not again.triggered


def test_space_available_can_wait_for_several_slots(env):
    ring = CommandRing(env, 0, entries=8)
    for i in range(8):
        ring.write(i)
    space = ring.space_available(4)
    freed_at = []

    def wait_for_space():
        yield space
        freed_at.append((env.now, ring.free_slots()))

    def firmware():
        for _ in range(8):
            yield env.timeout(10)
            ring.read()

    env.process(wait_for_space())
    env.process(firmware())
    env.run()
    assert freed_at == [(40, 4)]


def test_space_available_fires_on_read(env):
    ring = CommandRing(env, 0, entries=2)
    ring.write(1)
    ring.write(2)
    space = ring.space_available()
    freed_at = []

    def wait_for_space():
        yield space
        freed_at.append(env.now)

    def firmware():
        yield env.timeout(30)
        ring.read()

    env.process(wait_for_space())
    env.process(firmware())
    env.run()
    assert freed_at == [30]
    assert ring.free_slots() == 1


# -- semaphores --------------------------------------------------------------

def test_semaphore_values_are_monotonic(env):
    sems = SemaphoreBank(env)
    assert sems.value(5) == 0
    sems.signal(5, 3)
    sems.signal(5, 2)  # lower value: ignored
    assert sems.value(5) == 3
    assert sems.value(6) == 0


def test_semaphore_wait_releases_in_signal_order(env):
    sems = SemaphoreBank(env)
    log = []

    def waiter(name, target):
        value = yield sems.wait(1, target)
        log.append((env.now, name, value))

    def signaller():
        yield env.timeout(10)
        sems.signal(1, 1)
        yield env.timeout(10)
        sems.signal(1, 3)

    env.process(waiter("needs3", 3))
    env.process(waiter("needs1", 1))
    env.process(waiter("needs2", 2))
    env.process(signaller())
    env.run()
    assert [(t, n) for t, n, _ in log] == [(10, "needs1"), (20, "needs3"), (20, "needs2")]
    assert log[0][2] == 1 and log[1][2] == 3
    assert sems.signalled_at(1) == 20


def test_wait_for_a_value_already_reached_is_immediate(env):
    sems = SemaphoreBank(env)
    sems.signal(2, 4)
    event = sems.wait(2, 4)
    assert event.triggered and event.value == 4


def test_ignored_signal_does_not_move_the_timestamp(env):
    sems = SemaphoreBank(env)
    env.run(until=7)
    sems.signal(9, 2)
    env.run(until=50)
    sems.signal(9, 1)
    assert sems.signalled_at(9) == 7


def test_wait_and_signal_order_work_between_processes(env):
    """A consumer waiting on a fence runs only after the producer signalled it."""
    sems = SemaphoreBank(env)
    order = []

    def producer():
        yield env.timeout(100)
        order.append(("produce", env.now))
        sems.signal(4, 1)

    def consumer():
        yield sems.wait(4, 1)
        order.append(("consume", env.now))

    env.process(consumer())
    env.process(producer())
    env.run()
    assert order == [("produce", 100), ("consume", 100)]


# -- the processor -----------------------------------------------------------

def test_command_processor_creates_numbered_rings(env):
    cp = CommandProcessor(env, CommandProcessorConfig(ring_entries=16), device_index=0)
    rings = [cp.create_ring() for _ in range(3)]
    assert [r.ring_id for r in rings] == [0, 1, 2]
    assert all(r.entries == 16 for r in rings)
    assert cp.rings[1] is rings[1]
