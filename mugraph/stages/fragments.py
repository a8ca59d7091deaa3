"""Stage 1: split a reference program into LAX fragments (stitching them back is `stages.combine`).

A fragment is a contiguous interval of the program's op order (creation order, inputs and outputs
left out), which is topological, so every fragment is convex: no path leaves a fragment and comes
back. Non-LAX ops (relu, clamp) are never in a fragment; each stands alone as a *glue* op that is
copied as-is. An input op placed after compute ops marks a value that arrives later (a captured
PyTorch program's glue, run outside, computes it from earlier outputs): no fragment reading it starts
before it. Ops that reach no program output are dropped. Within the LAX runs between glue ops
the cut points are chosen by dynamic programming, see `split_program`.

The norms are LAX, eps or not: rms_norm and layer_norm are sums, squares, a constant added, one
square root and one division over the last dim, with no exponential, as Mirage's own RMSNorm program
is; layer_norm's centring subtracts a mean, a linear map. Their eps travels in the ops' JSON, which
is how a fragment's graph is copied out of the program and stitched back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from mugraph.ir.errors import MugraphError
from mugraph.ir.graph import KernelGraph, Op
from mugraph.ir.live import live_ops
from mugraph.ir.serialize import SCHEMA, from_json, to_json
from mugraph.ir.shapes import fmt
from mugraph.ir.types import NON_LAX_OPS, OpKind

# silu(x) = x / (1 + e^-x) and gelu carry an exponential too: at most one per path in a fragment.
EXP_BEARING_OPS = frozenset({OpKind.EXP, OpKind.SILU, OpKind.GELU, OpKind.GELU_ERF})


class FragmentError(MugraphError):
    """A program cannot be split into fragments, or chosen μGraphs cannot be stitched back."""


@dataclass(frozen=True)
class FragmentLimits:
    """How large a fragment may be: compute ops, boundary tensors read (program inputs or outputs
    of earlier parts), and tensors produced for later parts or as program outputs. Seven ops is the
    largest program Mirage searched whole (qknorm_gqa); four inputs is its largest block input tuple."""

    max_ops: int = 7
    max_inputs: int = 4
    max_outputs: int = 2
    # What one μGraph of the presets without two block graphs (mlp, lora) can hold, as SearchConfig's
    # defaults say (a test keeps the two equal): kernel ops counting its inputs, and block ops in its
    # one block graph counting the block's inputs. See `_Program.reachable`.
    kernel_ops: int = 5
    block_ops: int = 9
    reach: bool = True  # False: fragments as large as the other limits allow, reachable or not
    # A fragment reading this many inputs is searched with the lora preset, whose space is the
    # largest by far (lora's whole space: 12.8 M states, against 45 k for rms_norm's): the split
    # prices such a fragment like one more fragment, so it is taken only where it saves two.
    wide_inputs: int = 4

    def __post_init__(self) -> None:
        for key in ("max_ops", "max_inputs", "max_outputs", "kernel_ops", "block_ops", "wide_inputs"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise FragmentError(f"fragment limit {key}={value!r} must be a positive integer")


@dataclass(frozen=True)
class Part:
    """A fragment or glue op: a standalone graph whose inputs are named after their sources."""

    index: int
    name: str  # "f0", "f1", ... for fragments; "g0", "g1", ... for glue ops
    graph: KernelGraph  # inputs named by `sources`, outputs named "o0", "o1", ...
    sources: tuple[str, ...]  # per input of `graph`: a program input name, or "f1:o0" / "g0:o0"
    outputs: tuple[str, ...]  # the output names of `graph`, in order
    op_indices: tuple[int, ...]  # the positions of its ops in `program.ops`


@dataclass(frozen=True)
class FragmentSpec(Part):
    """A LAX fragment: the unit the search optimises."""


@dataclass(frozen=True)
class GlueSpec(Part):
    """A non-LAX op, copied into the stitched program unchanged."""


@dataclass(frozen=True)
class Split:
    program: KernelGraph
    fragments: tuple[FragmentSpec, ...]
    glue: tuple[GlueSpec, ...]
    order: tuple[str, ...]  # names of fragments and glue ops, in program order
    outputs: tuple[tuple[str, str], ...]  # (program output name, its source), in program order
    limits: FragmentLimits

    @property
    def parts(self) -> list[Part]:
        by_name: dict[str, Part] = {p.name: p for p in (*self.fragments, *self.glue)}
        return [by_name[n] for n in self.order]


# -- splitting ------------------------------------------------------------------------------------


class _Program:
    """The facts about a program the split needs: live compute ops and who consumes what."""

    def __init__(self, program: KernelGraph) -> None:
        self.graph = program
        names = [n for n, _, _ in program.input_signature()]
        bad = sorted({n for n in names if names.count(n) > 1 or ":" in n})
        if bad:
            raise FragmentError(f"program inputs {bad}: input names must be unique and contain no ':' to be split")
        custom = [i for i, op in enumerate(program.ops) if op.kind is OpKind.CUSTOMIZED]
        if custom:
            raise FragmentError(
                f"ops {custom} are graph-defined (customized); a reference program to split must "
                "have pre-defined kernel ops only"
            )
        self.json_ops = to_json(program)["ops"]
        self.input_pos = {op.outputs[0]: pos for pos, op in enumerate(program.ops) if op.kind is OpKind.INPUT}
        self.output_tensors = {t.index for t in program.output_tensors}
        self.seq, _ = live_ops(program)  # positions in program.ops of the live compute ops, in order
        self.consumers: dict[int, list[int]] = {}  # tensor -> consuming steps (indices in seq)
        for step, pos in enumerate(self.seq):
            for t in program.ops[pos].inputs:
                self.consumers.setdefault(t, []).append(step)

    def op(self, step: int) -> Op:
        return self.graph.ops[self.seq[step]]

    def boundary(self, lo: int, hi: int) -> tuple[list[int], list[int]]:
        """The tensors steps [lo, hi) read from outside and those they provide to the outside."""
        made = {t for s in range(lo, hi) for t in self.op(s).outputs}
        reads = sorted({t for s in range(lo, hi) for t in self.op(s).inputs if t not in made})
        gives = sorted(t for t in made if t in self.output_tensors or any(c >= hi for c in self.consumers.get(t, ())))
        return reads, gives

    def exp_depth(self, lo: int, hi: int) -> int:
        """The most exp-bearing ops on one path inside steps [lo, hi)."""
        depth: dict[int, int] = {}
        worst = 0
        for s in range(lo, hi):
            op = self.op(s)
            d = max((depth.get(t, 0) for t in op.inputs), default=0) + (op.kind in EXP_BEARING_OPS)
            depth.update(dict.fromkeys(op.outputs, d))
            worst = max(worst, d)
        return worst

    def contraction_through_exp(self, lo: int, hi: int) -> bool:
        """Whether a path inside steps [lo, hi) runs matmul -> exp-bearing op -> matmul."""
        stage: dict[int, int] = {}  # tensor -> 0 none, 1 after a matmul, 2 after matmul then exp-bearing
        for s in range(lo, hi):
            op = self.op(s)
            seen = max((stage.get(t, 0) for t in op.inputs), default=0)
            if op.kind is OpKind.MATMUL:
                if seen == 2:
                    return True
                seen = max(seen, 1)
            elif op.kind in EXP_BEARING_OPS and seen == 1:
                seen = 2
            stage.update(dict.fromkeys(op.outputs, seen))
        return False

    def reachable(self, lo: int, hi: int, reads: int, limits: FragmentLimits) -> list[str]:
        """Why the search cannot reach any μGraph of steps [lo, hi) under the presets a fragment without
        an exp gets (mlp, lora: one block graph), or nothing. Its r inputs (`reads`) leave
        `kernel_ops - r` kernel ops: one graph-defined op holding at most `block_ops - r` ops and
        pre-defined ops for the rest,
        so at most (block_ops - r) + (kernel_ops - r - 1) ops in all. And a contraction fed by a
        nonlinearity of another contraction (linear, SiLU, linear) needs the second block graph that
        only the attention preset has. A fragment holding an exp gets that preset and is not bounded
        here. Without these, the split's fewest-fragments rule made one fragment of a whole pre-norm
        MLP, whose space holds no μGraph at all."""
        if any(self.op(s).kind is OpKind.EXP for s in range(lo, hi)):
            return []
        room = (limits.block_ops - reads) + (limits.kernel_ops - reads - 1)
        found = []
        if hi - lo > room:
            found.append(
                f"{hi - lo} ops > the {room} that one block graph and the kernel ops left hold with {reads} inputs"
            )
        if self.contraction_through_exp(lo, hi):
            found.append("a matmul fed by a silu or gelu of another matmul (one block graph cannot hold both)")
        return found

    def violations(self, lo: int, hi: int, limits: FragmentLimits) -> list[str]:
        reads, gives = self.boundary(lo, hi)
        found = []
        if hi - lo > limits.max_ops:
            found.append(f"{hi - lo} ops > max_ops={limits.max_ops}")
        if len(reads) > limits.max_inputs:
            found.append(f"{len(reads)} inputs > max_inputs={limits.max_inputs}")
        if len(gives) > limits.max_outputs:
            found.append(f"{len(gives)} outputs > max_outputs={limits.max_outputs}")
        if self.exp_depth(lo, hi) > 1:
            found.append("a path with more than one exp-bearing op (exp, silu, gelu)")
        if any(self.input_pos.get(t, -1) > self.seq[lo] for t in reads):
            found.append("an input that arrives after the fragment's first op")
        if limits.reach and hi - lo > 1:  # one op alone is always searchable: it is its own reference
            found += self.reachable(lo, hi, len(reads), limits)
        return found


def _cut_run(p: _Program, lo: int, hi: int, limits: FragmentLimits) -> list[tuple[int, int]]:
    """Split LAX steps [lo, hi) into fragments: minimum (fragments + fragment outputs), then the
    lexicographically smallest sequence of cut points."""
    for s in range(lo, hi):
        found = p.violations(s, s + 1, limits)
        if found:
            op = p.op(s)
            shapes = ", ".join(fmt(p.graph.tensors[t].shape) for t in op.inputs)
            raise FragmentError(
                f"op {p.seq[s]} ({op.kind} of {shapes}) alone breaks the fragment limits "
                f"({'; '.join(found)}); no fragment can hold it"
            )
    # best[i]: (cost, cut points) of the best split of steps [i, hi); cut points end each fragment.
    best: dict[int, tuple[int, tuple[int, ...]]] = {hi: (0, ())}
    for i in range(hi - 1, lo - 1, -1):
        options = []
        for j in range(i + 1, min(hi, i + limits.max_ops) + 1):
            if not p.violations(i, j, limits):
                cost, cuts = best[j]
                reads, gives = p.boundary(i, j)
                wide = len(reads) >= limits.wide_inputs  # the lora preset's space, the largest
                options.append((1 + len(gives) + wide + cost, (j, *cuts)))
        best[i] = min(options)  # [i, i+1) is always an option: checked above
    bounds = (lo, *best[lo][1])
    return list(pairwise(bounds))


def _part_graph(
    p: _Program, steps: range, reads: Sequence[int], gives: Sequence[int], sources: Sequence[str]
) -> KernelGraph:
    """The standalone graph of steps: built from the program's JSON, so it is checked again."""
    local: dict[int, int] = {}
    ops: list[dict[str, object]] = []
    for t, src in zip(reads, sources, strict=True):
        tensor = p.graph.tensors[t]
        local[t] = len(local)
        ops.append({"kind": "input", "dtype": tensor.dtype.value, "name": src, "shape": list(tensor.shape)})
    for s in steps:
        op = p.op(s)
        ops.append({**p.json_ops[p.seq[s]], "inputs": [local[t] for t in op.inputs]})
        for t in op.outputs:
            local[t] = len(local)
    ops += [{"kind": "output", "inputs": [local[t]], "name": f"o{k}"} for k, t in enumerate(gives)]
    return from_json({"schema": SCHEMA, "ops": ops}, p.graph.limits, "fragment")


def split_program(program: KernelGraph, limits: FragmentLimits = FragmentLimits()) -> Split:
    """Split `program` into LAX fragments and glue ops.

    Fragments are intervals of the live compute ops, cut at every non-LAX op; each satisfies
    `limits` and has at most one exp-bearing op (exp, silu, gelu) on any path inside it. Among
    the valid splits of each LAX run, the one chosen minimises the number of fragments plus the
    total number of fragment outputs (fewer kernels, fewer tensors through device memory); ties go
    to the lexicographically smallest sequence of cut points. A fragment's inputs and outputs are
    ordered by the program's tensor order, so a one-fragment program gives the program itself
    (outputs renamed "o0", ...), except that a fragment reads the tensors earlier pieces made before
    the program's inputs: activations before weights, as Mirage's grid heuristic takes the first
    input's dim 0 for the batch (a later fragment's matmul by a [64, 96] weight listed first was
    offered grid 64 over the weight's rows alone, and no μGraph). Raises FragmentError if one LAX op
    alone breaks the limits.
    """
    p = _Program(program)
    pieces: list[tuple[bool, int, int]] = []  # (is glue, first step, end step)
    start = 0
    for s in range(len(p.seq) + 1):
        if s == len(p.seq) or p.op(s).kind in NON_LAX_OPS:
            pieces += [(False, a, b) for a, b in _cut_run(p, start, s, limits)]
            if s < len(p.seq):
                pieces.append((True, s, s + 1))
            start = s + 1
    ref = {t.index: n for t, (n, _, _) in zip(program.input_tensors, program.input_signature(), strict=True)}
    program_inputs = set(ref)
    fragments: list[FragmentSpec] = []
    glue: list[GlueSpec] = []
    order: list[str] = []
    for is_glue, lo, hi in pieces:
        reads, gives = p.boundary(lo, hi)
        if not is_glue:
            reads.sort(key=lambda t: (t in program_inputs, t))
        name = f"g{len(glue)}" if is_glue else f"f{len(fragments)}"
        sources = tuple(ref[t] for t in reads)
        outputs = tuple(f"o{k}" for k in range(len(gives)))
        graph = _part_graph(p, range(lo, hi), reads, gives, sources)
        ops = tuple(p.seq[lo:hi])
        if is_glue:
            glue.append(GlueSpec(len(glue), name, graph, sources, outputs, ops))
        else:
            fragments.append(FragmentSpec(len(fragments), name, graph, sources, outputs, ops))
        order.append(name)
        ref.update({t: f"{name}:{o}" for t, o in zip(gives, outputs, strict=True)})
    outs = tuple((str(op.attr("name")), ref[op.inputs[0]]) for op in program.ops_of(OpKind.OUTPUT))
    return Split(program, tuple(fragments), tuple(glue), tuple(order), outs, limits)
