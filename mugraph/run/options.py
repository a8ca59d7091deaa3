"""A run's options as one typed record, which the command line fills from its flags and
`mugraph.optimize` from its keywords: what each option means is written once, here."""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from mugraph.ir.errors import MugraphError
from mugraph.run.checks import file_name, parse_duration
from mugraph.stages.layout.profiles import DEFAULT_PROFILE
from mugraph.stages.search.config import parse_override
from mugraph.storage.run.recorded_command import KEYWORDS_ARG, TORCH_MODEL_ARG, is_model_command

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
    dashboard_address: str | None = "127.0.0.1:8787"  # None: the local cluster serves no dashboard
    layouts: Mapping[str, int] = field(default_factory=dict)
    gpu_profile: str = DEFAULT_PROFILE
    emit_kernels: bool = False
    measure: int = 0
    command: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        """The counts a keyword can give wrong that the command line's types refuse (workers=-1 would
        start a cluster of no workers that never runs a task), and the time limit: an OptionError for
        each, an OptionValueError where the value has the right type."""
        self._check_types()
        for name, low in (("workers", 1), ("budget", 1), ("measure", 0)):
            value = getattr(self, name)
            if value is None and name != "measure":
                continue
            wrong = OptionValueError if isinstance(value, int) and not isinstance(value, bool) else OptionError
            if wrong is OptionError or value < low:
                raise wrong(f"{name}={value!r}: give a whole number of at least {low}")
        try:
            self.seconds()
        except MugraphError as e:  # the same class as a bad count's, named as the caller gave it
            said = str(e)
            if self.from_python():
                for given in (f"time limit {self.time_limit!r}", f"time limit {str(self.time_limit)!r}"):
                    if said.startswith(given):
                        said = f"time_limit={self.time_limit!r}{said[len(given) :]}"
                        break
            raise OptionValueError(said) from None

    def _check_types(self) -> None:
        """Flags, names and mappings of the type they are read as: `fresh="no"` is truthy and would
        delete the store; `settings="grids"` would be read letter by letter."""
        wrong: list[str] = []
        for name in ("fresh", "emit_kernels"):
            if not isinstance(getattr(self, name), bool):
                wrong.append(f"{name}={getattr(self, name)!r}: give True or False")
        for name in ("preset", "scheduler", "memo_url", "dashboard_address"):
            if not isinstance(getattr(self, name), str | None):
                wrong.append(f"{name}={getattr(self, name)!r}: give a string or None")
        layouts: object = self.layouts  # as a caller gave it, whatever the annotation says
        settings: object = self.settings
        if not isinstance(layouts, Mapping):
            wrong.append(f"layouts={layouts!r}: give a dict of names to innermost dims")
        if not isinstance(settings, Mapping) and (
            not isinstance(settings, tuple | list) or not all(isinstance(x, str) for x in settings)
        ):
            wrong.append(f"settings={settings!r}: give a dict, or a tuple of KEY=VALUE strings")
        if wrong:
            raise OptionError("; ".join(wrong))

    def overrides(self) -> dict[str, object]:
        """The search-limit overrides by config field, each value as JSON gives it."""
        if isinstance(self.settings, Mapping):
            return dict(self.settings)
        return dict(parse_override(s) for s in self.settings)

    def seconds(self) -> float | None:
        """The time limit in seconds (None: no limit)."""
        value = self.time_limit
        if value is None:
            return None
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not value > 0:
                raise MugraphError(f"time limit {value!r}: must be a positive number of seconds")
            return float(value)
        return parse_duration(str(value))

    def from_python(self) -> bool:
        """Whether a library call made the run (it records no command line, or `mugraph.optimize`'s
        model): its messages name keywords (`store=`), not the command line's options."""
        return self.command is None or is_model_command(self.command)

    def store_option(self) -> str:
        """How messages name the store option: `store=` for a library call, else `--store`."""
        return "store=" if self.from_python() else "--store"

    def reuses_finished(self) -> bool:
        """Whether a finished store is the whole answer: nothing asked that only a run does (start
        over, other layouts, timing, emitted kernels, Dask's profile)."""
        return not (self.fresh or self.layouts or self.measure or self.emit_kernels or self.profile is not None)


def default_store(program: str, identity: Mapping[str, str]) -> Path:
    """The store `optimize` uses without --store: named for the program, its digest, the configs'
    digest and the search tree's version, so a change of any of them starts a store of its own."""
    program_digest = identity["program_digest"]
    if "model_digest" in identity:  # a PyTorch model: its glue as well as the program searched
        program_digest = hashlib.sha256(f"{program_digest}:{identity['model_digest']}".encode()).hexdigest()
    return DEFAULT_RUNS / (
        f"{file_name(program)}-{program_digest[:8]}-{identity['config_digest'][:8]}-t{identity['search_tree']}.zarr"
    )


class OptimizeKeywords(TypedDict, total=False):
    """OptimizeOptions' fields as `mugraph.optimize`'s keywords, so a type checker sees a misspelt
    option or a wrong type where the call is written (`command` is the command line's own)."""

    preset: str | None
    settings: Mapping[str, Any] | tuple[str, ...]
    workers: int | None
    scheduler: str | None
    memo_url: str | None
    store: str | Path | None
    time_limit: str | float | None
    fresh: bool
    budget: int | None
    backend: str
    profile: Path | None
    dashboard_address: str | None
    layouts: Mapping[str, int]
    gpu_profile: str
    emit_kernels: bool
    measure: int


class OptionError(MugraphError, TypeError):
    """`mugraph.optimize` was given an option it does not have, or a value of a type it cannot take."""


class OptionValueError(OptionError, ValueError):
    """An option was given a value of its type that it cannot take (workers=0, time_limit=-1): an
    OptionError as every refused option is, and a ValueError as Python's own functions raise."""


def check_options(options: Mapping[str, Any]) -> None:
    """Refuse option names OptimizeOptions does not have, naming each and the valid ones (a misspelt
    option would otherwise be silently ignored or fail deep inside the run), and counts out of range."""
    valid = sorted(f.name for f in dataclasses.fields(OptimizeOptions) if f.name != "command")
    unknown = sorted(k for k in options if k not in valid)
    if not unknown:
        OptimizeOptions(**options)  # the counts, before a model is captured or anything started
        return
    hints = []
    for k in unknown:
        close = difflib.get_close_matches(k, valid, n=1)
        hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise OptionError(
        f"mugraph.optimize: unknown option{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; "
        f"the options are: {', '.join(valid)}, and name, on_event, verbose"
    )


def model_command(name: str, keywords: bool = False) -> tuple[str, ...]:
    """The command a store made by `mugraph.optimize` records: no command line, the model by name (what
    `recorded_command.resuming_command` knows to offer no shell command for), and whether it was called
    with keyword inputs (which the call that resumes it passes again: `recorded_command.python_call`)."""
    return ("optimize", f"{TORCH_MODEL_ARG} {name}>", *((KEYWORDS_ARG,) if keywords else ()))
