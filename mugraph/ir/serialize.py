"""Canonical JSON of kernel graphs and its content digest.

The JSON carries a schema version and string enums (never numbers, unlike Mirage's files that broke
when enum values were renumbered). Output shapes are not stored: loading rebuilds the graph through
the builder, so every validity rule is checked again and a stored graph can never be trusted blindly.
The digest is SHA-256 of the canonical text (sorted keys, no spaces, ASCII), which is the same in
every process, machine and Python version.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, assert_never

from mugraph.ir.errors import IRError, SchemaError
from mugraph.ir.families import PREDEFINED, PROPS
from mugraph.ir.graph import BlockGraph, KernelGraph, Op, Tensor
from mugraph.ir.limits import DEFAULT_LIMITS, Limits
from mugraph.ir.types import ACCUMULATORS, BLOCK_OPS, KERNEL_OPS, DType, OpKind

SCHEMA = "mugraph.kernel-graph/1"
JSONDict = dict[str, Any]


def _op_json(op: Op) -> JSONDict:
    out: JSONDict = {"kind": op.kind.value}
    if op.inputs:
        out["inputs"] = list(op.inputs)
    for key, value in op.attrs:
        out[key] = list(value) if isinstance(value, tuple) else value
    if op.block is not None:
        out["block"] = block_to_json(op.block)
    return out


def block_to_json(bg: BlockGraph) -> JSONDict:
    return {
        "grid": list(bg.grid),
        "block": list(bg.block),
        "forloop": bg.forloop,
        "rdx": bg.rdx,
        "ops": [_op_json(op) for op in bg.ops],
    }


def to_json(graph: KernelGraph) -> JSONDict:
    return {"schema": SCHEMA, "ops": [_op_json(op) for op in graph.ops]}


def dumps(graph: KernelGraph) -> str:
    """The canonical text: what is hashed and what is stored."""
    return canonical_text(to_json(graph))


def canonical_text(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def digest(graph: KernelGraph) -> str:
    return hashlib.sha256(dumps(graph).encode("ascii")).hexdigest()


# -- loading --------------------------------------------------------------------------------------


class Fields:
    """Typed access to one JSON object, naming the field path in every error."""

    def __init__(self, obj: Any, path: str) -> None:
        if not isinstance(obj, Mapping):
            raise SchemaError(f"{path}: expected an object, got {type(obj).__name__}")
        self.obj = obj
        self.path = path
        self.read: set[str] = set()

    def get(self, key: str, check: Callable[[Any], bool], what: str, default: Any = ...) -> Any:
        self.read.add(key)
        if key not in self.obj:
            if default is ...:
                raise SchemaError(f"{self.path}.{key}: missing ({what} expected)")
            return default
        value = self.obj[key]
        if not check(value):
            raise SchemaError(f"{self.path}.{key}: expected {what}, got {json.dumps(value)}")
        return value

    def ints(self, key: str, n: int | None = None, default: Any = ...) -> list[int]:
        what = f"a list of {n} integers" if n else "a list of integers"
        return list(
            self.get(
                key,
                lambda v: isinstance(v, list) and all(_is_int(x) for x in v) and (n is None or len(v) == n),
                what,
                default,
            )
        )

    def int(self, key: str, default: Any = ...) -> int:
        return int(self.get(key, _is_int, "an integer", default))

    def number(self, key: str, default: Any = ...) -> float:
        return float(
            self.get(key, lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number", default)
        )

    def all_read(self) -> None:
        """Refuse a field nothing read: a misspelt attribute (`epsilon` for `eps`) would otherwise
        leave its default in place, a program other than the one written."""
        unknown = sorted(set(self.obj) - self.read)
        if unknown:
            known = ", ".join(sorted(self.read))
            raise SchemaError(
                f"{self.path}: unknown field(s) {', '.join(map(repr, unknown))} (the fields it takes: {known})"
            )

    def kind(self, allowed: frozenset[OpKind]) -> OpKind:
        names = sorted(k.value for k in allowed)
        raw = self.get("kind", lambda v: v in names, "one of " + ", ".join(names))
        return OpKind(raw)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _tensor(tensors: Sequence[Tensor], index: int, path: str) -> Tensor:
    if not 0 <= index < len(tensors):
        raise SchemaError(f"{path}: tensor {index} does not exist yet ({len(tensors)} defined)")
    return tensors[index]


def _apply_common(g: KernelGraph | BlockGraph, kind: OpKind, f: Fields, args: list[Tensor]) -> Tensor:
    """A computing op of either level, its attributes read from its JSON."""
    if kind not in PREDEFINED:  # pragma: no cover - the loaders handle these before
        raise SchemaError(f"{f.path}.kind: {kind} is not handled here")
    match kind:
        case OpKind.MATMUL:
            return g.matmul(args[0], args[1])
        case OpKind.ADD:
            return g.add(args[0], args[1])
        case OpKind.MUL:
            return g.mul(args[0], args[1])
        case OpKind.DIV:
            return g.div(args[0], args[1])
        case OpKind.MUL_SCALAR:
            return g.mul_scalar(args[0], f.number("scalar"))
        case OpKind.CLAMP:
            return g.clamp(args[0], f.number("lo"), f.number("hi"))
        case OpKind.EXP:
            return g.exp(args[0])
        case OpKind.SQUARE:
            return g.square(args[0])
        case OpKind.SQRT:
            return g.sqrt(args[0])
        case OpKind.SILU:
            return g.silu(args[0])
        case OpKind.GELU:
            return g.gelu(args[0])
        case OpKind.GELU_ERF:
            return g.gelu_erf(args[0])
        case OpKind.RELU:
            return g.relu(args[0])
        case OpKind.REDUCTION:
            return g.reduction(args[0], f.int("dim"))
        case OpKind.RMS_NORM:
            return g.rms_norm(args[0], f.number("eps", 0.0))
        case OpKind.LAYER_NORM:
            return g.layer_norm(args[0], f.number("eps", 0.0))
        case OpKind.CONCAT:
            return g.concat(args[0], args[1], f.int("dim"))
        case _ as unreachable:
            assert_never(unreachable)


def _args(f: Fields, kind: OpKind, tensors: Sequence[Tensor]) -> list[Tensor]:
    idx = f.ints("inputs", default=[])
    want = PROPS[kind].arity
    if want is not None and len(idx) != want:
        raise SchemaError(f"{f.path}.inputs: {kind} takes {want} inputs, got {len(idx)}")
    return [_tensor(tensors, i, f"{f.path}.inputs") for i in idx]


def _block_from_json(obj: Any, path: str, sources: list[Tensor], limits: Limits) -> BlockGraph:
    f = Fields(obj, path)
    bg = BlockGraph(f.ints("grid", 3), f.int("forloop"), f.ints("block", 3, [128, 1, 1]), f.int("rdx", 64), limits)
    ops = f.get("ops", lambda v: isinstance(v, list), "a list of ops")
    n_inputs = 0
    for i, raw in enumerate(ops):
        of = Fields(raw, f"{path}.ops[{i}]")
        kind = of.kind(BLOCK_OPS)
        try:
            match kind:
                case OpKind.INPUT:
                    if n_inputs >= len(sources):
                        raise SchemaError(f"{of.path}: more block inputs than the op's {len(sources)} inputs")
                    bg.new_input(sources[n_inputs], of.ints("imap", 3), of.int("fmap", -1))
                    n_inputs += 1
                case OpKind.OUTPUT:
                    bg.new_output(_args(of, kind, bg.tensors)[0], of.ints("omap", 3))
                case _ if kind in ACCUMULATORS:
                    bg.forloop_accum(_args(of, kind, bg.tensors)[0], kind, of.number("eps", 0.0))
                case _:
                    _apply_common(bg, kind, of, _args(of, kind, bg.tensors))
        except IRError as e:
            raise SchemaError(f"{of.path}: {e}") from e
        of.all_read()
    f.all_read()
    if n_inputs != len(sources):
        raise SchemaError(f"{path}: {n_inputs} block inputs for {len(sources)} op inputs")
    return bg


def replay(
    g: KernelGraph,
    ops: Sequence[Any],
    path: str,
    bind_input: Callable[[Fields], Tensor],
    bind_output: Callable[[Fields, Tensor], None],
    *,
    strict: bool = True,
) -> None:
    """Add the JSON `ops` of a kernel graph to `g`, checking every rule again.

    Tensor indices in `ops` count only the tensors these ops make, so the same list can be
    replayed into a fresh graph (`from_json`) or inlined into a larger one (`ir.compose`);
    `bind_input` supplies the tensor of each input op, `bind_output` receives each output.
    `strict`: a field no rule reads is an error (a person's JSON); off for JSON this package wrote,
    whose inputs `bind_input` may take by name alone.
    """
    local: list[Tensor] = []
    for i, raw in enumerate(ops):
        of = Fields(raw, f"{path}.ops[{i}]")
        kind = of.kind(KERNEL_OPS)
        try:
            match kind:
                case OpKind.INPUT:
                    local.append(bind_input(of))
                case OpKind.OUTPUT:
                    bind_output(of, _args(of, kind, local)[0])
                case OpKind.CUSTOMIZED:
                    _args(of, kind, local)  # every input exists
                    srcs = [_tensor(local, j, f"{of.path}.inputs") for j in of.ints("inputs")]
                    bg = _block_from_json(
                        of.get("block", lambda v: True, "a block graph"), f"{of.path}.block", srcs, g.limits
                    )
                    local.extend(g.customized(bg, srcs))
                case _:
                    local.append(_apply_common(g, kind, of, _args(of, kind, local)))
        except IRError as e:
            raise SchemaError(f"{of.path}: {e}") from e
        if strict:
            of.all_read()


def _name(f: Fields) -> str | None:
    return f.get("name", lambda v: isinstance(v, str) and bool(v), "a name", None)  # type: ignore[no-any-return]


def from_json(obj: Any, limits: Limits = DEFAULT_LIMITS, path: str = "graph") -> KernelGraph:
    """Rebuild a kernel graph from its JSON; errors name the field path (`graph.ops[3].imap`)."""
    f = Fields(obj, path)
    schema = f.get("schema", lambda v: isinstance(v, str), "a schema string")
    if schema != SCHEMA:
        raise SchemaError(f"{path}.schema: {schema!r} is not supported (expected {SCHEMA!r})")
    ops = f.get("ops", lambda v: isinstance(v, list), "a list of ops")
    g = KernelGraph(limits)

    def new_input(of: Fields) -> Tensor:
        shape = of.ints("shape")
        dtype = of.get("dtype", lambda v: isinstance(v, str), "a dtype name", "float16")
        name = _name(of)
        if dtype not in set(DType):  # a field error, named by its path, before the builder's
            raise SchemaError(f"{of.path}.dtype: unknown dtype {dtype!r} (one of {', '.join(DType)})")
        return g.new_input(shape, dtype, name)

    replay(g, ops, path, new_input, lambda of, t: g.mark_output(t, _name(of)))
    f.all_read()
    return g


def loads(text: str, limits: Limits = DEFAULT_LIMITS) -> KernelGraph:
    return from_json(json.loads(text), limits)
