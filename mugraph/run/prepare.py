"""A run put together before anything is created: every option checked once, the plan and the
per-fragment I/O layouts made once (the driver and the workers get them, never make them again),
and every path of the run named. A bad option is one error naming it, with no store, memo server or
cluster left behind."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from mugraph.arrays.backend import cupy_available
from mugraph.codegen.check import require_triton
from mugraph.codegen.errors import CodegenError
from mugraph.ir.errors import MugraphError
from mugraph.ir.families import BOUNDARY
from mugraph.ir.graph import KernelGraph
from mugraph.ir.live import live_ops
from mugraph.ir.names import printable
from mugraph.ir.plural import counted, noun
from mugraph.ir.types import OpKind
from mugraph.pipeline.plan import RunPlan, fragment_io_layouts, make_plan
from mugraph.programs import Program, resolve_program
from mugraph.run.checks import (
    check_dashboard_host,
    check_host_port,
    check_memo_secret,
    check_output_file,
    check_store_path,
    check_store_writable,
    check_workers,
)
from mugraph.run.options import OptimizeOptions, default_store
from mugraph.run.resume import how_to_resume
from mugraph.stages.fragments import Split
from mugraph.stages.layout.profiles import GpuProfile, get_profile
from mugraph.stages.search.serial import DEFAULT_BUDGET
from mugraph.storage.memo.url import check_memo_url
from mugraph.storage.run.backends import open_existing
from mugraph.storage.run.paths import RunPaths
from mugraph.storage.run.root import looks_like_store

# The title of the page Dask's performance_report writes (`--profile`): a file at that path is replaced
# only where it is such a page.
PROFILE_MARK = "Dask Performance Report"


@dataclass(frozen=True)
class Prepared:
    """A run with every option checked and nothing created yet: the program, its plan, its paths and
    the user's innermost dims as each fragment sees them (`io`, one mapping per fragment)."""

    program: Program
    options: OptimizeOptions
    plan: RunPlan
    paths: RunPaths
    io: tuple[dict[str, int], ...]
    time_limit: float | None
    gpu: GpuProfile

    @property
    def store(self) -> Path:
        return self.paths.store


def require_triton_for_torch() -> None:
    """A PyTorch model's run ends in a module of Triton kernels: without Triton, say so before the search
    (found, not imported: Triton reads TRITON_INTERPRET when first imported)."""
    require_triton(
        "the module made from a PyTorch model runs its kernels with it; install it before searching: "
        "pip install -e '.[torch]' (torch and Triton), or pip install 'triton>=3.9'"
    )
    import mugraph.torch

    if mugraph.torch.TRITON_IMPORTED_TOO_EARLY:
        raise CodegenError(
            "Triton was imported before mugraph.torch (by transformers, for one, once a model is built or "
            "loaded; `import mugraph` alone does not choose), so its interpreter, "
            "which runs the kernels on a machine without a CUDA device, cannot be chosen any more; "
            "import mugraph.torch first (before transformers or anything that imports Triton), or set "
            "TRITON_INTERPRET=1 in the environment"
        )


def _check_machine(o: OptimizeOptions) -> None:
    """What the options ask of this machine and of the cluster's addresses."""
    from mugraph.pipeline.measuring import NO_GPU  # Dask's import, only once a run is asked for

    check_workers(o.workers)
    if o.emit_kernels or o.measure:
        require_triton()  # before the run, not after it
    if o.measure and o.scheduler is None and not cupy_available():
        raise MugraphError(NO_GPU)  # the local cluster would have no GPU worker
    if o.backend == "cupy" and o.scheduler is None and not cupy_available():
        raise MugraphError(
            "--backend cupy needs CuPy and a usable CUDA device on this machine, and none was found; "
            "use --backend numpy (or auto)"
        )
    if o.workers is not None and o.scheduler is not None:
        raise MugraphError(
            "workers start a local cluster; with a scheduler the cluster's own workers run "
            "(give one of --workers and --scheduler)"
        )
    if o.scheduler is not None:
        check_host_port(o.scheduler, "--scheduler", scheduler=True)
    elif o.dashboard_address is not None:
        check_host_port(o.dashboard_address, "--dashboard-address", none="None" if o.from_python() else "none")
    if o.memo_url is not None:
        check_memo_url(o.memo_url)
    if o.profile is not None:
        check_output_file(o.profile, "--profile", PROFILE_MARK)


def _stored_budget(path: Path) -> int | None:
    """The budget in the identity of the store at `path`, if there is a readable one."""
    if not path.is_dir():
        return None
    try:
        with open_existing(path) as st:
            return int(st.identity["budget"])
    except (MugraphError, KeyError, ValueError, OSError):
        return None  # opening it for the run says what is wrong


def nothing_to_search(split: Split) -> str | None:
    """Why a program split into `split` leaves the search nothing (None where it has a fragment): no op
    reaches an output (each output is an input), or each op that does is glue, which stays as written.
    `check` says the same of a program with no experts as `optimize` refuses it with."""
    if split.fragments:
        return None
    kinds = sorted({op.kind.value for g in split.glue for op in g.graph.ops if op.kind not in BOUNDARY})
    if not kinds:
        dead = any(op.kind not in BOUNDARY for op in split.program.ops)
        return "no op of the program reaches an output: each output is one of its inputs" + (
            " (its other ops compute what no output reads, and are dropped)" if dead else ""
        )
    return (
        f"every op of the program that reaches an output is glue ({', '.join(kinds)}), which stays as written: "
        "the search builds μGraphs of LAX ops only (docs/semantics.md)"
    )


def unread_parts(program: KernelGraph) -> str | None:
    """The inputs no output depends on and the ops whose results reach no output, said in one phrase
    (None where there are none): what `optimize` leaves out of its search (`stages.fragments` drops
    such ops), and `check` warns of."""
    kept, live = live_ops(program)
    reached = set(kept)
    dead = [op.kind.value for pos, op in enumerate(program.ops) if op.kind not in BOUNDARY and pos not in reached]
    unused = [str(op.attr("name")) for op in program.ops_of(OpKind.INPUT) if op.outputs[0] not in live]
    parts = [f"no output depends on {noun(len(unused), 'input')} {', '.join(unused)}"] if unused else []
    if dead:
        kinds = ", ".join(dict.fromkeys(dead))  # each kind once, in program order
        parts.append(f"{counted(len(dead), 'op')} ({kinds}) {noun(len(dead), 'reaches', 'reach')} no output")
    return "; ".join(parts) + " (optimize leaves them out of its search)" if parts else None


def _not_a_store(spec: str) -> str:
    """`spec`, refused where it names a run store (given as the program to go on with its run): what
    reads the store instead, and how its run is resumed where it stopped before its end."""
    path = Path(spec)
    if not (path.is_dir() and looks_like_store(path)):
        return spec
    try:
        with open_existing(path, readonly=True) as st:
            final, meta = st.final(), dict(st.meta)
    except MugraphError:
        final, meta = None, {}
    shown = printable(spec)
    said = f"{shown} is a run store, not a program: `mugraph status {shown}`, `show` or `report` read it"
    if final is not None and final.get("complete"):
        raise MugraphError(f"{said}; its run is complete")
    raise MugraphError(f"{said}; {how_to_resume(path, meta)}")


def prepare(program: Program | str, options: OptimizeOptions | None = None) -> Prepared:
    """Check every option and make the run's plan, I/O layouts and paths, creating nothing (one error
    naming what is wrong otherwise)."""
    o = options or OptimizeOptions()
    limit = o.seconds()
    _check_machine(o)
    gpu = get_profile(o.gpu_profile)
    prog = resolve_program(_not_a_store(program)) if isinstance(program, str) else program
    if prog.save_beside is not None:
        require_triton_for_torch()  # the module a PyTorch model's run makes runs Triton kernels
    plan = make_plan(prog, o.preset, o.overrides(), o.budget or DEFAULT_BUDGET)
    why = nothing_to_search(plan.split)
    if why is not None:
        raise MugraphError(f"{prog.name}: nothing to search: {why}")
    io = tuple(fragment_io_layouts(plan, o.layouts))  # refuses unknown names and dims before anything starts
    path = (
        check_store_path(str(o.store), o.store_option())
        if o.store is not None
        else check_store_path(str(default_store(prog.name, plan.identity)), "the default store")
    )
    if o.budget is None and not o.fresh:
        resumed = _stored_budget(path)  # a store made with an older default resumes with its own budget
        if resumed is not None and resumed != plan.budget:
            plan = dataclasses.replace(plan, budget=resumed)  # the budget only splits tasks: same fragments
    return Prepared(prog, o, plan, RunPaths(path), io, limit, gpu)


def preflight(run: Prepared) -> None:
    """What the run would otherwise find only once its store, memo server or cluster exists: a store
    it cannot write (asked here, not in `prepare`: a finished store is read back, on a read-only
    mount too), the dashboard's host, the scheduler (reached now, with the TLS credentials a tls:// one needs) and an
    unreadable memo secret beside the store."""
    from mugraph.pipeline.cluster import external_security
    from mugraph.storage.memo.session import check_memo_reachable

    o = run.options
    check_store_writable(run.store, o.store_option() if o.store is not None else "the default store", _why_written(o))
    if o.scheduler is not None:
        external_security(o.scheduler)
        _probe_scheduler_live(o.scheduler)
    elif o.dashboard_address is not None:
        check_dashboard_host(o.dashboard_address)
    memo_dir = run.paths.memo_dir
    if o.memo_url is None and memo_dir.exists() and not memo_dir.is_dir():  # said before the store is made
        raise MugraphError(
            f"{memo_dir}, where the run keeps its memo server's data beside the store, is a file, not a "
            "directory: move it away, or choose another --store"
        )
    if o.memo_url != "local":
        check_memo_secret(memo_dir)
    if o.memo_url not in (None, "local"):
        check_memo_reachable(o.memo_url)
    if o.emit_kernels:  # before the search, not after it: a file of the user's where the module would go
        from mugraph.run.kernels import check_module_target

        store = run.paths.store
        check_module_target(
            run.paths.kernels,
            f"move it away, or run without --emit and write the module with `mugraph emit {store} --out FILE`",
        )


def _why_written(o: OptimizeOptions) -> str:
    """Why a run writes to an existing store, where a finished one is read back and not written."""
    if o.reuses_finished():
        return "the store holds no finished result for this command, and a stopped run is resumed in place"
    return "the options ask for more than a finished store holds (a fresh start, layouts, timings, kernels, a profile)"


def _probe_scheduler_live(address: str) -> None:
    """`probe_scheduler`, counting down on a terminal while the scheduler refuses connections (one may
    be starting alongside); the line is taken back before whatever follows. A log or a pipe gets one
    line as the wait starts, so that whoever tails it knows what the command waits for."""
    from mugraph.dashboards.progress_line import ProgressLine
    from mugraph.pipeline.cluster import probe_scheduler

    line = ProgressLine()
    told: list[bool] = []

    def waiting(reason: str, left: float) -> None:
        said = f"waiting for the Dask scheduler at {address} ({reason}): giving up in {left:.0f} s"
        if line.tty:
            line.update(said)
        elif not told:
            told.append(True)
            line.stream.write(f"mugraph: {said}\n")
            line.stream.flush()

    try:
        probe_scheduler(address, waiting=waiting)
    finally:
        line.erase()
