"""The library entry checks what the CLI checks before anything exists: a caller of
`mugraph.api.run_optimize` (or `mugraph.optimize`) with a bad option gets the error and no store,
memo directory or cluster."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mugraph.api import OptimizeKeywords, OptimizeOptions, run_optimize
from mugraph.ir.errors import MugraphError


@pytest.mark.parametrize(
    "options, needle",
    [
        ({"dashboard_address": "no-such-host.invalid:8787"}, "no-such-host.invalid"),
        ({"scheduler": "tcp://no-such-host.invalid:8786"}, "no-such-host.invalid"),
    ],
    ids=["dashboard-host", "scheduler-host"],
)
def test_bad_options_fail_before_anything_is_created(tmp_path: Path, options: dict[str, object], needle: str) -> None:
    store = tmp_path / "run.zarr"
    with pytest.raises(MugraphError, match=needle):
        run_optimize("lora", OptimizeOptions(store=store, **options))  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_an_unreadable_memo_secret_fails_before_the_store_is_made(tmp_path: Path) -> None:
    store = tmp_path / "run.zarr"
    memo = tmp_path / "run.zarr.memo"
    memo.mkdir(mode=0o700)
    (memo / "memo.key").write_bytes(b"\xff\xfe not text")
    with pytest.raises(MugraphError, match="UTF-8"):
        run_optimize("lora", OptimizeOptions(store=store))
    assert not store.exists()


def test_optimize_keywords_are_the_options_fields_with_their_types() -> None:
    """`mugraph.optimize`'s keywords are typed by OptimizeKeywords: a field added to OptimizeOptions and
    not there would be refused by a type checker in a correct call."""
    fields = {f.name: f.type for f in dataclasses.fields(OptimizeOptions) if f.name != "command"}
    assert {k: t.__forward_arg__ for k, t in OptimizeKeywords.__annotations__.items()} == fields
