"""The c10d backend ``emu``: collectives on emu tensors, over gloo on the host, timed by the model.

The functional data path is device -> host -> gloo -> host -> device: every collective copies its
emu operands to host memory (a blocking copy on the current stream, so it is ordered after the
stream's earlier work, like NCCL's stream semantics), runs gloo on the host copies, and copies the
results back on the current stream. Those copies are ordinary host<->device copies: telemetry counts
them as such. The time the collective would take on the emulated interconnect comes from
``cost_model``: each rank's ready time (its simulated host clock once its operands are ready) is
exchanged as part of the collective, and every rank's simulated clock moves to
``max(ready times) + modelled duration`` when the collective completes.

Collectives on CPU tensors (a ``"cpu:gloo,emu:emu"`` group hands them to this backend too) run on
gloo directly, unmodelled: they are host work.
"""
from __future__ import annotations

import datetime
import os
import threading
import time

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (AllreduceOptions, PrefixStore, ProcessGroupGloo, ReduceOp, Work)
from torch.futures import Future

import runtime
from torch_plugin.distributed import cost_model

_RED = ReduceOp.RedOpType
_records: list[dict] = []
_records_lock = threading.Lock()
_params = cost_model.CollectiveParams()
FAILURE_REPORT_WAIT_S = 0.5  # at most this long a survivor waits for its peers to report the same failure


def collective_records() -> list[dict]:
    """One record per modelled collective of this process, oldest first: ``op``, ``algorithm``,
    ``bytes``, ``ranks``, ``rank``, ``device``, ``seq``, ``ready_ns`` (this rank's ready time),
    ``start_ns`` (the latest arrival), ``end_ns``, ``duration_ns`` (modelled), ``wait_ns`` (this rank
    waited for later ranks), ``host_copy_bytes`` (the functional path's device<->host bytes),
    ``group``. Times are simulated ns. A record is added when the collective completes (its wait)."""
    with _records_lock:
        return [dict(r) for r in _records]


def reset_collective_records() -> None:
    with _records_lock:
        _records.clear()


def collective_summary() -> dict:
    """Per op: ``{"count", "bytes", "modelled_ns", "wait_ns", "algorithms": {name: count}}``."""
    out: dict[str, dict] = {}
    for r in collective_records():
        s = out.setdefault(r["op"], {"count": 0, "bytes": 0, "modelled_ns": 0.0, "wait_ns": 0.0, "algorithms": {}})
        s["count"] += 1
        s["bytes"] += r["bytes"]
        s["modelled_ns"] += r["duration_ns"]
        s["wait_ns"] += r["wait_ns"]
        s["algorithms"][r["algorithm"]] = s["algorithms"].get(r["algorithm"], 0) + 1
    return out


def set_collective_params(params: cost_model.CollectiveParams) -> None:
    """Replaces the collective model's parameters (``cost_model.CollectiveParams``) for this process."""
    global _params
    if not isinstance(params, cost_model.CollectiveParams):
        raise TypeError(f"expected a CollectiveParams, got {type(params).__name__}")
    _params = params


def collective_params() -> cost_model.CollectiveParams:
    return _params


def topology(ranks_per_node: int | None = None) -> cost_model.Topology:
    """The topology the model uses, from this process's hardware description. Ranks per node: the
    description's own field when it has one, else torchrun's LOCAL_WORLD_SIZE, else num_devices."""
    config = runtime.get_runtime().config
    if ranks_per_node is None and not (getattr(config.interconnect, "devices_per_node", 0)
                                       or getattr(config, "devices_per_node", 0)):
        local = os.environ.get("LOCAL_WORLD_SIZE")
        ranks_per_node = int(local) if local else None
    return cost_model.Topology.from_config(config, ranks_per_node)


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _is_emu(tensors) -> bool:
    return any(t.device.type == "emu" for t in tensors)


def _host(t: torch.Tensor) -> torch.Tensor:
    """The host copy of an emu tensor (a blocking copy on its current stream)."""
    return t.detach().to("cpu") if t.device.type == "emu" else t


def _host_empty(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(t.shape, dtype=t.dtype) if t.device.type == "emu" else t


def _copy_back(dst: torch.Tensor, src: torch.Tensor) -> None:
    if dst is not src:
        with torch.no_grad():
            dst.copy_(src)


class EmuWork(Work):
    """An issued collective. ``wait(timeout)`` finishes it: waits for gloo, copies the results to the
    device, and moves the simulated clock to the collective's modelled completion."""

    def __init__(self, pg: "EmuProcessGroup", op: str, seq: int, inner: list, finish, result):
        super().__init__()
        self._pg, self._op, self._seq, self._inner, self._finish = pg, op, seq, inner, finish
        self._result = result
        self._done = False
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    def is_completed(self) -> bool:
        """True once the results are on the device: when gloo has finished, this finishes the op
        (copies back, moves the clock), so a polling loop sees the results without wait()."""
        if not self._done and self._error is None and all(w.is_completed() for w in self._inner):
            self.wait()
        return self._done

    def is_success(self) -> bool:
        return self._done and self._error is None

    def exception(self):
        return self._error

    def wait(self, timeout: datetime.timedelta = datetime.timedelta(0)) -> bool:
        with self._lock:
            if self._error is not None:
                raise self._error
            if self._done:
                return True
            try:
                for w in self._inner:
                    w.wait(timeout) if timeout and timeout.total_seconds() > 0 else w.wait()
            except Exception as err:  # noqa: BLE001  (gloo's errors: dead peer, timeout)
                self._error = self._pg._failure(self._op, self._seq, err, timeout)
                raise self._error from err
            self._finish()
            self._done = True
            return True

    def get_future(self) -> Future:
        """A completed future of the op's result (DDP's reducer reads it): the op is finished first."""
        self.wait()
        fut = Future()
        fut.set_result(self._result)
        return fut

    def result(self):
        return self._result


class _Done(Work):
    """A work that completed at its call (barrier)."""

    def __init__(self, result=None):
        super().__init__()
        self._result = result if result is not None else []

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def wait(self, timeout=datetime.timedelta(0)) -> bool:
        return True

    def get_future(self) -> Future:
        fut = Future()
        fut.set_result(self._result)
        return fut

    def result(self):
        return self._result


class EmuProcessGroup(dist.ProcessGroup):
    """The ``emu`` backend of one process group (see the module docstring)."""

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta, global_ranks=None,
                 group_id: str = ""):
        super().__init__(rank, size)
        # torchrun may hand a restarted job the store of the failed attempt: its keys (gloo's peer
        # addresses, the failure bookkeeping) must not be read again, so each attempt has its own prefix.
        store = PrefixStore(f"emu/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
        self._store = store
        self._timeout = timeout
        self._global = list(global_ranks) if global_ranks else list(range(size))
        self._group_id = group_id or "default"
        self._gloo = ProcessGroupGloo(PrefixStore("emu_data", store), rank, size, timeout)
        # The ready-time exchange runs on its own gloo group, so it never queues behind data.
        self._clock = ProcessGroupGloo(PrefixStore("emu_clock", store), rank, size, timeout)
        self._seq = 0
        self._p2p_seq = 0

    # -- identity ------------------------------------------------------------
    def getBackendName(self) -> str:  # noqa: N802  (the c10d name)
        return "emu"

    def name(self) -> str:
        return "emu"

    @property
    def group_name(self) -> str:
        # c10d's ProcessGroup reads it from its registered C++ backends, which a Python group has none of.
        return self._group_id

    @property
    def group_desc(self) -> str:
        return self._group_desc if hasattr(self, "_group_desc") else self._group_id

    def _set_group_desc(self, desc: str) -> None:
        self._group_desc = desc

    @property
    def supports_splitting(self) -> bool:
        return False

    # -- bookkeeping ---------------------------------------------------------
    def _enter(self, op: str) -> int:
        self._seq += 1
        try:
            self._store.set(f"emu_entered/{self.rank()}", f"{self._seq} {op}")
        except Exception as err:  # noqa: BLE001
            raise dist.DistBackendError(
                f"emu backend: {op} (collective #{self._seq}) on rank {self._global[self.rank()]}: the "
                f"rendezvous store is unreachable (its host is gone?): {err}") from err
        return self._seq

    def _failure(self, op: str, seq: int, err: BaseException, timeout=None) -> dist.DistBackendError:
        """The error every survivor raises: names the ranks that neither finished nor reported."""
        me = self.rank()
        try:
            self._store.set(f"emu_failed/{me}", str(seq))
            suspects = self._suspects(seq)
        except Exception as store_err:  # noqa: BLE001
            suspects = None
            note = f"the rendezvous store is unreachable too ({store_err}); its host may be the dead rank"
        if suspects:
            names = ", ".join(f"rank {self._global[p]} ({why})" for p, why in suspects)
            note = f"peer {names}"
        elif suspects is not None:
            note = "every peer reported the failure too (see gloo's message)"
        t = self._timeout if not timeout or timeout.total_seconds() <= 0 else timeout
        return dist.DistBackendError(
            f"emu backend: {op} (collective #{seq} of group {self._group_id!r}) failed on rank "
            f"{self._global[me]} within the timeout ({t.total_seconds():g} s): {note}. gloo: {err}")

    def _suspects(self, seq: int) -> list:
        deadline = time.monotonic() + min(FAILURE_REPORT_WAIT_S, 0.1 * self._timeout.total_seconds())
        while True:
            suspects = []
            for p in range(self.size()):
                if p == self.rank():
                    continue
                failed = self._store.check([f"emu_failed/{p}"]) and int(self._store.get(f"emu_failed/{p}")) >= seq
                if failed:
                    continue
                entered = self._store.get(f"emu_entered/{p}").decode().split() \
                    if self._store.check([f"emu_entered/{p}"]) else ["0", "-"]
                if int(entered[0]) < seq:
                    suspects.append((p, f"never reached collective #{seq}; its last was #{entered[0]} "
                                        f"{entered[1]}: dead, hung or out of step"))
                else:
                    suspects.append((p, f"entered collective #{seq} and neither finished nor reported an "
                                        f"error: dead or hung"))
            if not suspects or time.monotonic() >= deadline:
                return suspects
            time.sleep(0.05)

    def _ready_ns(self) -> float:
        return runtime.get_runtime().host_time_ns()

    def _exchange_ready(self, op: str, seq: int, ready: float, link_fault: BaseException | None = None) -> float:
        """The latest ready time of the group's ranks (an all_reduce MAX on the clock group). Each
        rank also says whether its link faulted: one faulted link fails the collective on every
        rank (job scope), with the faulting rank's error as the cause where it happened."""
        t = torch.zeros(1 + self.size(), dtype=torch.float64)
        t[0] = ready
        t[1 + self.rank()] = 1.0 if link_fault is not None else 0.0
        opts = AllreduceOptions()
        opts.reduceOp = ReduceOp.MAX
        try:
            self._clock.allreduce([t], opts).wait()
        except Exception as err:  # noqa: BLE001
            raise self._failure(op, seq, err) from err
        faulted = [self._global[r] for r in range(self.size()) if t[1 + r] > 0]
        if faulted:
            where = f"on this rank ({link_fault})" if link_fault is not None else "on a peer"
            raise dist.DistBackendError(
                f"emu backend: {op} (collective #{seq} of group {self._group_id!r}) failed on every rank "
                f"(job scope): peer_link_error on the interconnect link of rank(s) "
                f"{', '.join(map(str, faulted))}; this is rank {self._global[self.rank()]}, the fault is "
                f"{where}") from link_fault
        return float(t[0].item())

    def _probe_link(self, device_tensors) -> BaseException | None:
        """A collective's traffic crosses the rank's inter-device link. When a peer_link_error is
        armed on the rank's device, a 4-byte peer copy (emu:d -> its neighbour in the rank's own
        emulated system) stands in for that traffic, so the fault fires there; its error is
        returned (None: no fault armed, or the probe passed). Without an armed fault nothing is
        copied, so ordinary runs are unchanged."""
        device = next((t.device.index for t in device_tensors if t.device.type == "emu"), None)
        rt = runtime.get_runtime()
        if device is None or rt.device_count < 2:
            return None
        armed = rt.health(device).get("faults_armed", ())
        if not any(f.get("kind") == "peer_link_error" for f in armed):
            return None
        neighbour = (device + 1) % rt.device_count
        try:
            probe = torch.zeros(1, dtype=torch.float32, device=f"emu:{device}")
            probe.to(f"emu:{neighbour}")
            torch.emu.synchronize(device)
        except Exception as err:  # noqa: BLE001  (the link fault, with its cause chain)
            return err
        return None

    def _issue(self, op: str, seq: int, device_tensors, nbytes: int, host_bytes: int, inner: list, finish,
               result, start: float, ready: float, cost: cost_model.CollectiveCost) -> EmuWork:
        device = next((t.device.index for t in device_tensors if t.device.type == "emu"), None)
        end = start + cost.time_ns
        record = {"op": op, "algorithm": cost.algorithm, "bytes": nbytes, "ranks": self.size(),
                  "rank": self._global[self.rank()], "device": device, "seq": seq, "ready_ns": ready,
                  "start_ns": start, "end_ns": end, "duration_ns": cost.time_ns, "wait_ns": start - ready,
                  "host_copy_bytes": host_bytes, "group": self._group_id}

        def complete():
            finish()
            runtime.get_runtime().advance_host_time(end)
            with _records_lock:
                _records.append(record)

        return EmuWork(self, op, seq, inner, complete, result)

    def _model(self, op: str, nbytes: int) -> cost_model.CollectiveCost:
        return cost_model.collective_cost(op, nbytes, self.size(), topology(), _params)

    def _gloo_call(self, op: str, seq: int, fn, *args):
        try:
            return fn(*args)
        except Exception as err:  # noqa: BLE001
            raise self._failure(op, seq, err) from err

    def _collective(self, op: str, device_tensors, host_in, host_out_pairs, launch, nbytes: int, result,
                    post=None) -> EmuWork:
        """The common path: enter, exchange ready times, launch gloo, and an EmuWork that finishes."""
        seq = self._enter(op)
        fault = self._probe_link(device_tensors)
        ready = self._ready_ns()
        start = self._exchange_ready(op, seq, ready, fault)
        inner = self._gloo_call(op, seq, launch)
        host_bytes = _nbytes([t for t in host_in]) + _nbytes([h for _, h in host_out_pairs])

        def finish():
            if post is not None:
                post()
            for dst, src in host_out_pairs:
                _copy_back(dst, src)

        return self._issue(op, seq, device_tensors, nbytes, host_bytes, [inner], finish, result, start, ready,
                           self._model(op, nbytes))

    # -- reductions ------------------------------------------------------------
    def _reduce_opts(self, cls, opts):
        """gloo's options for ``opts`` (AVG runs as SUM, divided afterwards); (options, average?)."""
        red = opts.reduceOp.op if hasattr(opts.reduceOp, "op") else opts.reduceOp
        if red == _RED.PREMUL_SUM:
            raise NotImplementedError("emu backend: ReduceOp.PREMUL_SUM is not supported (use SUM and scale)")
        if red not in (_RED.SUM, _RED.AVG, _RED.PRODUCT, _RED.MIN, _RED.MAX, _RED.BAND, _RED.BOR, _RED.BXOR):
            raise NotImplementedError(f"emu backend: reduce op {red} is not supported")
        out = cls()
        out.reduceOp = ReduceOp.SUM if red == _RED.AVG else ReduceOp(red)
        out.timeout = opts.timeout
        if hasattr(opts, "rootRank"):
            out.rootRank = opts.rootRank
            out.rootTensor = getattr(opts, "rootTensor", 0)
        return out, red == _RED.AVG

    def _average(self, tensors):
        n = self.size()
        for t in tensors:
            if t.is_floating_point() or t.is_complex():
                t.div_(n)
            else:
                t.div_(n, rounding_mode="floor")

    def allreduce(self, tensors, opts):
        gopts, avg = self._reduce_opts(AllreduceOptions, opts)
        if not _is_emu(tensors):
            if not avg:
                return self._gloo.allreduce(tensors, gopts)
            self._gloo.allreduce(tensors, gopts).wait()
            self._average(tensors)
            return _Done(tensors)
        host = [_host(t) for t in tensors]
        return self._collective("all_reduce", tensors, host, list(zip(tensors, host)),
                                lambda: self._gloo.allreduce(host, gopts), _nbytes(tensors), tensors,
                                post=(lambda: self._average(host)) if avg else None)

    def allreduce_coalesced(self, tensors, opts):
        plain = AllreduceOptions()
        plain.reduceOp, plain.timeout = opts.reduceOp, opts.timeout
        works = [self.allreduce([t], plain) for t in tensors]
        for w in works:
            w.wait()
        return _Done(tensors)

    def reduce(self, tensors, opts):
        from torch._C._distributed_c10d import ReduceOptions
        gopts, avg = self._reduce_opts(ReduceOptions, opts)
        if not _is_emu(tensors):
            return self._gloo.reduce(tensors, gopts)
        host = [_host(t) for t in tensors]
        root = opts.rootRank == self.rank()
        return self._collective("reduce", tensors, host, list(zip(tensors, host)) if root else [],
                                lambda: self._gloo.reduce(host, gopts), _nbytes(tensors), tensors,
                                post=(lambda: self._average(host)) if avg and root else None)

    def broadcast(self, tensors, opts):
        if not _is_emu(tensors):
            return self._gloo.broadcast(tensors, opts)
        root = opts.rootRank == self.rank()
        host = [_host(t) if root else _host_empty(t) for t in tensors]
        return self._collective("broadcast", tensors, host if root else [],
                                [] if root else list(zip(tensors, host)),
                                lambda: self._gloo.broadcast(host, opts), _nbytes(tensors), tensors)

    # -- gathers and scatters ----------------------------------------------------
    def allgather(self, output_tensors, input_tensors, opts):
        flat_out = [t for ts in output_tensors for t in ts]
        if not _is_emu(input_tensors + flat_out):
            return self._gloo.allgather(output_tensors, input_tensors, opts)
        host_in = [_host(t) for t in input_tensors]
        host_out = [[_host_empty(t) for t in ts] for ts in output_tensors]
        pairs = list(zip(flat_out, [h for hs in host_out for h in hs]))
        return self._collective("all_gather", input_tensors, host_in, pairs,
                                lambda: self._gloo.allgather(host_out, host_in, opts), _nbytes(flat_out),
                                output_tensors)

    def _allgather_base(self, output, input, opts):
        if not _is_emu([output, input]):
            return self._gloo._allgather_base(output, input, opts)
        host_in, host_out = _host(input), _host_empty(output)
        return self._collective("all_gather", [input], [host_in], [(output, host_out)],
                                lambda: self._gloo._allgather_base(host_out, host_in, opts), _nbytes([output]),
                                [output])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts):
        works = [self._allgather_base(o, i, opts) for o, i in zip(outputs, inputs)]
        for w in works:
            w.wait()
        return _Done(outputs)

    def _reduce_scatter_flat(self, op_name, output, flat_input, opts, device_tensors, result):
        """reduce_scatter as an all_reduce of the input on the host, keeping this rank's chunk (the
        functional path moves the whole input; the model times a reduce_scatter)."""
        gopts, avg = self._reduce_opts(AllreduceOptions, opts)
        host = _host(flat_input).clone() if flat_input.device.type != "emu" else _host(flat_input)
        n, me = self.size(), self.rank()
        chunk = host.numel() // n

        def post():
            if avg:
                self._average([host])

        def copy_out():
            _copy_back(output, host.view(-1)[me * chunk:(me + 1) * chunk].view(output.shape))

        if not _is_emu(device_tensors):
            self._gloo.allreduce([host], gopts).wait()
            post()
            copy_out()
            return _Done(result)
        work = self._collective(op_name, device_tensors, [host], [], lambda: self._gloo.allreduce([host], gopts),
                                _nbytes([flat_input]), result, post=lambda: (post(), copy_out()))
        return work

    def _reduce_scatter_base(self, output, input, opts):
        if input.numel() != output.numel() * self.size():
            raise ValueError(f"emu backend: reduce_scatter_tensor: input has {input.numel()} elements, expected "
                             f"output's {output.numel()} x {self.size()} ranks")
        return self._reduce_scatter_flat("reduce_scatter", output, input.reshape(-1), opts, [output, input],
                                         [output])

    def reduce_scatter(self, output_tensors, input_tensors, opts):
        if len(output_tensors) != 1:
            raise NotImplementedError("emu backend: reduce_scatter takes one output tensor per rank")
        output, inputs = output_tensors[0], input_tensors[0]
        if len(inputs) != self.size() or any(t.shape != output.shape for t in inputs):
            raise ValueError(f"emu backend: reduce_scatter needs {self.size()} inputs shaped like the output")
        flat = torch.cat([t.reshape(-1) for t in inputs])
        return self._reduce_scatter_flat("reduce_scatter", output, flat, opts, [output] + list(inputs),
                                         output_tensors)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts):
        works = [self._reduce_scatter_base(o, i, opts) for o, i in zip(outputs, inputs)]
        for w in works:
            w.wait()
        return _Done(outputs)

    def gather(self, output_tensors, input_tensors, opts):
        flat_out = [t for ts in output_tensors for t in ts]
        if not _is_emu(input_tensors + flat_out):
            return self._gloo.gather(output_tensors, input_tensors, opts)
        host_in = [_host(t) for t in input_tensors]
        host_out = [[_host_empty(t) for t in ts] for ts in output_tensors]
        pairs = list(zip(flat_out, [h for hs in host_out for h in hs]))
        return self._collective("gather", input_tensors, host_in, pairs,
                                lambda: self._gloo.gather(host_out, host_in, opts),
                                _nbytes(input_tensors) * self.size(), output_tensors)

    def scatter(self, output_tensors, input_tensors, opts):
        flat_in = [t for ts in input_tensors for t in ts]
        if not _is_emu(output_tensors + flat_in):
            return self._gloo.scatter(output_tensors, input_tensors, opts)
        host_in = [[_host(t) for t in ts] for ts in input_tensors]
        host_out = [_host_empty(t) for t in output_tensors]
        return self._collective("scatter", output_tensors, [h for hs in host_in for h in hs],
                                list(zip(output_tensors, host_out)),
                                lambda: self._gloo.scatter(host_out, host_in, opts),
                                _nbytes(output_tensors) * self.size(), output_tensors)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts):
        if not _is_emu([output, input]):
            return self._gloo.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)
        host_in, host_out = _host(input), _host_empty(output)
        return self._collective("all_to_all", [input], [host_in], [(output, host_out)],
                                lambda: self._gloo.alltoall_base(host_out, host_in, output_split_sizes,
                                                                 input_split_sizes, opts),
                                _nbytes([input]), [output])

    def alltoall(self, output_tensors, input_tensors, opts):
        """all_to_all of tensor lists, as one all_to_all_single of their concatenations."""
        dtypes = {t.dtype for t in output_tensors + input_tensors}
        if len(dtypes) != 1:
            raise ValueError(f"emu backend: all_to_all needs one dtype for every tensor, got {sorted(map(str, dtypes))}")
        flat_in = torch.cat([t.reshape(-1) for t in input_tensors])
        flat_out = torch.empty(sum(t.numel() for t in output_tensors), dtype=output_tensors[0].dtype,
                               device=output_tensors[0].device)
        work = self.alltoall_base(flat_out, flat_in, [t.numel() for t in output_tensors],
                                  [t.numel() for t in input_tensors], opts)
        inner_finish = work._finish if isinstance(work, EmuWork) else None

        def split():
            offset = 0
            for t in output_tensors:
                _copy_back(t, flat_out[offset:offset + t.numel()].view(t.shape))
                offset += t.numel()

        if inner_finish is None:
            work.wait()
            split()
            return _Done(output_tensors)
        work._finish = lambda: (inner_finish(), split())
        work._result = output_tensors
        return work

    # torch.distributed's Python-level names (2.13) for the ops above; C++ callers (DDP's reducer,
    # the functional collectives) reach the c10d names through ProcessGroup's trampoline.
    def all_gather_single(self, output, input, opts):
        return self._allgather_base(output, input, opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts):
        return self.allgather_into_tensor_coalesced(outputs, inputs, opts)

    def reduce_scatter_single(self, output, input, opts):
        return self._reduce_scatter_base(output, input, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    def allgather_coalesced(self, output_lists, inputs, opts):
        works = [self.allgather([outs], [i], opts) for outs, i in zip(output_lists, inputs)]
        for w in works:
            w.wait()
        return _Done(output_lists)

    # -- barrier and point to point ------------------------------------------
    def barrier(self, opts):
        seq = self._enter("barrier")
        rt = runtime.get_runtime() if runtime.is_initialized() else None
        if rt is not None:
            rt.synchronize_all()  # the barrier orders after every stream's work, like NCCL's
        ready = self._ready_ns() if rt is not None else 0.0
        start = self._exchange_ready("barrier", seq, ready)
        if rt is None:
            return _Done()
        work = self._issue("barrier", seq, [], 0, 0, [], lambda: None, [], start, ready,
                           self._model("barrier", 0))
        work.wait()
        return work

    def _clock_p2p(self, op, seq, peer: int, tag: int, ready: float):
        """send: posts this rank's ready time to the peer (gloo's send completes when the peer takes
        it: the work is waited with the data's); recv: the later of both ready times."""
        t = torch.tensor([ready], dtype=torch.float64)
        try:
            if op == "send":
                return ready, [self._clock.send([t], peer, tag), t]
            self._clock.recv([t], peer, tag).wait()
        except Exception as err:  # noqa: BLE001
            raise self._failure(op, seq, err) from err
        return max(ready, float(t.item())), []

    def send(self, tensors, dst: int, tag: int):
        if not _is_emu(tensors):
            return self._gloo.send(tensors, dst, tag)
        seq = self._enter("send")
        host = [_host(t) for t in tensors]
        ready = self._ready_ns()
        start, (clock_work, keep) = self._clock_p2p("send", seq, dst, tag, ready)
        inner = self._gloo_call("send", seq, self._gloo.send, host, dst, tag)
        cost = cost_model.p2p_cost(_nbytes(tensors), self.rank(), dst, self.size(), topology(), _params)
        return self._issue("send", seq, tensors, _nbytes(tensors), _nbytes(host), [clock_work, inner],
                           lambda: (keep, host), tensors, start, ready, cost)

    def recv(self, tensors, src: int, tag: int):
        if not _is_emu(tensors):
            return self._gloo.recv(tensors, src, tag)
        seq = self._enter("recv")
        host = [_host_empty(t) for t in tensors]
        ready = self._ready_ns()
        start, _ = self._clock_p2p("recv", seq, src, tag, ready)
        inner = self._gloo_call("recv", seq, self._gloo.recv, host, src, tag)
        cost = cost_model.p2p_cost(_nbytes(tensors), src, self.rank(), self.size(), topology(), _params)
        cost = cost_model.CollectiveCost("recv", cost.algorithm, cost.nbytes, cost.ranks, cost.time_ns,
                                         cost.candidates)

        def finish():
            for t, h in zip(tensors, host):
                _copy_back(t, h)

        return self._issue("recv", seq, tensors, _nbytes(tensors), _nbytes(host), [inner], finish, tensors,
                           start, ready, cost)

    def recv_anysource(self, tensors, tag: int):
        raise NotImplementedError("emu backend: recv from any source is not supported (name the source rank)")


def _create(common_opts, backend_opts) -> EmuProcessGroup:
    """c10d's creator (extended API): one EmuProcessGroup per process group."""
    return EmuProcessGroup(common_opts.store, common_opts.group_rank, common_opts.group_size, common_opts.timeout,
                           list(common_opts.global_ranks_in_group or []), str(common_opts.group_id or ""))


def register() -> None:
    """Registers the ``emu`` c10d backend (idempotent)."""
    if "emu" in dist.Backend.backend_list:
        return
    dist.Backend.register_backend("emu", _create, extended_api=True, devices=["emu"])
