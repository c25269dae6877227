"""The c10d backend ``emu``: collectives on emu tensors, over gloo on the host, timed by the model.

Functionally, the data goes device -> host -> gloo -> host -> device. Its modelled time is the
collective model's (``cost_model``), on the emulated links, like NCCL's kernels on their own stream:

1. On the current stream, a COLLECTIVE command (op "", it holds nothing) stages the inputs into host buffers. It is ordered
   after the stream's earlier work, and it takes no modelled time: the copies are the functional
   path, counted as host<->device traffic in telemetry but not charged to any engine. The host
   waits for it functionally (the emulated devices run ahead to it); the modelled host clock does
   not move. That point of the stream, in device time, is the rank's *ready time*. It is no earlier
   than the end of this device's previous collective: one device's collectives take turns on its
   links.
2. The ready times are exchanged (an all_reduce MAX on a second gloo group), and gloo moves the data.
   The collective starts at the latest ready time of the group and lasts its modelled duration.
   Every rank therefore has the same start and end.
3. On the process group's internal stream of the device, a second COLLECTIVE command carries the
   op, its size, the group's shape (ranks, the nodes it spans) and the algorithm; the device holds
   its network port and links from that start for the time its interconnect model gives
   (emulator/collectives.py, on the hardware description). At its end it writes the results into
   the output tensors. Work on the current stream goes on meanwhile:
   compute overlaps communication.
4. ``work.wait()`` makes the current stream wait for that command, without blocking the host. This
   is NCCL's stream semantics.

Collectives on CPU tensors (a ``"cpu:gloo,emu:emu"`` group hands them to this backend too) run on
gloo directly, unmodelled: they are host work.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import threading
import time
import weakref

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (AllreduceOptions, PrefixStore, ProcessGroupGloo, ReduceOp, Work)
from torch.futures import Future

import runtime
from torch_plugin.distributed import cost_model
from torch_plugin.ops import registry
from torch_plugin.ops._common import current_stream, device_ref, host_ref

_RED = ReduceOp.RedOpType
_records: list[dict] = []
_records_lock = threading.Lock()
# Per emu device of this process: the modelled end of its latest collective (its links are busy
# until then), in device time.
_links_free_ns: dict[int, float] = {}
# Each collective's (done event, what its command reads, a weak reference to its work). The host
# buffers must live until the command has executed, whatever the caller does with the work; the
# event is destroyed once it has passed and its work is gone.
_in_flight: list[tuple] = []
FAILURE_REPORT_WAIT_S = 0.5  # at most this long a survivor waits for its peers to report the same failure


def collective_records() -> list[dict]:
    """One record per modelled collective of this process, oldest first:
    - ``op``, ``algorithm``, ``bytes``, ``ranks``, ``rank``, ``device``, ``seq``, ``group``;
    - ``ready_ns``: this rank's ready time, the device time its current stream reached the
      collective, or the end of the device's previous collective if that was later;
    - ``start_ns``: the latest ready time of the group;
    - ``end_ns`` and ``duration_ns``: the modelled end and duration;
    - ``wait_ns``: how long this rank waited for later ranks;
    - ``host_copy_bytes``: the functional path's device<->host bytes.
    Times are simulated ns. A record is added when the collective is issued; its end is already known."""
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


def topology(ranks_per_node: int | None = None) -> cost_model.Topology:
    """The interconnect the devices model, from this process's hardware description. Ranks per
    node: the description's ``interconnect.devices_per_node`` (0: one node), unless
    ``ranks_per_node`` replaces it (a projection to nodes of another size)."""
    return cost_model.Topology.from_config(runtime.get_runtime().config, ranks_per_node)


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _is_emu(tensors) -> bool:
    return any(t.device.type == "emu" for t in tensors)


def _emu_device(tensors) -> int | None:
    return next((t.device.index for t in tensors if t.device.type == "emu"), None)


def _projection() -> bool:
    """Projection mode (docs/projection.md): the devices hold no values, so a collective moves no
    data: its commands are issued and timed as in functional mode, its host buffers are
    placeholders (one element seen through zero strides: the commands copy nothing in this mode)
    and gloo carries only the ready times."""
    return runtime.is_initialized() and runtime.get_runtime().projection


def _placeholder(shape, dtype) -> torch.Tensor:
    """A host buffer of ``shape`` for a command that copies nothing (projection mode): one element."""
    return torch.empty((), dtype=dtype).expand(shape)


def _refuse_host_outputs(op: str, tensors) -> None:
    """Projection mode: a CPU tensor among an emu collective's tensors would receive values that do
    not exist. Refused before the collective starts (on every rank alike: the check is local)."""
    if any(t.device.type != "emu" for t in tensors):
        from torch_plugin.errors import AROUND_HOST, projection_error
        raise projection_error(f"c10d::{op}", "a collective that mixes host (CPU) and emu tensors would write "
                               "values to host memory", AROUND_HOST)


def _staged(t: torch.Tensor, reads: list) -> torch.Tensor:
    """The host buffer of input ``t``: for an emu tensor, a new host tensor, staged from ``t`` by
    the collective's first command (``reads`` gets the pair); a CPU tensor is its own buffer."""
    if t.device.type != "emu":
        return t
    host = _placeholder(t.shape, t.dtype) if _projection() else torch.empty(t.shape, dtype=t.dtype)
    reads.append((host, t))
    return host


@contextlib.contextmanager
def _as_op(op: str, tensors):
    """While telemetry or a profiler is open, the collective is an op record ``c10d::<op>`` (path
    native) that its device commands belong to, so the profiler reports its modelled time per op."""
    if not registry._observers:
        yield
        return
    record = registry.begin_op(f"c10d::{op}", tuple(tensors), {})
    path = None
    try:
        yield
        path = registry.NATIVE
    finally:
        registry.end_op(record, path)


def _host_empty(t: torch.Tensor) -> torch.Tensor:
    if t.device.type != "emu":
        return t
    return _placeholder(t.shape, t.dtype) if _projection() else torch.empty(t.shape, dtype=t.dtype)


def _pair_refs(pairs) -> tuple:
    """(dst, src) TensorRefs of ``pairs`` of (dst, src) tensors, one on emu and one on the host."""
    return tuple(tuple(device_ref(t) if t.device.type == "emu" else host_ref(t) for t in pair) for pair in pairs)


class EmuWork(Work):
    """An issued collective. Its data has crossed gloo already (point-to-point sends excepted: gloo's
    send completes when the peer takes it, which ``wait`` waits for); its device side is a command on
    the group's stream. ``wait(timeout)`` makes the current stream wait for that command (NCCL's
    semantics: the host does not block)."""

    def __init__(self, pg: "EmuProcessGroup", op: str, seq: int, inner: list, device: int | None, done, result):
        super().__init__()
        self._pg, self._op, self._seq, self._inner, self._device = pg, op, seq, inner, device
        self._done_event = done        # a runtime.Event recorded after the device command (None: nothing queued)
        self._result = result
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    def _finish_host(self, timeout=None) -> None:
        try:
            for w in self._inner:
                w.wait(timeout) if timeout and timeout.total_seconds() > 0 else w.wait()
        except Exception as err:  # noqa: BLE001  (gloo's errors: dead peer, timeout)
            self._error = self._pg._failure(self._op, self._seq, err, timeout)
            raise self._error from err
        self._inner = []

    def is_completed(self) -> bool:
        """True once the collective's device command has completed (polling moves the host clock,
        so a polling loop sees it complete)."""
        if self._error is not None:
            return False
        if any(not w.is_completed() for w in self._inner):
            return False
        with self._lock:
            self._finish_host()
        event = self._done_event
        return event is None or runtime.get_runtime().event_query(event)

    def is_success(self) -> bool:
        return self.is_completed() and self._error is None

    def exception(self):
        return self._error

    def wait(self, timeout: datetime.timedelta = datetime.timedelta(0)) -> bool:
        with self._lock:
            if self._error is not None:
                raise self._error
            self._finish_host(timeout)
            if self._done_event is not None:
                runtime.get_runtime().stream_wait_event(current_stream(self._device), self._done_event)
            return True

    def get_future(self) -> Future:
        """A completed future of the op's result (DDP's reducer reads it): wait() first, so work the
        callback enqueues on the current stream is ordered after the collective."""
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


class _Released:
    """Stands for an inner gloo group after the process group was shut down or aborted."""

    def __init__(self, group_id: str, how: str):
        self._what = f"emu backend: process group {group_id!r} was {how} (destroy_process_group); it runs no collectives"

    def __getattr__(self, name):
        raise RuntimeError(self._what)


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

    # -- teardown ------------------------------------------------------------
    def shutdown(self) -> None:
        """``destroy_process_group`` calls it: the inner gloo groups are released now, so their
        worker threads are joined while the interpreter is alive (gloo's own ``shutdown`` keeps
        them; left to interpreter finalization, a worker that takes the GIL is ended there and the
        process aborts with "terminate called without an active exception")."""
        self._release("shut down")

    def abort(self) -> None:
        self._release("aborted")

    def _release(self, how: str) -> None:
        for name in ("_gloo", "_clock"):
            inner = getattr(self, name)
            if not isinstance(inner, _Released):
                setattr(self, name, _Released(self._group_id, how))
                del inner   # the last reference: ~ProcessGroupGloo joins its threads here

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

    def _comm_stream(self, device: int) -> runtime.Stream:
        """The group's internal stream on ``device`` (NCCL's communicator stream)."""
        streams = self.__dict__.setdefault("_comm_streams", {})
        stream = streams.get(device)
        if stream is None:
            stream = streams[device] = runtime.get_runtime().stream_create(device)
        return stream

    def _ready(self, op: str, device: int, reads) -> float:
        """Step 1 (module docstring): stages ``reads`` (host buffer, emu tensor) on the current
        stream and returns this rank's ready time."""
        rt = runtime.get_runtime()
        stream = current_stream(device)
        if reads:
            rt.collective(stream, f"{op}_inputs", _pair_refs(reads))
        return max(rt.stream_reached_ns(stream), _links_free_ns.get(device, 0.0))

    def _issue(self, op: str, seq: int, device: int, nbytes: int, host_bytes: int, inner: list, writes,
               result, start: float, ready: float, model) -> EmuWork:
        """Step 3: the device command that holds the links from ``start`` and writes ``writes``
        (emu tensor, host tensor) at its end; its record; the work. ``model``: ``_model``'s (cost,
        command fields); the command pins the chosen algorithm, so the device books ``cost``."""
        cost, fields = model
        end = start + cost.time_ns
        rt = runtime.get_runtime()
        comm = self._comm_stream(device)
        rt.collective(comm, op, _pair_refs(writes), start, **fields)
        for dst, _ in writes:  # the comm stream writes them: their frees wait for it (NCCL's recordStream)
            rt.record_stream(device, dst.untyped_storage().data_ptr(), comm.stream_id)
        done = rt.event_create(device)
        rt.event_record(done, comm)
        live = []
        for entry in _in_flight:
            if entry[2]() is None and rt.event_passed(entry[0]):
                rt.event_destroy(entry[0])
            else:
                live.append(entry)
        work = EmuWork(self, op, seq, inner, device, done, result)
        live.append((done, writes, weakref.ref(work)))
        _in_flight[:] = live
        _links_free_ns[device] = max(_links_free_ns.get(device, 0.0), end)
        record = {"op": op, "algorithm": cost.algorithm, "bytes": nbytes, "ranks": self.size(),
                  "rank": self._global[self.rank()], "device": device, "seq": seq, "ready_ns": ready,
                  "start_ns": start, "end_ns": end, "duration_ns": cost.time_ns, "wait_ns": start - ready,
                  "host_copy_bytes": host_bytes, "group": self._group_id}
        with _records_lock:
            _records.append(record)
        return work

    def _model(self, op: str, nbytes: int, peers=None):
        """(the device's modelled cost, the COLLECTIVE command's fields) of ``op`` over this group
        (``peers``: the (src, dst) group ranks of a send/recv)."""
        topo = topology()
        if peers is None:
            ranks, nodes, hops = self.size(), topo.nodes(self._global), 1
        else:
            src, dst = (self._global[r] for r in peers)
            ranks, nodes, hops = 2, topo.nodes((src, dst)), topo.hops(src, dst, max(self._global) + 1)
        cost = runtime.get_runtime().collective_cost(op, nbytes, ranks, nodes, hops)
        fields = {"op": op, "nbytes": nbytes, "ranks": ranks, "nodes": nodes, "hops": hops,
                  "algorithm": cost.algorithm if ranks > 1 else ""}
        return cost, fields

    def _gloo_call(self, op: str, seq: int, fn, *args):
        try:
            return fn(*args)
        except Exception as err:  # noqa: BLE001
            raise self._failure(op, seq, err) from err

    def _gloo_wait(self, op: str, seq: int, work) -> None:
        try:
            work.wait()
        except Exception as err:  # noqa: BLE001  (a dead peer, a timeout)
            raise self._failure(op, seq, err) from err

    def _collective(self, op: str, device_tensors, reads, launch, writes, nbytes: int, result,
                    post=None) -> EmuWork:
        """The common path (module docstring): ``reads`` (host buffer, emu input) are staged, the
        ready times exchanged, ``launch()`` runs gloo on the host buffers (waited for here), then
        ``post()`` on the host, and the device command writes ``writes`` (emu output, host
        buffer). CPU outputs in ``writes`` are copied on the host at once. In projection mode gloo
        moves nothing (``launch`` and ``post`` are not called): the commands and the ready-time
        exchange are the functional mode's, so the timeline is too."""
        projection = _projection()
        if projection:
            _refuse_host_outputs(op, device_tensors)
        with _as_op(op, device_tensors):
            return self._collective_steps(op, device_tensors, reads, launch, writes, nbytes, result, post)

    def _collective_steps(self, op, device_tensors, reads, launch, writes, nbytes, result, post) -> EmuWork:
        seq = self._enter(op)
        device = _emu_device(device_tensors)
        fault = self._probe_link(device_tensors)
        # A faulted link fails the collective on every rank at the exchange; this rank's stream
        # faulted with it, so nothing is staged.
        ready = self._ready(op, device, reads) if fault is None else runtime.get_runtime().host_time_ns()
        start = self._exchange_ready(op, seq, ready, fault)
        if not _projection():
            self._gloo_wait(op, seq, self._gloo_call(op, seq, launch))
            if post is not None:
                post()
        device_writes = []
        for dst, src in writes:
            if dst.device.type == "emu":
                device_writes.append((dst, src))
            elif dst is not src:
                dst.copy_(src)
        host_bytes = _nbytes([h for h, _ in reads]) + _nbytes([h for _, h in device_writes])
        if _projection():
            host_bytes = 0  # its buffers are placeholders: nothing crossed the host
        return self._issue(op, seq, device, nbytes, host_bytes, [], device_writes, result, start, ready,
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
        reads = []
        host = [_staged(t, reads) for t in tensors]
        return self._collective("all_reduce", tensors, reads, lambda: self._gloo.allreduce(host, gopts),
                                list(zip(tensors, host)), _nbytes(tensors), tensors,
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
        reads = []
        host = [_staged(t, reads) for t in tensors]
        root = opts.rootRank == self.rank()
        return self._collective("reduce", tensors, reads, lambda: self._gloo.reduce(host, gopts),
                                list(zip(tensors, host)) if root else [], _nbytes(tensors), tensors,
                                post=(lambda: self._average(host)) if avg and root else None)

    def broadcast(self, tensors, opts):
        if not _is_emu(tensors):
            return self._gloo.broadcast(tensors, opts)
        root = opts.rootRank == self.rank()
        reads = []
        host = [_staged(t, reads) if root else _host_empty(t) for t in tensors]
        return self._collective("broadcast", tensors, reads, lambda: self._gloo.broadcast(host, opts),
                                [] if root else list(zip(tensors, host)), _nbytes(tensors), tensors)

    # -- gathers and scatters ----------------------------------------------------
    def _gather_into_lists(self, kind, gloo_op, output_tensors, input_tensors, opts, nbytes):
        """all_gather or gather into lists of output tensors (one list per input), on the host
        through gloo_op (gloo's allgather or gather); nbytes(the outputs, flattened): what the
        collective moves, for the model."""
        flat_out = [t for ts in output_tensors for t in ts]
        if not _is_emu(input_tensors + flat_out):
            return gloo_op(output_tensors, input_tensors, opts)
        reads = []
        host_in = [_staged(t, reads) for t in input_tensors]
        host_out = [[_host_empty(t) for t in ts] for ts in output_tensors]
        writes = list(zip(flat_out, [h for hs in host_out for h in hs]))
        return self._collective(kind, input_tensors + flat_out, reads, lambda: gloo_op(host_out, host_in, opts),
                                writes, nbytes(flat_out), output_tensors)

    def allgather(self, output_tensors, input_tensors, opts):
        return self._gather_into_lists("all_gather", self._gloo.allgather, output_tensors, input_tensors, opts,
                                       _nbytes)

    def _allgather_base(self, output, input, opts):
        if not _is_emu([output, input]):
            return self._gloo._allgather_base(output, input, opts)
        reads = []
        host_in, host_out = _staged(input, reads), _host_empty(output)
        return self._collective("all_gather", [input, output], reads,
                                lambda: self._gloo._allgather_base(host_out, host_in, opts), [(output, host_out)],
                                _nbytes([output]), [output])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts):
        works = [self._allgather_base(o, i, opts) for o, i in zip(outputs, inputs)]
        for w in works:
            w.wait()
        return _Done(outputs)

    def _reduce_scatter(self, output, inputs, opts, result):
        """reduce_scatter of ``inputs`` (this rank's n chunks, in rank order) as an all_reduce of
        their concatenation on the host, keeping this rank's chunk (the functional path moves the
        whole input; the model times a reduce_scatter)."""
        gopts, avg = self._reduce_opts(AllreduceOptions, opts)
        n, me = self.size(), self.rank()
        chunk = output.numel()
        if _projection() and _is_emu([output, *inputs]):
            _refuse_host_outputs("reduce_scatter", [output, *inputs])
            host = _placeholder((n * chunk,), output.dtype)
            reads = [(_placeholder(t.shape, t.dtype), t) for t in inputs]
            return self._collective("reduce_scatter", [output, *inputs], reads, None,
                                    [(output, _placeholder(output.shape, output.dtype))],
                                    host.numel() * host.element_size(), result)
        host = torch.empty(n * chunk, dtype=output.dtype)
        reads = []
        for i, t in enumerate(inputs):
            part = host[i * t.numel():(i + 1) * t.numel()].view(t.shape)
            if t.device.type == "emu":
                reads.append((part, t))
            else:
                part.copy_(t)
        mine = host[me * chunk:(me + 1) * chunk].view(output.shape)
        post = (lambda: self._average([host])) if avg else None
        if not _is_emu([output, *inputs]):
            self._gloo.allreduce([host], gopts).wait()
            if post is not None:
                post()
            output.copy_(mine)
            return _Done(result)
        return self._collective("reduce_scatter", [output, *inputs], reads,
                                lambda: self._gloo.allreduce([host], gopts), [(output, mine)],
                                host.numel() * host.element_size(), result, post=post)

    def _reduce_scatter_base(self, output, input, opts):
        if input.numel() != output.numel() * self.size():
            raise ValueError(f"emu backend: reduce_scatter_tensor: input has {input.numel()} elements, expected "
                             f"output's {output.numel()} x {self.size()} ranks")
        if input.dtype != output.dtype:
            raise ValueError(f"emu backend: reduce_scatter_tensor: input is {input.dtype}, output {output.dtype}")
        return self._reduce_scatter(output, list(input.reshape(self.size(), -1).unbind(0)), opts, [output])

    def reduce_scatter(self, output_tensors, input_tensors, opts):
        if len(output_tensors) != 1:
            raise NotImplementedError("emu backend: reduce_scatter takes one output tensor per rank")
        output, inputs = output_tensors[0], input_tensors[0]
        if len(inputs) != self.size() or any(t.shape != output.shape or t.dtype != output.dtype for t in inputs):
            raise ValueError(f"emu backend: reduce_scatter needs {self.size()} inputs shaped like the output, of "
                             f"its dtype")
        return self._reduce_scatter(output, list(inputs), opts, output_tensors)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts):
        works = [self._reduce_scatter_base(o, i, opts) for o, i in zip(outputs, inputs)]
        for w in works:
            w.wait()
        return _Done(outputs)

    def gather(self, output_tensors, input_tensors, opts):
        return self._gather_into_lists("gather", self._gloo.gather, output_tensors, input_tensors, opts,
                                       lambda _: _nbytes(input_tensors) * self.size())

    def scatter(self, output_tensors, input_tensors, opts):
        flat_in = [t for ts in input_tensors for t in ts]
        if not _is_emu(output_tensors + flat_in):
            return self._gloo.scatter(output_tensors, input_tensors, opts)
        reads = []
        host_in = [[_staged(t, reads) for t in ts] for ts in input_tensors]
        host_out = [_host_empty(t) for t in output_tensors]
        return self._collective("scatter", output_tensors + flat_in, reads,
                                lambda: self._gloo.scatter(host_out, host_in, opts),
                                list(zip(output_tensors, host_out)), _nbytes(output_tensors) * self.size(),
                                output_tensors)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts):
        if not _is_emu([output, input]):
            return self._gloo.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)
        reads = []
        host_in, host_out = _staged(input, reads), _host_empty(output)
        return self._collective("all_to_all", [input, output], reads,
                                lambda: self._gloo.alltoall_base(host_out, host_in, output_split_sizes,
                                                                 input_split_sizes, opts),
                                [(output, host_out)], _nbytes([input]), [output])

    def alltoall(self, output_tensors, input_tensors, opts):
        """all_to_all of tensor lists, as one all_to_all_single of their concatenations on the host."""
        dtypes = {t.dtype for t in output_tensors + input_tensors}
        if len(dtypes) != 1:
            raise ValueError(f"emu backend: all_to_all needs one dtype for every tensor, got {sorted(map(str, dtypes))}")
        dtype = dtypes.pop()
        if not _is_emu(output_tensors + input_tensors):
            flat_in = torch.cat([t.reshape(-1) for t in input_tensors])
            flat_out = torch.empty(sum(t.numel() for t in output_tensors), dtype=dtype)
            self._gloo.alltoall_base(flat_out, flat_in, [t.numel() for t in output_tensors],
                                     [t.numel() for t in input_tensors], opts).wait()
            offset = 0
            for t in output_tensors:
                t.copy_(flat_out[offset:offset + t.numel()].view(t.shape))
                offset += t.numel()
            return _Done(output_tensors)

        def chunks(flat, tensors):
            offset, out = 0, []
            for t in tensors:
                out.append((t, flat[offset:offset + t.numel()].view(t.shape)))
                offset += t.numel()
            return out

        if _projection():
            return self._collective("all_to_all", output_tensors + input_tensors,
                                    [(_placeholder(t.shape, dtype), t) for t in input_tensors], None,
                                    [(t, _placeholder(t.shape, dtype)) for t in output_tensors],
                                    _nbytes(input_tensors), output_tensors)
        host_in = torch.empty(sum(t.numel() for t in input_tensors), dtype=dtype)
        host_out = torch.empty(sum(t.numel() for t in output_tensors), dtype=dtype)
        reads = []
        for t, part in chunks(host_in, input_tensors):
            if t.device.type == "emu":
                reads.append((part, t))
            else:
                part.copy_(t)
        return self._collective("all_to_all", output_tensors + input_tensors, reads,
                                lambda: self._gloo.alltoall_base(host_out, host_in,
                                                                 [t.numel() for t in output_tensors],
                                                                 [t.numel() for t in input_tensors], opts),
                                chunks(host_out, output_tensors), _nbytes(input_tensors), output_tensors)

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
        """Orders after every stream's work and blocks the host until every rank arrived plus the
        barrier's modelled time (NCCL's barrier also synchronises the device)."""
        seq = self._enter("barrier")
        rt = runtime.get_runtime() if runtime.is_initialized() else None
        if rt is not None:
            rt.synchronize_all()
        ready = rt.host_time_ns() if rt is not None else 0.0
        start = self._exchange_ready("barrier", seq, ready)
        if rt is None:
            return _Done()
        cost, _ = self._model("barrier", 0)
        end = start + cost.time_ns
        rt.advance_host_time(end)
        record = {"op": "barrier", "algorithm": cost.algorithm, "bytes": 0, "ranks": self.size(),
                  "rank": self._global[self.rank()], "device": None, "seq": seq, "ready_ns": ready,
                  "start_ns": start, "end_ns": end, "duration_ns": cost.time_ns, "wait_ns": start - ready,
                  "host_copy_bytes": 0, "group": self._group_id}
        with _records_lock:
            _records.append(record)
        return _Done()

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
        """The sender's link is busy from its own ready time (it cannot know the receiver's without
        a round trip); gloo's send completes when the peer takes it, which ``wait`` waits for."""
        if not _is_emu(tensors):
            return self._gloo.send(tensors, dst, tag)
        with _as_op("send", tensors):
            return self._send(tensors, dst, tag)

    def _send(self, tensors, dst: int, tag: int):
        seq = self._enter("send")
        device = _emu_device(tensors)
        reads = []
        host = [_staged(t, reads) for t in tensors]
        ready = self._ready("send", device, reads)
        start, (clock_work, keep) = self._clock_p2p("send", seq, dst, tag, ready)
        projection = _projection()
        inner = [] if projection else [self._gloo_call("send", seq, self._gloo.send, host, dst, tag)]
        model = self._model("send", _nbytes(tensors), (self.rank(), dst))
        work = self._issue("send", seq, device, _nbytes(tensors), 0 if projection else _nbytes(host),
                           [clock_work, *inner], [], tensors, start, ready, model)
        work._keep = (keep, host)  # gloo reads them until the send completes
        return work

    def recv(self, tensors, src: int, tag: int):
        if not _is_emu(tensors):
            return self._gloo.recv(tensors, src, tag)
        with _as_op("recv", tensors):
            return self._recv(tensors, src, tag)

    def _recv(self, tensors, src: int, tag: int):
        seq = self._enter("recv")
        device = _emu_device(tensors)
        host = [_host_empty(t) for t in tensors]
        ready = self._ready("recv", device, [])
        start, _ = self._clock_p2p("recv", seq, src, tag, ready)
        projection = _projection()
        if not projection:
            self._gloo_wait("recv", seq, self._gloo_call("recv", seq, self._gloo.recv, host, src, tag))
        model = self._model("recv", _nbytes(tensors), (src, self.rank()))
        return self._issue("recv", seq, device, _nbytes(tensors), 0 if projection else _nbytes(host), [],
                           list(zip(tensors, host)), tensors, start, ready, model)

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
