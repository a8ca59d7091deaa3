"""`mugraph optimize`: the batch pipeline, its flags made into a run's options (what a run store holds
is read back by `status` (status, report) and `show`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from mugraph.cli import json_stream
from mugraph.cli.options import backend_option
from mugraph.ir.errors import MugraphError
from mugraph.ir.names import check_tensor_name, shown
from mugraph.run.checks import WORKERS_PER_CORE_LIMIT
from mugraph.run.options import OptimizeOptions
from mugraph.run.printed import run_printed
from mugraph.stages.layout.profiles import DEFAULT_PROFILE, PROFILES
from mugraph.stages.search.config import PRESETS
from mugraph.stages.search.serial import DEFAULT_BUDGET


def _parse_layout(text: str) -> tuple[str, int]:
    """NAME=DIM with DIM a dim index from 0 (a negative one would count from the end, as Python's do,
    and name another dim than the user meant on tensors of another rank)."""
    name, _, dim = text.partition("=")
    try:
        value = int(dim)
    except ValueError:
        raise click.BadParameter(
            f"{shown(text)}: expected NAME=DIM, e.g. W=0 for a column-major W", param_hint="--layout"
        ) from None
    if value < 0:
        raise click.BadParameter(
            f"{shown(text)}: DIM is a dim index from 0 (the first dim), not {value}", param_hint="--layout"
        )
    try:
        return check_tensor_name(name.strip(), "the program input or output"), value
    except MugraphError as e:
        raise click.BadParameter(str(e), param_hint="--layout") from None


@click.command()
@click.argument("program")
@click.option(
    "--preset",
    type=click.Choice(PRESETS),
    default=None,
    help="Search space preset for every fragment (default: the program's own, or one per fragment).",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override one search limit for every fragment, VALUE in JSON (see `mugraph search`).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help=f"Worker processes of the local cluster (default: one per core; at most {WORKERS_PER_CORE_LIMIT} per core).",
)
@click.option(
    "--scheduler",
    default=None,
    metavar="ADDRESS",
    help="Run on an existing Dask cluster (tcp://HOST:8786) whose workers came from `dask worker`.",
)
@click.option(
    "--memo-url",
    default=None,
    metavar="URL",
    envvar="MUGRAPH_MEMO_URL",
    help="Shared verdict memo (redis://HOST:PORT/DB, unix:///PATH, or 'local'). Default: a private "
    "redis-server beside the store. Also read from $MUGRAPH_MEMO_URL, which keeps a Redis password "
    "out of the command line that `ps` shows every user.",
)
@click.option(
    "--store",
    default=None,
    metavar="PATH",
    help="The run store (Zarr). Default: runs/PROGRAM-<program digest>-<config digest>-t<search tree>.zarr; "
    "an existing one for the same program and settings is resumed.",
)
@click.option(
    "--time-limit",
    default=None,
    metavar="DURATION",
    help="Stop cleanly after this long (90, 15m, 2h); the same command resumes.",
)
@click.option("--fresh", is_flag=True, help="Delete the store first and start over.")
@click.option(
    "--budget",
    default=None,
    type=click.IntRange(min=1),
    help=f"Search states per task (part of the run's identity: it fixes the task split). Default: "
    f"the budget of the store being resumed, else {DEFAULT_BUDGET}.",
)
@backend_option("Array backend of the workers' fingerprints.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    is_eager=True,  # read first, so that a refused option's error closes the stream too
    callback=json_stream.open_on_flag,
    help="NDJSON events on stdout (docs/commands.md, 'The --json event stream'); the last is 'done', or "
    "'error' (the one line stderr gets) where the run fails or stops before its end.",
)
@click.option(
    "--profile",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write Dask's performance report (HTML) to this file.",
)
@click.option(
    "--dashboard-address",
    default="127.0.0.1:8787",
    show_default=True,
    help="Where the local cluster's Dask dashboard listens; 'none' for no dashboard (a batch job: the "
    "cluster starts a second or so sooner, and `status` still follows the run).",
)
@click.option(
    "--layout",
    "layouts",
    multiple=True,
    metavar="NAME=DIM",
    help="The innermost (stride-1) dim of a program input or output, as your tensors have it (default: "
    "row-major, the last dim). Layouts are chosen and ranked around it; not part of the run's identity. "
    "Emitted kernels (--emit, `mugraph emit`) still take and return row-major tensors.",
)
@click.option(
    "--gpu-profile",
    default=DEFAULT_PROFILE,
    show_default=True,
    metavar="NAME",
    help=f"GPU whose cost model ranks the μGraphs: {', '.join(PROFILES)}. Not part of the run's "
    "identity: rerunning a finished store with another profile ranks it again.",
)
@click.option(
    "--emit",
    "emit_kernels",
    is_flag=True,
    help="At the end, write the stitched best program as Triton kernels beside the store "
    "(NAME.kernels.py, as `mugraph emit STORE` does); needs the kernels extra.",
)
@click.option(
    "--measure",
    type=click.IntRange(min=0),
    default=0,
    metavar="K",
    help="At the end, time the model's K best μGraphs of each fragment and its reference as compiled "
    "Triton kernels on a GPU worker (Dask resource GPU) and rank them by measured time; needs a "
    "CUDA device with CuPy and the kernels extra. Not part of the run's identity.",
)
def optimize(program: str, as_json: bool, layouts: tuple[str, ...], **flags: Any) -> None:
    """Search every fragment of PROGRAM (built-in name, .py or .json file, or a PyTorch model: a .py file
    defining `model` and `example_inputs`) on a Dask cluster, confirm, rank and stitch the best μGraphs;
    everything is kept in a Zarr store, and killing the command then running it again continues where it
    stopped."""
    if flags["workers"] is not None and flags["scheduler"] is not None:
        raise click.UsageError("--workers starts a local cluster; with --scheduler the cluster's own workers run")
    if flags["dashboard_address"].strip().lower() == "none":
        flags["dashboard_address"] = None
    # every other flag is the OptimizeOptions field of its name
    options = OptimizeOptions(layouts=dict(_parse_layout(s) for s in layouts), command=tuple(sys.argv[1:]), **flags)
    run_printed(program, options, as_json=as_json, echo=click.echo, exiting=True)
    json_stream.closed()
