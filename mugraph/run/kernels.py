"""The kernels of a run: which μGraph a module is emitted from (a store's stitched best program, one
of its confirmed μGraphs, or a program's reference or expert), with the layouts and header it is
emitted with, and the module `optimize --emit` writes beside the store. `mugraph emit` is a shell
around this."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mugraph.codegen import EmitInfo, emit_module
from mugraph.codegen.check import require_triton
from mugraph.codegen.emit_module import is_emitted_text
from mugraph.ir.canonical import canonical_digest
from mugraph.ir.errors import MugraphError
from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import dumps, loads
from mugraph.ir.types import OpKind
from mugraph.programs import Program, resolve_program
from mugraph.run.resume import how_to_resume
from mugraph.run.store_program import PROGRAM_OPTION, recorded_program, store_program
from mugraph.run.stored_checks import differs_from_program, repair_hint
from mugraph.stages.combine import stitch
from mugraph.stages.fragments import Split, split_program
from mugraph.stages.layout.choose import LayoutResult, choose_layouts
from mugraph.stages.layout.costs import Layouts
from mugraph.stages.layout.describe import describe_layouts
from mugraph.stages.layout.facts import LayoutError
from mugraph.storage.run.backends import open_existing
from mugraph.storage.run.errors import MISMATCH_HINT
from mugraph.storage.run.paths import EXPORTED_META_KEY, RunPaths
from mugraph.storage.run.protocol import RunStoreReader
from mugraph.storage.run.recorded_command import is_model_command
from mugraph.storage.run.records import metadata_file


@dataclass(frozen=True)
class Selection:
    """The μGraph to emit, what `--check` compares it with, what the header says, and the layouts the
    module was emitted with (None where no layout was found)."""

    graph: KernelGraph
    reference: KernelGraph | None
    info: EmitInfo
    default_out: Path | None
    layouts: Layouts | None = None
    note: str | None = None
    unchecked: str | None = None  # why the stored program could not be run beside its program, if not


def row_major_note(io_layouts: Mapping[str, int], graph: KernelGraph) -> str | None:
    """What to tell a user whose run was ranked for other strides (`--layout`) than the ones the emitted
    module takes (its program inputs and outputs are row-major, whatever the ranking assumed)."""
    ndim = {name: len(shape) for name, shape, _ in graph.input_signature()}
    ndim.update({str(op.attr("name")): len(graph.tensors[op.inputs[0]].shape) for op in graph.ops_of(OpKind.OUTPUT)})
    other = {name: dim for name, dim in io_layouts.items() if name in ndim and dim != ndim[name] - 1}
    if not other:
        return None
    given = ", ".join(f"{name} dim {dim}" for name, dim in sorted(other.items()))
    return (
        f"the ranking assumed the innermost dims given by --layout ({given}); the emitted module takes and "
        "returns its program inputs and outputs row-major (pass them contiguous)"
    )


def _run_io_layouts(st: RunStoreReader) -> dict[str, int]:
    """The innermost dims the run's layouts were chosen around (`--layout`), by tensor name."""
    io: dict[str, int] = {}
    for i, _ in enumerate(st.fragments()):
        for rec in st.layouts(i).values():
            io.update({str(k): int(v) for k, v in rec.get("io_layouts", {}).items()})
    return io


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


def _store_split(st: RunStoreReader, program: Program | str | None) -> tuple[KernelGraph, Split] | None:
    """The store's program and its split into the store's fragments; None where the program cannot be
    had again (a moved program file, one the user did not name: `store_program`) or no longer splits
    into them (another release's split)."""
    reference = store_program(st, program).reference
    if reference is None:
        return None
    split = split_program(reference)
    stored = [(f["name"], f["graph"]) for f in st.fragments()]
    return (reference, split) if [(f.name, dumps(f.graph)) for f in split.fragments] == stored else None


def _stitched_with(
    st: RunStoreReader,
    fragment: int,
    graph: KernelGraph,
    final: Mapping[str, Any] | None,
    program: Program | str | None,
) -> tuple[KernelGraph, KernelGraph] | None:
    """The whole program with `graph` in place of fragment `fragment`'s choice, each other fragment's
    best as the run ranked it (its reference before the run's end), and the program's reference; None
    where the store's program cannot be had again (a moved program file) or no longer splits into the
    store's fragments, so that only the fragment itself, with its own names, can be emitted."""
    had = _store_split(st, program)
    if had is None:
        return None
    reference, split = had
    frags = st.fragments()
    best = dict(final["best_per_fragment"]) if final is not None else {}
    chosen: dict[str, KernelGraph] = {}
    for j, f in enumerate(frags):
        confirmed = st.confirmations(j)
        d = best.get(f["name"])
        if j == fragment:
            chosen[f["name"]] = graph
        elif d is not None and d in confirmed and confirmed[d]["equivalent"] and (rec := st.found(j).get(d)):
            chosen[f["name"]] = loads(rec.graph)  # else its reference (the run kept it, or has not ranked)
    return stitch(split, chosen), reference


def program_outputs(st: RunStoreReader, program: Program | str | None = None) -> dict[str, dict[str, str]]:
    """Per fragment, the program output each of its outputs is (`o0` is `H`), where the store's
    program can be had again without running a file the user did not name (`program`); empty where
    it cannot, and for a PyTorch model's store (its program is had again only by running the model's
    file)."""
    had = None if EXPORTED_META_KEY in st.meta else _store_split(st, program)
    if had is None:
        return {}
    out: dict[str, dict[str, str]] = {}
    for name, src in had[1].outputs:
        fragment, _, tensor = src.partition(":")
        if tensor:
            out.setdefault(fragment, {})[tensor] = name
    return out


def _match(digests: list[str], prefix: str, where: str) -> str:
    hits = sorted({d for d in digests if d.startswith(prefix)})
    if len(hits) != 1:
        what = "no μGraph" if not hits else f"{len(hits)} μGraphs"
        raise MugraphError(f"{what} in {where} with a digest starting {prefix!r}")
    return hits[0]


def select_from_store(store: Path, digest: str | None, given: Program | str | None = None) -> Selection:
    """The stitched program of the store's best μGraphs, or the confirmed μGraph named by `digest`;
    `given` is the program the user named for the store (see `store_program`): a store made from a
    program file needs it for its stitched program, which is checked against it before it is emitted."""
    with open_existing(store, readonly=True) as st:
        final = st.final()
        frags = st.fragments()
        ident = st.identity
        where = store.resolve()  # the header outlives the working directory it was emitted from
        config = f"store {where}, config digest {ident.get('config_digest', '-')}, budget {ident.get('budget', '-')}"
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
            whole = _stitched_with(st, i, graph, final, given)
            if whole is not None:  # the program's own inputs and outputs, the other fragments as ranked
                program, program_reference = whole
                _same_program(store, f"found/{i}/{d}", program_reference, program)
                lines, inner, chosen = _layouts(program)
                label = str(ident.get("program"))
                if len(frags) > 1:
                    rest = "best" if final is not None else "references"
                    label += f" ({frags[i]['name']} from --digest, the other fragments' {rest})"
                info = EmitInfo(label, config, d, lines, inner)
                note = row_major_note(_run_io_layouts(st), program)
                return Selection(program, program_reference, info, None, chosen, note)
            rec = st.layouts(i).get(d)
            layout = LayoutResult.from_json(rec) if rec and "error" not in rec else None
            _same_program(store, f"found/{i}/{d}", loads(frags[i]["graph"]), graph)
            lines, inner, chosen = _layouts(graph, layout)
            info = EmitInfo(f"{ident.get('program')} {frags[i]['name']}", config, d, lines, inner)
            strides = row_major_note(dict(rec.get("io_layouts", {})), graph) if rec else None
            note = "; ".join(n for n in (strides, _alone(st.meta, given, frags[i]["name"])) if n) or None
            return Selection(graph, loads(frags[i]["graph"]), info, None, chosen, note)
        meta = st.meta
        if final is None:
            raise MugraphError(_no_result(store, st.writer(), meta))
        had = store_program(st, given)
        if had.needs_file is not None:  # the stored program is emitted only once checked against it
            had.required(store, "emitting its stitched program")
        reference, unchecked = had.reference, had.why
        io = _run_io_layouts(st)
        for i in range(len(frags)):
            st.found(i)  # read whole, as show reads them: a damaged record is said here too
    graph = loads(final["program_graph"])
    if reference is not None:  # what `repair` checks too (`stored_checks`), so it drops what is refused here
        named = given if isinstance(given, str) else _program_file(meta)
        _same_program(store, "final", reference, graph, repair_hint(store, named))
    # the stitched program's layouts, solved as the layout stage solves each fragment's (the same
    # layouts for a one-fragment program, whose stitched program is its best μGraph)
    lines, inner, chosen = _layouts(graph)
    complete = bool(final.get("complete"))
    stopped = "" if complete else ", search stopped before its end (its best so far)"
    info = EmitInfo(
        str(ident.get("program")),
        config + f", GPU profile {final.get('gpu_profile')}{stopped}",
        str(final["best"]),
        lines,
        inner,
    )
    so_far = None if complete else _SO_FAR.format(resume=how_to_resume(store, meta))
    notes = [n for n in (row_major_note(io, graph), so_far) if n]
    return Selection(graph, reference, info, RunPaths(store).kernels, chosen, "; ".join(notes) or None, unchecked)


def _no_result(store: Path, writer: int | None, meta: Mapping[str, Any]) -> str:
    """Why a store has no result to emit yet: its run is still going (`writer`, its pid), or stopped
    before ranking what it found; what to do meanwhile."""
    shown = shlex.quote(str(store))
    meanwhile = f"`mugraph show {shown}` ranks what it holds so far and `--digest D` emits one of those"
    if writer is not None:
        return f"{store}: no result yet: the run is still going (pid {writer}); {meanwhile}, or wait for its end"
    return (
        f"{store}: no result yet (the run stopped before ranking what it found); {meanwhile}, or "
        f"{how_to_resume(store, meta)} and finish it"
    )


def _same_program(
    store: Path, record: str, reference: KernelGraph, program: KernelGraph, hint: str = MISMATCH_HINT
) -> None:
    """Refuse to emit a stored program that does not compute its reference (a record edited after the
    run and its checksum recomputed: the checksums guard against damage, not against an edit); `hint`
    says what to do (a found μGraph's record, which `repair` does not run, means starting over)."""
    bad = differs_from_program(metadata_file(store, record), reference, program, hint)
    if bad is not None:
        raise bad


def _alone(meta: Mapping[str, Any], given: Program | str | None, fragment: str) -> str | None:
    """Why a μGraph of a store made from a program file is emitted as its fragment alone, with the
    fragment's own names: the whole program is stitched only with the file named (None otherwise)."""
    file = _program_file(meta)
    if given is not None or file is None:
        return None
    named = f"{PROGRAM_OPTION} {shlex.quote(file)}"
    return f"emitted {fragment} alone, with its own names: to stitch it into the whole program, pass {named}"


def kernels_check_command(store: Path, command: Sequence[str] | None) -> str | None:
    """The command that runs the kernels `optimize --emit` wrote beside `store` against the program
    (`command`, the optimize command line): a program file (.py) is named to it, since `emit` runs one
    only where the user names it; None for a model optimized from Python (`mugraph.load` checks those)."""
    if command is None or is_model_command(command):
        return None
    args = ["mugraph", "emit", str(store)]
    file = recorded_program({"command": list(command)})
    if file is not None and Path(file).suffix == ".py":
        args += [PROGRAM_OPTION, file]
    return shlex.join([*args, "--check"])


def _program_file(meta: Mapping[str, Any]) -> str | None:
    """The program file (.py) a store's command names, which `repair` must be told to run."""
    recorded = recorded_program(meta)
    return recorded if recorded is not None and Path(recorded).suffix == ".py" else None


# what emit says of a store whose search stopped at its time limit (or was stopped after one)
_SO_FAR = "the run's search stopped before its end: these are its best μGraphs so far ({resume})"


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


def check_module_target(target: Path, instead: str, reading: Path | None = None) -> None:
    """Refuse to write a module over a file emit did not write: the program file being read (`reading`),
    or any existing file whose first lines lack the mark every emitted module begins with. Writing an
    emitted module again (a rerun of the same emit) stays allowed. `instead` says what to do."""
    if not target.exists():
        return
    if reading is not None and reading.is_file() and target.samefile(reading):
        raise MugraphError(f"{target} is the program file this command reads; emit will not write over it: {instead}")
    try:
        with target.open(encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except OSError:
        head = ""
    if not is_emitted_text(head):
        raise MugraphError(
            f"{target} exists and is not a module `mugraph emit` wrote; emit will not replace it: {instead}"
        )


def write_store_module(store: Path, program: Program | None = None) -> tuple[Path, str | None]:
    """Emit the store's stitched best program beside it (what `optimize --emit` does at the end, given
    the program it ran); the file and what the user should know of its strides (`row_major_note`)."""
    require_triton()
    sel = select_from_store(store, None, program)
    out = RunPaths(store).kernels
    check_module_target(out, f"move it away, or write the module elsewhere with `mugraph emit {store} --out FILE`")
    out.write_text(emit_module(sel.graph, sel.info))
    return out, sel.note
