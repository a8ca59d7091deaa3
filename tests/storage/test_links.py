"""No file of a run store or of its memo directory is written through a link planted in it: each link is
refused with one line naming it, and its target is left exactly as it was (real stores, a real redis-server,
the real CLI)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from mugraph.cli import main
from mugraph.ir.errors import MugraphError
from mugraph.storage.memo.auth import ENV_SECRET, load_secret
from mugraph.storage.memo.redis_files import LOCK_NAME as REDIS_LOCK
from mugraph.storage.memo.redis_files import LOG_NAME, PID_NAME, STATE_NAME
from mugraph.storage.memo.redis_server import EmbeddedRedis
from mugraph.storage.run.atomic_store import write_atomic
from mugraph.storage.run.ledger import LEDGER_NAME
from mugraph.storage.run.lock import LOCK_NAME
from mugraph.storage.run.store import RunStore, StoreDamaged
from tests.helpers.cli_runs import optimize_args
from tests.helpers.run_store import new_store, run_to_end

PRECIOUS = b"precious: not to be truncated, appended to or replaced\n"


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """The file a planted link points at (as root, it could be any file)."""
    path = tmp_path / "elsewhere" / "precious.txt"
    path.parent.mkdir()
    path.write_bytes(PRECIOUS)
    return path


def untouched(target: Path) -> bool:
    return target.read_bytes() == PRECIOUS and not target.is_symlink()


def plant(link: Path, target: Path) -> None:
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    else:
        link.unlink(missing_ok=True)
    link.symlink_to(target)


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("links") / "s"
    with new_store(path) as st:
        run_to_end(st, limit=60)
    return path


@pytest.fixture
def store(small_store: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(small_store, tmp_path / "run.zarr"))


def openers(path: Path) -> list[Callable[[], RunStore]]:
    return [
        lambda: new_store(path),
        lambda: RunStore.open_existing(path),
        lambda: RunStore.open_existing(path, readonly=False),
    ]


# ------------------------------------------------------------------ the run store


@pytest.mark.parametrize(
    "inside",
    [LOCK_NAME, LEDGER_NAME, "zarr.json", "tasks/zarr.json", "tasks/info/c/0/0", "found/0", "found", "tasks/path"],
)
def test_a_link_inside_the_store_is_damage_and_its_target_is_untouched(
    store: Path, tmp_path: Path, inside: str
) -> None:
    link = store / inside
    copy = tmp_path / "copy"  # the link points at an intact copy: only the link itself is wrong
    shutil.copytree(link, copy) if link.is_dir() else shutil.copyfile(link, copy)
    before = {p: p.read_bytes() for p in ([copy] if copy.is_file() else sorted(copy.rglob("*"))) if p.is_file()}
    plant(link, copy)
    for opener in openers(store):
        with pytest.raises(StoreDamaged) as info:
            opener()
        msg = str(info.value)
        assert f"{link}: a symbolic link" in msg and "--fresh" in msg and "\n" not in msg, msg
    assert {p: p.read_bytes() for p in before} == before and link.is_symlink()


def test_the_lock_link_through_the_cli(
    store: Path, target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    plant(store / LOCK_NAME, target)
    monkeypatch.chdir(tmp_path)
    for argv in (optimize_args("lora", store, "--workers", "1"), ["status", str(store)], ["show", str(store)]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        err = capsys.readouterr().err.strip()
        assert info.value.code == 2 and len(err.splitlines()) == 1, (argv[0], err)
        assert f"run store damaged: {store / LOCK_NAME}: a symbolic link" in err, err
    assert untouched(target)


def test_fresh_removes_links_not_their_targets(store: Path, target: Path) -> None:
    plant(store / LOCK_NAME, target)
    plant(store / "found", target.parent)  # a directory link: rmtree must not descend into it
    with new_store(store, fresh=True) as st:
        assert st.created and st.tasks() == []
    assert untouched(target) and not (store / LOCK_NAME).is_symlink()


def test_fresh_through_a_linked_store_path_is_refused(store: Path, tmp_path: Path) -> None:
    """A store path that is itself a link (to a store on another disk): --fresh would move the link
    away and make a new store where the link was, keeping the old store; it is refused, naming the
    link, with the link and the store it names as they were. Without --fresh the store opens through it."""
    with new_store(store) as st:
        tasks = st.tasks()
    link = tmp_path / "linked.zarr"
    link.symlink_to(store)
    with pytest.raises(MugraphError, match=r"it is a symbolic link .* give that store's own path"):
        new_store(link, fresh=True)
    assert link.is_symlink() and link.resolve() == store.resolve()
    assert not [p for p in tmp_path.iterdir() if ".mugraph-old-" in p.name]
    with new_store(link) as st:
        assert not st.created and st.tasks() == tasks


def test_a_hard_linked_lock_is_refused(store: Path, target: Path) -> None:
    (store / LOCK_NAME).unlink()
    os.link(target, store / LOCK_NAME)  # same file system: tmp_path
    with pytest.raises(StoreDamaged, match=f"{store / LOCK_NAME}: a hard link"):
        new_store(store)
    assert untouched(target)


def test_a_link_planted_while_the_writer_runs(store: Path, target: Path) -> None:
    """The ledger is appended to without following a link even after the open's check."""
    with new_store(store) as st:
        plant(store / LEDGER_NAME, target)
        with pytest.raises(StoreDamaged, match=f"{store / LEDGER_NAME}: a symbolic link"):
            st.put_timeline(0, [{"wall": 1.0}])
    assert untouched(target)


def test_an_atomic_write_replaces_a_link_instead_of_writing_through_it(tmp_path: Path, target: Path) -> None:
    key = tmp_path / "d" / "zarr.json"
    key.parent.mkdir()
    key.symlink_to(target)
    write_atomic(key, b"{}")
    assert key.read_bytes() == b"{}" and not key.is_symlink() and untouched(target)
    assert [p.name for p in key.parent.iterdir()] == ["zarr.json"]  # no temp file left


# ------------------------------------------------------------------ the memo directory


@pytest.mark.parametrize("name", [LOG_NAME, PID_NAME, STATE_NAME, REDIS_LOCK, "memo.key", "appendonly.aof", "dump.rdb"])
def test_a_link_in_the_memo_directory_is_refused_before_redis_starts(tmp_path: Path, target: Path, name: str) -> None:
    data = tmp_path / "run.zarr.memo"
    data.mkdir()
    plant(data / name, target)
    server = EmbeddedRedis(data)
    with pytest.raises(MugraphError) as info:
        server.start()
    msg = str(info.value)
    assert msg.startswith(f"memo directory damaged: {data / name}: a symbolic link") and "\n" not in msg, msg
    assert not server.running and untouched(target)


def test_a_memo_directory_that_is_a_link_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    memo = tmp_path / "run.zarr.memo"
    memo.symlink_to(real)
    with pytest.raises(MugraphError, match=re.escape(f"memo directory damaged: {memo}: a symbolic link")):
        EmbeddedRedis(memo).start()
    assert list(real.iterdir()) == []


def test_redis_logs_into_our_file_and_never_opens_it(tmp_path: Path) -> None:
    data = tmp_path / "memo"
    with EmbeddedRedis(data) as server:
        client = redis.Redis.from_url(server.url, protocol=2)
        assert client.config_get("logfile") == {"logfile": ""}  # stdout, the file opened here
        client.close()
    log = (data / LOG_NAME).read_text()
    assert "Redis is starting" in log and "ready to exit" in log
    assert (data.stat().st_mode & 0o777) == 0o700


def test_a_memo_key_link_is_refused_with_a_shared_server(
    tmp_path: Path, target: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_SECRET, raising=False)
    data = tmp_path / "run.zarr.memo"
    data.mkdir()
    plant(data / "memo.key", target)
    with pytest.raises(MugraphError, match=f"memo directory damaged: {data / 'memo.key'}: a symbolic link"):
        load_secret(data)
    short = tmp_path / "short"
    short.write_bytes(b"abc")  # a secret cut short is replaced, but never through a link
    plant(data / "memo.key", short)
    with pytest.raises(MugraphError, match="a symbolic link"):
        load_secret(data)
    assert untouched(target) and short.read_bytes() == b"abc"


def test_the_redis_log_link_through_the_cli(
    tmp_path: Path, target: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "run.zarr"
    memo = tmp_path / "run.zarr.memo"
    memo.mkdir()
    plant(memo / LOG_NAME, target)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(optimize_args("lora", store, "--workers", "1"))
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and len(err.splitlines()) == 1, err
    assert f"memo directory damaged: {memo / LOG_NAME}: a symbolic link" in err, err
    assert untouched(target)
