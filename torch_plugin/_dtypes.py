"""torch dtypes <-> the device kernel library's element-type codes."""
import torch

from emulator.kernels import dtypes as codes

TO_CODE = {
    torch.bool: codes.BOOL, torch.uint8: codes.UINT8, torch.int8: codes.INT8, torch.int16: codes.INT16,
    torch.int32: codes.INT32, torch.int64: codes.INT64, torch.float16: codes.FLOAT16,
    torch.bfloat16: codes.BFLOAT16, torch.float32: codes.FLOAT32, torch.float64: codes.FLOAT64,
}
SUPPORTED = frozenset(TO_CODE)
FLOATING = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
