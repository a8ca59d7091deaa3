"""The matrix products of the lowering: `nn.Linear`, `@` / `mm` / `bmm`, a matmul einsum, `addmm` and
`baddbmm`, each to the IR's matmul (+ bias), on the 2-d form of an input of more dims where the
product keeps its rows; anything else raises `Skip` and stays glue."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from torch import fx

from mugraph.ir.graph import Tensor
from mugraph.ir.types import DType
from mugraph.torch.flatten import einsum_matmul
from mugraph.torch.lower_operands import InputSource, Skip, Value, bind, scalar
from mugraph.torch.lower_split import SplitPieces

aten = torch.ops.aten


class MatmulLowering(SplitPieces):
    """The matrix-product handlers (the rest of `OpLowering` builds on them)."""

    def out_dtype(self, node: fx.Node) -> DType:
        return self._dtype(node)

    def linear(self, node: fx.Node) -> Value:
        """x @ W.T (+ bias); x of 3 or more dims on its 2-d form [rows, k]."""
        b = bind(node)
        dt = self.out_dtype(node)
        x, w = b["input"], b["weight"]
        if not isinstance(w, fx.Node) or w.name in self.values or len(self._shape(w)) != 2:
            raise Skip
        if node.users and all(self._split_rows(u) is not None for u in node.users):
            raise Skip  # lowered piece by piece (`piece`): the whole output is never needed
        if not isinstance(x, fx.Node) or len(self._shape(x)) < 2 or self._dtype(w) is not dt:
            raise Skip
        f = self.frame(node, [x, b.get("bias")])
        xt = self.operand(x, dt, f)
        y = self.g.matmul(xt, self._transposed(w, dt))
        if b.get("bias") is not None:
            y = self.g.add(y, self.operand(b["bias"], dt, f))
        return y

    def transpose(self, node: fx.Node) -> Value:
        """`w.T`, `w.t()`, `w.permute(1, 0)`, `w.transpose(0, 1)` of a 2-d value torch holds (Falcon's
        `x @ self.weight.T`): the transposed input a linear layer's weight is. Of a lowered value: glue."""
        w = node.args[0]
        if not isinstance(w, fx.Node) or w.name in self.values or len(self._shape(w)) != 2:
            raise Skip
        if node.target is aten.permute.default and [d % 2 for d in cast(Sequence[int], node.args[1])] != [1, 0]:
            raise Skip
        if node.target is aten.transpose.int and {int(cast(int, d)) % 2 for d in node.args[1:3]} != {0, 1}:
            raise Skip
        dt = self.out_dtype(node)
        if self._dtype(w) is not dt:
            raise Skip
        return self._transposed(w, dt)

    def matmul(self, node: fx.Node) -> Value:
        """a @ b: a batched matmul where the batch dims agree; a [.., m, k] of 3 or more dims times a
        matrix b [k, n] (leading 1-dims allowed) on a's 2-d form."""
        a, b = node.args[0], node.args[1]
        dt = self.out_dtype(node)
        if not (isinstance(a, fx.Node) and isinstance(b, fx.Node)):
            raise Skip
        sa, sb = self._shape(a), self._shape(b)
        if len(sa) >= 3 and len(sb) >= 2 and all(d == 1 for d in sb[:-2]):
            f = self.frame(node, [a])
            if f.flat:
                bt = self.tensor(b, dt) if len(sb) == 2 else self._matrix(b, dt)
                return self.g.matmul(self.operand(a, dt, f), bt)
        if len(sa) != len(sb) or len(sa) < 2 or sa[:-2] != sb[:-2]:
            raise Skip
        return self.g.matmul(self.tensor(a, dt), self.tensor(b, dt))

    def einsum(self, node: fx.Node) -> Value:
        """An einsum that is a matmul by a matrix (`bsd,df->bsf`; `...d,fd->...f` reads the matrix as a
        linear layer's weight, transposed in place); other einsums are glue."""
        mm = einsum_matmul(node)
        if mm is None:
            raise Skip
        a, b, transposed = mm
        dt = self.out_dtype(node)
        if len(self._shape(b)) != 2 or len(self._shape(a)) < 2:
            raise Skip
        f = self.frame(node, [a])
        if len(self._shape(a)) > 2 and not f.flat:
            raise Skip
        if transposed:
            if b.name in self.values or self._dtype(b) is not dt:
                raise Skip
            return self.g.matmul(self.operand(a, dt, f), self._transposed(b, dt))
        return self.g.matmul(self.operand(a, dt, f), self.tensor(b, dt))

    def _matrix(self, b: fx.Node, dt: DType) -> Tensor:
        """A torch value [1, .., k, n] as the matrix [k, n]."""
        if b.name in self.values or self._dtype(b) is not dt:
            raise Skip
        src = InputSource("reshape", b.name, self._shape(b)[-2:], dt)
        name = self._made(src) or self._fresh(f"{b.name}_2d")
        return self._new_input(name, src, b.name not in self.late)

    def addmm(self, node: fx.Node) -> Value:
        """`input + mat1 @ mat2` (GPT-2's Conv1D), where beta and alpha are 1; other scalings are glue."""
        return self._bias_plus_product(node, "mat1", "mat2", 2)

    def baddbmm(self, node: fx.Node) -> Value:
        """`input + batch1 @ batch2` (attention scores with a bias, as BLOOM and others compute them),
        where beta and alpha are 1; other scalings are glue."""
        return self._bias_plus_product(node, "batch1", "batch2", 3)

    def _bias_plus_product(self, node: fx.Node, left: str, right: str, rank: int) -> Value:
        """The bias (`self`, of `rank` dims once its leading 1-dims are added) plus the product of the
        operands named `left` and `right`, for addmm and baddbmm alike."""
        b = bind(node)
        if scalar(b.get("beta", 1)) != 1.0 or scalar(b.get("alpha", 1)) != 1.0:
            raise Skip
        dt = self.out_dtype(node)
        product = self.g.matmul(self.tensor(b[left], dt), self.tensor(b[right], dt))
        return self.g.add(product, self.tensor(b["self"], dt, rank))
