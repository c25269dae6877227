"""Which aten ops fuse, and how a chain of them becomes one pointwise program.

A pointwise program (emulator/kernels/fused.pyx) is a postfix string: ``L<i>`` loads input i,
``C<value>`` pushes a constant, a name applies an op. Evaluation is in float64; after every op
whose eager result is float32/float16/bfloat16 the program rounds to that dtype (``round_*``),
so a fused chain gives the values eager gives, not merely close ones.

An op fuses when its output is a floating or bool tensor on emu shaped as the broadcast of its
tensor inputs, its other arguments are Python numbers, and its inputs are emu tensors (a CPU
scalar tensor, a SymInt or a SymFloat argument keeps it out: the program bakes constants in).
"""
from __future__ import annotations

import math

import torch
from torch.fx import Node

aten = torch.ops.aten
prims = torch.ops.prims

MAX_INPUTS = 15   # fused.pyx MAX_INPUTS
MAX_STACK = 16    # fused.pyx MAX_STACK

_ROUND = {torch.float32: "round_f32", torch.float16: "round_f16", torch.bfloat16: "round_bf16",
          torch.float64: None, torch.bool: "to_bool"}

# aten overload -> (op token, number of leading tensor/number operands)
_SIMPLE = {
    aten.neg.default: ("neg", 1), aten.abs.default: ("abs", 1), aten.exp.default: ("exp", 1),
    aten.log.default: ("log", 1), aten.sqrt.default: ("sqrt", 1), aten.rsqrt.default: ("rsqrt", 1),
    aten.tanh.default: ("tanh", 1), aten.sigmoid.default: ("sigmoid", 1), aten.relu.default: ("relu", 1),
    aten.erf.default: ("erf", 1), aten.reciprocal.default: ("reciprocal", 1), aten.sin.default: ("sin", 1),
    aten.cos.default: ("cos", 1), aten.log1p.default: ("log1p", 1), aten.expm1.default: ("expm1", 1),
    aten.silu.default: ("silu", 1), aten.logical_not.default: ("not", 1),
    aten.mul.Tensor: ("mul", 2), aten.mul.Scalar: ("mul", 2), aten.div.Tensor: ("div", 2),
    aten.div.Scalar: ("div", 2), aten.pow.Tensor_Scalar: ("pow", 2), aten.pow.Tensor_Tensor: ("pow", 2),
    aten.maximum.default: ("max", 2), aten.minimum.default: ("min", 2),
    aten.gt.Tensor: ("gt", 2), aten.gt.Scalar: ("gt", 2), aten.lt.Tensor: ("lt", 2), aten.lt.Scalar: ("lt", 2),
    aten.ge.Tensor: ("ge", 2), aten.ge.Scalar: ("ge", 2), aten.le.Tensor: ("le", 2), aten.le.Scalar: ("le", 2),
    aten.eq.Tensor: ("eq", 2), aten.eq.Scalar: ("eq", 2), aten.ne.Tensor: ("ne", 2), aten.ne.Scalar: ("ne", 2),
    aten.logical_and.default: ("and", 2), aten.logical_or.default: ("or", 2),
    aten.where.self: ("where", 3),
}
_FLOATING = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
# dtypes the program's loads convert (fused.pyx: the block converters' arithmetic dtypes)
_LOADABLE = (*_FLOATING, torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def value_of(node) -> object:
    """The FakeTensor (or example value) aot_autograd recorded for a node, or None."""
    return node.meta.get("val") if isinstance(node, Node) else None


def _is_emu_tensor(value) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "emu"


def _constant(value) -> str | None:
    if type(value) is bool:
        return f"C{float(value)!r}"
    if type(value) in (int, float):
        if isinstance(value, int) and abs(value) > 2 ** 53:
            return None
        if isinstance(value, float) and not math.isfinite(value):
            return f"C{value!r}"  # "inf", "-inf", "nan": float() reads them back
        return f"C{float(value)!r}"
    return None


def op_tokens(node: Node):
    """(operands, tail tokens) for a fusible node, or None. ``operands``: its positional inputs
    (Nodes or constant tokens, in order); ``tail``: the tokens applied after them."""
    if node.op != "call_function":
        return None
    out = value_of(node)
    if not _is_emu_tensor(out) or out.dtype not in _ROUND:
        return None
    target, args, kwargs = node.target, node.args, node.kwargs
    operands, tail = None, []
    if target is aten.bitwise_not.default and out.dtype == torch.bool:
        target = aten.logical_not.default
    if target in _SIMPLE:
        token, n = _SIMPLE[target]
        if kwargs or len(args) != n:
            return None
        operands, tail = list(args), [token]
    elif target in (aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar):
        alpha = kwargs.get("alpha", 1)
        if len(args) != 2 or set(kwargs) - {"alpha"} or _constant(alpha) is None:
            return None
        token = "add" if target in (aten.add.Tensor, aten.add.Scalar) else "sub"
        if alpha == 1:
            operands, tail = list(args), [token]
        else:  # a + alpha * b, as eager (alpha multiplies in the compute dtype)
            operands, tail = [args[0], args[1], alpha], ["mul", token]
            return _finish(node, operands, tail, mul_alpha=True)
    elif target is aten.gelu.default:
        approximate = kwargs.get("approximate", args[1] if len(args) > 1 else "none")
        operands, tail = [args[0]], ["gelu_tanh" if approximate == "tanh" else "gelu"]
    elif target in (aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default):
        if kwargs:
            return None
        lo = args[1] if len(args) > 1 else None
        hi = args[2] if len(args) > 2 else None
        if target is aten.clamp_max.default:
            lo, hi = None, args[1]
        operands = [args[0]]
        for bound, token in ((lo, "max"), (hi, "min")):
            if bound is not None:
                if _constant(bound) is None:
                    return None
                operands.append(bound)
                tail.append(token)
        if not tail:
            return None
        return _finish(node, operands, tail, chained=True)
    elif target in (prims.convert_element_type.default, aten._to_copy.default):
        dtype = args[1] if target is prims.convert_element_type.default else kwargs.get("dtype")
        if target is aten._to_copy.default and (len(args) != 1 or set(kwargs) - {"dtype"}):
            return None
        source = value_of(args[0])
        if dtype not in _ROUND or source is None or source.dtype not in _ROUND:
            return None
        operands, tail = [args[0]], []
    elif target is aten.clone.default:
        if kwargs.get("memory_format") not in (None, torch.contiguous_format) or len(args) != 1:
            return None
        operands, tail = [args[0]], []
    else:
        return None
    return _finish(node, operands, tail)


def _finish(node, operands, tail, mul_alpha=False, chained=False):
    out = value_of(node)
    shapes = []
    for a in operands:
        if isinstance(a, Node):
            v = value_of(a)
            if not _is_emu_tensor(v) or v.dtype not in _LOADABLE:
                return None
            shapes.append(tuple(v.shape))
        elif _constant(a) is None:
            return None
    if not shapes:
        return None
    operands = _round_constants(node, operands)
    try:
        if tuple(torch.broadcast_shapes(*shapes)) != tuple(out.shape):
            return None
    except Exception:   # symbolic shapes that cannot be decided here: leave the op to eager
        return None
    if node.target is aten.where.self and value_of(operands[0]) is not None and value_of(operands[0]).dtype != torch.bool:
        return None
    # Integer arithmetic results are not fused (the program computes in float64).
    if out.dtype not in _FLOATING and out.dtype != torch.bool:
        return None
    round_token = _ROUND[out.dtype]
    tail = list(tail) + ([round_token] if round_token else [])
    return operands, tail, chained, mul_alpha


_REDUCED_OR_SINGLE = (torch.float32, torch.float16, torch.bfloat16)


# Ops whose CPU kernels cast a scalar operand to the tensors' dtype before computing (the others
# use it in float32, their compute type): checked against CPU with float16/bfloat16 chains.
_SCALAR_IN_COMMON_DTYPE = {aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar,
                           aten.gt.Scalar, aten.lt.Scalar, aten.ge.Scalar, aten.le.Scalar, aten.eq.Scalar,
                           aten.ne.Scalar, aten.gt.Tensor, aten.lt.Tensor, aten.ge.Tensor, aten.le.Tensor,
                           aten.eq.Tensor, aten.ne.Tensor}


def _round_constants(node, operands):
    """Python-number operands as eager uses them beside tensors of one float32/float16/bfloat16
    dtype: cast to that dtype first (add, sub, comparisons) or to float32 (the others), as CPU's
    kernels do."""
    dtypes = {value_of(a).dtype for a in operands if isinstance(a, Node)}
    if len(dtypes) != 1 or next(iter(dtypes)) not in _REDUCED_OR_SINGLE:
        return operands
    (common,) = dtypes
    cast = common if node.target in _SCALAR_IN_COMMON_DTYPE else torch.float32
    return [a if isinstance(a, Node) or type(a) is bool else float(torch.tensor(float(a), dtype=cast))
            for a in operands]


class Expr:
    """A fused expression: postfix tokens with leaf placeholders, its leaves (Nodes) and depth."""
    __slots__ = ("tokens", "leaves", "depth", "ops")

    def __init__(self, tokens, leaves, depth, ops):
        self.tokens, self.leaves, self.depth, self.ops = tokens, leaves, depth, ops

    def program(self, leaf_index) -> str:
        return " ".join(f"L{leaf_index[t[1]]}" if isinstance(t, tuple) else t for t in self.tokens)


def leaf_expr(node: Node) -> Expr:
    return Expr([("leaf", node)], [node], 1, 0)


def const_expr(token: str) -> Expr:
    return Expr([token], [], 1, 0)


def combine(parts: list, fused, tail) -> Expr | None:
    """The expression of a fusible node from its operands' expressions, or None past the kernel's
    limits (more than MAX_INPUTS distinct leaves, or a deeper stack than MAX_STACK)."""
    _, _, chained, mul_alpha = fused
    tokens, leaves, depth = [], [], 0
    if chained:   # x C lo max C hi min: apply each bound in turn
        tokens += parts[0].tokens
        depth = parts[0].depth
        leaves += parts[0].leaves
        for part, token in zip(parts[1:], tail):
            tokens += part.tokens + [token]
            depth = max(depth, 2)
        tokens += tail[len(parts) - 1:]
    elif mul_alpha:  # a b alpha mul add
        for i, part in enumerate(parts):
            tokens += part.tokens
            leaves += part.leaves
            depth = max(depth, i + part.depth)
        tokens += tail
    else:
        for i, part in enumerate(parts):
            tokens += part.tokens
            leaves += part.leaves
            depth = max(depth, i + part.depth)
        tokens += tail
    unique = list(dict.fromkeys(leaves))
    if len(unique) > MAX_INPUTS or depth > MAX_STACK:
        return None
    # ops: the graph nodes the expression evaluates (this one and those inlined into it)
    return Expr(tokens, unique, depth, sum(p.ops for p in parts) + 1)


def _nbytes(node) -> int:
    v = value_of(node)
    if not isinstance(v, torch.Tensor):
        return 0
    n = 1
    for extent, stride in zip(v.shape, v.stride()):
        n *= extent if stride else 1
    return n * v.element_size()


def recompute_pays(node: Node, expr: Expr) -> bool:
    """The recompute rule for a fusible value with several users: inline (recompute) it inside
    every user's kernel when that moves fewer bytes, counting each of its ``n`` users re-reading
    all of its expression's inputs (an upper bound: a user that reads one already reads it once):
        n * bytes(its expression's inputs)  <  bytes(value) * (1 + n)
    the right side being what materialising it costs (one write, ``n`` reads). Every user must be
    a fusible elementwise op (one that is not, a matmul or a reduction, reads the value from
    memory anyway). The vector work is repeated per user; the bytes decide, as the fused kernels
    are memory-bound."""
    users = list(node.users)
    if len(users) < 2 or any(op_tokens(u) is None for u in users):
        return False
    n = len(users)
    return n * sum(_nbytes(leaf) for leaf in expr.leaves) < _nbytes(node) * (1 + n)
