"""Serving a request stream with transformers' continuous batching engine on emu, on the
device's modelled clock.

transformers' ``ContinuousBatchingManager`` runs its generation loop in a background thread:
each loop step schedules a batch (prefill chunks and decode tokens of several requests), writes
the new K/V into its paged cache (``index_copy_`` through the write index), reads every
request's K/V back through the block table (``index_select`` through the read index: the gather
the memory model charges per sector), runs SDPA with the varlen batch's mask, samples the next
token on the device and reads the ids on the host. :class:`ClockedManager` is that manager
with two additions, both in its own thread, so the engine's order of work is untouched:

- **arrivals on the modelled clock**: before a step it admits the requests whose arrival time
  (ns after the stream's start) the modelled host clock has passed; when the engine is idle it
  advances the host clock to the next arrival (``runtime.advance_host_time``: the host waits);
- **token times on the modelled clock**: every request streams, and each delivered token is
  stamped with the host clock after the step's host read (so after the device produced it),
  with the device memory allocated and reserved then and the KV cache bytes in use.

A request that can never fit the cache (its prompt plus its new tokens need more pages than the
cache has) is refused at admission with :class:`RequestTooLargeError` (a ``ValueError`` naming
both numbers); transformers' scheduler would otherwise fail every request in flight.

In projection mode (``EMU_MODE=projection``) no value exists to read: the step's host read of the
sampled ids is replaced by placeholder ids (0) of the same count, after the same synchronisation
(and the engine's seed, which makes a round trip through a device tensor for a tensor-parallel
group, is set on the host), so every request generates its ``max_new_tokens`` (no EOS check) and
each step's commands and times are those of a functional run of the same lengths.
transformers' async batching (double-buffered IO on extra streams) is cuda/xpu only in
transformers 5.24, so the engine runs in its synchronous mode.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

import torch
from transformers import ContinuousBatchingConfig, GenerationConfig
from transformers.generation.continuous_batching.continuous_api import ContinuousBatchingManager, OutputRouter

import runtime


class _NoPsutilNotes(logging.Filter):
    """transformers logs an error and a warning per manager when psutil is missing (host memory
    figures for CPU offloading, which the engine here does not use); other records pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "psutil" not in record.getMessage()


logging.getLogger("ContinuousBatchingLogger").addFilter(_NoPsutilNotes())


class RequestTooLargeError(ValueError):
    """A request needs more KV cache than the engine's cache holds."""


@dataclass
class Request:
    request_id: str
    prompt: list[int]
    max_new_tokens: int
    arrival_ns: float = 0.0   # after the stream's start, modelled time


@dataclass
class Result:
    request_id: str
    prompt_len: int
    tokens: list[int] = field(default_factory=list)
    token_ns: list[float] = field(default_factory=list)   # modelled host time of each token, from the start
    arrival_ns: float = 0.0
    error: str | None = None

    @property
    def ttft_ns(self) -> float:
        return self.token_ns[0] - self.arrival_ns

    @property
    def tpot_ns(self) -> float | None:
        """Mean time per output token after the first (None with one token)."""
        if len(self.token_ns) < 2:
            return None
        return (self.token_ns[-1] - self.token_ns[0]) / (len(self.token_ns) - 1)


class _StampingRouter(OutputRouter):
    """Stamps each streamed output with the modelled host clock (in the engine's thread) and
    passes only finished requests on to the output queue."""

    def __init__(self, manager: "ClockedManager"):
        super().__init__()
        self.manager = manager

    def deliver_batch(self, outputs) -> None:
        self.manager._record(outputs)
        super().deliver_batch([o for o in outputs if o.is_finished()])

    def deliver(self, output) -> None:
        self.manager._record([output])
        if output.is_finished():
            super().deliver(output)


class ClockedManager(ContinuousBatchingManager):
    """transformers' continuous batching manager, fed by arrival times and stamping tokens on the
    modelled clock (module docstring)."""

    def __init__(self, model, generation_config, continuous_batching_config, requests: list[Request], on_step=None):
        super().__init__(model, generation_config, continuous_batching_config)
        self.output_router = _StampingRouter(self)
        self.rt = runtime.get_runtime()
        self.device = model.device.index or 0
        self.projection = torch.emu.is_projection_mode()
        self._pending = sorted(requests, key=lambda r: (r.arrival_ns, r.request_id))
        self._next = 0
        self.results = {r.request_id: Result(r.request_id, len(r.prompt), arrival_ns=r.arrival_ns)
                        for r in requests}
        self.memory: list[tuple] = []   # (ns, allocated, reserved, KV cache bytes in use) after each step
        self.on_step = on_step
        self.done = threading.Event()
        self._open = len(requests)
        self.start_ns = None
        if self.projection and self.distributed_helper.tp_size == 1:
            # Its seed makes a round trip through a device tensor (for a TP group's broadcast); with
            # one process the seed is the host's own.
            self.distributed_helper.set_tp_seed = lambda seed, device: torch.manual_seed(seed or 0)

    # -- the engine thread --------------------------------------------------------------------
    def _now(self) -> float:
        return self.rt.host_time_ns() - self.start_ns

    def _arrival_time(self, request: Request) -> float:
        return self.start_ns + request.arrival_ns

    def _arrived(self, request: Request) -> bool:
        # On the host clock itself, the same sum the idle engine advances to: ``now - start_ns``
        # can round below an arrival the clock was just set to (start + 5e6 - start < 5e6 for a
        # start whose last bit the sum drops), and the engine then waited for it forever.
        return self.rt.host_time_ns() >= self._arrival_time(request)

    def _admit(self, batch_processor) -> None:
        if self.start_ns is None:
            self.start_ns = self.rt.host_time_ns()
        idle = not batch_processor.has_pending_requests() and self.input_queue.empty()
        if idle and self._next < len(self._pending) and not self._arrived(self._pending[self._next]):
            self.rt.advance_host_time(self._arrival_time(self._pending[self._next]))
        cache = batch_processor.cache
        capacity = cache.num_blocks * self.continuous_batching_config.page_size   # tokens
        while self._next < len(self._pending) and self._arrived(self._pending[self._next]):
            request = self._pending[self._next]
            self._next += 1
            need = len(request.prompt) + request.max_new_tokens
            if need > capacity:
                self._fail(request.request_id, RequestTooLargeError(
                    f"request {request.request_id}: {len(request.prompt)} prompt + {request.max_new_tokens} new "
                    f"tokens = {need} tokens of KV cache, and the cache holds {capacity} tokens "
                    f"({cache.num_blocks} blocks)"))
                continue
            self.add_request(request.prompt, request_id=request.request_id, max_new_tokens=request.max_new_tokens,
                             streaming=True, eos_token_id=-1 if self.projection else None)

    def _generation_loop_body(self, batch_processor, bootstrapping: bool) -> bool:
        self._admit(batch_processor)
        return super()._generation_loop_body(batch_processor, bootstrapping)

    def _create_batch_processor(self):
        processor = super()._create_batch_processor()
        if self.projection:
            _placeholder_reads(processor.inputs_and_outputs)
        return processor

    def _record(self, outputs) -> None:
        now = self._now()
        for out in outputs:
            result = self.results.get(out.request_id)
            if result is None:
                continue
            if out.error:
                self._fail(out.request_id, RuntimeError(out.error))
                continue
            new = out.generated_tokens[len(result.tokens):]
            result.tokens.extend(new)
            result.token_ns.extend([now] * len(new))
            if out.is_finished():
                self._close()
        cache = self.batch_processor.cache
        kv_used = cache.num_sectors * cache.bytes_per_sector - cache.compute_free_capacity(relative=False)
        self.memory.append((now, torch.emu.memory_allocated(self.device), torch.emu.memory_reserved(self.device),
                            int(kv_used)))
        if self.on_step is not None:
            self.on_step(self)

    def _fail(self, request_id: str, error: Exception) -> None:
        result = self.results[request_id]
        if result.error is None:
            result.error = f"{type(error).__name__}: {error}"
            self._close()

    def _close(self) -> None:
        self._open -= 1
        if self._open <= 0:
            self.done.set()


def _placeholder_reads(ios) -> None:
    """Projection mode: the step's host read of the sampled ids becomes placeholder ids (0); the
    host still waits for the step (the read's synchronisation), only the copy of the ids is not
    made."""
    def prepare_batch_update():
        torch.emu.synchronize()
        return ios.requests_in_batch, [0] * ios.num_request_in_batch, None
    ios.prepare_batch_update = prepare_batch_update


def cb_config(num_blocks: int | None = None, page_size: int = 16, max_batch_tokens: int = 256,
              max_requests_per_batch: int = 32, **extra) -> ContinuousBatchingConfig:
    """A continuous batching configuration sized by hand (transformers infers one from free device
    memory otherwise), synchronous, without CUDA graphs and prefix sharing."""
    return ContinuousBatchingConfig(num_blocks=num_blocks, page_size=page_size, max_batch_tokens=max_batch_tokens,
                                    max_requests_per_batch=max_requests_per_batch, use_async_batching=False,
                                    use_cuda_graph=False, allow_block_sharing=False, **extra)


def serve(model, requests: list[Request], config: ContinuousBatchingConfig, on_step=None,
          timeout_s: float = 3600.0) -> ClockedManager:
    """Serves ``requests`` with the engine until each has finished or failed; the manager holds
    ``results`` (per request: tokens, modelled token times, error) and ``memory`` over time."""
    generation = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0,
                                  max_new_tokens=max((r.max_new_tokens for r in requests), default=1))
    manager = ClockedManager(model, generation, config, requests, on_step=on_step)
    if not requests:
        return manager
    manager.start()
    try:
        while not manager.done.wait(0.05):
            if not manager.is_running():
                error = manager.background_thread_status.fatal_error
                raise RuntimeError(f"the continuous batching loop stopped: {error}") from error
            timeout_s -= 0.05
            if timeout_s <= 0:
                raise TimeoutError("serving did not finish in time")
    finally:
        manager.stop(block=True)
        manager.destroy()
    return manager
