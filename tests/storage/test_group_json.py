"""A record's `zarr.json` is the document zarr's own `GroupMetadata` writes for the same attributes,
and zarr reads it back: the run store serialises it directly, so the two must never drift apart."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest
import zarr.api.asynchronous as zasync
from zarr.buffer import default_buffer_prototype
from zarr.core.group import GroupMetadata

from mugraph.storage.run.atomic_store import AtomicLocalStore
from mugraph.storage.run.errors import StoreDamaged
from mugraph.storage.run.records import _group_json, read_record, seal, sealed_group_json, write_record

ATTRS: list[dict[str, Any]] = [
    {},
    {"rows": 12, "epoch": 3, "workers": ["tls://127.0.0.1:4001"], "found": {"0": 2}},
    {"samples": [{"t": 0.5, "states": 10, "by": {"f0": [1, 2.25, None]}} for _ in range(3)], "crc32": 7},
    {"name": "rms_norm ∘ silu", "nested": [[[]], {}, [True, False]], "big": 2**62, "small": -1e-300},
    {"odd": math.inf, "neg": -math.inf},
]


@pytest.mark.unit
@pytest.mark.parametrize("attrs", ATTRS)
def test_the_record_json_is_zarrs_document(attrs: dict[str, Any]) -> None:
    zarrs = GroupMetadata(attributes=dict(attrs), zarr_format=3).to_buffer_dict(default_buffer_prototype())
    assert json.loads(_group_json(attrs)) == json.loads(zarrs["zarr.json"].to_bytes())


@pytest.mark.unit
@pytest.mark.parametrize("attrs", ATTRS)
def test_the_one_pass_document_is_the_sealed_one(attrs: dict[str, Any]) -> None:
    """What `write_record` writes: the same document as sealing and then serialising, in one pass."""
    assert json.loads(sealed_group_json(attrs)) == json.loads(_group_json(seal(attrs)))


@pytest.mark.unit
def test_zarr_reads_a_written_record_back(tmp_path: Path) -> None:
    store = AtomicLocalStore(tmp_path / "s", read_only=False)
    attrs = {"samples": [{"t": 1.0, "f": {"a": [1, 2]}}], "label": "x/y"}
    write_record(store, "timeline/000000", attrs)
    group = asyncio.run(zasync.open_group(store=store, path="timeline/000000", mode="r"))
    assert dict(group.attrs) == seal(attrs)
    assert asyncio.run(read_record(store, tmp_path / "s", "timeline/000000")) == attrs


class _Asked(AtomicLocalStore):
    """Records the keys zarr asks for."""

    asked: list[str]

    async def get(self, key: str, *args: Any, **kwargs: Any) -> Any:
        self.asked.append(key)
        return await super().get(key, *args, **kwargs)


@pytest.mark.unit
def test_a_damaged_record_is_read_as_zarr_v3_alone(tmp_path: Path) -> None:
    """A record whose zarr.json zarr refuses is damage at once: zarr is not let fall back to looking for
    a v2 group (.zgroup, .zattrs, .zmetadata), whose failed reads it left behind as unretrieved
    futures, printed as tracebacks after the one-line error."""
    write_record(AtomicLocalStore(tmp_path / "s", read_only=False), "timeline/000000", {"samples": []})
    file = tmp_path / "s" / "timeline" / "000000" / "zarr.json"
    file.write_text(file.read_text().replace('"attributes"', '"attribuues"'))
    store = _Asked(tmp_path / "s", read_only=True)
    store.asked = []
    with pytest.raises(StoreDamaged, match="attribuues"):
        asyncio.run(read_record(store, tmp_path / "s", "timeline/000000"))
    assert store.asked and all(key.endswith("zarr.json") for key in store.asked), store.asked
