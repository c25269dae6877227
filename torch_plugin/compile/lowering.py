"""An FX graph (aten level, after aot_autograd and the core-aten decompositions) lowered to a
device program: a list of steps in graph order. The first call (and the first call with another
input layout) runs the steps op by op and captures the commands they issue (replay.py); later
calls replay the capture: each segment of commands in one ring write and one doorbell, with no
Python per op. Nothing synchronises in between (the device runs the commands at the next
synchronising call).

Steps:
  ``fused``     a chain of elementwise ops, ONE ``fused_pointwise`` launch (fusion.py);
  ``epilogue``  mm/addmm whose only consumer is an elementwise chain over its whole result
                (bias, activation, residual): ONE ``matmul_epilogue`` launch;
  ``epilogue``  also bmm with such a consumer: ONE ``bmm_epilogue`` launch;
  ``row``       softmax / layer norm with its producer chain and/or consumer chain: ONE
                ``fused_softmax`` / ``fused_layer_norm`` launch (``_row_fusion_of``); RMS norm
                (a last-dimension mean between two chains): ONE ``fused_rms_norm`` launch
                (``_rms_fusion_of``); a row step that also computes one of its inputs read by
                other steps (a residual sum, ``_keep_of``): ONE ``fused_keep`` launch;
  ``aten``      any other op, through the dispatcher (its native kernels, or its path as eager).

A producer with several users is recomputed inside each of them when fusion.recompute_pays says
that moves fewer bytes.

Buffers: each fused/epilogue result that does not escape the graph (not an output, not viewed
by one) gets a slot; a slot is reused by a later result of the same dtype once every value
viewing its buffer is dead (liveness over the graph's order). Every value is dropped after its
last use, so the caching allocator can reuse its block at once.
"""
from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node

from torch_plugin.compile import fusion, replay, stats
from torch_plugin.compile.fusion import value_of
from torch_plugin.ops import registry
from torch_plugin._dtypes import TO_CODE
from torch_plugin.ops._common import broadcast_shape, broadcast_strides, current_stream, device_ref, \
    empty_like_layout, rt

aten = torch.ops.aten
_MATMULS = (aten.mm.default, aten.addmm.default, aten.bmm.default)
_SOFTMAXES = (aten._softmax.default, aten._safe_softmax.default)
_ROW_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)
_EPILOGUE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# the fused attention kernel's ops (the emu backend lowers SDPA to them: compile/__init__.py)
_FUSED_ATTENTION = (aten._scaled_dot_product_fused_attention_overrideable.default,
                    aten._scaled_dot_product_fused_attention_overrideable_backward.default)


def _resolve(a, env):
    if type(a) is Node:
        return env[a]
    if isinstance(a, (list, tuple)):   # (FX's immutable_list is a list)
        return [_resolve(x, env) for x in a] if isinstance(a, list) else tuple(_resolve(x, env) for x in a)
    if isinstance(a, dict):
        return {k: _resolve(v, env) for k, v in a.items()}
    return a


def _nodes_in(a) -> list:
    found = []
    torch.fx.node.map_arg(a, found.append)
    return found


def _is_aliasing(node: Node) -> bool:
    """Whether the op may return a view of an input (its schema says so)."""
    if node.target is operator.getitem:
        return True
    schema = getattr(node.target, "_schema", None)
    return schema is not None and any(r.alias_info is not None for r in schema.returns)


_MISSING = object()


def _begin(op: str, inputs):
    """A fused kernel is one op instance of the "native" path (op_stats and telemetry see it as
    ``compiled::fused_pointwise`` / ``compiled::matmul_epilogue``)."""
    return registry.begin_op(op, tuple(inputs), {}) if registry._observers is not None else None


def _end(op: str, record) -> None:
    registry.count(op, registry.NATIVE)
    if record is not None:
        registry.end_op(record, registry.NATIVE)


def _reads_with(reads, kept) -> tuple:
    """A row step's reads when it computes a kept value: that value's leaves instead of it."""
    if kept is None:
        return tuple(reads)
    node, leaves = kept[0], kept[1]
    return tuple(dict.fromkeys(r for r in (*leaves, *reads) if r is not node))


def _compute_kept(env, kept):
    """Allocates a row step's kept value and puts it in env (the row kernel fills it): (tensor,
    its inputs, program); None without one."""
    if kept is None:
        return None
    node, leaves, program, dtype = kept
    inputs = [env[leaf] for leaf in leaves]
    shape = broadcast_shape(*[tuple(t.shape) for t in inputs])
    value = env[node] = torch.empty(shape, dtype=dtype, device=inputs[0].device)
    return value, inputs, program


def _launch_row(kind, args, kept_value, device):
    """The row kernel ``kind`` (``args`` None: nothing to compute), computing the kept value first
    in the same launch (``fused_keep``) when there is one."""
    stream = current_stream(device)
    if kept_value is None:
        if args is not None:
            rt().launch(kind, args, stream)
        return
    value, inputs, program = kept_value
    if not value.numel():
        if args is not None:
            rt().launch(kind, args, stream)
        return
    shape = tuple(value.shape)
    refs = [device_ref(t, shape, broadcast_strides(t, shape)) for t in inputs]
    if args is None:
        rt().launch("fused_pointwise", (device_ref(value), program, *refs), stream)
    else:
        rt().launch("fused_keep", (device_ref(value), program, len(refs), kind, *refs, *args), stream)


class Step:
    __slots__ = ("kind", "node", "reads", "fn", "free_after", "slot", "defines")

    def __init__(self, kind, node, reads, fn, defines=()):
        self.kind, self.node, self.reads, self.fn = kind, node, reads, fn
        self.free_after: tuple = ()
        self.slot: int | None = None
        self.defines: tuple = defines   # other values its fn puts in env (a row step's kept value)


class DeviceProgram:
    """The lowered graph: ``program(*inputs)`` runs it (boxed: ``program(list)`` too)."""

    def __init__(self, gm: GraphModule):
        self.gm = gm
        self.placeholders: list[Node] = []
        self.steps: list[Step] = []
        self.output_args = None
        self.stats = {"fused_kernels": 0, "fused_ops": 0, "epilogues": 0, "aten_ops": 0, "planned_buffers": 0,
                      "buffer_slots": 0, "constant_steps": 0, "row_fusions": 0, "bmm_epilogues": 0,
                      "fused_attention": 0, "rms_norm_fusions": 0, "kept_values": 0}
        self._lower()
        self._constants: dict = {}      # step node -> its value, kept from the first run
        self._find_constants()
        self._plan()
        self._first_run = True
        self._capture = None            # replay.Capture of the last input layout (built on a call)
        self.replays = 0
        self.replay_enabled = True
        # aot_autograd calls it with one list of inputs (and lets it clear the list); an instance
        # attribute, so that the wrappers aot puts around it (functools.wraps) copy it
        self._boxed_call = True

    # -- lowering -------------------------------------------------------------------
    def _lower(self):
        """Lowers the graph; a kept value (``_keep_of``) that a step before its row step reads is
        lowered again without being kept (its own step then computes it, as before)."""
        self._no_keep: set = set()
        initial = dict(self.stats)
        while True:
            self._lower_once()
            defined = {n: i for i, step in enumerate(self.steps) for n in step.defines}
            early = {r for i, step in enumerate(self.steps) for r in step.reads if defined.get(r, -1) > i}
            if not early:
                return
            self._no_keep |= early
            self.steps, self.placeholders, self.stats, self._claimed = [], [], dict(initial), None

    def _keep_of(self, leaves, roots, epilogues, absorbed, claimed):
        """The leaf of a row step to compute inside it (``fused_keep``): an elementwise chain that
        other steps read too (a residual sum ``h = x + attn``, read by the norm and by the next
        residual add), not a matmul's epilogue and nobody's prologue. The row kernel writes it
        once for its other readers and reads it itself: one launch instead of two."""
        for leaf in leaves:
            if leaf in roots and leaf not in epilogues and leaf not in claimed and leaf not in absorbed \
                    and leaf not in self._no_keep and fusion._is_emu_tensor(value_of(leaf)) \
                    and len(roots[leaf].leaves) <= fusion.MAX_INPUTS:
                return leaf
        return None

    def _lower_once(self):
        nodes = list(self.gm.graph.nodes)
        output = next(n for n in nodes if n.op == "output")
        self.output_args = output.args[0]
        outputs = set(_nodes_in(self.output_args))
        exprs: dict[Node, fusion.Expr] = {}
        inlined: dict[Node, int] = {}   # producer -> how many of its users inlined it
        decided: dict[Node, bool] = {}

        def recompute(a):
            if a not in decided:
                decided[a] = fusion.recompute_pays(a, exprs[a])
            return decided[a]
        for node in nodes:
            fused = fusion.op_tokens(node)
            if fused is None:
                continue
            operands, tail = fused[0], fused[1]

            def parts_for(inline: bool):
                parts, taken = [], []
                for a in operands:
                    if isinstance(a, Node):
                        if inline and a in exprs and a not in outputs and (len(a.users) == 1 or recompute(a)):
                            parts.append(exprs[a])
                            taken.append(a)
                        else:
                            parts.append(fusion.leaf_expr(a))
                    else:
                        parts.append(fusion.const_expr(fusion._constant(a)))
                return parts, taken

            parts, taken = parts_for(True)
            expr = fusion.combine(parts, fused, tail)
            if expr is None:
                parts, taken = parts_for(False)
                expr = fusion.combine(parts, fused, tail)
                if expr is None:
                    continue
            exprs[node] = expr
            for a in dict.fromkeys(taken):
                inlined[a] = inlined.get(a, 0) + 1
        # a producer disappears only when every user recomputes it; else its own step stays
        inlined = {a for a, n in inlined.items() if n == len(a.users)}
        # A chain of one op stays an aten op (its own kernel: nothing to fuse), unless it is a
        # matmul's epilogue. (A consumer that inlined something is a chain of two ops or more.)
        roots = self._roots = {n: e for n, e in exprs.items() if n not in inlined}
        absorbed: set[Node] = set(inlined)
        epilogues = {}
        # A recomputed producer's expression is copied into its users, so its leaves are read by
        # them too: a matmul (or its view) one of those copies reads cannot vanish into an epilogue.
        read_by: dict[Node, set] = {}
        for root, expr in roots.items():
            for leaf in expr.leaves:
                read_by.setdefault(leaf, set()).add(root)
        for node, expr in roots.items():
            found = self._epilogue_of(node, expr, outputs)
            if found is not None and any(read_by.get(a, set()) - {node} for a in found[2]):
                found = None
            if found is not None:
                epilogues[node] = found
                absorbed.update(found[2])
        rows = {}
        for node in nodes:
            found = self._row_fusion_of(node, roots, epilogues, absorbed, outputs)
            if found is not None:
                rows[found[5]] = found
                absorbed.update(n for n in (*found[:4], found[6]) if n is not None)
                absorbed.discard(found[5])
        norms = {}
        for node in nodes:
            found = self._rms_fusion_of(node, roots, epilogues, absorbed, outputs)
            if found is not None:
                norms[found[2]] = found
                absorbed.update(n for n in found[:2] if n in roots or n is found[0])
                if found[3] is not None:
                    absorbed.add(found[3])
        groups = {n: e for n, e in roots.items() if n in epilogues or e.ops >= 2}
        for node in nodes:
            if node.op == "placeholder":
                self.placeholders.append(node)
            elif node.op == "output" or node in absorbed:
                continue
            elif node in rows:
                self.steps.append(self._row_step(*rows[node]))
            elif node in norms:
                self.steps.append(self._rms_step(*norms[node]))
            elif node in epilogues:
                self.steps.append(self._epilogue_step(node, groups[node], *epilogues[node][:2]))
            elif node in groups:
                self.steps.append(self._fused_step(node, groups[node]))
            elif node.op == "call_function":
                self.steps.append(self._aten_step(node))
            elif node.op == "get_attr":
                value = getattr(self.gm, node.target)
                self.steps.append(Step("attr", node, (), lambda env, value=value: value))
            else:
                raise NotImplementedError(f"emu compile: FX node kind {node.op!r} ({node}) is not supported")

    def _epilogue_of(self, node, expr, outputs):
        """(matmul node, view node or None, absorbed nodes) when ``node``'s chain is an epilogue."""
        target = value_of(node)
        for leaf in expr.leaves:
            view = None
            mm = leaf
            if leaf.op == "call_function" and leaf.target in _VIEWS and isinstance(leaf.args[0], Node):
                view, mm = leaf, leaf.args[0]
            if mm.op != "call_function" or mm.target not in _MATMULS or mm in outputs or len(mm.users) != 1:
                continue
            if view is not None and (view in outputs or len(view.users) != 1):
                continue
            mm_value, leaf_value = value_of(mm), value_of(leaf)
            if mm_value is None or leaf_value is None or target is None:
                continue
            if mm_value.dtype not in _EPILOGUE_DTYPES or target.dtype != mm_value.dtype:
                continue
            if tuple(leaf_value.shape) != tuple(target.shape):
                continue
            if mm.target is aten.addmm.default and set(mm.kwargs) - {"beta", "alpha"}:
                continue
            return mm, view, {mm} | ({view} if view is not None else set())
        return None

    def _row_fusion_of(self, node, roots, epilogues, absorbed, outputs):
        """A softmax or layer norm fused with its elementwise producer chain (prologue: the chain
        whose only user it is) and its consumer chain (epilogue: the chain that is the only user of
        its result): (reduction, prologue root or None, getitem or None, epilogue root or None,
        prologue expression, last node). None when neither fuses, or eager's arithmetic could
        differ (a non-contiguous input: the rows' summation order; mixed parameter dtypes)."""
        if node.op != "call_function" or node.target not in (*_SOFTMAXES, aten.native_layer_norm.default):
            return None
        claimed = getattr(self, "_claimed", None)
        if claimed is None:
            claimed = self._claimed = set()
        x = node.args[0]
        xv = value_of(x)
        if not isinstance(x, Node) or not fusion._is_emu_tensor(xv) or xv.dtype not in _ROW_DTYPES \
                or xv.dim() == 0 or not xv.is_contiguous():
            return None
        is_norm = node.target is aten.native_layer_norm.default
        if is_norm:
            _, shape, weight, bias, eps = (list(node.args) + [None] * 5)[:5]
            if node.kwargs or eps is None or fusion._constant(eps) is None:
                return None
            for p in (weight, bias):
                if p is not None and (not isinstance(p, Node) or value_of(p) is None or value_of(p).dtype != xv.dtype):
                    return None
        else:
            if node.target is aten._safe_softmax.default and (node.kwargs.get("dtype", node.args[2] if len(
                    node.args) > 2 else None) not in (None, xv.dtype)):
                return None
            if node.target is aten._softmax.default and node.kwargs:
                return None
        prologue = x if (x in roots and x not in epilogues and x not in claimed and x not in absorbed
                         and len(x.users) == 1 and x not in outputs) else None
        # the epilogue: the chain over the whole result that is its only user
        result, getitem = node, None
        if is_norm:
            if len(node.users) == 1:
                (getitem,) = node.users
                if getitem.target is operator.getitem and getitem.args[1] == 0 and getitem not in outputs:
                    result = getitem
            if result is node:
                result = None
        epilogue = None
        out = value_of(node)
        out = out[0] if is_norm else out
        if result is not None and len(result.users) == 1 and result not in outputs:
            # the chain root that reads it (its one user, or the chain its user is inlined into)
            chain = [u for u, e in roots.items() if result in e.leaves]
            user = chain[0] if len(chain) == 1 else None
            uv = value_of(user)
            if user in roots and user not in epilogues and user not in claimed and user not in absorbed \
                    and uv is not None and uv.dtype == out.dtype and tuple(uv.shape) == tuple(out.shape):
                epilogue = user
        leaves = (*(roots[prologue].leaves if prologue is not None else (x,)),
                  *(roots[epilogue].leaves if epilogue is not None else ()))
        keep = self._keep_of(leaves, roots, epilogues, absorbed, claimed | {prologue, epilogue})
        if prologue is None and epilogue is None and keep is None:
            return None
        if epilogue is None:
            getitem = None
        claimed.update(n for n in (prologue, epilogue, keep) if n is not None)
        expr = roots[prologue] if prologue is not None else fusion.leaf_expr(x)
        last = epilogue if epilogue is not None else node
        return node, prologue, getitem, epilogue, expr, last, keep

    def _kept(self, keep):
        """What a row step needs to compute its kept value: (node, leaves, program, dtype); None
        without one."""
        if keep is None:
            return None
        expr = self._roots[keep]
        leaves = tuple(expr.leaves)
        self.stats["kept_values"] += 1
        self.stats["fused_ops"] += expr.ops
        return keep, leaves, expr.program({leaf: i for i, leaf in enumerate(leaves)}), value_of(keep).dtype

    def _row_step(self, node, prologue, getitem, epilogue, expr, last, keep=None):
        pro_leaves = tuple(expr.leaves)
        pro_program = expr.program({leaf: i for i, leaf in enumerate(pro_leaves)})
        result = getitem if getitem is not None else node
        if epilogue is not None:
            epi = self._roots[epilogue]
            epi_leaves = tuple(leaf for leaf in epi.leaves if leaf is not result)
            epi_program = epi.program({leaf: i for i, leaf in enumerate((result, *epi_leaves))})
        else:
            epi_leaves, epi_program = (), ""
        is_norm = node.target is aten.native_layer_norm.default
        rank = value_of(node.args[0]).dim()   # (static; the sizes may be symbolic: read at run time)
        out_value = value_of(node)[0] if is_norm else value_of(node)
        out_dtype = out_value.dtype
        params = ()
        if is_norm:
            _, normalized, weight, bias, eps = (list(node.args) + [None] * 5)[:5]
            axis = rank - len(normalized)
            params = tuple(p for p in (weight, bias) if isinstance(p, Node))
            stat_dtype = value_of(node)[1].dtype
        else:
            dim = node.args[1] % rank
            safe = node.target is aten._safe_softmax.default
        reads = tuple(dict.fromkeys((*pro_leaves, *params, *epi_leaves)))
        self.stats["row_fusions"] += 1
        self.stats["fused_ops"] += expr.ops + 1 + (self._roots[epilogue].ops if epilogue is not None else 0)
        kind = "fused_layer_norm" if is_norm else "fused_softmax"
        kept = self._kept(keep)
        step = Step("row", last, _reads_with(reads, kept), None, defines=(keep,) if keep is not None else ())

        def run(env):
            kept_value = _compute_kept(env, kept)
            pro_inputs = [env[leaf] for leaf in pro_leaves]
            epi_inputs = [env[leaf] for leaf in epi_leaves]
            device = pro_inputs[0].get_device()
            emu = torch.device("emu", device)
            x_shape = broadcast_shape(*[tuple(t.shape) for t in pro_inputs])   # the prologue's result
            out = torch.empty(x_shape, dtype=out_dtype, device=emu)
            refs = [device_ref(t, x_shape, broadcast_strides(t, x_shape)) for t in (*pro_inputs, *epi_inputs)]
            record = _begin("compiled::" + kind, (*pro_inputs, *epi_inputs))
            if is_norm:
                outer = x_shape[:axis]
                mean = torch.empty(outer + (1,) * (len(x_shape) - axis), dtype=stat_dtype, device=emu)
                rstd = torch.empty(mean.shape, dtype=stat_dtype, device=emu)
                w, b = (None if p is None else env[p] for p in (weight, bias))
                _launch_row(kind, (device_ref(out), device_ref(mean, outer, mean.stride()[:axis]),
                                   device_ref(rstd, outer, rstd.stride()[:axis]),
                                   None if w is None else device_ref(w, x_shape, broadcast_strides(w, x_shape)),
                                   None if b is None else device_ref(b, x_shape, broadcast_strides(b, x_shape)),
                                   axis, float(eps), pro_program, len(pro_inputs), epi_program, *refs)
                            if mean.numel() else None, kept_value, device)
                value = out if epilogue is not None else (out, mean, rstd)
            else:
                _launch_row(kind, (device_ref(out), dim, safe, pro_program, len(pro_inputs), epi_program, *refs)
                            if out.numel() else None, kept_value, device)
                value = out
            _end("compiled::" + kind, record)
            return value
        step.fn = run
        return step

    def _rms_fusion_of(self, node, roots, epilogues, absorbed, outputs):
        """RMS norm as the graph writes it (LlamaRMSNorm and the like, decomposed): a ``mean`` over
        the last dimension (keepdim) of an elementwise chain (the square, possibly of casts) whose
        only user it is, and the elementwise chain that is the mean's only user, over the whole
        rows (``x * rsqrt(mean + eps) * weight``, with its casts). Matched on the graph's structure:
        any chain may sit on either side, so the casts, the weight's side and eps's form do not
        matter. (mean, square root or leaf, epilogue root); None when eager's arithmetic could
        differ: the squared rows not contiguous (their summation order), dtypes other than
        float32/float16/bfloat16."""
        if node.op != "call_function" or node.target is not aten.mean.dim or node in outputs:
            return None
        args = list(node.args) + [None] * 3
        x, dims, keepdim = args[:3]
        if set(node.kwargs) - {"dtype"} or node.kwargs.get("dtype") is not None or keepdim is not True:
            return None
        xv, mv = value_of(x), value_of(node)
        if not isinstance(x, Node) or not fusion._is_emu_tensor(xv) or xv.dtype not in _ROW_DTYPES \
                or xv.dim() == 0 or not xv.is_contiguous() or mv is None or mv.dtype not in _ROW_DTYPES:
            return None
        if not isinstance(dims, (list, tuple)) or len(dims) != 1 or not isinstance(dims[0], int) \
                or dims[0] % xv.dim() != xv.dim() - 1:
            return None
        claimed = getattr(self, "_claimed", None)
        if claimed is None:
            claimed = self._claimed = set()
        if x in roots:
            if x in epilogues or x in claimed or x in absorbed or len(x.users) != 1 or x in outputs:
                return None
        if len(node.users) != 1:
            return None
        chain = [u for u, e in roots.items() if node in e.leaves]
        if len(chain) != 1:
            return None
        (user,) = chain
        uv = value_of(user)
        if user in epilogues or user in claimed or user in absorbed or uv is None or uv.dtype not in _ROW_DTYPES \
                or tuple(uv.shape) != tuple(xv.shape):
            return None
        square = roots[x] if x in roots else fusion.leaf_expr(x)
        leaves = dict.fromkeys((*square.leaves, *(leaf for leaf in roots[user].leaves if leaf is not node)))
        if len(leaves) + 1 > fusion.MAX_INPUTS:
            return None
        claimed.update(n for n in (x, user) if n in roots)
        keep = self._keep_of(leaves, roots, epilogues, absorbed, claimed)
        if keep is not None:
            claimed.add(keep)
        return node, x, user, keep

    def _rms_step(self, mean, x, epilogue, keep=None):
        square = self._roots[x] if x in self._roots else fusion.leaf_expr(x)
        epi = self._roots[epilogue]
        leaves = tuple(dict.fromkeys((*square.leaves, *(leaf for leaf in epi.leaves if leaf is not mean))))
        square_program = square.program({leaf: i for i, leaf in enumerate(leaves)})
        epi_program = epi.program({leaf: i for i, leaf in enumerate((mean, *leaves))})
        out_dtype = value_of(epilogue).dtype
        square_dtype, stat_dtype = TO_CODE[value_of(x).dtype], TO_CODE[value_of(mean).dtype]
        self.stats["row_fusions"] += 1
        self.stats["rms_norm_fusions"] += 1
        self.stats["fused_ops"] += square.ops + 1 + epi.ops
        kept = self._kept(keep)
        step = Step("row", epilogue, _reads_with(leaves, kept), None, defines=(keep,) if keep is not None else ())

        def run(env):
            kept_value = _compute_kept(env, kept)
            inputs = [env[leaf] for leaf in leaves]
            device = inputs[0].get_device()
            shape = broadcast_shape(*[tuple(t.shape) for t in inputs])   # (the sizes may be symbolic at lowering)
            out = torch.empty(shape, dtype=out_dtype, device=torch.device("emu", device))
            record = _begin("compiled::fused_rms_norm", inputs)
            _launch_row("fused_rms_norm", (device_ref(out), square_dtype, stat_dtype, square_program, epi_program,
                                           *[device_ref(t, shape, broadcast_strides(t, shape)) for t in inputs])
                        if out.numel() else None, kept_value, device)
            _end("compiled::fused_rms_norm", record)
            return out
        step.fn = run
        return step

    def _aten_step(self, node):
        target, args, kwargs = node.target, node.args, node.kwargs
        reads = tuple(dict.fromkeys(_nodes_in((args, kwargs))))
        self.stats["aten_ops"] += 1
        if target in _FUSED_ATTENTION:
            self.stats["fused_attention"] += 1
        if not kwargs:
            def run(env):
                return target(*_resolve(args, env))
        else:
            def run(env):
                return target(*_resolve(args, env), **_resolve(kwargs, env))
        return Step("aten", node, reads, run)

    def _fused_step(self, node, expr):
        leaves = tuple(expr.leaves)
        program = expr.program({leaf: i for i, leaf in enumerate(leaves)})
        dtype = value_of(node).dtype
        self.stats["fused_kernels"] += 1
        self.stats["fused_ops"] += expr.ops
        step = Step("fused", node, leaves, None)

        def run(env):
            inputs = [env[leaf] for leaf in leaves]
            shape = broadcast_shape(*[tuple(t.shape) for t in inputs])
            device = inputs[0].get_device()
            out = self._output(step, env, shape, dtype, device, inputs)
            record = _begin("compiled::fused_pointwise", inputs)
            if out.numel():
                rt().launch("fused_pointwise", (device_ref(out), program, *[
                    device_ref(t, shape, broadcast_strides(t, shape)) for t in inputs]), current_stream(device))
            _end("compiled::fused_pointwise", record)
            return out
        step.fn = run
        return step

    def _epilogue_step(self, node, expr, mm, view):
        others = tuple(leaf for leaf in expr.leaves if leaf is not (view if view is not None else mm))
        product = view if view is not None else mm
        program = expr.program({leaf: i for i, leaf in enumerate((product, *others))})
        has_bias = mm.target is aten.addmm.default
        is_bmm = mm.target is aten.bmm.default
        if is_bmm:
            self.stats["bmm_epilogues"] += 1
        mm_args = mm.args
        beta = float(mm.kwargs.get("beta", 1)) if has_bias else 0.0
        alpha = float(mm.kwargs.get("alpha", 1))
        view_rest = view.args[1:] if view is not None else ()
        view_target = view.target if view is not None else None
        reads = tuple(dict.fromkeys((*_nodes_in(mm_args), *_nodes_in(view_rest), *others)))
        self.stats["epilogues"] += 1
        self.stats["fused_ops"] += expr.ops + 1
        step = Step("epilogue", node, reads, None)

        def run(env):
            if has_bias:
                bias, a, b = (env[x] if isinstance(x, Node) else x for x in mm_args)
            else:
                (a, b), bias = (env[x] for x in mm_args), None
            inputs = [env[leaf] for leaf in others]
            if a.dtype != b.dtype or alpha == 0 or (bias is not None and bias.dtype != a.dtype):
                return self._epilogue_unfused(env, mm, view, program, inputs)
            if is_bmm:
                out = torch.empty((a.shape[0], a.shape[1], b.shape[2]), dtype=a.dtype, device=a.device)
            else:
                M, N = a.shape[0], b.shape[1]
                out = torch.empty((M, N), dtype=a.dtype, device=a.device)
            product_view = view_target(out, *_resolve(view_rest, env)) if view_target is not None else out
            shape = tuple(product_view.shape)
            if broadcast_shape(shape, *[tuple(t.shape) for t in inputs]) != shape or out.numel() == 0:
                return self._epilogue_unfused(env, mm, view, program, inputs)
            refs = [device_ref(t, shape, broadcast_strides(t, shape)) for t in inputs]
            if is_bmm:
                record = _begin("compiled::bmm_epilogue", (a, b, *inputs))
                rt().launch("bmm_epilogue", (device_ref(out), device_ref(a), device_ref(b), program,
                                             device_ref(product_view), *refs), current_stream(a.get_device()))
                _end("compiled::bmm_epilogue", record)
                return product_view
            c = None
            if bias is not None and beta != 0:
                c = device_ref(bias, (M, N), broadcast_strides(bias, (M, N)))
            record = _begin("compiled::matmul_epilogue", (a, b, *inputs))
            rt().launch("matmul_epilogue", (device_ref(out), device_ref(a), device_ref(b), c, beta, alpha, program,
                                            device_ref(product_view), *[
                device_ref(t, shape, broadcast_strides(t, shape)) for t in inputs]), current_stream(a.get_device()))
            _end("compiled::matmul_epilogue", record)
            return product_view
        step.fn = run
        return step

    def _epilogue_unfused(self, env, mm, view, program, inputs):
        """The same result in two launches (a product the fused kernel cannot take: empty, alpha 0)."""
        product = mm.target(*_resolve(mm.args, env), **_resolve(mm.kwargs, env))
        if view is not None:
            product = view.target(product, *_resolve(view.args[1:], env))
        shape = broadcast_shape(tuple(product.shape), *[tuple(t.shape) for t in inputs])
        out = torch.empty(shape, dtype=product.dtype, device=product.device)
        if out.numel():
            refs = [device_ref(t, shape, broadcast_strides(t, shape)) for t in (product, *inputs)]
            rt().launch("fused_pointwise", (device_ref(out), program, *refs), current_stream(out.get_device()))
        return out

    # -- constants -------------------------------------------------------------------------
    def _find_constants(self):
        """Steps whose value depends on no graph input (a causal mask built from arange, a
        constant filled with ones): computed in the first run and kept, unless the value (or a
        view of it) leaves the graph, where the caller could mutate it. Random ops never are."""
        constant: set[Node] = set()
        for step in self.steps:
            node = step.node
            target = node.target
            if step.kind == "attr" or node.op != "call_function" or step.defines:
                continue   # (a step that also defines a kept value runs on every call)
            if any(r not in constant for r in step.reads):
                continue
            schema = getattr(target, "_schema", None)
            if schema is None or schema.is_mutable or torch.Tag.nondeterministic_seeded in getattr(target, "tags", ()):
                continue
            constant.add(node)
        escaping = list(_nodes_in(self.output_args))
        while escaping:   # an output and everything it views
            node = escaping.pop()
            if node in constant:
                constant.discard(node)
                step = next(s for s in self.steps if s.node is node)
                if step.kind == "aten" and _is_aliasing(node):
                    escaping.extend(step.reads)
        for step in self.steps:
            if step.node in constant:
                step.kind = "constant_" + step.kind
        self.stats["constant_steps"] = len(constant)

    # -- buffers -----------------------------------------------------------------------
    def _plan(self):
        """Liveness: each value is dropped after the last step that reads it; fused results that
        do not escape share slots (one per dtype at a time)."""
        index = {step.node: i for i, step in enumerate(self.steps)}
        last_use: dict[Node, int] = {}
        for i, step in enumerate(self.steps):
            for r in step.reads:
                last_use[r] = i
        outputs = set(_nodes_in(self.output_args))
        # roots: the planned buffer a value views (views follow their first tensor input)
        root: dict[Node, Node] = {}
        for step in self.steps:
            if step.kind in ("fused", "epilogue"):
                root[step.node] = step.node
            elif step.kind == "aten" and _is_aliasing(step.node):
                for r in step.reads:
                    if r in root:
                        root[step.node] = root[r]
                        break
        end: dict[Node, int] = {}
        escapes: set[Node] = set()
        for value, r in root.items():
            end[r] = max(end.get(r, -1), last_use.get(value, index.get(value, -1)))
            if value in outputs:
                escapes.add(r)
        free_slots: dict[tuple, list[int]] = {}
        busy: list[tuple[int, int, tuple]] = []   # (end step, slot, key)
        n_slots = 0
        for i, step in enumerate(self.steps):
            still = []
            for e, slot, key in busy:
                if e < i:
                    free_slots.setdefault(key, []).append(slot)
                else:
                    still.append((e, slot, key))
            busy = still
            if step.kind != "fused" or step.node in escapes or step.node not in end:
                continue
            key = (value_of(step.node).dtype,)
            if free_slots.get(key):
                step.slot = free_slots[key].pop()
            else:
                step.slot, n_slots = n_slots, n_slots + 1
            busy.append((end[step.node], step.slot, key))
            self.stats["planned_buffers"] += 1
        self.stats["buffer_slots"] = n_slots
        for i, step in enumerate(self.steps):
            step.free_after = tuple(r for r in step.reads if last_use.get(r) == i and r not in outputs)

    def _output(self, step, env, shape, dtype, device, inputs):
        if step.slot is None or "__slots__" not in env:
            return empty_like_layout(shape, dtype, device, *inputs)
        slots = env["__slots__"]  # (a capture run has none: its intermediates go to the pool)
        n = 1
        for s in shape:
            n *= s
        buffer = slots.get(step.slot)
        if buffer is None or buffer.numel() < n:
            buffer = slots[step.slot] = torch.empty((max(n, 1),), dtype=dtype, device=torch.device("emu", device))
        return buffer[:n].view(shape)

    # -- running ---------------------------------------------------------------------

    def __call__(self, *args):
        # boxed (one list, which the program may clear) or unboxed (aot's backward may call it
        # so); a graph input is never a list
        if len(args) == 1 and type(args[0]) is list:
            return self.run(args[0])
        return self.run(list(args))

    def run(self, args: list):
        sig = replay.signature(args) if self.replay_enabled else None
        capture = self._capture
        if capture is not None and sig is not None and capture.signature == sig and capture.refused is None \
                and current_stream(sig[0]) is capture.stream and rt().replay_allowed():
            self.replays += 1
            stats.note_replay(capture)
            return capture.replay(args)
        first = self._first_run
        if first:
            before = sum(registry.op_stats()[registry.HOST_FALLBACK].values())
        if sig is not None and rt().replay_allowed() and (capture is None or capture.signature != sig):
            self._capture = None   # a new capture (another input layout): the old pool is released
            outputs, self._capture = replay.Capture.run_and_capture(self, args, sig)
            stats.note_capture(self._capture)
        else:
            outputs = self._interpret(args)
        if first:
            self._first_run = False
            stats.note_outside_program(sum(registry.op_stats()[registry.HOST_FALLBACK].values()) - before)
        return outputs

    def _interpret(self, args: list):
        """Runs the steps op by op, through the dispatcher."""
        env = {"__slots__": {}}
        for node, value in zip(self.placeholders, args):
            env[node] = value
        args.clear()  # boxed calling convention: the program owns its inputs now
        for step in self.steps:
            if step.kind.startswith("constant_"):
                env[step.node] = self._constant_value(step, env)
            else:
                env[step.node] = step.fn(env)
            for r in step.free_after:
                del env[r]
        return self._outputs(env)

    def _constant_value(self, step, env):
        value = self._constants.get(step.node, _MISSING)
        if value is _MISSING:
            value = self._constants[step.node] = step.fn(env)
        return value

    def _attr_values(self) -> list:
        return [step.fn({}) for step in self.steps if step.kind == "attr"]

    def _outputs(self, env):
        return _resolve(self.output_args, env) if not isinstance(self.output_args, (list, tuple)) else \
            [_resolve(a, env) for a in self.output_args]
