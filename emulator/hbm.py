"""High-bandwidth memory: the device's byte store and its bandwidth model.

The store is one anonymous private mapping of the configured capacity, created
with MAP_NORESERVE so the host commits pages only when they are touched: a 16 GiB
device costs nothing until used. Addresses here are *physical* device addresses
(offsets into the store); virtual addresses are the MMU's business.

Bandwidth is one reservation timeline shared by the device's cores, streams and DMA
engines (contention); ``efficiency`` derates the peak.

In projection mode (``backed=False``) there is no store at all: the memory is address space
only (the MMU still translates, so faults still happen), host addresses are offsets from 0 that
nothing dereferences, and nothing is ever resident.

Left out: banks/channels conflicts, refresh, and ECC scrubbing (ECC faults can
be injected by marking addresses poisoned).
"""
from __future__ import annotations

import ctypes
import mmap

import numpy as np

from emulator.config import HbmConfig
from emulator.errors import EmulatorBug, FaultRecord, HardwareFault
from emulator.timeline import Timeline

_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)  # Linux value; Python 3.11 lacks the name


class HbmTiming:
    """HBM's timing model alone (no store): what kernel cost functions use."""

    def __init__(self, config: HbmConfig, device_index: int):
        self.config = config
        self.device_index = device_index
        # Bandwidth reservation shared by every core, stream and DMA engine of the device.
        self.timeline = Timeline()
        self.lane = f"dev{device_index}.hbm"
        self.bytes_per_ns = config.sustained_gb_per_s

    def transfer_ns(self, nbytes: int) -> float:
        """Time to stream ``nbytes`` through HBM at its sustained bandwidth (peak x efficiency;
        GB/s == bytes/ns), latency included."""
        return self.config.latency_ns + nbytes / self.bytes_per_ns

    def stream_ns(self, nbytes: int) -> float:
        """The bandwidth term alone (no latency)."""
        return nbytes / self.bytes_per_ns


class HBM(HbmTiming):
    def __init__(self, env, config: HbmConfig, device_index: int, backed: bool = True):
        super().__init__(config, device_index)
        self.env = env
        self.config = config
        self.device_index = device_index
        self.capacity = config.capacity_bytes
        self.backed = backed
        if backed:
            self._store = mmap.mmap(-1, self.capacity,
                                    flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE)
            self._bytes = np.frombuffer(self._store, dtype=np.uint8)
            self.base_address = self._bytes.ctypes.data
        else:  # projection: address space only
            self._store = self._bytes = None
            self.base_address = 0
        # Byte counters (kept by the firmware per command: kernel operand traffic and copies).
        self.bytes_read = 0
        self.bytes_written = 0

    def host_address(self, physical: int, nbytes: int) -> int:
        """Host pointer backing ``nbytes`` at ``physical``; a bus error outside the store."""
        if physical < 0 or nbytes < 0 or physical + nbytes > self.capacity:
            raise HardwareFault(FaultRecord(
                "bus_error", "hbm", self.device_index, physical, self.env.now,
                f"access of {nbytes} bytes outside the {self.capacity}-byte memory"))
        return self.base_address + physical

    def view(self, physical: int, nbytes: int) -> np.ndarray:
        self.host_address(physical, nbytes)
        if not self.backed:
            raise EmulatorBug("a view of device memory in projection mode: the memory holds no bytes")
        return self._bytes[physical:physical + nbytes]


    def resident_bytes(self) -> int:
        """Bytes of the store the host has actually committed (Linux ``mincore``); 0 without a store."""
        if not self.backed:
            return 0
        page = mmap.PAGESIZE
        vector = (ctypes.c_ubyte * (-(-self.capacity // page)))()
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        if libc.mincore(ctypes.c_void_p(self.base_address), self.capacity, vector) != 0:
            return -1
        return int((np.frombuffer(vector, dtype=np.uint8) & 1).sum()) * page

    # -- injected memory faults (emulator/faults.py) ---------------------------
    # ECC is modelled by its outcome only: a correctable error is counted, an uncorrectable one
    # marks its page poisoned (the driver retires it at the next reset), a bit flip without ECC
    # silently changes one bit of the store.
    def ecc_corrected(self, physical: int) -> None:
        self.ecc_corrected_count = getattr(self, "ecc_corrected_count", 0) + 1

    def ecc_uncorrected(self, physical: int, page_size: int) -> int:
        """Marks the page holding ``physical`` poisoned; returns the page's physical address."""
        self.ecc_uncorrected_count = getattr(self, "ecc_uncorrected_count", 0) + 1
        page = physical - physical % page_size
        if not hasattr(self, "poisoned_pages"):
            self.poisoned_pages: set[int] = set()
        self.poisoned_pages.add(page)
        return page

    def take_poisoned_pages(self) -> list[int]:
        """The poisoned pages, forgotten here (the driver retires them: never handed out again)."""
        pages = sorted(getattr(self, "poisoned_pages", ()))
        self.poisoned_pages = set()
        return pages

    def flip_bit(self, physical: int, bit: int) -> None:
        self.host_address(physical, 1)
        if self.backed:  # projection: no bytes to flip; the event is still counted
            self._bytes[physical] ^= np.uint8(1 << (bit % 8))
        self.bits_flipped = getattr(self, "bits_flipped", 0) + 1

    def ecc_counters(self) -> dict:
        return {"ecc_corrected": getattr(self, "ecc_corrected_count", 0),
                "ecc_uncorrected": getattr(self, "ecc_uncorrected_count", 0),
                "bits_flipped": getattr(self, "bits_flipped", 0)}
