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
# float8 storage types (emulator/kernels/_float8.pxi: CPU's conversions); the copy/convert and
# fill kernels take them, and the quantized matrix kernels (quantized.pyx) read them.
FLOAT8_E4M3FN = 16
FLOAT8_E5M2 = 17
FLOAT8_E4M3FNUZ = 18
FLOAT8_E5M2FNUZ = 19
FLOAT8 = frozenset({FLOAT8_E4M3FN, FLOAT8_E5M2, FLOAT8_E4M3FNUZ, FLOAT8_E5M2FNUZ})

ITEMSIZE = {BOOL: 1, UINT8: 1, INT8: 1, INT16: 2, INT32: 4, INT64: 8,
            FLOAT16: 2, BFLOAT16: 2, FLOAT32: 4, FLOAT64: 8, UINT16: 2, UINT32: 4, UINT64: 8,
            COMPLEX64: 8, COMPLEX128: 16, COMPLEX32: 4,
            FLOAT8_E4M3FN: 1, FLOAT8_E5M2: 1, FLOAT8_E4M3FNUZ: 1, FLOAT8_E5M2FNUZ: 1}
NAMES = {BOOL: "bool", UINT8: "uint8", INT8: "int8", INT16: "int16", INT32: "int32",
         INT64: "int64", FLOAT16: "float16", BFLOAT16: "bfloat16", FLOAT32: "float32",
         FLOAT64: "float64", UINT16: "uint16", UINT32: "uint32", UINT64: "uint64",
         COMPLEX64: "complex64", COMPLEX128: "complex128",
         COMPLEX32: "complex32", FLOAT8_E4M3FN: "float8_e4m3fn", FLOAT8_E5M2: "float8_e5m2",
         FLOAT8_E4M3FNUZ: "float8_e4m3fnuz", FLOAT8_E5M2FNUZ: "float8_e5m2fnuz"}
FLOATING = frozenset({FLOAT16, BFLOAT16, FLOAT32, FLOAT64})
COMPLEX = frozenset({COMPLEX64, COMPLEX128, COMPLEX32})
STORAGE_ONLY = frozenset({UINT16, UINT32, UINT64, COMPLEX64, COMPLEX128, COMPLEX32}) | FLOAT8
