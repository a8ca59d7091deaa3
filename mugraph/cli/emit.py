"""`mugraph emit`: a chosen μGraph as one runnable Python module of Triton kernels, optionally run in
Triton's interpreter and compared with the float64 reference (`--check`). Which μGraph, and how its
module is written, is `run.kernels`'s; this module turns flags into that call and prints the verdict."""

from __future__ import annotations

import time
from pathlib import Path

import click

from mugraph.arrays.backend import cupy_available
from mugraph.cli.records import EmitResult, json_line
from mugraph.codegen import FP16_TOLERANCE, check_source, emit_module
from mugraph.codegen.check import FP32_TOLERANCE, default_tolerance, require_triton
from mugraph.codegen.errors import CodegenError
from mugraph.codegen.timing import time_source
from mugraph.ir.canonical import canonical_digest
from mugraph.ir.errors import MugraphError
from mugraph.run.checks import check_output_file, file_name
from mugraph.run.kernels import Selection, check_module_target, select_from_program, select_from_store
from mugraph.stages.layout.describe import seconds_text
from mugraph.storage.run.paths import RunPaths


@click.command()
@click.argument("source")
@click.option(
    "--digest",
    default=None,
    metavar="D",
    help="Emit the μGraph with this canonical digest (a prefix will do): a confirmed one of the STORE "
    "(stitched into the whole program in place of its fragment's best), or the PROGRAM's reference or "
    "an expert.",
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
    help="Where to write the module (default: beside a STORE as NAME.kernels.py; stdout for a PROGRAM "
    "or a --digest, or NAME.kernels.py in the current directory with --json). An existing file is "
    "replaced only if emit wrote it.",
)
@click.option(
    "--check",
    is_flag=True,
    help=f"Run the module and compare with the float64 reference (tolerance {FP16_TOLERANCE:g} of the "
    f"output's largest magnitude, {FP32_TOLERANCE:g} where every input is float32): compiled on a CUDA "
    "device where CuPy finds one, else in Triton's interpreter on the CPU.",
)
@click.option("--interpret", is_flag=True, help="With --check: use Triton's interpreter even where a GPU is present.")
@click.option(
    "--time",
    "time_it",
    is_flag=True,
    help="Time the compiled module on the CUDA device (fp16, CUDA events, median of 50 runs); needs a GPU.",
)
@click.option(
    "--program",
    "program",
    default=None,
    metavar="FILE",
    help="For a STORE made from a program file (.py): that file, run to check the stored program against "
    "the program it computes. A program file a store names is never run unless named here.",
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
    program: str | None,
    as_json: bool,
) -> None:
    """Write SOURCE's chosen μGraph as one Python module: a Triton kernel per graph-defined op, an
    array call per pre-defined op, and `run(inputs) -> outputs`. SOURCE is a run store (its best μGraph
    of each fragment, stitched into the whole program) or a program (built-in name, .py or .json)."""
    t0 = time.perf_counter()
    require_triton()
    _check_flags(source, expert, check, interpret, time_it)
    if program is not None and not Path(source).is_dir():
        raise click.UsageError("--program names the program of a STORE; a PROGRAM is given as SOURCE itself")
    native = (check or time_it) and not interpret and cupy_available()
    is_store = Path(source).is_dir()
    if out is not None:
        check_output_file(out, "--out")
        check_module_target(out, "choose another --out", reading=None if is_store else Path(source))
    sel = select_from_store(Path(source), digest, program) if is_store else select_from_program(source, digest, expert)
    text = emit_module(sel.graph, sel.info)
    target = out or sel.default_out or (_json_out(sel.info.program) if as_json else None)
    if target is not None:
        check_module_target(target, "move it away, or choose where to write with --out")
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
        "tolerance": default_tolerance(sel.reference) if sel.reference is not None else FP16_TOLERANCE,
    }
    notes = [n for n in (sel.note, sel.unchecked and f"{UNCHECKED} {sel.unchecked}") if n]
    if notes:
        result["note"] = "; ".join(notes)
    if check or time_it:
        _run_module(result, text, sel, source, check=check, time_it=time_it, native=native)
    result["seconds"] = round(time.perf_counter() - t0, 3)
    if as_json:
        click.echo(json_line(result))
    else:
        for note in notes:
            click.echo(f"mugraph: note: {note}", err=True)
        for line in _verdict_lines(result, target, check=check, time_it=time_it):
            click.echo(line, err=True)
    if (check or time_it) and not result["ok"]:
        raise SystemExit(1)


# what a plain emit of a store says where the program it was made for cannot be had again as it was
UNCHECKED = "the float64 cross-check of the stored program against the program it computes was skipped:"


def _json_out(program: str) -> Path:
    """Where `--json` without `--out` writes a module that would otherwise go to stdout (which holds the
    JSON line): NAME.kernels.py in the current directory, named as `optimize --emit` names its file."""
    return RunPaths.of(file_name(program) + ".zarr").kernels


def _check_flags(source: str, expert: str | None, check: bool, interpret: bool, time_it: bool) -> None:
    """Flags that contradict each other, or ask for a GPU this machine lacks, before anything is written."""
    if interpret and not check:
        raise click.UsageError("--interpret chooses how --check runs the module; give --check too")
    if time_it and interpret:
        raise click.UsageError("--time compiles the module for the GPU; it cannot run in the interpreter")
    if time_it and not cupy_available():
        raise CodegenError(
            "--time needs CuPy and a usable CUDA device; none was found (--check runs the module "
            "in Triton's interpreter on the CPU)"
        )
    if expert is not None and Path(source).is_dir():
        raise click.UsageError("--expert names an expert of a PROGRAM; for a STORE use --digest")
    path = Path(source)
    if not path.exists() and path.suffix not in (".py", ".json") and (path.suffix == ".zarr" or "/" in source):
        raise MugraphError(f"no run store at {source}, and no program by that name (check the path)")


def _run_module(
    result: EmitResult, text: str, sel: Selection, source: str, *, check: bool, time_it: bool, native: bool
) -> None:
    """Run the module against the float64 reference (`--check`) and time it (`--time`), into `result`."""
    if sel.reference is None:
        why = (
            sel.unchecked or "cannot find the program this store was made for; run the check where its program file is"
        )
        raise CodegenError(f"{source}: nothing to check the module against: {why}")
    if check:
        report = check_source(text, sel.reference, interpret=not native)
        result["ok"] = report.ok
        result["max_rel_err"] = report.max_rel_err
        result["interpreted"] = report.interpreted
        result["per_output"] = report.per_output
        result["run_seconds"] = round(report.seconds, 3)
        result["tolerance"] = report.tolerance
    if time_it:
        timing = time_source(text, sel.reference)
        result["timing"] = timing.as_dict()
        result["median_seconds"] = timing.median_seconds
        result["device"] = timing.device
        if not check:
            result["ok"], result["max_rel_err"], result["interpreted"] = timing.ok, timing.max_rel_err, False


def _verdict_lines(result: EmitResult, target: Path | None, *, check: bool, time_it: bool) -> list[str]:
    """What `emit` says on stderr: the file written, the check's verdict, the timing."""
    lines = []
    if target is not None:
        lines.append(f"mugraph: wrote {target} ({result['program']}, μGraph {result['digest'][:16]})")
    if check:
        verdict = "matches" if result["ok"] else "DIFFERS from"
        where = "in Triton's interpreter" if result["interpreted"] else "compiled, on the GPU (first run)"
        lines.append(
            f"mugraph: check: the module {verdict} the float64 reference; max rel err "
            f"{result['max_rel_err']:.3g} (tolerance {result['tolerance']:g}), {result['run_seconds']:.2f} s "
            f"{where}"
        )
    if time_it:
        t = result["timing"]
        lines.append(
            f"mugraph: time: {seconds_text(t['median_seconds'])} median of {t['repeats']} runs on "
            f"{t['device']} (min {seconds_text(t['min_seconds'])}; the host takes "
            f"{seconds_text(t['host_seconds'])} per synchronous run)"
        )
    return lines
