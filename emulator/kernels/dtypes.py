"""Element types the device's kernel library understands.

The codes are part of the kernel ABI: launch descriptors carry them, and the
Cython kernels switch on them. Keep them stable.
"""
BOOL = 0
UINT8 = 1
INT8 = 2
INT16 = 3
INT32 = 4
INT64 = 5
FLOAT16 = 6
BFLOAT16 = 7
FLOAT32 = 8
FLOAT64 = 9
# Storage types: the copy/convert and fill kernels (strided.pyx) take them; arithmetic kernels
# reject them (their block converters compute in float/double/int64, which holds neither uint64
# beyond 2**63 nor a complex value).
UINT16 = 10
UINT32 = 11
UINT64 = 12
COMPLEX64 = 13
COMPLEX128 = 14
COMPLEX32 = 15   # two float16 (torch.chalf)

ITEMSIZE = {BOOL: 1, UINT8: 1, INT8: 1, INT16: 2, INT32: 4, INT64: 8,
            FLOAT16: 2, BFLOAT16: 2, FLOAT32: 4, FLOAT64: 8, UINT16: 2, UINT32: 4, UINT64: 8,
            COMPLEX64: 8, COMPLEX128: 16, COMPLEX32: 4}
NAMES = {BOOL: "bool", UINT8: "uint8", INT8: "int8", INT16: "int16", INT32: "int32",
         INT64: "int64", FLOAT16: "float16", BFLOAT16: "bfloat16", FLOAT32: "float32",
         FLOAT64: "float64", UINT16: "uint16", UINT32: "uint32", UINT64: "uint64",
         COMPLEX64: "complex64", COMPLEX128: "complex128",
         COMPLEX32: "complex32"}
FLOATING = frozenset({FLOAT16, BFLOAT16, FLOAT32, FLOAT64})
COMPLEX = frozenset({COMPLEX64, COMPLEX128, COMPLEX32})
STORAGE_ONLY = frozenset({UINT16, UINT32, UINT64, COMPLEX64, COMPLEX128, COMPLEX32})
