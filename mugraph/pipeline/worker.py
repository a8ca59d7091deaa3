"""What runs on a Dask worker: the per-process state a WorkerPlugin holds (memo client, array backend,
one Searcher per fragment with its Z3 contexts and reference fingerprints) and the task functions.

Task functions take and return plain data (paths, counters, graph JSON), so results are the same
whichever worker ran them; the state only makes repeated tasks of one fragment cheap.
"""

from __future__ import annotations

import logging
import os
import resource
import time
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from dask.system import CPU_COUNT
from distributed import WorkerPlugin, get_worker
from distributed.system import MEMORY_LIMIT

from mugraph.arrays.backend import ArrayModule, cupy_available, get_array_module
from mugraph.codegen.emit_kernel import kernel_problem
from mugraph.ir.errors import warning_line
from mugraph.ir.serialize import loads
from mugraph.pipeline.plan import FragmentPayload
from mugraph.pipeline.records import MEMO_KEYS, SearchTaskResult
from mugraph.stages.layout.choose import choose_layouts
from mugraph.stages.layout.costs import LAYOUT_SCHEMA
from mugraph.stages.layout.facts import LayoutError
from mugraph.stages.prune.heap import keep_context_memory
from mugraph.stages.prune.oracle import VERDICT_BYTES
from mugraph.stages.search.estimate import frontier_estimates
from mugraph.stages.search.explore import CACHE_WEIGHT, Searcher
from mugraph.stages.search.task_paths import Path
from mugraph.stages.verify.confirm import Confirmer, held_bytes, holds_inputs
from mugraph.storage.memo.auth import ENV_SECRET, attach_secret, split_secret
from mugraph.storage.memo.layered import LayeredMemo, MemoStore, open_memo_store
from mugraph.storage.run.run_records import ConfirmationRecord, LayoutRecord, MeasurementRecord

PLUGIN_NAME = "mugraph"
MEMO_URL_ENV = "MUGRAPH_WORKER_MEMO_URL"  # the memo URL with the run's secret, in a worker's environment
HEARTBEAT_FAILURE = "Failed to communicate with scheduler during heartbeat"
logger = logging.getLogger(__name__)
MAX_SEARCHERS = 8
MEASURE_REPEATS = 50
# A worker takes search tasks in the driver's order by rank, so most start away from the frontier the
# last one left, and the nodes its searchers hold spare it replaying their paths and working their
# tables out again. lora's whole space in that order, in one process: 257 s of CPU with 65,536 rows in
# each cache (`explore.CACHE_WEIGHT`), 190 s with 262,144 (1.5 GB peak), 166 s with 1,048,576 (3.7 GB);
# depth first with 65,536, 174 s (benchmarks/RESULTS.md, "Searcher caches sized by the worker's
# memory"). So the caches get a share of the worker's memory limit, at a conservative size per unit
# of weight (lora's rows take about 2.9 KB in the two caches together).
CACHE_SHARE = 0.3
CACHE_BYTES = 4096
CACHE_MAX = 1 << 20
# Where rows weigh more than that: past this share of the memory limit after a task, every searcher's
# caches are halved (not below `explore.CACHE_WEIGHT`), well before Dask pauses the worker (80%).
CACHE_GUARD = 0.6
# The guard reads the process's memory at most this often: read after every path, it took about
# 1 s of the workers' 190 s in lora's whole run (py-spy), for a figure that moves slowly.
GUARD_SECONDS = 0.25


class WorkerState:
    """One per worker process."""

    def __init__(
        self, memo_url: str | None, backend: str, memory_limit: int | None = None, *, warn_unavailable: bool = True
    ) -> None:
        store: MemoStore | None = None
        if memo_url not in (None, "local"):
            store = open_memo_store(memo_url)
        self.memo = LayeredMemo(store, valid_values=VERDICT_BYTES, warn_unavailable=warn_unavailable)
        self.xp: ArrayModule = get_array_module(backend)
        self._searchers: OrderedDict[str, Searcher] = OrderedDict()
        self._confirmers: OrderedDict[str, Confirmer] = OrderedDict()
        self.memory_limit = memory_limit
        self.cache_weight = cache_weight(memory_limit)
        self.guarded_at = -GUARD_SECONDS  # when the guard last read the process's memory (perf_counter)

    def searcher(self, payload: FragmentPayload) -> Searcher:
        s = self._searchers.get(payload.digest)
        if s is None:
            s = Searcher(payload.fragment(), self.memo, xp=self.xp, cache_weight=self.cache_weight)
            self._searchers[payload.digest] = s
            if len(self._searchers) > MAX_SEARCHERS:
                self._searchers.popitem(last=False)
        else:
            self._searchers.move_to_end(payload.digest)
        return s

    def fit_caches(self, rss: int) -> None:
        """Halve every searcher's caches (and those of searchers made later) where the process holds
        `rss` bytes, past `CACHE_GUARD` of the memory limit. Every searcher was made with the weight of
        its time, which only falls, so all of them hold the new one."""
        if not self.memory_limit or rss <= CACHE_GUARD * self.memory_limit or self.cache_weight <= CACHE_WEIGHT:
            return
        self.cache_weight = max(CACHE_WEIGHT, self.cache_weight // 2)
        for s in self._searchers.values():
            s.resize_caches(self.cache_weight)

    def confirmer(self, payload: FragmentPayload) -> Confirmer:
        """The fragment's Confirmer; it holds its seeds' inputs where they fit, beside those the
        worker's other Confirmers hold, under one budget (`confirm.HOLD_INPUT_BYTES`)."""
        c = self._confirmers.get(payload.digest)
        if c is None:
            reference = loads(payload.reference)
            others = sum(held_bytes(o.reference) for o in self._confirmers.values() if o.holds)
            c = Confirmer(reference, payload.digest, xp=self.xp, hold=holds_inputs(reference, others=others))
            self._confirmers[payload.digest] = c
            if len(self._confirmers) > MAX_SEARCHERS:
                self._confirmers.popitem(last=False)
        return c

    def close(self) -> None:
        self.memo.close()


def cache_weight(memory_limit: int | None) -> int:
    """The weight a worker's searcher caches hold at most under a memory limit of `memory_limit` bytes
    (None or 0: none, and the worker's share of the machine is taken as its memory over its cores, as
    Dask sees them: cgroup and rlimit bounds included)."""
    if not memory_limit:
        memory_limit = MEMORY_LIMIT // max(1, CPU_COUNT)
    return max(CACHE_WEIGHT, min(CACHE_MAX, int(memory_limit * CACHE_SHARE) // CACHE_BYTES))


def worker_environment(memo_url: str | None) -> dict[str, str]:
    """What a local cluster adds to the environment of the worker processes it starts for a run whose
    memo is at `memo_url`: the URL with its secret, so that neither the plugin nor anything else the
    scheduler holds carries the secret. Per run, not per process: two runs in one process (two threads)
    each give their own workers their own."""
    if memo_url in (None, "local") or split_secret(memo_url)[1] is None:
        return {}
    return {MEMO_URL_ENV: memo_url}


_TOLD_NO_SECRET: set[str] = set()  # the shared memos this process has logged it cannot use


def worker_memo_url(public: str | None) -> str | None:
    """The memo URL a worker opens: `public` (the plugin's, without a secret) with the secret from this
    process's environment: the local cluster's $MUGRAPH_WORKER_MEMO_URL, or $MUGRAPH_MEMO_KEY set where
    `dask worker` was started. Without one, a Redis memo is not used (a verdict read from it could not be
    checked): the worker keeps a memo of its own."""
    if public in (None, "local"):
        return public
    full = os.environ.get(MEMO_URL_ENV)
    if full and split_secret(full)[0] == public:
        return full
    key = os.environ.get(ENV_SECRET)
    if key:
        return attach_secret(public, key.encode())
    if public not in _TOLD_NO_SECRET:  # a `dask worker` serves run after run: its log says it once
        _TOLD_NO_SECRET.add(public)
        logger.warning("mugraph: no memo secret in this worker's environment ($%s); its memo stays local", ENV_SECRET)
    return None


def memo_without_secret(dask_worker: Any) -> bool:
    """Run on every worker by the driver (`Client.run`, which names the worker `dask_worker`) once the
    plugin is in: whether this worker was given a shared memo it cannot use, for want of the secret.
    Its log says so; the driver's user, who reads no worker log, hears it from the driver."""
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    return isinstance(plugin, MugraphPlugin) and plugin.without_secret


class _NoHeartbeatNoise(logging.Filter):
    """A worker closing after its scheduler (the end of a run, an interrupt) logs its failed heartbeat
    with a CommClosedError traceback; the driver knows the cluster is ending, the terminal need not."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(HEARTBEAT_FAILURE)


_PLAIN_FORMAT = warnings.formatwarning
_OURS = f"{os.sep}mugraph{os.sep}"


def worker_warning_line(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, line: str | None = None
) -> str:
    """A warning raised in mugraph's code, on a worker, as the command line prints its own (one line,
    on the terminal the local cluster's workers share); anyone else's as Python formats it."""
    if _OURS in filename:
        return warning_line(message, category, filename, lineno, line)
    return _PLAIN_FORMAT(message, category, filename, lineno, line)


def one_line_warnings() -> None:
    warnings.formatwarning = worker_warning_line


class MugraphPlugin(WorkerPlugin):
    """Installed on every worker (also on workers that join later, and on restarted ones). Holds the
    memo URL without its secret (a client can read a plugin through the scheduler): the secret is in
    the workers' environment (see `worker_memo_url`)."""

    name = PLUGIN_NAME

    def __init__(self, memo_url: str | None, backend: str = "auto") -> None:
        self.memo_url = split_secret(memo_url)[0] if memo_url not in (None, "local") else memo_url
        self.backend = backend
        self.state: WorkerState | None = None
        self.without_secret = False  # a shared memo given, and no secret here to use it with

    def setup(self, worker: Any) -> None:
        keep_context_memory()  # for every task's Z3 contexts, the layout stage's among them
        one_line_warnings()
        logging.getLogger("distributed.worker").addFilter(_NoHeartbeatNoise())
        url = worker_memo_url(self.memo_url)
        self.without_secret = url is None and self.memo_url not in (None, "local")
        # a local cluster's worker (the URL from its driver) shares the driver's terminal, where the
        # driver says a failed memo once for all its workers; a `dask worker` says it in its own log too
        local = url is not None and url == os.environ.get(MEMO_URL_ENV)
        self.state = WorkerState(url, self.backend, worker.memory_manager.memory_limit, warn_unavailable=not local)

    def teardown(self, worker: Any) -> None:
        if self.state is not None:
            self.state.close()


_FALLBACK: WorkerState | None = None


def _state() -> WorkerState:
    """The worker's plugin state; outside a worker (a unit test calling a task directly), a
    process-wide state with a local memo."""
    global _FALLBACK
    try:
        plugin = get_worker().plugins.get(PLUGIN_NAME)
    except ValueError:
        plugin = None
    if isinstance(plugin, MugraphPlugin) and plugin.state is not None:
        return plugin.state
    if _FALLBACK is None:
        _FALLBACK = WorkerState(None, "numpy")
    return _FALLBACK


def _worker_name() -> str:
    try:
        return str(get_worker().name)
    except ValueError:
        return f"pid{os.getpid()}"


def search_task(
    payload: FragmentPayload,
    paths: Sequence[Path],
    budget: int,
    seconds: float | None = None,
    deadline: float | None = None,
) -> tuple[SearchTaskResult, ...]:
    """Explore each path's subtree under the node budget, in order: one result per path (its found
    μGraphs, its frontier, its counters), as if each had been its own task. Once the paths explored
    have taken `seconds`, the rest are left unexplored: the results are a prefix of `paths`, and the
    driver submits the others again (the nodes each path visits do not depend on its task). At the
    run's time limit (`deadline`, wall-clock) the path being explored is cut (`SearchTaskResult.cut`)
    and the rest are left: a task that starts past it explores nothing."""
    if deadline is not None and time.time() >= deadline:
        return ()
    state = _state()
    searcher = state.searcher(payload)
    worker = _worker_name()
    out: list[SearchTaskResult] = []
    t0 = time.perf_counter()
    for path in paths:
        if out and seconds is not None and time.perf_counter() - t0 >= seconds:
            break
        if out and deadline is not None and time.time() >= deadline:
            break
        m0 = state.memo.counters.as_dict()
        result = searcher.explore(path, budget, deadline)
        if (now := time.perf_counter()) - state.guarded_at >= GUARD_SECONDS:
            state.guarded_at = now
            state.fit_caches(_rss())
        m1 = state.memo.counters.as_dict()
        estimates = frontier_estimates(searcher, result.frontier)  # the run's size estimate (Knuth probes)
        out.append(
            SearchTaskResult(
                path=tuple(result.path),
                found=tuple(result.found.values()),
                frontier=tuple(tuple(p) for p in result.frontier),
                counters=result.counters.as_dict(),
                memo={k: int(m1[k] - m0[k]) for k in MEMO_KEYS},
                worker=worker,
                peak_rss_mib=peak_rss_mib(),
                frontier_estimates=tuple(estimates),
                frontier_ranks=tuple(result.ranks),
                memo_error=state.memo.failure,  # on every result after: a lost one does not hide it
                found_at=tuple(result.found_at[d] for d in result.found),
                cut=result.cut,
            )
        )
        if result.cut:
            break
    return tuple(out)


def warm_task(payload: FragmentPayload, confirming: bool) -> str:
    """Build this worker's per-fragment state (a Searcher, and the Confirmer where `confirming`)
    before its first task needs it, while the root task is still the only work there is."""
    state = _state()
    state.searcher(payload)
    if confirming:
        state.confirmer(payload)
    return _worker_name()


def _since(t0: float) -> float:
    """A task's wall seconds since `t0` (a perf_counter time), as its record keeps them."""
    return round(time.perf_counter() - t0, 6)


def confirm_task(payload: FragmentPayload, digest: str, graph: str) -> ConfirmationRecord:
    """k fresh fingerprint tests and float64 against the fragment's reference."""
    t0 = time.perf_counter()
    state = _state()
    v = state.confirmer(payload).confirm(loads(graph))
    return {
        "equivalent": bool(v["equivalent"]),
        "seeds": list(v["seeds"]),
        "float_max_rel_err": v["float_max_rel_err"],
        "reason": str(v["reason"]),
        "seconds": float(v["seconds"]),
        "backend": str(v["backend"]),
        "digest": digest,
        "worker": _worker_name(),
        "wall_seconds": _since(t0),
    }


def layout_task(digest: str, graph: str, io_layouts: dict[str, int] | None = None) -> LayoutRecord:
    """Choose the layouts of a confirmed μGraph (z3.Optimize) for the user's strides; the record the
    store keeps. No layout under those strides is a record with an `error`, not a failed task."""
    t0 = time.perf_counter()
    g = loads(graph)
    try:
        problem = kernel_problem(g)
        if problem is not None:  # left out of the ranking, as a μGraph no layout fits is
            raise LayoutError(f"no Triton kernels can be written for it: {problem}")
        j = choose_layouts(g, io_layouts).to_json()
    except LayoutError as e:
        return {
            "schema": LAYOUT_SCHEMA,
            "error": str(e),
            "io_layouts": dict(sorted((io_layouts or {}).items())),
            "digest": digest,
            "worker": _worker_name(),
            "wall_seconds": _since(t0),
        }
    return {
        "schema": j["schema"],
        "layouts": j["layouts"],
        "terms": j["terms"],
        "objective": j["objective"],
        "solve_seconds": j["solve_seconds"],
        "io_layouts": j["io_layouts"],
        "digest": digest,
        "worker": _worker_name(),
        "wall_seconds": _since(t0),
    }


def measure_task(
    payload: FragmentPayload, digest: str, graph: str, inner: list[int], repeats: int = MEASURE_REPEATS
) -> MeasurementRecord:
    """Emit a μGraph (or the fragment's reference) as Triton kernels with its chosen layouts, compile
    it for this worker's GPU and time it against the reference (codegen.timing). A module that fails
    to compile or run is a record with an `error`, not a failed task: the model still ranks it."""
    from mugraph.codegen import EmitInfo, emit_module
    from mugraph.codegen.errors import CodegenError
    from mugraph.codegen.timing import time_source

    t0 = time.perf_counter()
    source = emit_module(loads(graph), EmitInfo(payload.name, digest=digest, inner=tuple(inner)))
    try:
        t = time_source(source, loads(payload.reference), repeats=repeats)
    except CodegenError as e:
        return {"error": str(e), "digest": digest, "worker": _worker_name(), "wall_seconds": _since(t0)}
    return {
        "device": t.device,
        "median_seconds": t.median_seconds,
        "min_seconds": t.min_seconds,
        "host_seconds": t.host_seconds,
        "repeats": t.repeats,
        "warmup": t.warmup,
        "first_run_seconds": t.first_run_seconds,
        "max_rel_err": t.max_rel_err,
        "ok": t.ok,
        "l2_flushed": t.l2_flushed,
        "digest": digest,
        "worker": _worker_name(),
        "wall_seconds": _since(t0),
    }


def _rss() -> int:
    """This process's resident bytes now, as the worker's memory monitor reads them (0 outside a
    worker: no limit to keep to there)."""
    try:
        return int(get_worker().monitor.get_process_memory())
    except ValueError:
        return 0


def peak_rss_mib() -> float:
    """This process's peak resident memory (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker_has_gpu() -> bool:
    return cupy_available()
