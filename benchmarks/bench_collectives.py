"""Collectives: the modelled bus bandwidth against the ring bound, and the functional path's cost.

    python benchmarks/bench_collectives.py            # the model: an nccl-tests style table
    python benchmarks/bench_collectives.py --live     # also 2 torchrun ranks: wall time of the
                                                      # emu backend per all_reduce vs plain gloo

The model table lists, per message size and rank count, the algorithm the model picks, its
modelled time, the bus bandwidth and its ratio to the analytical ring bound 2(n-1)/n * S / B (the
large-message target: within 10%). The live part runs both paths in the same job and reports the
ratio (the emu path adds the device<->host copies and the ready-time exchange).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = [1 << k for k in (10, 14, 17, 20, 23, 26, 28)]


def model_table(preset: str, ranks=(2, 8, 64)) -> int:
    from runtime.settings import Settings
    from torch_plugin.distributed.cost_model import Topology, collective_cost, ring_bound_ns
    config = Settings(preset=preset).load_config()
    misses = 0
    print(f"modelled all_reduce on preset {preset!r} (one node of n devices; link "
          f"{Topology.from_config(config).link_bandwidth_gb_per_s:g} GB/s)")
    print(f"{'ranks':>5} {'bytes':>11} {'algorithm':>9} {'time':>12} {'busbw GB/s':>11} {'/ ring bound':>12}")
    for n in ranks:
        topo = Topology.from_config(config, devices_per_node=n)
        for size in SIZES:
            c = collective_cost("all_reduce", size, n, topo)
            ratio = ring_bound_ns(size, n, topo.link_bandwidth_gb_per_s) / c.time_ns
            flag = ""
            if size >= 1 << 26 and ratio < 0.9:
                flag, misses = "  OVER TARGET", misses + 1
            print(f"{n:>5} {size:>11} {c.algorithm:>9} {c.time_ns / 1e3:>10.1f}us {c.busbw_gb_per_s:>11.2f} "
                  f"{ratio:>11.1%}{flag}")
    print("large messages: " + ("all within 10% of the ring bound" if not misses else f"{misses} OVER TARGET"))
    return misses


def live_worker(iters: int) -> None:
    import torch
    import torch.distributed as dist
    import torch_plugin  # noqa: F401
    dist.init_process_group("cpu:gloo,emu:emu")
    local = int(os.environ["LOCAL_RANK"])
    torch.emu.set_device(local)
    for numel in (1 << 10, 1 << 18):
        rows = {}
        for where in ("cpu", f"emu:{local}"):
            t = torch.ones(numel, device=where)
            dist.all_reduce(t)
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t)
            rows[where.split(":")[0]] = (time.perf_counter() - start) / iters
        if dist.get_rank() == 0:
            print(f"all_reduce {numel * 4:>8} B: emu {rows['emu'] * 1e3:8.3f} ms  gloo/cpu {rows['cpu'] * 1e3:8.3f} ms"
                  f"  ratio {rows['emu'] / rows['cpu']:6.2f}x (wall time, same job)", flush=True)
    dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--preset", default=os.environ.get("EMU_PRESET", "default"))
    p.add_argument("--live", action="store_true", help="also run 2 ranks under torchrun")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        live_worker(args.iters)
        return 0
    misses = model_table(args.preset)
    if args.live:
        env = dict(os.environ, PYTHONPATH=str(ROOT), EMU_PRESET=os.environ.get("EMU_PRESET", "tiny"))
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                               __file__, "--worker", "--iters", str(args.iters)], env=env, cwd=ROOT, timeout=600)
        if proc.returncode:
            return proc.returncode
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
