"""No combination of deleted or emptied files of a finished run store passes as a different result.

A real run of lora is damaged in every combination of: the ledger emptied, the best μGraph's found record,
confirmation or layout removed, the ranking or the final record removed (63 stores). `status` and
`optimize` must each report damage naming a file of the store, or give exactly the original result (same
μGraphs, same best); `status` may also say "not complete" where the final record is gone, since
`optimize` then rebuilds it."""

from __future__ import annotations

import itertools
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from mugraph.cli import main
from mugraph.storage.run.ledger import LEDGER_NAME
from tests.helpers.cli_runs import done, mugraph, optimize_args

BUDGET = 40
DAMAGES = ("ledger", "found", "confirmation", "layout", "ranking", "final")
COMBINATIONS = [c for n in range(1, len(DAMAGES) + 1) for c in itertools.combinations(DAMAGES, n)]


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """A finished store, its `done` event and its `status --json`."""
    cwd = tmp_path_factory.mktemp("finished")
    store = cwd / "run.zarr"
    last = done(mugraph(*optimize_args("lora", store, "--workers", "2", budget=BUDGET), cwd=cwd))
    assert last["complete"] and len(last["mugraphs"]) >= 2
    status = mugraph("status", "--json", str(store), cwd=cwd)
    assert status.returncode == 0, status.stderr
    return store, last, json.loads(status.stdout)


def damage(store: Path, what: tuple[str, ...], best: str) -> None:
    paths = {
        "found": f"found/0/{best}",
        "confirmation": f"confirmations/0/{best}",
        "layout": f"layouts/0/{best}",
        "ranking": "rankings/0",
        "final": "final",
    }
    for kind in what:
        if kind == "ledger":
            (store / LEDGER_NAME).write_bytes(b"")
        else:
            shutil.rmtree(store / paths[kind])


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err.strip()


def is_damage(code: int, err: str, store: Path) -> bool:
    """Exit 2 with one line naming a file of the store as damaged."""
    if code != 2:
        return False
    assert len(err.splitlines()) == 1 and f"run store damaged: {store}/" in err and "--fresh" in err, err
    return True


def same_status(got: dict[str, Any], want: dict[str, Any]) -> bool:
    """The same fragments, results and identity. A fragment's `best_found` line says when its best
    was found as a share of the run's time, which a rerun adds to: only what it names is compared."""
    keys = ("fragments", "complete", "best", "identity")
    return {k: _timeless(got[k]) for k in keys} == {k: _timeless(want[k]) for k in keys}


# the seconds and the share of the run's search time in "best first found after 0.4 s of search (81
# states; 46% of the run's search time)": the states are the search's own and compared
_TIMES = re.compile(r"[\d.]+ s of search|\d+% of the run's search time")


def _timeless(value: Any) -> Any:
    if not isinstance(value, list):
        return value
    return [
        {**f, "best_found": f["best_found"] and _TIMES.sub("…", f["best_found"])} if isinstance(f, dict) else f
        for f in value
    ]


@pytest.mark.slow
@pytest.mark.parametrize("what", COMBINATIONS, ids=["+".join(c) for c in COMBINATIONS])
def test_damage_is_reported_or_the_result_is_the_same(
    what: tuple[str, ...],
    original: tuple[Path, dict[str, Any], dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    finished, last, status = original
    store = Path(shutil.copytree(finished, tmp_path / "run.zarr"))
    damage(store, what, last["best"])
    monkeypatch.chdir(tmp_path)

    code, out, err = run(["status", "--json", str(store)], capsys)
    if not is_damage(code, err, store):
        assert code == 0, err
        got = json.loads(out)
        assert same_status(got, status) or ("final" in what and not got["complete"] and got["best"] is None), got
    status_damaged = code == 2

    code, out, err = run(optimize_args("lora", store, "--workers", "1", budget=BUDGET), capsys)
    if is_damage(code, err, store):
        assert status_damaged, f"optimize reports damage that status missed: {err}"
        return
    assert code == 0 and not status_damaged, err
    result = [json.loads(line) for line in out.splitlines() if line.startswith("{")][-1]
    assert result["event"] == "done", result
    assert (result["mugraphs"], result["best"], result["best_per_fragment"]) == (
        last["mugraphs"],
        last["best"],
        last["best_per_fragment"],
    )
    code, out, err = run(["status", "--json", str(store)], capsys)
    assert code == 0 and same_status(json.loads(out), status), err
    assert "ledger" in what and "found" not in what  # the ledger alone, or the found count, catches the rest
