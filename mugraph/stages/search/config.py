"""Every limit of the search in one frozen object, Mirage's presets, and overrides by name.

Defaults follow Mirage's `get_default_config` (reference/mirage-search.md §1): at most 5 kernel ops
and 9 block ops (both counting input ops), one block graph (two with `attention`), grids from the
inputs' dims. Widened where Mirage's paper reports its best μGraphs outside its own defaults:
for-loop ranges {4, 16, 32, 64} (Mirage: {4, 16, 64}; the paper's RMSNorm+Linear uses 32) and the
attention grids (batch, 8, 16) and (batch, 16, 1) beside (batch, 16, 4) (the paper's GQA kernels). Differences,
each deliberate: clamp is not explored (its bounds are floats the search cannot choose and its
fingerprint ignores them); candidate lists are sorted; a commutative op's operand pair is tried
once; a block graph may read any non-empty subset of Mirage's input tuple (the one tensor of a
program of one input, where Mirage's has none), and is closed only once its block ops read every
input it loads (`block_inputs`; "mirage" gives Mirage's rule exactly).

A config has a digest (of its canonical JSON), so stored results name the exact space they
were searched in.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from mugraph.ir.errors import MugraphError, did_you_mean
from mugraph.ir.graph import Op, eps_of
from mugraph.ir.limits import DEFAULT_LIMITS
from mugraph.ir.types import Dim3, OpKind
from mugraph.stages.prune.oracle import DEFAULT_RLIMIT, ENGINES, Engine

PRESETS = ("mlp", "lora", "attention")
BLOCK_INPUTS = ("mirage", "subsets")
BlockInputs = Literal["mirage", "subsets"]
# The order a node's kept children are explored in (structures.py): "cost" puts the children that
# add the least DRAM traffic first, "index" is the order they are listed in.
SearchOrder = Literal["cost", "index"]
SEARCH_ORDERS: tuple[SearchOrder, ...] = ("cost", "index")
MAX_DIM = 3  # tensors have at most 4 dims
MAX_INT = 2**31 - 1

_KERNEL_OPS = (
    OpKind.MATMUL,
    OpKind.EXP,
    OpKind.SILU,
    OpKind.GELU,
    OpKind.RELU,
    OpKind.ADD,
    OpKind.MUL,
    OpKind.DIV,
)
_BLOCK_OPS = (
    OpKind.MATMUL,
    OpKind.EXP,
    OpKind.SILU,
    OpKind.GELU,
    OpKind.RELU,
    OpKind.ADD,
    OpKind.MUL,
    OpKind.DIV,
    OpKind.RMS_NORM,
    OpKind.ACCUM_NO_RED,
    OpKind.ACCUM_SUM,
    OpKind.ACCUM_RMS,
)
# The op kinds the search can enumerate at each level: every other kind is made by the search itself
# (input, output, customized, the lora macro's concat), needs attributes it cannot choose (clamp's
# bounds, mul_scalar's scalar, a block reduction's dim, concat's dim), or belongs to the other level.
_SEARCHABLE = frozenset(
    {
        OpKind.MATMUL,
        OpKind.EXP,
        OpKind.SQUARE,
        OpKind.SQRT,
        OpKind.SILU,
        OpKind.GELU,
        OpKind.GELU_ERF,
        OpKind.RELU,
        OpKind.ADD,
        OpKind.MUL,
        OpKind.DIV,
        OpKind.RMS_NORM,
        OpKind.LAYER_NORM,
    }
)
SEARCHABLE_KERNEL_OPS = _SEARCHABLE | {OpKind.REDUCTION}
SEARCHABLE_BLOCK_OPS = _SEARCHABLE | {
    OpKind.ACCUM_NO_RED,
    OpKind.ACCUM_SUM,
    OpKind.ACCUM_MEAN,
    OpKind.ACCUM_RMS,
    OpKind.ACCUM_REDTOX,
}
# Mirage's imap candidates; `attention` keeps only the first three.
_IMAPS: tuple[Dim3, ...] = ((0, -1, 1), (0, 1, -1), (0, 2, -1), (-1, -1, -1), (1, -1, -1), (0, -1, -1))
_OMAPS: tuple[Dim3, ...] = (
    (0, 1, -1),
    (0, 2, 1),
    (0, 2, -1),
    (0, -1, -1),
    (-1, 2, 1),
    (-1, 1, -1),
    (-1, 2, -1),
    (-1, -1, -1),
    (1, -1, -1),
)


class ConfigError(MugraphError):
    """A preset or an override the search cannot use."""


@dataclass(frozen=True)
class SearchConfig:
    """What the search explores. `None` in `grids` means Mirage's grid heuristics."""

    preset: str = "mlp"
    max_kernel_ops: int = 5  # counting input ops, as Mirage does
    max_block_ops: int = 9  # counting block input ops
    max_block_graphs: int = 1
    max_block_outputs: int = 2
    kernel_ops: tuple[OpKind, ...] = _KERNEL_OPS
    block_ops: tuple[OpKind, ...] = _BLOCK_OPS
    concat_matmul: bool = False  # the lora preset's concat-then-matmul macro
    four_input_blocks: bool = False  # lora: a block graph may read all four inputs
    # Which kernel tensors a new block graph reads (`candidates.block_source_options`): "mirage", its
    # one fixed tuple; "subsets", any non-empty subset of that tuple, with a block graph that leaves a
    # block input unread never closed.
    block_inputs: BlockInputs = "subsets"
    grids: tuple[Dim3, ...] | None = None
    grid_divisors: tuple[int, ...] = (8, 16, 32, 64)
    attention_grids: bool = False  # (batch, d/y, 1) for y in attention_divisors, and (batch, y, z) below
    attention_divisors: tuple[int, ...] = (8, 64, 128, 256)
    # Mirage's (batch, 16, 4), the paper's (batch, 8, 16), and (batch, 16, 1): the second kernel of
    # the paper's GQA μGraph, whose inputs (made under grid (2, 8, 16)) have no dim d with d/y = 16.
    attention_yz: tuple[tuple[int, int], ...] = ((8, 16), (16, 4), (16, 1))
    min_blocks: int = 32
    max_blocks: int = 1024
    imaps: tuple[Dim3, ...] = _IMAPS
    omaps: tuple[Dim3, ...] = _OMAPS
    fmaps: tuple[int, ...] = (-1, 0, 1, 2)
    franges: tuple[int, ...] = (4, 16, 32, 64)
    rdx: int = 64
    seeds: tuple[int, ...] = (0,)  # fingerprint seeds of the inline check
    rlimit: int = DEFAULT_RLIMIT  # Z3's (oracle z3 or both)
    unknown_keeps: bool = False  # Z3's unknowns; an undecided normal form is always kept
    # Who judges subexpressions (prune/oracle.py): "normal_form" decides exactly, "z3" is Mirage's
    # solver (its unknowns pruned unless unknown_keeps), "both" checks one against the other.
    oracle: Engine = "normal_form"
    # With the normal forms: prune a subexpression that only fits the outputs with a sum of lower
    # degree than its own (prune/decide.py, "degrees only grow"), which no op can build on.
    grow_only: bool = True
    # The eps the search gives every rms_norm and accum_rms, and every layer_norm, it makes: the
    # reference's (`for_reference`), so the search can rediscover its norms. Written to the JSON
    # only when not 0, so every config without them keeps its digest.
    rms_eps: float = 0.0
    layer_norm_eps: float = 0.0
    # Which kept child the search explores first (`nodes.Expansion`): the same children, so
    # a whole space finds the same μGraphs; only when each is found changes.
    order: SearchOrder = "cost"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in _EPS_FIELDS and not getattr(self, f.name):
                continue
            out[f.name] = _plain(getattr(self, f.name))
        return out

    def eps_of(self, kind: OpKind) -> float:
        """The eps an op of `kind` the search makes carries (0 for kinds without one)."""
        return eps_for(kind, self.rms_eps, self.layer_norm_eps)

    @property
    def digest(self) -> str:
        data = self.to_json()
        if data["block_inputs"] == "mirage":
            # Mirage's rule is the tree every config searched before the setting existed: leaving it
            # out keeps the digests of those spaces, so their stores still resume (a lora run of hours).
            del data["block_inputs"]
        if data["oracle"] == "z3":
            # Likewise Z3 is the oracle every space was searched with before the setting existed
            # (grow_only is the normal forms' rule).
            del data["oracle"], data["grow_only"]
        if data["order"] == "index":
            # Every space was explored in listing order before the setting existed.
            del data["order"]
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def with_overrides(self, overrides: Mapping[str, Any]) -> SearchConfig:
        """A copy with fields replaced; values are checked and converted (lists become tuples)."""
        known = {f.name: f for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for name, value in overrides.items():
            if name not in known:
                raise ConfigError(
                    f"unknown search setting {name!r}{did_you_mean(name, known)}; known: {', '.join(sorted(known))}"
                )
            changes[name] = _convert(name, value, getattr(self, name))
        out = dataclasses.replace(self, **changes)
        out.validate()
        return out

    def validate(self) -> None:
        if self.preset not in PRESETS:
            raise ConfigError(f"unknown preset {self.preset!r}; presets are: {', '.join(PRESETS)}")
        for name in (
            "max_kernel_ops",
            "max_block_ops",
            "max_block_outputs",
            "min_blocks",
            "max_blocks",
            "rdx",
            "rlimit",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.oracle not in ENGINES:
            raise ConfigError(f"oracle {self.oracle!r}: one of {', '.join(ENGINES)}")
        for name in _EPS_FIELDS:
            eps = getattr(self, name)
            if isinstance(eps, bool) or not isinstance(eps, int | float) or not math.isfinite(eps) or eps < 0:
                raise ConfigError(f"{name} {eps!r}: an eps is a finite number >= 0")
        if self.order not in SEARCH_ORDERS:
            raise ConfigError(f"order {self.order!r}: one of {', '.join(SEARCH_ORDERS)}")
        if self.block_inputs not in BLOCK_INPUTS:
            raise ConfigError(f"block_inputs {self.block_inputs!r}: one of {', '.join(BLOCK_INPUTS)}")
        if self.max_block_graphs < 0:
            raise ConfigError("max_block_graphs must not be negative")
        if any(f < 2 for f in self.franges):
            raise ConfigError(f"franges {list(self.franges)}: every for-loop range must be at least 2")
        if not self.seeds:
            raise ConfigError("at least one fingerprint seed is needed")
        if any(not 0 <= s < 2**32 for s in self.seeds):
            raise ConfigError(f"seeds {list(self.seeds)}: every seed is an integer from 0 to 2**32-1")
        for name in ("grid_divisors", "attention_divisors"):
            if any(d < 1 for d in getattr(self, name)):
                raise ConfigError(f"{name} {list(getattr(self, name))}: every divisor must be at least 1")
        for name, maps in (("imaps", self.imaps), ("omaps", self.omaps)):
            if any(len(m) != 3 for m in maps):
                raise ConfigError(f"{name}: every map has three entries (grid axes x, y, z)")
            if any(not -1 <= d <= MAX_DIM for m in maps for d in m):
                raise ConfigError(f"{name}: map entries are tensor dims 0 to {MAX_DIM}, or -1 (replicate)")
        if any(not -1 <= d <= MAX_DIM for d in self.fmaps):
            raise ConfigError(f"fmaps {list(self.fmaps)}: entries are tensor dims 0 to {MAX_DIM}, or -1 (none)")
        for name, kinds, allowed in (
            ("kernel_ops", self.kernel_ops, SEARCHABLE_KERNEL_OPS),
            ("block_ops", self.block_ops, SEARCHABLE_BLOCK_OPS),
        ):
            _check_kinds(name, kinds, allowed)
        if self.grids is not None and any(len(g) != 3 or min(g) < 1 for g in self.grids):
            raise ConfigError("grids: every grid is three positive integers")
        # limits no block graph could meet: the search would end "finished" with nothing found
        launchable = DEFAULT_LIMITS.max_blocks
        if self.min_blocks > min(self.max_blocks, launchable):
            raise ConfigError(
                f"min_blocks {self.min_blocks} is above max_blocks {min(self.max_blocks, launchable)}"
                + (f" (a kernel launches at most {launchable} blocks)" if self.max_blocks > launchable else "")
                + ": no grid would be searched"
            )
        for g in self.grids or ():
            if math.prod(g) > launchable:
                raise ConfigError(f"grids: {list(g)} has {math.prod(g)} blocks; a kernel launches at most {launchable}")
        if any(len(g) != 2 or min(g) < 1 for g in self.attention_yz):
            raise ConfigError("attention_yz: every entry is two positive integers (grid y and z)")


_EPS_FIELDS = ("rms_eps", "layer_norm_eps")


def eps_for(kind: OpKind, rms_eps: float, layer_norm_eps: float) -> float:
    """`SearchConfig.eps_of` from the two fields."""
    if kind is OpKind.RMS_NORM or kind is OpKind.ACCUM_RMS:
        return rms_eps
    if kind is OpKind.LAYER_NORM:
        return layer_norm_eps
    return 0.0


def _check_kinds(name: str, kinds: tuple[OpKind, ...], allowed: frozenset[OpKind]) -> None:
    """Every kind one the search can enumerate at its level, each once."""
    level = "kernel" if name == "kernel_ops" else "block"
    for kind in kinds:
        if kind not in allowed:
            raise ConfigError(
                f"{name}: the search cannot enumerate {kind} ops in a {level} graph; {name} takes "
                f"{', '.join(sorted(k.value for k in allowed))}"
            )
    twice = sorted({k.value for k in kinds if kinds.count(k) > 1})
    if twice:
        raise ConfigError(f"{name}: {', '.join(twice)} named more than once")


def _plain(v: Any) -> Any:
    if isinstance(v, OpKind):
        return v.value
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


def _int(value: Any) -> int:
    """An integer setting: a whole, finite JSON number of at most 2**31 (so 1e400, -Infinity, 1.5 are refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected an integer, got {value!r}")
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        raise TypeError(f"expected an integer, got {value!r}")
    if abs(value) > MAX_INT:
        raise ValueError(f"{value!r} is out of range (at most {MAX_INT})")
    return int(value)


def _ints(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple):
        raise TypeError(f"expected a list of integers, got {value!r}")
    return tuple(_int(x) for x in value)


def _convert(name: str, value: Any, current: Any) -> Any:
    """Turn a JSON-ish override into the field's type."""
    try:
        if name in ("kernel_ops", "block_ops"):
            if not isinstance(value, list | tuple):
                raise TypeError(f"expected a list of op names, got {value!r}")
            return tuple(OpKind(v) for v in value)
        if name in ("grids", "imaps", "omaps", "attention_yz"):
            if value is None:
                return None
            if not isinstance(value, list | tuple):
                raise TypeError(f"expected a list of integer lists, got {value!r}")
            return tuple(_ints(m) for m in value)
        if isinstance(current, bool):
            if not isinstance(value, bool):
                raise TypeError("expected true or false")
            return value
        if isinstance(current, tuple):
            return _ints(value)
        if name in _EPS_FIELDS:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"expected a number, got {value!r}")
            return float(value)
        if isinstance(current, int):
            return _int(value)
        if isinstance(current, str):
            return str(value)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"search setting {name}={value!r}: {e}") from None
    raise ConfigError(f"search setting {name} cannot be overridden")


def preset_config(preset: str) -> SearchConfig:
    """Mirage's presets: `mlp` (the defaults), `lora` (+ concat-then-matmul, four-input blocks, Mirage's
    block-input rule), `attention` (two block graphs, REDTOX, 2-D grids, for-loop ranges up to 8,
    three imaps)."""
    if preset == "mlp":
        cfg = SearchConfig()
    elif preset == "lora":
        # Mirage's tuple: with four inputs and at most five kernel ops (inputs counted), the block
        # graph opens at the root as the last kernel op, so the one output comes from it and reads
        # all four inputs; every smaller tuple is a dead subtree (Knuth's estimate: 2.6x the states).
        # For-loop range 2 as well: Mirage's own finished LoRA search explored {2, 4}, and its saved
        # concat μGraph loops twice.
        cfg = SearchConfig(
            preset="lora",
            concat_matmul=True,
            four_input_blocks=True,
            block_inputs="mirage",
            franges=(2, 4, 16, 32, 64),
        )
    elif preset == "attention":
        cfg = SearchConfig(
            preset="attention",
            max_block_graphs=2,
            block_ops=_BLOCK_OPS + (OpKind.ACCUM_REDTOX,),
            attention_grids=True,
            imaps=_IMAPS[:3],
            franges=(4,),
        )
    else:
        raise ConfigError(f"unknown preset {preset!r}; presets are: {', '.join(PRESETS)}")
    cfg.validate()
    return cfg


def for_reference(
    cfg: SearchConfig, kinds: Collection[OpKind], eps: Mapping[OpKind, float] | None = None
) -> SearchConfig:
    """The config a reference with these op kinds searches with: where it has the exact (erf) form of
    GELU, the candidate op lists carry the erf form wherever they carry the tanh form (in its place when
    the reference has no tanh GELU, beside it when it has both), so the search can rediscover it; where
    it has a layer_norm, both lists carry layer_norm after rms_norm (the kernel list at its end); `eps`
    (a norm kind's eps in the reference, `reference_eps`) becomes the eps of the norms the search makes.
    Every other reference keeps the preset's lists, and its digest (neither the erf form nor layer_norm
    can be built from other ops, so each is useless to a reference without it)."""
    out = cfg
    if OpKind.GELU_ERF in kinds:
        keep_tanh = OpKind.GELU in kinds

        def swap(ops: tuple[OpKind, ...]) -> tuple[OpKind, ...]:
            if OpKind.GELU_ERF in ops:
                return ops
            res: list[OpKind] = []
            for k in ops:
                if k is OpKind.GELU:
                    res += [OpKind.GELU, OpKind.GELU_ERF] if keep_tanh else [OpKind.GELU_ERF]
                else:
                    res.append(k)
            return tuple(res)

        out = dataclasses.replace(out, kernel_ops=swap(out.kernel_ops), block_ops=swap(out.block_ops))
    if OpKind.LAYER_NORM in kinds:
        out = dataclasses.replace(
            out, kernel_ops=_with_layer_norm(out.kernel_ops), block_ops=_with_layer_norm(out.block_ops)
        )
    if eps:
        rms = eps.get(OpKind.RMS_NORM, eps.get(OpKind.ACCUM_RMS, out.rms_eps))
        out = dataclasses.replace(out, rms_eps=rms, layer_norm_eps=eps.get(OpKind.LAYER_NORM, out.layer_norm_eps))
    if out is not cfg:
        out.validate()
    return out


def _with_layer_norm(ops: tuple[OpKind, ...]) -> tuple[OpKind, ...]:
    if OpKind.LAYER_NORM in ops:
        return ops
    if OpKind.RMS_NORM in ops:
        at = ops.index(OpKind.RMS_NORM) + 1
        return ops[:at] + (OpKind.LAYER_NORM,) + ops[at:]
    return ops + (OpKind.LAYER_NORM,)


def reference_eps(ops: Iterable[Op]) -> dict[OpKind, float]:
    """The eps of each norm kind among `ops` (block graphs' ops included), the first one met where a
    reference holds several: the search gives one eps to every norm of a kind."""
    out: dict[OpKind, float] = {}
    for op in ops:
        if op.block is not None:
            for k, v in reference_eps(op.block.ops).items():
                out.setdefault(k, v)
        if op.kind in (OpKind.RMS_NORM, OpKind.ACCUM_RMS, OpKind.LAYER_NORM):
            out.setdefault(op.kind, eps_of(op))
    return {k: v for k, v in out.items() if v}


def check_eps(cfg: SearchConfig, ops: Iterable[Op]) -> None:
    """Refuse an `rms_eps` or `layer_norm_eps` set to other than the reference's norms' eps: the search
    gives its norms one eps, and a norm of another eps computes another function, so it would find no
    μGraph with a norm at all (0 is the default: the reference's eps is taken then)."""
    ops = list(ops)
    every = [*ops, *(b for op in ops if op.block is not None for b in op.block.ops)]
    for name, norm_kinds in (
        ("rms_eps", (OpKind.RMS_NORM, OpKind.ACCUM_RMS)),
        ("layer_norm_eps", (OpKind.LAYER_NORM,)),
    ):
        norms = [op for op in every if op.kind in norm_kinds]
        theirs = sorted({eps_of(op) for op in norms})
        ours = getattr(cfg, name)
        if not norms or not ours or theirs == [ours]:
            continue
        what = (
            f"{norms[0].kind.value} has eps {theirs[0]!r}"
            if len(theirs) == 1
            else (f"norms have eps {', '.join(map(repr, theirs))}")
        )
        raise ConfigError(
            f"{name}={ours!r}: the reference's {what}, and the search gives its norms the reference's eps "
            f"(a norm of another eps computes another function): leave {name} out"
        )


def no_preset_among(overrides: Mapping[str, Any]) -> None:
    """Refuse `overrides` given over a preset (`--set`, `settings=`) that name `preset`: over a preset
    it would only rename the config, not change one limit of it."""
    if "preset" in overrides:
        value = overrides["preset"]
        raise ConfigError(
            f"preset is not a setting to --set (it would rename the config, not change its limits): "
            f"give --preset {value} (preset={value!r} from Python)"
        )


def parse_override(text: str) -> tuple[str, Any]:
    """`KEY=VALUE` with VALUE in JSON (bare words are strings): `grids=[[64,1,1]]`, `franges=[64]`."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"setting {text!r} is not KEY=VALUE")
    if not raw.strip():
        raise ConfigError(f"setting {text!r} has an empty value")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    except RecursionError:
        raise ConfigError(f"setting {key.strip()}: the value is nested too deeply") from None
    return key.strip(), value
