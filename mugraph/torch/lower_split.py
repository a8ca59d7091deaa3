"""Transposed weights, and the pieces of a linear layer's output split along its last dim.

A linear layer's weight [n, k] is read as its transpose [k, n], a view the kernels read in place. A
fused linear whose output is split (a SwiGLU's gate and up projections in one `nn.Linear`, then
`chunk`, as Phi-3 and transformers' MoE experts write it) is lowered piece by piece: each piece is the
linear over its rows of the weight (and bias), so the search can fuse it with what reads it, and the
whole linear and the split, read by nothing then, never run. Only where the search can fuse the pieces
(every piece read by an op of the program, all in one fragment: `lower`): n pieces are n matmul calls
where the model makes one, so a piece only returned (an attention's q, k and v, split then viewed as
heads by glue), or pieces in separate fragments, leave the linear whole, one call as the model has it,
and the split to torch.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import fx

from mugraph.ir.graph import Tensor
from mugraph.ir.types import DType
from mugraph.torch.flatten import split_linear
from mugraph.torch.lower_operands import InputSource, Operands, Skip, Value, bind

aten = torch.ops.aten


class SplitPieces(Operands):
    """The transposed-weight inputs and the split-linear handler of the lowering. `whole`: linear layers
    whose split is not lowered piece by piece (an earlier pass found their pieces unfused: see `lower`)."""

    whole: frozenset[str] = frozenset()

    def __init__(self, ep: torch.export.ExportedProgram) -> None:
        super().__init__(ep)
        self.piece_weights: dict[str, str] = {}  # split linear's name -> its weight's node, once a piece is lowered
        self.folded: dict[str, str] = {}  # fx node -> the node whose product took its scale in (`_fold_into_weight`)

    def _transposed(self, w: fx.Node, dt: DType, rows: tuple[int, int] | None = None) -> Tensor:
        """A 2-d torch value's transpose (of its `rows` only, where given) as a program input, a view the
        kernels read in place (one per value and rows, shared by every reader)."""
        n_out, k = self._shape(w)
        if rows is not None:
            n_out = rows[1] - rows[0]
        src = InputSource("transpose", w.name, (k, n_out), dt, rows=rows)
        base = f"{w.name}_t" if rows is None else f"{w.name}_t{rows[0]}_{rows[1]}"
        return self._new_input(self._made(src) or self._fresh(base), src, w.name not in self.late)

    def _split_rows(self, split: fx.Node) -> list[tuple[int, int]] | None:
        """The (start, stop) of each piece of a split of a linear layer's output along its last dim, where
        the linear can be lowered piece by piece (its weight a 2-d torch value, so each piece is the
        linear over those rows of it); None for any other split."""
        lin = split_linear(split)
        if lin is None or lin.name in self.whole:
            return None
        w = bind(lin)["weight"]
        if not isinstance(w, fx.Node) or w.name in self.values or len(self._shape(w)) != 2:
            return None
        size, spec = self._shape(lin)[-1], split.args[1] if len(split.args) > 1 else None
        if split.target is aten.chunk.default and isinstance(spec, int) and spec > 0:
            spec = -(-size // spec)  # chunk: pieces of ceil(size / chunks)
        if isinstance(spec, int) and spec > 0:
            sizes = [min(spec, size - start) for start in range(0, size, spec)]
        elif isinstance(spec, list | tuple) and all(isinstance(v, int) and v > 0 for v in spec):
            sizes = [int(v) for v in spec]
        else:
            return None
        if sum(sizes) != size:
            return None
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        return [(a, a + n) for a, n in zip(starts, sizes, strict=True)]

    def piece(self, node: fx.Node) -> Value:
        """`h[i]` of `h = linear(x, W, b).split(...)` along the last dim (or `.chunk`): the linear over
        W's rows of that piece (and b's), so each piece is a matmul the search can fuse with its readers,
        and the whole linear and the split are never computed."""
        split, index = node.args[0], node.args[1]
        if not isinstance(split, fx.Node) or not isinstance(index, int):
            raise Skip
        pieces = self._split_rows(split)
        if pieces is None:
            raise Skip
        lin = cast(fx.Node, split.args[0])
        if lin.name in self.values:  # lowered whole (something reads it whole): the split reads that
            raise Skip
        rows = pieces[index]
        b = bind(lin)
        dt = self._dtype(node)
        x, w, bias = b["input"], cast(fx.Node, b["weight"]), b.get("bias")  # a node: `_split_rows`
        if not isinstance(x, fx.Node) or len(self._shape(x)) < 2 or self._dtype(w) is not dt:
            raise Skip
        f = self.frame(node, [x])
        y = self.g.matmul(self.operand(x, dt, f), self._transposed(w, dt, rows))
        self.piece_weights[lin.name] = w.name
        if bias is None:
            return y
        if not isinstance(bias, fx.Node) or bias.name in self.values or self._dtype(bias) is not dt:
            raise Skip
        src = InputSource("reshape", bias.name, (1, rows[1] - rows[0]), dt, rows=rows)
        name = self._made(src) or self._fresh(f"{bias.name}_{rows[0]}_{rows[1]}")
        return self.g.add(y, self._new_input(name, src, bias.name not in self.late))
