"""A layout assignment and its cost terms, in the spirit of Mirage's `resolve_tensor_layout`.

Every tensor has one innermost (stride-1) dim; a shared-memory tensor may also swizzle one other dim.
The cost of an assignment is a sum of named terms, each a count times a weight (Mirage's weights):

- `reduction_over_inner` (4000 each): a reduction whose reduced dim is innermost; its threads then
  read along a row and must combine partial sums across lanes.
- `narrow_copy` (4000 each): a block input or output tile copy that cannot move 16-byte vectors,
  because the tile's innermost dim differs from the device tensor's or its rows are not a multiple
  of 16 bytes.
- `no_async_copy` (20000 each): a block input that cannot use `cp.async` (the tile's innermost dim
  differs from the device tensor's, or rows are not a multiple of 4 bytes), so the copy goes through
  registers and cannot overlap the previous iteration's compute.
- `no_ldmatrix` (10000 each): a block matmul operand whose innermost extent is not a multiple of 8
  halves (one `ldmatrix` row), so it cannot be loaded onto tensor cores directly.
- `swizzle` (1000 each): a swizzled shared-memory tensor (address arithmetic on every access).
- `smem_bytes` (1 per byte): shared memory of every block graph, Mirage's estimate plus 16 bytes of
  padding per row of each matmul operand that is not swizzled (padding or a swizzle is what keeps an
  `ldmatrix` free of bank conflicts).

Hard rules (not costs): one innermost dim per tensor; the swizzled dim is not the innermost; matmul
operands and results have their innermost dim among their last two; unary ops, reductions and
accumulators keep their input's innermost dim; inputs and outputs keep the user's strides.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict

from mugraph.stages.layout.facts import KERNEL, Copy, LayoutFacts, TensorKey

WEIGHTS: dict[str, int] = {
    "reduction_over_inner": 4000,
    "narrow_copy": 4000,
    "no_async_copy": 20000,
    "no_ldmatrix": 10000,
    "swizzle": 1000,
    "smem_bytes": 1,
}
WIDE_COPY_BYTES = 16
ASYNC_COPY_BYTES = 4
LDMATRIX_ELEMENTS = 8
PAD_BYTES_PER_ROW = 16
LAYOUT_SCHEMA = "mugraph.layout/1"


class LayoutsJSON(TypedDict):
    """`Layouts` as JSON (kept in layout records and ranking rows): block keys are the op index as text."""

    kernel: list[int]
    blocks: dict[str, list[list[int]]]


@dataclass(frozen=True, slots=True)
class Layouts:
    """Innermost dim of each device tensor, and (innermost, swizzled or -1) of each shared-memory
    tensor of each block graph (keyed by the kernel op index)."""

    kernel: tuple[int, ...]
    blocks: Mapping[int, tuple[tuple[int, int], ...]]

    def inner(self, key: TensorKey) -> int:
        op, i = key
        return self.kernel[i] if op == KERNEL else self.blocks[op][i][0]

    def swizzle(self, key: TensorKey) -> int:
        op, i = key
        return -1 if op == KERNEL else self.blocks[op][i][1]

    def to_json(self) -> LayoutsJSON:
        return {
            "kernel": list(self.kernel),
            "blocks": {str(op): [list(p) for p in ts] for op, ts in sorted(self.blocks.items())},
        }

    @classmethod
    def from_json(cls, data: LayoutsJSON) -> Layouts:
        blocks = {int(op): tuple((int(a), int(b)) for a, b in ts) for op, ts in data["blocks"].items()}
        return cls(tuple(int(d) for d in data["kernel"]), blocks)

    @classmethod
    def row_major(cls, facts: LayoutFacts) -> Layouts:
        """Every tensor's last dim innermost, nothing swizzled: what a layout-unaware lowering does."""
        kernel: dict[int, int] = {}
        blocks: dict[int, dict[int, tuple[int, int]]] = {}
        for (op, i), shape in facts.shapes.items():
            if op == KERNEL:
                kernel[i] = len(shape) - 1
            else:
                blocks.setdefault(op, {})[i] = (len(shape) - 1, -1)
        return cls(
            tuple(kernel[i] for i in sorted(kernel)),
            {op: tuple(ts[i] for i in sorted(ts)) for op, ts in blocks.items()},
        )

    def __str__(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))


def contiguous(layouts: Layouts, copy: Copy) -> int | None:
    """The dim along which a tile copy reads contiguous rows, or None when the tile's innermost dim
    is not the device tensor's."""
    d = layouts.inner(copy.stensor)
    return d if layouts.inner(copy.dtensor) == d else None


def row_bytes(facts: LayoutFacts, key: TensorKey, dim: int) -> int:
    return facts.shapes[key][dim] * facts.itemsize[key]


def is_wide(facts: LayoutFacts, layouts: Layouts, copy: Copy) -> bool:
    d = contiguous(layouts, copy)
    return d is not None and row_bytes(facts, copy.stensor, d) % WIDE_COPY_BYTES == 0


def is_async(facts: LayoutFacts, layouts: Layouts, copy: Copy) -> bool:
    d = contiguous(layouts, copy)
    return copy.direction == "input" and d is not None and row_bytes(facts, copy.stensor, d) % ASYNC_COPY_BYTES == 0


def has_ldmatrix(facts: LayoutFacts, layouts: Layouts, key: TensorKey) -> bool:
    return facts.shapes[key][layouts.inner(key)] % LDMATRIX_ELEMENTS == 0


def padding_bytes(facts: LayoutFacts, layouts: Layouts, key: TensorKey) -> int:
    """Padding a non-swizzled matmul operand needs: 16 bytes per row."""
    if layouts.swizzle(key) >= 0:
        return 0
    return facts.rows(key, layouts.inner(key)) * PAD_BYTES_PER_ROW


def smem_capacity(facts: LayoutFacts, layouts: Layouts, op: int) -> int:
    """Bytes of shared memory the block graph of kernel op `op` needs under `layouts`."""
    operands = sorted({k for k in facts.mm_operands if k[0] == op})
    return facts.static_smem[op] + sum(padding_bytes(facts, layouts, k) for k in operands)


def counts(facts: LayoutFacts, layouts: Layouts) -> dict[str, int]:
    """How many times each cost term occurs (bytes for `smem_bytes`)."""
    swizzled = sum(1 for op, ts in layouts.blocks.items() for _, s in ts if s >= 0)
    return {
        "reduction_over_inner": sum(1 for k, d in facts.reductions if layouts.inner(k) == d),
        "narrow_copy": sum(1 for c in facts.copies if not is_wide(facts, layouts, c)),
        "no_async_copy": sum(1 for c in facts.copies if c.direction == "input" and not is_async(facts, layouts, c)),
        "no_ldmatrix": sum(1 for k in facts.mm_operands if not has_ldmatrix(facts, layouts, k)),
        "swizzle": swizzled,
        "smem_bytes": sum(smem_capacity(facts, layouts, op) for op in facts.static_smem),
    }


def cost_terms(facts: LayoutFacts, layouts: Layouts) -> dict[str, int]:
    """Each term's weighted cost; their sum is the objective the solver minimises."""
    return {name: n * WEIGHTS[name] for name, n in counts(facts, layouts).items()}


def violations(facts: LayoutFacts, layouts: Layouts) -> list[str]:
    """Every hard rule `layouts` breaks (empty for any assignment the solver returns)."""
    out = []
    for key, shape in facts.shapes.items():
        d, s = layouts.inner(key), layouts.swizzle(key)
        if not 0 <= d < len(shape):
            out.append(f"{key}: innermost dim {d} is not a dim of {shape}")
        if s >= 0 and (s == d or s >= len(shape)):
            out.append(f"{key}: swizzled dim {s} is the innermost dim or not a dim")
    for key, d in facts.fixed.items():
        if layouts.inner(key) != d:
            out.append(f"{key}: the user's innermost dim {d} is not kept")
    for key in facts.last_two:
        if layouts.inner(key) < len(facts.shapes[key]) - 2:
            out.append(f"{key}: matmul tensor with innermost dim outside its last two")
    for a, b in facts.same_inner:
        if layouts.inner(a) != layouts.inner(b):
            out.append(f"{b}: does not keep its input {a}'s innermost dim")
    return out
