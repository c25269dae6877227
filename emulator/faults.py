"""Fault injection: hardware events armed on a device and fired by the commands it runs.

A ``FaultSpec`` names one of the kinds below and the trigger that fires it; a
``FaultInjector`` (one per device) holds the armed specs. The firmware consults
the injector once per command, and only while something is armed (``armed`` is
one attribute check on the hot path). When a spec's triggers all hold for a
command, the injector returns a ``Hit`` (the spec and the operand it hit) and the
firmware turns it into the hardware event: an error record, a silent change of
memory, or a change of the device's state (a slower clock, a dead link).

Triggers (all given ones must hold; none given = the next eligible command):
``at_time_ns`` (the first eligible command at or after that simulated time),
``after_commands`` (N eligible commands pass, the next one fires; ``engine``
restricts the count to one engine), ``address_range=(lo, hi)`` (a command with
an operand overlapping the virtual range), ``probability`` + ``seed`` (a seeded
draw per eligible command; ``seed`` also seeds which bit a ``bit_flip`` flips). One-shot unless
``persistent=True``.

Left out: faults in the middle of a transfer (a command faults as a whole),
multi-bit ECC patterns, scrubbing, and link-level packet replay.
"""
from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field

# kind -> what happens (the strings scripts use)
KINDS = {
    "ecc_correctable": "HBM correctable ECC error: counted, data intact",
    "ecc_uncorrectable": "HBM uncorrectable ECC error: the data is poisoned, the device needs a reset",
    "bit_flip": "one bit flipped in memory without ECC: silent data corruption",
    "dma_error": "DMA transfer error: the copy fails, its stream is aborted",
    "dma_timeout": "DMA timeout: the copy never completes, its stream is aborted",
    "page_fault": "MMU page fault: the command touches an unmapped address (sticky for its context)",
    "engine_hang": "a compute engine hangs; the watchdog catches it, the device needs a reset",
    "firmware_crash": "the firmware crashes and its heartbeat is lost; the device needs a reset",
    "ring_corruption": "the command ring is corrupted: a malformed command, its stream is aborted",
    "link_down": "the host link goes down: host transfers fail, the device needs a reset",
    "link_flaky": "the host link drops transfers, which are retried (counted, slower, data intact)",
    "peer_link_error": "an inter-device link error: the peer copy fails, its stream is aborted",
    "thermal_throttle": "the clock is reduced: a performance fault visible in projected time, not an error",
}

# The scope of the error each kind raises (None: no error is raised).
SCOPES = {
    "ecc_correctable": None, "ecc_uncorrectable": "device", "bit_flip": None, "dma_error": "stream",
    "dma_timeout": "stream", "page_fault": "context", "engine_hang": "device", "firmware_crash": "device",
    "ring_corruption": "stream", "link_down": "device", "link_flaky": None, "peer_link_error": "stream",
    "thermal_throttle": None,
}

TRIGGERS = ("at_time_ns", "after_commands", "engine", "address_range", "probability", "seed", "persistent")
OPTIONS = ("factor",)  # thermal_throttle: clock multiplier in (0, 1], default 0.5
ENGINES = ("dma", "vector", "matrix")

# Command classes, as the firmware describes a command to the injector. ELIGIBLE: the commands
# each kind can hit (a compute engine hangs only under a kernel or a fill; the host link carries
# only host transfers, the interconnect only device-to-device copies).
COPY_HOST, COPY_PEER, COPY_LOCAL, FILL, LAUNCH = "copy_host", "copy_peer", "copy_local", "fill", "launch"
_MEMORY = frozenset({COPY_HOST, COPY_PEER, COPY_LOCAL, FILL, LAUNCH})
ELIGIBLE = {
    "ecc_correctable": _MEMORY, "ecc_uncorrectable": _MEMORY, "bit_flip": _MEMORY, "page_fault": _MEMORY,
    # A kernel's operands stream through the DMA engines too (HBM <-> scratchpad).
    "dma_error": _MEMORY, "dma_timeout": _MEMORY,
    "engine_hang": frozenset({FILL, LAUNCH}),
    "firmware_crash": _MEMORY, "ring_corruption": _MEMORY, "thermal_throttle": _MEMORY,
    "link_down": frozenset({COPY_HOST}), "link_flaky": frozenset({COPY_HOST}),
    "peer_link_error": frozenset({COPY_PEER}),
}


class FaultSpecError(ValueError):
    """A fault request names an unknown kind or trigger, or a bad trigger value."""


@dataclass(frozen=True)
class FaultSpec:
    kind: str
    device: int = 0
    at_time_ns: float | None = None
    after_commands: int | None = None
    engine: str | None = None
    address_range: tuple | None = None
    probability: float | None = None
    seed: int | None = None
    persistent: bool = False
    factor: float = 0.5

    def __post_init__(self):
        if self.kind not in KINDS:
            raise FaultSpecError(f"unknown fault kind {self.kind!r}; valid kinds: {', '.join(KINDS)}")
        if type(self.device) is not int or self.device < 0:
            raise FaultSpecError(f"device must be an int >= 0, got {self.device!r}")
        if self.at_time_ns is not None and (not isinstance(self.at_time_ns, (int, float))
                                            or isinstance(self.at_time_ns, bool) or not self.at_time_ns >= 0):
            raise FaultSpecError(f"at_time_ns must be a number >= 0, got {self.at_time_ns!r}")
        if self.after_commands is not None and (type(self.after_commands) is not int or self.after_commands < 0):
            raise FaultSpecError(f"after_commands must be an int >= 0, got {self.after_commands!r}")
        if self.engine is not None and self.engine not in ENGINES:
            raise FaultSpecError(f"engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if self.address_range is not None:
            r = self.address_range
            if (not isinstance(r, (tuple, list)) or len(r) != 2 or not all(type(v) is int for v in r)
                    or not 0 <= r[0] < r[1]):
                raise FaultSpecError(f"address_range must be (lo, hi) ints with 0 <= lo < hi, got {r!r}")
            object.__setattr__(self, "address_range", (int(r[0]), int(r[1])))
        if self.probability is not None and (not isinstance(self.probability, (int, float))
                                             or isinstance(self.probability, bool)
                                             or not 0 < self.probability <= 1):
            raise FaultSpecError(f"probability must be in (0, 1], got {self.probability!r}")
        if self.seed is not None and type(self.seed) is not int:
            raise FaultSpecError(f"seed must be an int, got {self.seed!r}")
        if type(self.persistent) is not bool:
            raise FaultSpecError(f"persistent must be True or False, got {self.persistent!r}")
        if not isinstance(self.factor, (int, float)) or isinstance(self.factor, bool) or not 0 < self.factor <= 1:
            raise FaultSpecError(f"factor must be in (0, 1], got {self.factor!r}")

    @classmethod
    def build(cls, kind: str, device: int = 0, **trigger) -> "FaultSpec":
        """A spec from keyword arguments; unknown ones are rejected with the list of valid ones."""
        unknown = sorted(set(trigger) - set(TRIGGERS) - set(OPTIONS))
        if unknown:
            raise FaultSpecError(f"unknown trigger argument(s) {', '.join(unknown)}; valid ones: "
                                 f"{', '.join(TRIGGERS + OPTIONS)}")
        return cls(kind, device, **trigger)

    @property
    def scope(self) -> str | None:
        return SCOPES[self.kind]


@dataclass
class Hit:
    """A fired spec and what it hit: the operand (device, asid, virtual address, bytes) if any."""
    spec: FaultSpec
    handle: int
    operand: tuple | None = None
    count: int = 0  # eligible commands the spec had seen when it fired (seeds its random choices)

    def rng(self) -> random.Random:
        """Random choices of this firing (which bit flips, how many retries): a function of the
        spec's seed and of how many commands it saw, so the same run gives the same choices."""
        return random.Random((self.spec.seed or 0) * 1_000_003 + self.count)


@dataclass
class _Armed:
    spec: FaultSpec
    handle: int
    rng: random.Random | None
    seen: int = 0
    fired: int = 0


@dataclass
class FaultInjector:
    """The armed faults of one device and the state they left (throttle, link)."""

    device_index: int
    armed: bool = False          # the firmware's one check per command
    _specs: list = field(default_factory=list)
    _next: int = 1
    _lock: threading.Lock = field(default_factory=threading.Lock)
    fired: list = field(default_factory=list)   # (handle, kind, sim_time_ns, seq)
    clock_factor: float = 1.0    # thermal throttle: < 1 while throttled
    link_down: bool = False
    link_retries: int = 0

    def arm(self, spec: FaultSpec) -> int:
        with self._lock:
            handle = self._next
            self._next += 1
            rng = random.Random(spec.seed if spec.seed is not None else handle) if spec.probability else None
            self._specs.append(_Armed(spec, handle, rng))
            self._update()
            return handle

    def cancel(self, handle: int) -> bool:
        with self._lock:
            before = len(self._specs)
            self._specs = [a for a in self._specs if a.handle != handle]
            self._update()
            return len(self._specs) != before

    def clear(self) -> None:
        """Removes every armed spec and the state faults left (the clock, the link)."""
        with self._lock:
            self._specs = []
            self.reset_state()

    def reset_state(self) -> None:
        """A device reset: the clock and the link come back; armed specs stay armed."""
        self.clock_factor = 1.0
        self.link_down = False
        self._update()

    def active(self) -> list[dict]:
        return [{"handle": a.handle, "kind": a.spec.kind, "persistent": a.spec.persistent, "fired": a.fired}
                for a in self._specs]

    def _update(self) -> None:
        self.armed = bool(self._specs) or self.clock_factor != 1.0 or self.link_down

    def match(self, command_class: str, engine: str, now: float, operands) -> Hit | None:
        """The armed spec that fires at this command, or None. Every armed spec sees the command
        (counts for after_commands, draws for probability); when several would fire, the first one
        that raises an error wins, and the others stay armed for the next eligible command.
        ``operands`` is a list of (device, asid, va, nbytes) the command touches."""
        if not self._specs:
            return None
        with self._lock:
            candidates = []
            for armed in self._specs:
                spec = armed.spec
                if command_class not in ELIGIBLE[spec.kind]:
                    continue
                if spec.engine is not None and spec.engine != engine:
                    continue
                if spec.at_time_ns is not None and now < spec.at_time_ns:
                    continue
                operand = operands[0] if operands else None
                if spec.address_range is not None:
                    lo, hi = spec.address_range
                    operand = next((o for o in operands if o[2] < hi and o[2] + max(o[3], 1) > lo), None)
                    if operand is None:
                        continue
                armed.seen += 1
                if spec.after_commands is not None and armed.seen <= spec.after_commands:
                    continue
                if armed.rng is not None and armed.rng.random() >= spec.probability:
                    continue
                candidates.append((armed, operand))
            if not candidates:
                return None
            armed, operand = next((c for c in candidates if SCOPES[c[0].spec.kind] is not None), candidates[0])
            for other, _ in candidates:
                if other is not armed:
                    other.seen -= 1  # not this command: it fires at the next eligible one
            armed.fired += 1
            if not armed.spec.persistent:
                self._specs.remove(armed)
                self._update()
            return Hit(armed.spec, armed.handle, operand, armed.seen)
