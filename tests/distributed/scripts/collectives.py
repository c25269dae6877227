"""Launched by torchrun (2 ranks): every collective on emu tensors, checked against the CPU answer;
with a second argument (a directory), also FSDP2, tensor parallel and a sharded checkpoint there.

Writes one JSON line per rank to $EMU_TEST_OUT/rank<r>.json with what it checked.
"""
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist

import torch_plugin  # noqa: F401  (registers emu and the c10d backend)
import torch_plugin.distributed as emu_dist

backend = sys.argv[1] if len(sys.argv) > 1 else "emu"
dist.init_process_group(backend, timeout=datetime.timedelta(seconds=30))
rank, world = dist.get_rank(), dist.get_world_size()
local = int(os.environ["LOCAL_RANK"])
dev = torch.device(f"emu:{local}")
torch.emu.set_device(local)
checked = {}


def check(name, got, want):
    got = got.cpu() if isinstance(got, torch.Tensor) else got
    ok = torch.equal(got, want) if isinstance(want, torch.Tensor) else got == want
    checked[name] = bool(ok)
    if not ok:
        print(f"rank {rank}: {name}: got {got}, want {want}", flush=True)


def base(r):
    return torch.arange(6, dtype=torch.float32) + 10 * r + 1


# all_reduce with every op; the input comes from device work on the current stream (ordering)
ranks = [base(r) for r in range(world)]
for op, want in [(dist.ReduceOp.SUM, sum(ranks)), (dist.ReduceOp.AVG, sum(ranks) / world),
                 (dist.ReduceOp.MAX, torch.stack(ranks).max(0).values),
                 (dist.ReduceOp.MIN, torch.stack(ranks).min(0).values),
                 (dist.ReduceOp.PRODUCT, torch.stack(ranks).prod(0))]:
    t = (torch.arange(6, dtype=torch.float32, device=dev) * 1 + 10 * rank) + 1  # device ops before
    dist.all_reduce(t, op=op)
    check(f"all_reduce_{op}", t, want)
ti = torch.full((3,), rank + 1, dtype=torch.int64, device=dev)
dist.all_reduce(ti)
check("all_reduce_int64", ti, torch.full((3,), sum(range(1, world + 1)), dtype=torch.int64))
tb = torch.full((4,), float(rank + 1), dtype=torch.bfloat16, device=dev)
dist.all_reduce(tb)
check("all_reduce_bf16", tb, torch.full((4,), float(sum(range(1, world + 1))), dtype=torch.bfloat16))

# async: wait() with a timeout, is_completed after
t = base(rank).to(dev)
work = dist.all_reduce(t, async_op=True)
checked["async_wait"] = work.wait(timeout=datetime.timedelta(seconds=20)) is not False
check("async_all_reduce", t, sum(ranks))
checked["async_completed"] = bool(work.is_completed())

# polling: is_completed() turns True by itself once the results are on the device
t = base(rank).to(dev)
work = dist.all_reduce(t, async_op=True)
while not work.is_completed():
    pass
check("polled_all_reduce", t, sum(ranks))

# the functional path's copies are counted as host traffic
with torch.emu.telemetry() as tel:
    dist.all_reduce(torch.ones(8, device=dev))
copies = tel.as_dict()["copies"]
checked["host_copies_counted"] = (copies["device_to_host"] == {"count": 1, "bytes": 32}
                                  and copies["host_to_device"] == {"count": 1, "bytes": 32})

# broadcast
t = base(rank).to(dev)
dist.broadcast(t, src=1)
check("broadcast", t, base(1))

# all_gather (list) and all_gather_into_tensor
outs = [torch.empty(6, device=dev) for _ in range(world)]
dist.all_gather(outs, base(rank).to(dev))
check("all_gather", torch.stack([o.cpu() for o in outs]), torch.stack(ranks))
out = torch.empty(world * 6, device=dev)
dist.all_gather_into_tensor(out, base(rank).to(dev))
check("all_gather_into_tensor", out, torch.cat(ranks))

# reduce_scatter (list) and reduce_scatter_tensor
inp = torch.arange(world * 4, dtype=torch.float32) + rank
want = sum(torch.arange(world * 4, dtype=torch.float32) + r for r in range(world)).view(world, 4)[rank]
out = torch.empty(4, device=dev)
dist.reduce_scatter_tensor(out, inp.to(dev))
check("reduce_scatter_tensor", out, want)
out = torch.empty(4, device=dev)
dist.reduce_scatter(out, [c.to(dev) for c in inp.view(world, 4)])
check("reduce_scatter", out, want)

# all_to_all_single and all_to_all (lists)
inp = torch.arange(world * 2, dtype=torch.float32) + 100 * rank
want = torch.cat([(torch.arange(world * 2, dtype=torch.float32) + 100 * r)[2 * rank:2 * rank + 2]
                  for r in range(world)])
out = torch.empty(world * 2, device=dev)
dist.all_to_all_single(out, inp.to(dev))
check("all_to_all_single", out, want)
outs = [torch.empty(2, device=dev) for _ in range(world)]
dist.all_to_all(outs, [c.to(dev) for c in inp.view(world, 2)])
check("all_to_all", torch.cat([o.cpu() for o in outs]), want)

# a subgroup made by new_group gets its own emu group
sub = dist.new_group([0, 1])
t = base(rank).to(dev)
dist.all_reduce(t, group=sub)
check("new_group_all_reduce", t, sum(ranks))

# barrier
dist.barrier()
checked["barrier"] = True

# send / recv, and batched isend / irecv
peer = 1 - rank
if rank == 0:
    dist.send(base(0).to(dev), dst=1)
    got = torch.empty(6, device=dev)
    dist.recv(got, src=1)
    check("send_recv", got, base(1))
else:
    got = torch.empty(6, device=dev)
    dist.recv(got, src=0)
    dist.send(base(1).to(dev), dst=0)
    check("send_recv", got, base(0))
got = torch.empty(6, device=dev)
reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, base(rank).to(dev), peer),
                               dist.P2POp(dist.irecv, got, peer)])
for r in reqs:
    r.wait()
check("batch_isend_irecv", got, base(peer))

# CPU tensors: a "cpu:gloo,emu:emu" group hands them to the same backend, which runs gloo directly
if backend.startswith("cpu:gloo"):
    c = base(rank)
    dist.all_reduce(c)
    check("cpu_all_reduce", c, sum(ranks))
    c = base(rank)
    dist.all_reduce(c, op=dist.ReduceOp.AVG)
    check("cpu_all_reduce_avg", c, sum(ranks) / world)

# unsupported input: a clear error, the group stays usable
try:
    dist.all_reduce(base(rank).to(dev), op=dist._make_nccl_premul_sum(2.0))
    checked["premul_sum_rejected"] = False
except (NotImplementedError, RuntimeError, ValueError) as err:
    checked["premul_sum_rejected"] = "PREMUL_SUM" in str(err)

# overlap: an async all_reduce occupies the links while compute runs on the current stream; the
# step ends near max(compute, collective), not at their sum. Then contention: two collectives
# issued back to back take turns on the device's links.
import runtime  # noqa: E402
rt = runtime.get_runtime()


def compute(x):
    for _ in range(6):
        x = x @ x * 0.01
    return x


x0 = torch.randn(192, 192, device=dev)   # device-bound matmuls on the tiny preset
big = torch.full((1 << 20,), float(rank + 1), device=dev)
compute(x0)
torch.emu.synchronize()
t0 = rt.host_time_ns()
compute(x0)
big.sum()
torch.emu.synchronize()
compute_ns = rt.host_time_ns() - t0  # the same step without the collective
dist.barrier()
t0 = rt.host_time_ns()
work = dist.all_reduce(big, async_op=True)
compute(x0)
work.wait()
total = big.sum()  # ordered after the collective by wait()
torch.emu.synchronize()
step_ns = rt.host_time_ns() - t0
overlap_rec = emu_dist.collective_records()[-1]
check("overlapped_all_reduce", total, torch.tensor(float(sum(range(1, world + 1)) * (1 << 20))))
a, b = torch.ones(1 << 16, device=dev), torch.ones(1 << 16, device=dev)
w1 = dist.all_reduce(a, async_op=True)
w2 = dist.all_reduce(b, async_op=True)
w1.wait(), w2.wait()
check("back_to_back_all_reduce", torch.stack([a, b]).cpu(), torch.full((2, 1 << 16), float(world)))
first, second = emu_dist.collective_records()[-2:]
link_trace = [(e.name, e.start_ns, e.end_ns, e.engines) for e in rt.command_trace(local)
              if e.name.startswith("collective.all_reduce") and e.engines]

# the profiler reports a collective per op, with its modelled time on the links
with torch.emu.profile() as prof:
    work = dist.all_reduce(torch.ones(1 << 16, device=dev), async_op=True)
    work.wait()
    torch.emu.synchronize()
row = next((r for r in prof.report().ops if r.op == "c10d::all_reduce"), None)
profiled = {"row": None if row is None else {"bound": row.bound, "time_s": row.time_s, "path": row.path,
                                             "kernel": row.kernel},
            "duration_ns": emu_dist.collective_records()[-1]["duration_ns"]}

# simulated time agrees: after a barrier every rank's clock is at the same completion time
if rank == 0:  # rank 0 does extra device work first: it arrives late
    x = torch.randn(64, 64, device=dev)
    for _ in range(20):
        x = x @ x
    torch.emu.synchronize()
dist.barrier()
now = torch.tensor([runtime.get_runtime().host_time_ns()], dtype=torch.float64)
clocks = [torch.zeros(1, dtype=torch.float64) for _ in range(world)]
dist.all_gather(clocks, now.to(dev))
records = emu_dist.collective_records()
summary = emu_dist.collective_summary()
result = {"rank": rank, "checked": checked, "clocks_after_barrier": [float(c.cpu()) for c in clocks],
          "ops": sorted(summary), "algorithms": sorted({r["algorithm"] for r in records}),
          "n_records": len(records), "last_barrier": [r for r in records if r["op"] == "barrier"][-1],
          "backend_name": dist.get_backend(),
          "overlap": {"compute_ns": compute_ns, "step_ns": step_ns, "record": overlap_rec},
          "back_to_back": [first, second], "link_trace": link_trace[-3:], "profiled": profiled}
if len(sys.argv) > 2:  # FSDP2, tensor parallel and a sharded checkpoint, in the same job
    import parallel_checks  # noqa: E402  (tests/distributed/scripts)
    result["parallel"] = parallel_checks.run(rank, world, dev, sys.argv[2])
# last (it leaves rank 1's stream faulted): a peer_link_error on rank 1's link fails the collective
# on every rank, and rank 1's error chains down to the firmware's record of the link fault
if rank == 1:
    runtime.get_runtime().inject_fault(local, "peer_link_error")
try:
    dist.all_reduce(torch.ones(4, device=dev))
    result["peer_link_error"] = None
except dist.DistBackendError as err:
    chain, cause = [], err
    while cause is not None:
        chain.append(f"{type(cause).__name__}: {cause}")
        cause = cause.__cause__
    result["peer_link_error"] = chain
with open(os.path.join(os.environ["EMU_TEST_OUT"], f"rank{rank}.json"), "w") as f:
    json.dump(result, f)
dist.destroy_process_group()
