"""torch dtypes <-> the element-type codes of the device's launch descriptors.

The codes come from the runtime (which has them from the driver and the firmware ABI);
each is named like the torch dtype it carries.

``SUPPORTED``: the dtypes the device's arithmetic kernels take (ops check their operands
against it). ``STORABLE``: every dtype the device can hold, copy, convert and fill
(``SUPPORTED`` plus the storage-only uint16/uint32/uint64/complex32/complex64/complex128 and the four
float8 types); arithmetic on those is not a device kernel (float8 GEMMs: torch._scaled_mm,
ops/quantized.py).
"""
import torch

import runtime

TO_CODE = {getattr(torch, name): code for code, name in runtime.ELEMENT_NAMES.items()}
STORABLE = frozenset(TO_CODE)
FLOAT8 = frozenset({torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz})
STORAGE_ONLY = frozenset({torch.uint16, torch.uint32, torch.uint64, torch.complex32, torch.complex64,
                          torch.complex128}) | FLOAT8
SUPPORTED = STORABLE - STORAGE_ONLY
FLOATING = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
COMPLEX = frozenset({torch.complex32, torch.complex64, torch.complex128})

# c10's ScalarType names: how CPU's error messages print a dtype.
SCALAR_TYPE_NAMES = {
    torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
    torch.uint16: "UInt16", torch.uint32: "UInt32", torch.uint64: "UInt64", torch.bool: "Bool",
    torch.complex32: "ComplexHalf", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
    torch.float8_e4m3fn: "Float8_e4m3fn", torch.float8_e5m2: "Float8_e5m2",
    torch.float8_e4m3fnuz: "Float8_e4m3fnuz", torch.float8_e5m2fnuz: "Float8_e5m2fnuz",
}


def scalar_type_name(dtype) -> str:
    """c10's name of a dtype ("Float" for torch.float32), as CPU's messages print it."""
    return SCALAR_TYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


# caffe2 TypeMeta names: how some of CPU's messages print a dtype ("Expected out tensor to have dtype float").
TYPE_META_NAMES = {
    torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16",
    torch.int64: "long int", torch.int32: "int", torch.int16: "short int", torch.int8: "signed char",
    torch.uint8: "unsigned char", torch.bool: "bool",
}


def type_meta_name(dtype) -> str:
    """caffe2's TypeMeta name of a dtype ("float" for torch.float32)."""
    return TYPE_META_NAMES.get(dtype, str(dtype))
