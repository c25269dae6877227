"""hash_tensor on emu (emulator/kernels/hashing.pyx): the xor of the elements' 64-bit patterns over
the reduced dims, as CPU's.

Left out: nothing beyond what aten defines (xor is its only mode).
"""
from __future__ import annotations

import torch

from torch_plugin.ops._common import common_device, device_ref, resize_out
from torch_plugin.ops._indexing_common import _check_out_dtype, _emu, _launch, _shape1, _supported, _wrap_dim
from torch_plugin.ops._overloads import Overloads

OVERLOADS = Overloads(__name__)

def _hash_tensor(self, dim=(), keepdim=False, mode=0, out=None):
    name = "aten::hash_tensor"
    device = common_device(name, self, *([out] if out is not None else []))
    _supported(name, self)
    if mode != 0:
        raise RuntimeError(f"Unknown hash_tensor mode: {mode}")
    nd = self.dim()
    dims = list(range(nd)) if not dim else sorted({_wrap_dim(d, nd) for d in dim})
    if self.numel() == 0:
        if not dim:
            raise RuntimeError("hash_tensor: Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        for d in dims:
            if self.shape[d] == 0:
                raise IndexError(f"hash_tensor: Expected reduction dim {d} to have non-zero size.")
    keep_shape = tuple(1 if k in dims else n for k, n in enumerate(self.shape))
    shape = keep_shape if keepdim else tuple(n for k, n in enumerate(self.shape) if k not in dims)
    if out is None:
        out = torch.empty(shape, dtype=torch.uint64, device=_emu(device))
    else:
        _check_out_dtype("hash_tensor", out, torch.uint64)
        resize_out(out, shape)
    if out.numel() == 0:
        return out
    bits = out.view(torch.int64)  # the same 64 bits; the kernel writes int64
    if keepdim:
        strides = tuple(0 if k in dims else st for k, st in enumerate(bits.stride()))
    else:  # the kept dims take out's strides in order, the reduced ones 0
        kept = iter(bits.stride())
        strides = tuple(0 if k in dims else next(kept) for k in range(nd))
    s_shape, s_strides = _shape1(self)
    if nd == 0:
        strides = (0,)
    _launch("hash_xor", (device_ref(bits, s_shape, strides), device_ref(self, s_shape, s_strides)), device)
    return out


@OVERLOADS.implements("hash_tensor")
def hash_tensor(self, dim=(), *, keepdim=False, mode=0):
    return _hash_tensor(self, dim, keepdim, mode)


@OVERLOADS.implements("hash_tensor.out")
def hash_tensor_out(self, dim=(), *, keepdim=False, mode=0, out):
    return _hash_tensor(self, dim, keepdim, mode, out)
