"""What a run sets up around its driver: the memo's URL and secret beside the store, the worker
processes' view of the main module, the exported program of a PyTorch model written
before the store is made, and the versions the store records."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from mugraph.programs import Program
from mugraph.storage.memo.auth import ENV_SECRET, KEY_FILE
from mugraph.storage.memo.session import private_memo, signed_url
from mugraph.storage.memo.url import redact_url
from mugraph.storage.run.paths import RunPaths

if TYPE_CHECKING:
    from mugraph.torch.program import StagedArchive


def versions() -> dict[str, str]:
    """The versions of mugraph and the libraries a run's results depend on, for the store's meta."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("mugraph", "zarr", "dask", "distributed", "z3-solver", "numpy"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "unknown"
    return out


@contextlib.contextmanager
def workers_memo_url(given: str | None, store: Path) -> Iterator[str | None]:
    """The URL workers use, with the run's memo secret in it (kept in STORE.memo/): the given one, or a
    private redis-server kept beside the store (so a resumed run finds its verdicts again)."""
    folder = RunPaths(store).memo_dir
    if given is None:
        with private_memo(folder) as url:
            yield url
        return
    yield None if given == "local" else signed_url(given, folder)


def say_key_of_its_own(given: str | None, scheduler: str | None, store: Path) -> None:
    """One warning where a local cluster's run shares a memo server with no $MUGRAPH_MEMO_KEY: its
    verdicts are sealed with a key the store made for itself, so it reads none that other runs sealed
    and they read none of its (docs/semantics.md). A cluster of one's own takes its workers' key, and
    says where they have none."""
    if given in (None, "local") or scheduler is not None or os.environ.get(ENV_SECRET):
        return
    warnings.warn(
        f"the shared memo at {redact_url(given)} is used with this store's own key "
        f"({RunPaths(store).memo_dir / KEY_FILE}): verdicts are shared only with runs that use the same key, "
        f"so none sealed by other runs is read; set ${ENV_SECRET} to one secret for every run that shares "
        "the server (docs/semantics.md)",
        RuntimeWarning,
        stacklevel=2,
    )


@contextlib.contextmanager
def main_not_rerun() -> Iterator[None]:
    """Worker processes are spawned, and a spawned process first runs the parent's main script again
    (multiprocessing re-imports `__main__` from its file or module name): a user's script that calls
    `mugraph.optimize` at its top level, with no `if __name__ == "__main__"` guard, would start a second
    run inside every worker. While the cluster lives the main module names neither, so workers start
    from mugraph alone (nothing they run comes from the script: the plan holds graphs as JSON)."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved: dict[str, object] = {k: main.__dict__[k] for k in ("__file__", "__spec__") if k in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


@contextlib.contextmanager
def staged_exported(prog: Program, store: Path) -> Iterator[StagedArchive | None]:
    """The exported program of a PyTorch model's run, written beside the store under a name of its own
    until the store is open (None for other programs)."""
    if prog.save_beside is None:
        yield None
        return
    from mugraph.torch.program import staged_archive

    with staged_archive(prog.save_beside, store) as staged:
        yield staged
