"""The lanes of a profiled block's Chrome trace: which there are, and in what order.

Every engine a command used, and every engine of each device that ran one (idle lanes too, so a
device's layout does not change with the workload), in a fixed order: command processor, cores'
engines, DMA engines, host link, device links; numbers in names as numbers. Leaves out the
events on them (chrome_trace.py) and the splitting of overlapping records (runtime/report.py).
"""
from __future__ import annotations

_LANE_ORDER = (".cp", ".core", ".dma", ".host_link", "link", ".interconnect")


def lane_key(lane: str) -> tuple:
    """Command processor first, then the cores' engines, DMA engines, host link, device links;
    numbers in names sort as numbers (core2 before core10)."""
    rank = next((i for i, key in enumerate(_LANE_ORDER) if key in lane), len(_LANE_ORDER))
    parts, digits = [], ""
    for ch in lane + " ":
        if ch.isdigit():
            digits += ch
            continue
        if digits:
            parts.append((1, int(digits), ""))
            digits = ""
        parts.append((0, 0, ch))
    return rank, parts


def lane_tids(commands, spans_of, config) -> dict:
    """{(device, lane): tid} for every lane a command used, and every engine of each device that
    ran one (idle lanes included: each core's matrix and vector engine, each DMA engine, the host
    link's directions, the command processor), tids in lane order (device lanes start at 100;
    the firmware's ring lanes use 100000+)."""
    commands = list(commands)
    lanes = {(cmd.device, lane) for cmd in commands for lane, _ in spans_of(cmd)}
    device = config.device
    for d in {cmd.device for cmd in commands}:
        names = [f"dev{d}.host_link.h2d", f"dev{d}.host_link.d2h"]
        names += [f"dev{d}.core{c}.{unit}" for c in range(getattr(device, "cores", 1)) for unit in ("matrix", "vector")]
        names += [f"dev{d}.dma{k}" for k in range(device.dma.engines)]
        if any(getattr(e, "engines", None) for cmd in commands for e in cmd.entries):
            names.append(f"dev{d}.cp")
        lanes.update((d, name) for name in names)
    return {key: 100 + i for i, key in enumerate(sorted(lanes, key=lambda k: (k[0], lane_key(k[1]))))}
