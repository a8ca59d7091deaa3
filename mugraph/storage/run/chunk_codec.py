"""The codec chain of the task arrays (bytes → zstd → crc32c), and a direct encoder for whole chunks.

zarr 3.1's async write path costs about 2 ms per chunk on a local disk (event-loop and thread hops),
six times the file write itself; a task completion writes several chunks. The writer therefore
encodes whole chunks here, byte for byte what zarr writes for `CODECS` (a test compares them), and
writes each file atomically itself. Reads, metadata and resizes stay with zarr, whose crc32c check
rejects any chunk this encoder got wrong.
"""

from __future__ import annotations

import struct
from typing import Any, NotRequired, TypedDict

import google_crc32c
import numpy as np
import numpy.typing as npt
from numcodecs.zstd import Zstd  # type: ignore[import-untyped]
from zarr.codecs import Crc32cCodec, ZstdCodec

__all__ = ["CODEC_DICTS", "ZSTD_LEVEL", "compressors", "encode_chunk"]

ZSTD_LEVEL = 1


class CodecJson(TypedDict):
    """One codec as the array's `zarr.json` names it (and zarr's `Codec.to_dict` gives it)."""

    name: str
    configuration: NotRequired[dict[str, int | bool | str]]


CODEC_DICTS: list[CodecJson] = [
    {"name": "bytes", "configuration": {"endian": "little"}},
    {"name": "zstd", "configuration": {"level": ZSTD_LEVEL, "checksum": False}},
    {"name": "crc32c"},
]
_ZSTD = Zstd(level=ZSTD_LEVEL)


def compressors() -> list[Any]:
    """The bytes-to-bytes codecs to create the arrays with: zstd, then a crc32c of the compressed bytes."""
    return [ZstdCodec(level=ZSTD_LEVEL), Crc32cCodec()]


def encode_chunk(block: npt.NDArray[Any]) -> bytes:
    """The stored bytes of one whole chunk: little-endian C-order values, zstd, crc32c appended."""
    raw = np.ascontiguousarray(block, dtype=block.dtype.newbyteorder("<")).tobytes()
    packed = bytes(_ZSTD.encode(raw))
    return packed + struct.pack("<I", google_crc32c.value(packed))
