"""The μGraph IR: kernel graphs, block graphs, shape and validity rules, canonical JSON."""

from mugraph.ir.errors import (
    AccumulationError,
    BlockOutputLimitError,
    DeviceMemoryError,
    DTypeError,
    GraphStructureError,
    IRError,
    MappingError,
    MugraphError,
    RankError,
    SchemaError,
    ShapeError,
    SharedMemoryError,
)
from mugraph.ir.graph import BlockGraph, KernelGraph, Op, Tensor, eps_of
from mugraph.ir.limits import DEFAULT_LIMITS, Limits
from mugraph.ir.render import render
from mugraph.ir.serialize import SCHEMA, digest, dumps, from_json, loads, to_json
from mugraph.ir.types import DType, OpKind

__all__ = [
    "DEFAULT_LIMITS",
    "SCHEMA",
    "AccumulationError",
    "BlockGraph",
    "BlockOutputLimitError",
    "DType",
    "DTypeError",
    "DeviceMemoryError",
    "GraphStructureError",
    "IRError",
    "KernelGraph",
    "Limits",
    "MappingError",
    "MugraphError",
    "Op",
    "OpKind",
    "RankError",
    "SchemaError",
    "ShapeError",
    "SharedMemoryError",
    "Tensor",
    "digest",
    "dumps",
    "eps_of",
    "from_json",
    "loads",
    "render",
    "to_json",
]
