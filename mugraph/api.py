"""The library entry: the `optimize` pipeline as one function with typed options, which the command line
and `mugraph.optimize` both call, and `mugraph.load` for a run made from a PyTorch model."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib.util
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mugraph.arrays.backend import cupy_available
from mugraph.cli.checks import (
    check_dashboard_host,
    check_host_port,
    check_memo_secret,
    check_output_file,
    check_store_path,
    check_workers,
    file_name,
    parse_duration,
)
from mugraph.cli.emit import write_store_module
from mugraph.cli.explain import expert_line
from mugraph.codegen.check import require_triton
from mugraph.codegen.errors import CodegenError
from mugraph.dashboards import live
from mugraph.dashboards.report import write_report
from mugraph.ir.errors import MugraphError
from mugraph.programs import Program, resolve_program
from mugraph.run_setup import (
    children_ignore_sigint,
    main_not_rerun,
    memo_dir,
    staged_exported,
    versions,
    workers_memo_url,
)
from mugraph.stages.layout.profiles import DEFAULT_PROFILE, GpuProfile, get_profile
from mugraph.stages.search.config import parse_override
from mugraph.stages.search.serial import DEFAULT_BUDGET
from mugraph.storage.memo.session import check_memo_reachable
from mugraph.storage.memo.url import check_memo_url, redact_url
from mugraph.storage.run.store import RunStore

if TYPE_CHECKING:
    from mugraph.pipeline.events import DoneEvent, Event
    from mugraph.pipeline.plan import RunPlan
    from mugraph.torch.runtime import OptimizedModule

DEFAULT_RUNS = Path("runs")


@dataclass(frozen=True)
class OptimizeOptions:
    """Everything `mugraph optimize` takes besides the program (the command's options, typed).

    `settings` overrides search limits for every fragment (KEY=VALUE as `--set` takes them, or a dict);
    `layouts` gives the innermost dim of program inputs and outputs; `time_limit` is seconds or a
    duration such as "15m"; `command` is what the store records as the command that made it."""

    preset: str | None = None
    settings: Mapping[str, Any] | tuple[str, ...] = ()
    workers: int | None = None
    scheduler: str | None = None
    memo_url: str | None = None
    store: str | Path | None = None
    time_limit: str | float | None = None
    fresh: bool = False
    budget: int | None = None
    backend: str = "auto"
    profile: Path | None = None
    dashboard_address: str = "127.0.0.1:8787"
    layouts: Mapping[str, int] = field(default_factory=dict)
    gpu_profile: str = DEFAULT_PROFILE
    emit_kernels: bool = False
    measure: int = 0
    command: tuple[str, ...] | None = None

    def overrides(self) -> dict[str, object]:
        """The search-limit overrides by config field, each value as JSON gives it."""
        if isinstance(self.settings, Mapping):
            return dict(self.settings)
        return dict(parse_override(s) for s in self.settings)


def default_store(program: str, identity: Mapping[str, str]) -> Path:
    """The store `optimize` uses without --store: named for the program, its digest, the configs'
    digest and the search tree's version, so a change of any of them starts a store of its own."""
    return DEFAULT_RUNS / (
        f"{file_name(program)}-{identity['program_digest'][:8]}-{identity['config_digest'][:8]}"
        f"-t{identity['search_tree']}.zarr"
    )


def require_triton_for_torch() -> None:
    """A PyTorch model's run ends in a module of Triton kernels: without Triton, say so before the search
    (found, not imported: Triton reads TRITON_INTERPRET when first imported)."""
    if importlib.util.find_spec("triton") is None:
        raise CodegenError(
            "Triton is not installed, and the module made from a PyTorch model runs its kernels with it; "
            "install it before searching: pip install -e '.[torch]' (torch and Triton), or pip install 'triton>=3.9'"
        )
    import mugraph.torch

    if mugraph.torch.TRITON_IMPORTED_TOO_EARLY:
        raise CodegenError(
            "Triton was imported before mugraph (transformers, for one, imports it), so its interpreter, "
            "which runs the kernels on a machine without a CUDA device, cannot be chosen any more; "
            "import mugraph first, or set TRITON_INTERPRET=1 in the environment"
        )


def _stored_budget(path: Path) -> int | None:
    """The budget in the identity of the store at `path`, if there is a readable one."""
    if not path.is_dir():
        return None
    try:
        with RunStore.open_existing(path) as st:
            return int(st.identity["budget"])
    except (MugraphError, KeyError, ValueError, OSError):
        return None  # opening it for the run says what is wrong


def _time_limit(value: str | float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not value > 0:
            raise MugraphError(f"time limit {value!r}: must be a positive number of seconds")
        return float(value)
    return parse_duration(str(value))


def _preflight(o: OptimizeOptions, store: Path) -> None:
    """What the run would otherwise find only once its store, memo server or cluster exists: the
    dashboard's host, the scheduler (reached now, with the TLS credentials a tls:// one needs) and an
    unreadable memo secret beside the store."""
    from mugraph.pipeline.cluster import external_security, probe_scheduler

    if o.scheduler is None:
        check_dashboard_host(o.dashboard_address)
    else:
        external_security(o.scheduler)
        probe_scheduler(o.scheduler)
    if o.memo_url != "local":
        check_memo_secret(memo_dir(store))


@dataclass(frozen=True)
class Prepared:
    """A run with every option checked and nothing created yet: the program, its plan, its store."""

    program: Program
    options: OptimizeOptions
    plan: RunPlan
    store: Path
    io_layouts: dict[str, int]
    time_limit: float | None
    gpu: GpuProfile


def prepare(program: Program | str, options: OptimizeOptions = OptimizeOptions()) -> Prepared:
    """Check every option and make the run's plan and store path, creating nothing (one error naming
    what is wrong otherwise)."""
    from mugraph.pipeline.measuring import NO_GPU
    from mugraph.pipeline.plan import fragment_io_layouts, make_plan

    o = options
    # Every option is checked before the store, the memo server or the cluster is created.
    check_workers(o.workers)
    limit = _time_limit(o.time_limit)
    if o.emit_kernels or o.measure:
        require_triton()  # before the run, not after it
    if o.measure and o.scheduler is None and not cupy_available():
        raise MugraphError(NO_GPU)  # the local cluster would have no GPU worker
    if o.backend == "cupy" and o.scheduler is None and not cupy_available():
        raise MugraphError(
            "--backend cupy needs CuPy and a usable CUDA device on this machine, and none was found; "
            "use --backend numpy (or auto)"
        )
    gpu = get_profile(o.gpu_profile)
    if o.workers is not None and o.scheduler is not None:
        raise MugraphError(
            "workers start a local cluster; with a scheduler the cluster's own workers run "
            "(give one of --workers and --scheduler)"
        )
    if o.scheduler is not None:
        check_host_port(o.scheduler, "--scheduler", scheduler=True)
    else:
        check_host_port(o.dashboard_address, "--dashboard-address")
    if o.memo_url is not None:
        check_memo_url(o.memo_url)
    if o.profile is not None:
        check_output_file(o.profile, "--profile")
    prog = resolve_program(program) if isinstance(program, str) else program
    if prog.save_beside is not None:
        require_triton_for_torch()  # the module a PyTorch model's run makes runs Triton kernels
    overrides = o.overrides()
    plan = make_plan(prog, o.preset, overrides, o.budget or DEFAULT_BUDGET)
    io_layouts = dict(o.layouts)
    fragment_io_layouts(plan, io_layouts)  # refuses unknown names and dims before anything starts
    path = (
        check_store_path(str(o.store))
        if o.store is not None
        else check_store_path(str(default_store(prog.name, plan.identity)), "the default store")
    )
    if o.budget is None and not o.fresh:
        resumed = _stored_budget(path)  # a store made with an older default resumes with its own budget
        if resumed is not None and resumed != plan.budget:
            plan = make_plan(prog, o.preset, overrides, resumed)
    return Prepared(prog, o, plan, path, io_layouts, limit, gpu)


def run_optimize(
    program: Program | str,
    options: OptimizeOptions = OptimizeOptions(),
    on_event: Callable[[Event], None] | None = None,
) -> DoneEvent:
    """Search every fragment of `program` (a Program, or a built-in name or file as the command takes it)
    on a Dask cluster, confirm, rank and stitch the best μGraphs into a Zarr store; the same call on the
    same store continues where a stopped one left off. `on_event` gets every event as the run goes
    (start, progress, found, confirmed, layout, measured); the return value is the `done` event, with
    `report` and `kernels` (paths or None) added."""
    return run_prepared(prepare(program, options), on_event)


def run_prepared(run: Prepared, on_event: Callable[[Event], None] | None = None) -> DoneEvent:
    """`run_optimize` once its options are checked (`prepare`)."""
    from distributed import performance_report

    from mugraph.pipeline.cluster import dask_client
    from mugraph.pipeline.driver import COUNTER_NAMES, Driver
    from mugraph.pipeline.worker import MugraphPlugin

    o, prog, plan, path = run.options, run.program, run.plan, run.store
    _preflight(o, path)
    if o.memo_url not in (None, "local"):
        check_memo_reachable(o.memo_url)
    command = [redact_url(a) for a in (o.command if o.command is not None else sys.argv[1:])]
    meta = {"versions": versions(), "command": command}
    live_client: list[Any] = []  # the client once it exists, and the live page's URL

    def emit(e: Event) -> None:
        if live_client:
            live.publish(live_client[0], e)
            if e["event"] == "start":
                e["live_page"] = live_client[1]
        if on_event is not None:
            on_event(e)

    with contextlib.ExitStack() as stack:
        # what the store alone does not hold (a PyTorch model's exported program), written before the
        # store is made, so that a new store records its digest (which `load` checks)
        staged = stack.enter_context(staged_exported(prog, path))
        if staged is not None:
            meta[staged.key] = staged.record()
        st = stack.enter_context(
            RunStore.open(path, plan.identity, meta=meta, counter_names=COUNTER_NAMES, fresh=o.fresh)
        )
        if staged is not None:
            staged.place(st.meta)
        url = stack.enter_context(workers_memo_url(o.memo_url, path))
        stack.enter_context(main_not_rerun())
        with children_ignore_sigint():
            client = stack.enter_context(dask_client(o.workers, o.scheduler, o.dashboard_address))
        client.register_plugin(MugraphPlugin(url, o.backend), name="mugraph")
        live_client.extend([client, live.install(client)])
        perf = performance_report(filename=str(o.profile)) if o.profile else contextlib.nullcontext()
        with perf:
            done = Driver(
                plan,
                st,
                client,
                time_limit=run.time_limit,
                on_event=emit,
                profile=run.gpu,
                io_layouts=run.io_layouts,
                measure=o.measure,
            ).run()
        live.publish(client, done)  # before the client closes: the page says how the run ended
    done["profile"] = str(o.profile) if o.profile else None
    done["report"] = str(write_report(path))
    done["kernels"] = str(write_store_module(path)) if o.emit_kernels else None
    done["expert"] = expert_line(
        prog, [(fp.payload.reference, fp.config) for fp in plan.fragments], set(done["mugraphs"])
    )
    return done


class OptionError(MugraphError, TypeError):
    """`mugraph.optimize` was given an option it does not have."""


def check_options(options: Mapping[str, Any]) -> None:
    """Refuse option names OptimizeOptions does not have, naming each and the valid ones (a misspelt
    option would otherwise be silently ignored or fail deep inside the run)."""
    valid = sorted(f.name for f in dataclasses.fields(OptimizeOptions) if f.name != "command")
    unknown = sorted(k for k in options if k not in valid)
    if not unknown:
        return
    hints = []
    for k in unknown:
        close = difflib.get_close_matches(k, valid, n=1)
        hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise OptionError(
        f"mugraph.optimize: unknown option{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; "
        f"the options are: {', '.join(valid)}, and name, on_event, verbose"
    )


def optimize(
    model: Any,
    example_inputs: Any,
    *,
    name: str | None = None,
    on_event: Callable[[Event], None] | None = None,
    verbose: bool = True,
    **options: Any,
) -> OptimizedModule:
    """Optimise a PyTorch module or function at the shapes of `example_inputs`: capture it with
    torch.export, search its fragments (as `mugraph optimize` does; `options` are OptimizeOptions'
    fields), and return a drop-in module running the chosen μGraphs as Triton kernels, glue in torch.
    The module holds the model's own parameters (under the same names), so it computes with their
    values at every call, and its `verdict` says what the search got.

    A store that already holds the finished result for this program and config (the default store is
    named for both) is reused without a search; a stopped one is resumed. `verbose` prints, on stderr,
    what `mugraph optimize` prints: the start line, the progress line and the verdict."""
    check_options(options)
    from mugraph.torch.errors import require_torch

    require_torch()
    require_triton_for_torch()  # before the capture and the search: the module runs Triton kernels
    from mugraph.outcome import Console, finished, stored_done, verdict_of
    from mugraph.torch.capture import capture
    from mugraph.torch.program import optimized_module

    t0 = time.perf_counter()
    captured = capture(model, example_inputs, name)
    prog = Program(
        captured.name,
        f"PyTorch model {captured.name}",
        "mlp",
        captured.builder(),
        {},
        source="torch",
        save_beside=captured.save_beside,
    )
    opts = OptimizeOptions(**{"command": ("optimize", f"<torch model {captured.name}>"), **options})
    run = prepare(prog, opts)
    console = Console(verbose)
    reused = _reusable(run) and finished(run.store, run.plan.identity, run.gpu.name)
    if reused:
        done = stored_done(run.store, t0)
        console.reused(done)
    else:

        def emit(e: Event) -> None:
            console.event(e)
            if on_event is not None:
                on_event(e)

        try:
            done = run_prepared(run, emit)
        finally:
            console.close()
    module = optimized_module(Path(done["store"]), captured)
    module.verdict = verdict_of(done, module.heavy_glue, reused)
    console.verdict(done, module.verdict)
    return module


def _reusable(run: Prepared) -> bool:
    """Options under which a finished store is the whole answer: nothing asked that only a run does
    (start over, other layouts, timing, emitted kernels, Dask's profile)."""
    o = run.options
    return not (o.fresh or o.layouts or o.measure or o.emit_kernels or o.profile is not None)


def load(store: str | Path) -> OptimizedModule:
    """The drop-in module of a run made from a PyTorch model (by `mugraph.optimize` or by `mugraph
    optimize model.py`): its best μGraphs so far as Triton kernels, the glue in torch, the weights
    those of the exported program saved with the run (checked against the digest the store recorded,
    and refused where it holds anything torch would unpickle); its `verdict` as the store has it."""
    from mugraph.torch.errors import require_torch

    require_torch()
    from mugraph.outcome import stored_done, verdict_of
    from mugraph.torch.program import load_store

    path = Path(store)
    module = load_store(path)
    done = stored_done(path, write_missing_report=False)  # a store may be read-only: load writes nothing
    module.verdict = verdict_of(done, module.heavy_glue, reused=True)
    return module
