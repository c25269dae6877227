"""Data-parallel training of a zoo model on emulated devices, with its projected report.

    torchrun --nproc-per-node 2 examples/ddp_train.py [--model mlp] [--steps 8]

Each rank is one process with its own emulated system and uses ``emu:<local_rank>``; the ranks
rendezvous through torchrun's TCP store and exchange data with gloo on the host, while the
collectives' time is modelled on the emulated interconnect (docs/distributed.md). Rank 0 prints
the losses, the modelled collective time per op, the projected step time, and a projection of
the same data-parallel step on 8, 64 and 512 devices.

The global batch of each step is the zoo model's batch; rank r trains on its r-th shard, so the
run is equivalent to one process training on the whole batch (``--dump`` writes the losses and
final parameters for comparing with that CPU run). ``--checkpoint DIR`` saves after every step and
resumes from the last save (torchrun ``--max-restarts`` restarts the job after a failure);
``--fail-at-step K`` makes rank 1 fail once at step K, to see it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import torch_plugin  # noqa: F401  (the emu device and the c10d backend "emu")
import torch_plugin.distributed as emu_dist
from torch_plugin.distributed.trace import add_collectives_to_trace
from torch_plugin.zoo import MODELS


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mlp", help="zoo model (torch_plugin/zoo), default mlp")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.1, help="SGD learning rate")
    p.add_argument("--backend", default="emu", help='init_process_group backend ("emu", "cpu:gloo,emu:emu")')
    p.add_argument("--allow-host-fallback", action="store_true",
                   help="let ops without a device path run on the host (forbidden by default)")
    p.add_argument("--dump", help="write losses and final parameters (rank 0) to this JSON file")
    p.add_argument("--trace-dir", help="write each rank's Chrome trace (rank<r>.json) with its collectives")
    p.add_argument("--checkpoint", help="directory: save after every step, resume from the last save")
    p.add_argument("--fail-at-step", type=int, default=-1, help="rank 1 fails once at this step")
    p.add_argument("--project", default="8,64,512", help="device counts of the scaling projection")
    p.add_argument("--devices-per-node", type=int, default=None,
                   help="devices per node in the projection (default: the hardware description's, else "
                        "torchrun's LOCAL_WORLD_SIZE)")
    return p.parse_args(argv)


def shard(batch: dict, rank: int, world: int) -> dict:
    n = next(iter(batch.values())).shape[0]
    if n % world:
        raise SystemExit(f"the batch of {n} samples does not split over {world} ranks")
    k = n // world
    return {key: v[rank * k:(rank + 1) * k] for key, v in batch.items()}


def load_checkpoint(path, model, opt) -> int:
    file = os.path.join(path, "ckpt.pt")
    if not os.path.exists(file):
        return 0
    state = torch.load(file, map_location="cpu")
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return state["step"]


def save_checkpoint(path, model, opt, step: int) -> None:
    os.makedirs(path, exist_ok=True)
    state = {"model": {k: v.cpu() for k, v in model.state_dict().items()}, "step": step,
             "opt": opt.state_dict()}
    tmp = os.path.join(path, "ckpt.pt.tmp")
    torch.save(state, tmp)
    os.replace(tmp, os.path.join(path, "ckpt.pt"))  # a rank that dies mid-save leaves the last one


def main(argv=None) -> int:
    args = parse(argv)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.emu.set_device(local)
    dev = torch.device(f"emu:{local}")
    spec = MODELS[args.model]
    model = spec.build(0)
    opt_model = model.to(dev)
    opt = torch.optim.SGD(opt_model.parameters(), lr=args.lr)
    start = load_checkpoint(args.checkpoint, opt_model, opt) if args.checkpoint else 0
    ddp = DDP(opt_model)
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    rt = __import__("runtime").get_runtime()
    losses, step_ns, comm_ns = [], [], []
    policy = "allow" if args.allow_host_fallback else "forbid"
    with torch.emu.host_fallback(policy):
        for step in range(start, args.steps):
            if step == args.fail_at_step and rank == 1 and restarts == 0:
                raise RuntimeError(f"rank 1 fails at step {step} on purpose (--fail-at-step)")
            torch.emu.synchronize()
            t0, n0 = rt.host_time_ns(), len(emu_dist.collective_records())
            b = {k: v.to(dev) for k, v in shard(spec.batch(step), rank, world).items()}
            loss = spec.loss(ddp, b)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            torch.emu.synchronize()
            step_ns.append(rt.host_time_ns() - t0)
            recs = emu_dist.collective_records()[n0:]
            # The communication compute did not hide (the collectives overlap the backward pass).
            comm_ns.append(emu_dist.exposed_collective_ns(recs, rt.command_trace(local), t0, rt.host_time_ns()))
            avg = loss.detach().clone()
            dist.all_reduce(avg, op=dist.ReduceOp.AVG)  # the global batch's loss (equal shards)
            losses.append(float(avg.cpu()))
            if args.checkpoint and rank == 0:
                save_checkpoint(args.checkpoint, opt_model, opt, step + 1)
            if args.checkpoint:
                dist.barrier()
    if args.trace_dir:
        os.makedirs(args.trace_dir, exist_ok=True)
        path = os.path.join(args.trace_dir, f"rank{rank}.json")
        torch.emu.export_timeline(path)
        add_collectives_to_trace(path, rank)
    if rank == 0:
        report(args, spec, opt_model, losses, step_ns, comm_ns, world, start, restarts)
    dist.destroy_process_group()
    return 0


def report(args, spec, model, losses, step_ns, comm_ns, world, start, restarts) -> None:
    print(f"DDP {spec.name} on {world} ranks x emu ({os.environ.get('EMU_PRESET', 'default')} preset), "
          f"steps {start}..{args.steps - 1}" + (f", resumed after {restarts} restart(s)" if restarts else ""))
    for i, loss in enumerate(losses):
        print(f"  step {start + i:3d}  loss {loss:.6f}  modelled step {step_ns[i] / 1e3:9.1f} us"
              f"  (collectives not hidden by compute {comm_ns[i] / 1e3:8.1f} us)")
    print("modelled collectives (this rank):")
    for op, s in sorted(emu_dist.collective_summary().items()):
        algos = ", ".join(f"{a} x{n}" for a, n in s["algorithms"].items())
        print(f"  {op:15s} x{s['count']:<4d} {s['bytes'] / 1e6:9.3f} MB  modelled {s['modelled_ns'] / 1e3:9.1f} us"
              f"  waiting for peers {s['wait_ns'] / 1e3:9.1f} us  [{algos}]")
    steady = step_ns[1:] or step_ns
    measured = sorted(steady)[len(steady) // 2] if steady else 0.0
    comm = sorted(comm_ns[1:] or comm_ns)[len(steady) // 2] if steady else 0.0
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    if measured > 0:
        print(f"projected step on {world} ranks: {measured / 1e3:.1f} us (median), gradients {grad_bytes / 1e6:.3f} MB")
        counts = [int(c) for c in args.project.split(",") if c]
        rows = emu_dist.project_data_parallel(measured, grad_bytes, emu_dist.topology(args.devices_per_node), counts,
                                              measured_comm_ns=min(comm, measured),
                                              samples_per_rank=next(iter(spec.batch(0).values())).shape[0] // world)
        print("projection (weak scaling, DDP buckets of 25 MB; docs/distributed.md):")
        print(emu_dist.format_projection(rows))
    if args.dump:
        with open(args.dump, "w") as f:
            json.dump({"losses": losses, "start": start, "restarts": restarts,
                       "params": {k: v.detach().cpu().reshape(-1).tolist() for k, v in model.state_dict().items()},
                       "collectives": emu_dist.collective_summary()}, f)


if __name__ == "__main__":
    sys.exit(main())
