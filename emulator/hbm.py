"""High-bandwidth memory: the device's byte store and its bandwidth model.

The store is one anonymous private mapping of the configured capacity, created
with MAP_NORESERVE so the host commits pages only when they are touched: a 16 GiB
device costs nothing until used. Addresses here are *physical* device addresses
(offsets into the store); virtual addresses are the MMU's business.

Left out: banks/channels conflicts, refresh, and ECC scrubbing (ECC faults can
be injected by marking addresses poisoned).
"""
from __future__ import annotations

import ctypes
import mmap

import numpy as np

from emulator.config import HbmConfig
from emulator.errors import FaultRecord, HardwareFault

_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)  # Linux value; Python 3.11 lacks the name


class HBM:
    def __init__(self, env, config: HbmConfig, device_index: int):
        self.env = env
        self.config = config
        self.device_index = device_index
        self.capacity = config.capacity_bytes
        self._store = mmap.mmap(-1, self.capacity,
                                flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE)
        self._bytes = np.frombuffer(self._store, dtype=np.uint8)
        self.base_address = self._bytes.ctypes.data
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
        return self._bytes[physical:physical + nbytes]

    def transfer_ns(self, nbytes: int) -> float:
        """Time to stream ``nbytes`` through HBM at peak bandwidth (GB/s == bytes/ns)."""
        return self.config.latency_ns + nbytes / self.config.bandwidth_gb_per_s

    def resident_bytes(self) -> int:
        """Bytes of the store the host has actually committed (Linux ``mincore``)."""
        page = mmap.PAGESIZE
        vector = (ctypes.c_ubyte * (-(-self.capacity // page)))()
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        if libc.mincore(ctypes.c_void_p(self.base_address), self.capacity, vector) != 0:
            return -1
        return int((np.frombuffer(vector, dtype=np.uint8) & 1).sum()) * page
