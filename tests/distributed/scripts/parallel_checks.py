"""FSDP2, tensor parallelism and torch.distributed.checkpoint on emu ranks (imported by the
launched scripts). Every check compares with a CPU computation made here; results are JSON-able."""
import json
import os

import torch
import torch.distributed as dist
from torch import nn

from torch_plugin.zoo import MODELS

STEPS, LR = 2, 0.1


def shard(batch, rank, world):
    n = next(iter(batch.values())).shape[0] // world
    return {k: v[rank * n:(rank + 1) * n] for k, v in batch.items()}


def cpu_mlp_reference(steps=STEPS, lr=LR):
    """The zoo MLP trained on CPU in one process (SGD, the zoo's batch of each step): the losses of
    its steps and the model. Also tests/distributed/test_ddp.py's reference."""
    spec = MODELS["mlp"]
    model = spec.build(0)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        loss = spec.loss(model, spec.batch(step))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses, model


def train_against_cpu(model, forward_model, rank, world, dev):
    """STEPS SGD steps of the zoo MLP (model, run through forward_model: itself or its wrapper), each
    rank on its shard of the batch, with the host fallback forbidden. Returns the largest difference
    of the rank-averaged losses from cpu_mlp_reference()'s, and the reference model."""
    spec = MODELS["mlp"]
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    with torch.emu.host_fallback("forbid"):
        for step in range(STEPS):
            b = {k: v.to(dev) for k, v in shard(spec.batch(step), rank, world).items()}
            loss = spec.loss(forward_model, b)
            loss.backward()
            opt.step()
            opt.zero_grad()
            avg = loss.detach().clone()
            dist.all_reduce(avg, op=dist.ReduceOp.AVG)
            losses.append(float(avg.cpu()))
    ref_losses, ref = cpu_mlp_reference()
    return max(abs(a - b) for a, b in zip(losses, ref_losses)), ref


def fsdp2(rank, world, dev):
    from torch.distributed.fsdp import fully_shard
    spec = MODELS["mlp"]
    model = spec.build(0).to(dev)
    for m in model.net:
        if isinstance(m, nn.Linear):
            fully_shard(m)
    fully_shard(model)
    loss_diff, ref = train_against_cpu(model, model, rank, world, dev)
    full = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
    param_diff = max(float((full[k] - v).abs().max()) for k, v in ref.state_dict().items())
    return model, {"loss_diff": loss_diff, "param_diff": param_diff,
                   "sharded": all(type(v).__name__ == "DTensor" for v in model.state_dict().values())}


def ddp(rank, world, dev):
    from torch.nn.parallel import DistributedDataParallel as DDP
    spec = MODELS["mlp"]
    model = spec.build(0).to(dev)
    loss_diff, ref = train_against_cpu(model, DDP(model), rank, world, dev)
    got = model.state_dict()
    return {"loss_diff": loss_diff,
            "param_diff": max(float((got[k].cpu() - v).abs().max()) for k, v in ref.state_dict().items())}


class Block(nn.Module):
    """A pre-norm transformer block: attention (q, k, v, o) and an MLP (fc1, fc2)."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.head_dim = dim // heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.norm1(x)
        q, k, v = (f(h).view(b, t, -1, self.head_dim).transpose(1, 2) for f in (self.q, self.k, self.v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))  # -1: the local heads under TP
        return x + self.fc2(torch.relu(self.fc1(self.norm2(x))))


def tensor_parallel(rank, world, dev):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = init_device_mesh("emu", (world,))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        block = Block()
        x = torch.randn(2, 8, 32)
    ref = block(x)
    ref.sum().backward()
    ref_grad = block.fc1.weight.grad.clone()
    block.zero_grad()
    plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(), "o": RowwiseParallel(),
            "fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    tp = parallelize_module(block.to(dev), mesh, plan)
    with torch.emu.host_fallback("forbid"):
        out = tp(x.to(dev))
        out.sum().backward()
    grad = tp.fc1.weight.grad.full_tensor().cpu()
    return {"out_diff": float((out.detach().cpu() - ref.detach()).abs().max()),
            "grad_diff": float((grad - ref_grad).abs().max()),
            "sharded": type(tp.fc1.weight).__name__ == "DTensor"}


def save_checkpoint(model, path):
    import torch.distributed.checkpoint as dcp
    dcp.save({"model": model.state_dict()}, checkpoint_id=os.path.join(path, "dcp"))
    full = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
    if dist.get_rank() == 0:
        torch.save(full, os.path.join(path, "reference.pt"))
    dist.barrier()
    return True


def load_checkpoint(rank, world, dev, path):
    """A fresh FSDP2 model over this job's ranks loads the checkpoint (resharded)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.fsdp import fully_shard
    model = MODELS["mlp"].build(1).to(dev)  # other weights: the load must replace them
    fully_shard(model)
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=os.path.join(path, "dcp"))
    model.load_state_dict(state["model"])
    ref = torch.load(os.path.join(path, "reference.pt"))
    full = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
    local = next(iter(model.state_dict().values())).to_local()
    return {"diff": max(float((full[k] - v).abs().max()) for k, v in ref.items()), "world": world,
            "local_rows": int(local.shape[0])}


def attempt(fn, *args):
    try:
        return fn(*args)
    except Exception as err:  # noqa: BLE001  (reported, and the test names what failed)
        return {"error": f"{type(err).__name__}: {err}"}


def run(rank, world, dev, path):
    out = {}
    got = attempt(fsdp2, rank, world, dev)
    model, out["fsdp2"] = got if isinstance(got, tuple) else (None, got)
    out["tp"] = attempt(tensor_parallel, rank, world, dev)
    out["dcp_save"] = attempt(save_checkpoint, model, path) if model is not None else {"error": "no model"}
    return out


if __name__ == "__main__":  # the 4-rank (two "nodes") job: loads the 2-rank checkpoint, trains DDP and FSDP2
    import sys
    import datetime
    import torch_plugin  # noqa: F401
    dist.init_process_group("emu", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ["LOCAL_RANK"])
    torch.emu.set_device(local)
    dev = torch.device(f"emu:{local}")
    res = attempt(load_checkpoint, rank, world, dev, sys.argv[1])
    res["group_rank"] = int(os.environ.get("GROUP_RANK", -1))
    res["ddp"] = attempt(ddp, rank, world, dev)  # training on 4 ranks too
    got = attempt(fsdp2, rank, world, dev)
    res["fsdp2"] = got[1] if isinstance(got, tuple) else got
    with open(os.path.join(sys.argv[1], f"load{rank}.json"), "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()
