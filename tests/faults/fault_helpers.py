"""Helpers of the fault-injection tests (plain functions; fixtures are in conftest.py)."""
import numpy as np
import runtime
from runtime import TensorRef

F32 = 8  # abi.ElementType.FLOAT32


def host(a: np.ndarray) -> TensorRef:
    return TensorRef(True, -1, a.ctypes.data, F32, a.shape, tuple(s // a.itemsize for s in a.strides))


def dev(device: int, address: int, n: int) -> TensorRef:
    return TensorRef(False, device, address, F32, (n,), (1,))


def upload(rt, device, values, stream=None):
    values = np.ascontiguousarray(values, dtype=np.float32)
    address = rt.malloc(device, values.nbytes)
    rt.memcpy(dev(device, address, values.size), host(values), stream or rt.stream(device), blocking=True)
    return address


def download(rt, device, address, n, stream=None):
    out = np.zeros(n, np.float32)
    rt.memcpy(host(out), dev(device, address, n), stream or rt.stream(device), blocking=True)
    return out


def chain(err) -> list:
    out = []
    while err is not None:
        out.append(err)
        err = err.__cause__
    return out


def chain_text(err) -> str:
    return "\n".join(f"{type(e).__name__}: {e}" for e in chain(err))
