"""The exported program's file, checked before torch reads it.

torch.export's `.pt2` is a zip whose entries torch may unpickle: a weight or constant marked
`use_pickle` (with `weights_only=False`), a custom or opaque object, and the sample inputs (a pickle
torch first reads safely, then, if that fails, with `weights_only=False`). A store someone hands over
would then run their code at `mugraph.load`. mugraph writes none of these (weights and constants as raw
bytes, no sample inputs), so an archive holding one was not written by mugraph and is refused, by
reading the zip with Python's own `zipfile`, before torch opens it.

The archive's digest covers every entry's name and bytes but torch's random serialization id, so the
same program with the same weights has the same digest; the store records it when the archive is
written and `load` compares the two first.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from pathlib import Path
from typing import Any

from mugraph.torch.errors import TorchError

_SERIALIZATION_ID = ".data/serialization_id"
# Every entry torch.export.save writes for one program without pickles, relative to the archive's root.
_PLAIN = {"archive_format", "archive_version", "byteorder", ".data/version", _SERIALIZATION_ID}
_ENTRY = re.compile(
    r"(?P<kind>models/\w+\.json|data/weights/\w+_weights_config\.json|data/constants/\w+_constants_config\.json"
    r"|data/weights/weight_\d+|data/constants/tensor_\d+|data/sample_inputs/\w+\.pt|extra/mugraph_forward\.json)"
)


class UnsafeArchiveError(TorchError):
    """An exported program holds something torch would unpickle, or is not the one the store recorded."""


def _entries(path: Path, data: bytes | None = None) -> dict[str, bytes]:
    """The archive's entries by name below its root (one root folder, no duplicate names), from `data`
    (the file's bytes) or else the file."""
    try:
        with zipfile.ZipFile(io.BytesIO(data) if data is not None else path) as z:
            names = z.namelist()
            if len(set(names)) != len(names):
                raise UnsafeArchiveError(f"{path}: the archive names an entry twice; refusing to read it")
            roots = {n.split("/", 1)[0] for n in names}
            if len(roots) != 1 or any("/" not in n for n in names):
                raise UnsafeArchiveError(f"{path}: not an exported program (expected one root folder in the zip)")
            return {n.split("/", 1)[1]: z.read(n) for n in names if not n.endswith("/")}
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise UnsafeArchiveError(f"{path}: cannot read the exported program: {e}") from None


def _config(path: Path, name: str, data: bytes) -> dict[str, Any]:
    try:
        config = json.loads(data)["config"]
    except (ValueError, KeyError, TypeError):
        raise UnsafeArchiveError(f"{path}: {name} is not a payload config") from None
    if not isinstance(config, dict) or not all(isinstance(v, dict) for v in config.values()):
        raise UnsafeArchiveError(f"{path}: {name} is not a payload config")
    return config


def check_archive(path: Path, data: bytes) -> dict[str, bytes]:
    """Refuse an archive (`data`, the bytes of `path`) holding anything torch would unpickle, naming the
    file and the entry; its entries otherwise."""
    entries = _entries(path, data)
    for name, data in entries.items():
        m = _ENTRY.fullmatch(name)
        if name in _PLAIN:
            continue
        if m is None:
            raise UnsafeArchiveError(
                f"{path}: holds {name!r}, which mugraph never writes (torch may unpickle it); refusing to load it"
            )
        if name.startswith("data/sample_inputs/") and data:
            raise UnsafeArchiveError(
                f"{path}: holds pickled sample inputs ({name}), which torch would unpickle; refusing to load it "
                "(mugraph writes none: optimise the model again to make a store this version loads)"
            )
        if name.endswith("_config.json"):
            for fqn, meta in _config(path, name, data).items():
                if meta.get("use_pickle") is not False:
                    raise UnsafeArchiveError(
                        f"{path}: {fqn!r} in {name} is stored as a pickle, which torch would unpickle (and so run "
                        "any code in it); refusing to load it"
                    )
                kind = "tensor_" if "constants" in name else "weight_"
                if not str(meta.get("path_name", "")).startswith(kind):
                    raise UnsafeArchiveError(
                        f"{path}: {fqn!r} in {name} is an opaque object ({meta.get('path_name')!r}), which torch "
                        "would unpickle; refusing to load it"
                    )
    return entries


def extra_file(data: bytes, name: str) -> str | None:
    """The text of an extra file torch.export.save wrote into the archive (`data`, checked), or None."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        found = [n for n in z.namelist() if n.split("/", 1)[-1] == f"extra/{name}"]
        return z.read(found[0]).decode("utf-8", errors="replace") if found else None


def archive_digest(path: Path) -> str:
    """sha256 of the archive's entries (names and bytes, sorted by name) but its random serialization id."""
    return entries_digest(_entries(path))


def entries_digest(entries: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name in sorted(entries):
        if name == _SERIALIZATION_ID:
            continue
        data = entries[name]
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def read_recorded(path: Path, recorded: str | None) -> bytes:
    """The bytes of the archive at `path` once they are known safe for torch to read: nothing in them
    that torch would unpickle, and their digest the one the store recorded (`recorded`). One read, so
    what torch then reads is what was checked."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UnsafeArchiveError(f"{path}: cannot read the exported program: {e.strerror or e}") from None
    digest = entries_digest(check_archive(path, data))
    if recorded is None:
        raise UnsafeArchiveError(
            f"{path}: the store records no digest for its exported program (made by an older mugraph); "
            "optimise the model again (fresh) to make one this version loads"
        )
    if digest != recorded:
        raise UnsafeArchiveError(
            f"{path}: not the exported program the store recorded (digest {digest[:16]}, recorded "
            f"{recorded[:16]}); refusing to load it"
        )
    return data
