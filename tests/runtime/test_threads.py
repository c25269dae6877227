"""Several host threads sharing one Runtime."""
import threading

import numpy as np

from runtime import TensorRef
from emulator.kernels import dtypes

THREADS = 6
ROUNDS = 8
N = 4096


def test_concurrent_memcpy_round_trips(rt):
    barrier = threading.Barrier(THREADS)
    failures, errors = [], []

    def worker(tid):
        try:
            device = tid % rt.device_count
            stream = rt.stream_create(device) if tid % 3 else rt.stream(device)  # shared and private streams
            address = rt.malloc(device, N * 4, stream_id=stream.stream_id)
            ref = TensorRef(False, device, address, dtypes.FLOAT32, (N,), (1,))
            barrier.wait()
            for r in range(ROUNDS):
                src = np.full(N, tid * 1000 + r, np.float32)
                src[::7] = -tid - r                       # not a constant pattern
                out = np.zeros_like(src)
                rt.memcpy(ref, TensorRef(True, -1, src.ctypes.data, dtypes.FLOAT32, (N,), (1,)), stream)
                rt.memcpy(TensorRef(True, -1, out.ctypes.data, dtypes.FLOAT32, (N,), (1,)), ref, stream,
                          blocking=True)
                if not np.array_equal(out, src):
                    failures.append((tid, r))
            rt.free(device, address)
        except Exception as err:  # surfaced below with the thread id
            errors.append((tid, repr(err)))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert errors == []
    assert failures == []
    copies = sum(rt.telemetry(d)["kernel_stats"]["memcpy_h2d"].count for d in range(rt.device_count))
    assert copies == THREADS * ROUNDS
