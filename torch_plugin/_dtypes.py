"""torch dtypes <-> the element-type codes of the device's launch descriptors.

The codes come from the runtime (which has them from the driver and the firmware ABI);
each is named like the torch dtype it carries.
"""
import torch

import runtime

TO_CODE = {getattr(torch, name): code for code, name in runtime.ELEMENT_NAMES.items()}
SUPPORTED = frozenset(TO_CODE)
FLOATING = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
