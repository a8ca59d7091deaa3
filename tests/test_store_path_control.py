"""A store path with a control character is refused before anything is created."""

from __future__ import annotations

from pathlib import Path

import pytest

from mugraph.ir.errors import MugraphError
from mugraph.run.checks import check_store_path


@pytest.mark.parametrize("bad", ["run\n.zarr", "run\t.zarr", "run\r.zarr", "run\x7f.zarr"])
def test_control_character_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(MugraphError, match="control character"):
        check_store_path(str(tmp_path / bad))
    assert list(tmp_path.iterdir()) == []
