"""Helpers shared by the tests/compile tests."""
import torch

import torch_plugin  # noqa: F401


def kernels_launched(fn):
    """(result, {kernel name: launches}) of fn() under torch.emu.telemetry()."""
    with torch.emu.telemetry() as t:
        result = fn()
        torch.emu.synchronize()
    launched = {}
    for row in t.as_dict()["ops"]:
        for name, n in row["kernels"].items():
            launched[name] = launched.get(name, 0) + n
    return result, launched
