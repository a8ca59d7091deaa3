"""`mugraph emit`: a chosen μGraph as one runnable Python module of Triton kernels, optionally run in
Triton's interpreter and compared with the float64 reference (`--check`)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import click

from mugraph.arrays.backend import cupy_available
from mugraph.cli.records import EmitResult
from mugraph.codegen import FP16_TOLERANCE, EmitInfo, check_source, emit_module
from mugraph.codegen.check import require_triton
from mugraph.codegen.errors import CodegenError
from mugraph.codegen.timing import time_source
from mugraph.ir.canonical import canonical_digest
from mugraph.ir.errors import MugraphError
from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import digest as json_digest
from mugraph.ir.serialize import loads
from mugraph.programs import resolve_program
from mugraph.stages.layout.choose import LayoutResult, choose_layouts
from mugraph.stages.layout.costs import Layouts
from mugraph.stages.layout.describe import describe_layouts, seconds_text
from mugraph.stages.layout.facts import LayoutError
from mugraph.storage.run.store import RunStore


@dataclass(frozen=True)
class Selection:
    """The μGraph to emit, what `--check` compares it with, what the header says, and the layouts the
    module was emitted with (None where no layout was found)."""

    graph: KernelGraph
    reference: KernelGraph | None
    info: EmitInfo
    default_out: Path | None
    layouts: Layouts | None = None


def kernels_path(store: Path) -> Path:
    """Where a store's module goes: beside it, `NAME.zarr` → `NAME.kernels.py`."""
    return store.with_name(store.name.removesuffix(".zarr") + ".kernels.py")


def _layouts(
    graph: KernelGraph,
    layout: LayoutResult | None = None,
) -> tuple[list[str], tuple[int, ...], Layouts | None]:
    """The chosen layouts of `graph` (given, or solved now as the layout stage does) as lines for the
    header, as the innermost dim of each device tensor, and whole; none where no layout is found."""
    try:
        chosen = layout or choose_layouts(graph)
    except LayoutError:
        return [], (), None
    return describe_layouts(graph, chosen.layouts), chosen.layouts.kernel, chosen.layouts


def _store_reference(st: RunStore) -> KernelGraph | None:
    """The program the store was made for: a built-in name, or the program file of its command,
    taken only if its digest is the store's."""
    candidates = [st.identity.get("program", "")]
    command = st.meta.get("command")
    if isinstance(command, list) and len(command) > 1 and isinstance(command[1], str):
        candidates.append(command[1])
    for spec in candidates:
        try:
            graph = resolve_program(spec).reference()
        except MugraphError:
            continue
        if json_digest(graph) == st.identity.get("program_digest"):
            return graph
    return None


def _match(digests: list[str], prefix: str, where: str) -> str:
    hits = sorted({d for d in digests if d.startswith(prefix)})
    if len(hits) != 1:
        what = "no μGraph" if not hits else f"{len(hits)} μGraphs"
        raise MugraphError(f"{what} in {where} with a digest starting {prefix!r}")
    return hits[0]


def select_from_store(store: Path, digest: str | None) -> Selection:
    """The stitched program of the store's best μGraphs, or the confirmed μGraph named by `digest`."""
    with RunStore.open_existing(store, readonly=True) as st:
        final = st.final()
        frags = st.fragments()
        ident = st.identity
        config = f"store {store}, config digest {ident.get('config_digest', '-')}, budget {ident.get('budget', '-')}"
        if digest is not None:
            found = {
                d: (i, rec.graph)
                for i, _ in enumerate(frags)
                for d, rec in st.found(i).items()
                if (c := st.confirmations(i).get(d)) is not None and c["equivalent"]
            }
            d = _match(list(found), digest, f"the confirmed μGraphs of {store}")
            i, text = found[d]
            graph = loads(text)
            rec = st.layouts(i).get(d)
            layout = LayoutResult.from_json(rec) if rec and "error" not in rec else None
            lines, inner, chosen = _layouts(graph, layout)
            info = EmitInfo(f"{ident.get('program')} {frags[i]['name']}", config, d, lines, inner)
            return Selection(graph, loads(frags[i]["graph"]), info, None, chosen)
        if final is None:
            raise MugraphError(f"{store}: no result yet; run `mugraph optimize` on it first")
        reference = _store_reference(st)
    # the stitched program's layouts, solved as the layout stage solves each fragment's (the same
    # layouts for a one-fragment program, whose stitched program is its best μGraph)
    graph = loads(final["program_graph"])
    lines, inner, chosen = _layouts(graph)
    info = EmitInfo(
        str(ident.get("program")),
        config + f", GPU profile {final.get('gpu_profile')}",
        str(final["best"]),
        lines,
        inner,
    )
    return Selection(graph, reference, info, kernels_path(store), chosen)


def select_from_program(spec: str, digest: str | None, expert: str | None) -> Selection:
    """A built-in or file program's expert (default: its first), its reference (`--expert reference`),
    or whichever of them has the canonical digest `digest`."""
    prog = resolve_program(spec)
    builders = {"reference": prog.reference, **prog.experts}
    if digest is not None:
        graphs = {label: b() for label, b in builders.items()}
        by_digest = {canonical_digest(g): label for label, g in graphs.items()}
        label = by_digest[_match(list(by_digest), digest, f"{prog.name}'s reference and experts")]
    else:
        label = expert or next(iter(prog.experts), "reference")
        if label not in builders:
            raise MugraphError(f"{prog.name} has no expert {label!r}; choose one of {', '.join(builders)}")
    graph = builders[label]()
    what = "the reference program" if label == "reference" else f"expert {label!r}"
    lines, inner, chosen = _layouts(graph)
    info = EmitInfo(prog.name, f"{what} of {prog.source} program {prog.name}", None, lines, inner)
    return Selection(graph, prog.reference(), info, None, chosen)


def write_store_module(store: Path) -> Path:
    """Emit the store's stitched best program beside it (what `optimize --emit` does at the end)."""
    require_triton()
    sel = select_from_store(store, None)
    out = kernels_path(store)
    out.write_text(emit_module(sel.graph, sel.info))
    return out


@click.command()
@click.argument("source")
@click.option(
    "--digest",
    default=None,
    metavar="D",
    help="Emit the μGraph with this canonical digest (a prefix will do): a confirmed one of the STORE, "
    "or the PROGRAM's reference or an expert.",
)
@click.option(
    "--expert",
    default=None,
    metavar="NAME",
    help="For a PROGRAM: which expert ('reference' for the reference program; default: its first expert).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to write the module (default: beside a STORE as NAME.kernels.py; stdout for a PROGRAM).",
)
@click.option(
    "--check",
    is_flag=True,
    help=f"Run the module and compare with the float64 reference (fp16 tolerance {FP16_TOLERANCE:g} of the "
    "output's largest magnitude): compiled on a CUDA device where CuPy finds one, else in Triton's "
    "interpreter on the CPU.",
)
@click.option("--interpret", is_flag=True, help="With --check: use Triton's interpreter even where a GPU is present.")
@click.option(
    "--time",
    "time_it",
    is_flag=True,
    help="Time the compiled module on the CUDA device (fp16, CUDA events, median of 50 runs); needs a GPU.",
)
@click.option("--json", "as_json", is_flag=True, help="The last stdout line is one JSON object with the verdict.")
def emit(
    source: str,
    digest: str | None,
    expert: str | None,
    out: Path | None,
    check: bool,
    interpret: bool,
    time_it: bool,
    as_json: bool,
) -> None:
    """Write SOURCE's chosen μGraph as one Python module: a Triton kernel per graph-defined op, an
    array call per pre-defined op, and `run(inputs) -> outputs`. SOURCE is a run store (its best μGraph
    of each fragment, stitched into the whole program) or a program (built-in name, .py or .json)."""
    t0 = time.perf_counter()
    require_triton()
    if interpret and not check:
        raise click.UsageError("--interpret chooses how --check runs the module; give --check too")
    if time_it and interpret:
        raise click.UsageError("--time compiles the module for the GPU; it cannot run in the interpreter")
    if time_it and not cupy_available():
        raise CodegenError(
            "--time needs CuPy and a usable CUDA device; none was found (--check runs the module "
            "in Triton's interpreter on the CPU)"
        )
    native = (check or time_it) and not interpret and cupy_available()
    is_store = Path(source).is_dir()
    if is_store and expert is not None:
        raise click.UsageError("--expert names an expert of a PROGRAM; for a STORE use --digest")
    sel = select_from_store(Path(source), digest) if is_store else select_from_program(source, digest, expert)
    text = emit_module(sel.graph, sel.info)
    target = out or sel.default_out
    if target is not None:
        target.write_text(text)
    elif not as_json:
        click.echo(text, nl=False)
    result: EmitResult = {
        "program": sel.info.program,
        "digest": sel.info.digest or canonical_digest(sel.graph),
        "out": str(target) if target else None,
        "ok": None,
        "max_rel_err": None,
        "interpreted": None,
        "tolerance": FP16_TOLERANCE,
    }
    if (check or time_it) and sel.reference is None:
        raise CodegenError(
            f"{source}: cannot find the program this store was made for, to check against; "
            "run the check where its program file is"
        )
    if check:
        assert sel.reference is not None
        report = check_source(text, sel.reference, interpret=not native)
        result["ok"] = report.ok
        result["max_rel_err"] = report.max_rel_err
        result["interpreted"] = report.interpreted
        result["per_output"] = report.per_output
        result["run_seconds"] = round(report.seconds, 3)
    if time_it:
        assert sel.reference is not None
        timing = time_source(text, sel.reference)
        result["timing"] = timing.as_dict()
        result["median_seconds"] = timing.median_seconds
        result["device"] = timing.device
        if not check:
            result["ok"], result["max_rel_err"], result["interpreted"] = timing.ok, timing.max_rel_err, False
    result["seconds"] = round(time.perf_counter() - t0, 3)
    if as_json:
        click.echo(json.dumps(result))
    else:
        if target is not None:
            click.echo(f"mugraph: wrote {target} ({sel.info.program}, μGraph {result['digest'][:16]})", err=True)
        if check:
            verdict = "matches" if result["ok"] else "DIFFERS from"
            where = "in Triton's interpreter" if result["interpreted"] else "compiled, on the GPU (first run)"
            click.echo(
                f"mugraph: check: the module {verdict} the float64 reference; max rel err "
                f"{result['max_rel_err']:.3g} (tolerance {FP16_TOLERANCE:g}), {result['run_seconds']:.2f} s "
                f"{where}",
                err=True,
            )
        if time_it:
            t = result["timing"]
            click.echo(
                f"mugraph: time: {seconds_text(t['median_seconds'])} median of {t['repeats']} runs on "
                f"{t['device']} (min {seconds_text(t['min_seconds'])}; the host takes "
                f"{seconds_text(t['host_seconds'])} per synchronous run)",
                err=True,
            )
    if (check or time_it) and not result["ok"]:
        raise SystemExit(1)
