"""The subexpression oracle: may a new tensor's abstract expression still lead to the output?

Engines (`OracleConfig.engine`): "normal_form" (the default) decides each query exactly from normal
forms (decide.py), in microseconds. Where a normal form passes its size budget it answers `U`,
undecided, and the candidate is kept: no state is pruned on a question left open. A subexpression
that fits the outputs only through a sum of lower degree than its own is answered `S` and pruned
under `grow_only` (decide.py, "degrees only grow"). "z3" is Mirage's route, described below.
"both" takes Z3's route and checks each of its verdicts against the normal forms', keeping the
latter where decided and counting every decided verdict on which they differ (`disagreements`): an
independent check. Memo keys name the engine (and for Z3 its version and limits), so no verdict is
ever read as another engine's; the memo stores raw verdicts, so changing a policy needs no new memo.

Verdicts come, in order, from the memo (a per-process LRU in front of a shared store, reached
through the small `VerdictMemo` protocol so this stage never knows Redis) and from the engine. One
call answers a whole batch (all operand tuples of a search node): one memo round trip for the
batch, the engine only for the misses, one write-back.

Each Z3 query runs in a fresh context under a deterministic rlimit (z3_encoding.SubQueries), so a
verdict depends on the query alone, never on what this process asked before.

Unknown (the rlimit was hit before a proof either way): under "z3", by default the candidate is
pruned, as in Mirage, whose oracle treats unknown as "not a subexpression".
`OracleConfig(unknown_keeps=True)` keeps such candidates instead (a larger, slower, more complete
search).

Under "z3" and "both", before any memo or solver, finite models of the axioms (models.py) may
refute a candidate: if in any of them it is a subexpression of no output, the answer is `N` at once,
soundly. They spare the solver the commonest queries of a search (an exp or a div that no output
has, a square of an input the output uses once, a doubled product, an exp of the wrong argument),
which otherwise end `unknown` at the rlimit after 20-40 ms each: Z3 almost never answers `sat` here.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Literal, Protocol, get_args

import z3

from mugraph.stages.prune.decide import NORMAL_FORM_VERSION, Decider
from mugraph.stages.prune.expr import Expr
from mugraph.stages.prune.models import Refuter
from mugraph.stages.prune.z3_encoding import AXIOM_VERSION, Z3_VERSION, SubQueries

# Z3 otherwise catches SIGINT itself during a check (even where SIGINT is ignored, as on Dask workers) and
# answers "unknown": a verdict that depends on when Ctrl-C came, which the shared memo would then keep.
z3.set_param("ctrl_c", False)

# /1 verdicts came from a solver reused across queries; /2 only from Z3; /3 keys name their engine
MEMO_SCHEMA = "mugraph-memo/3"
DEFAULT_RLIMIT = 80_000  # Mirage's
CLAIM_SECONDS = 10.0  # lease of a claimed query: how long others wait at most if its holder dies
SETTLED_LIMIT = 1_000_000  # verdicts one oracle keeps by term before starting over


Engine = Literal["normal_form", "z3", "both"]
ENGINES: tuple[str, ...] = get_args(Engine)


class Verdict(StrEnum):
    YES = "Y"  # a subexpression of some output: keep
    NO = "N"  # provably not: prune
    UNKNOWN = "U"  # undecided: Z3's resource limit, or a normal form past its size budget
    # A subexpression, but only through a sum of lower degree than the candidate's: pruned under
    # the "degrees only grow" rule (OracleConfig.grow_only), kept otherwise. Normal forms only.
    SHRINKS = "S"


VERDICT_BYTES = frozenset(v.value.encode() for v in Verdict)
_FROM_Z3 = {"unsat": Verdict.YES, "sat": Verdict.NO, "unknown": Verdict.UNKNOWN}


def _read(raw: bytes | None) -> Verdict | None:
    """A memo value as a verdict; None for a miss or anything that is not a verdict byte."""
    return Verdict(raw.decode()) if raw is not None and raw in VERDICT_BYTES else None


class VerdictMemo(Protocol):
    """What the oracle needs of a memo (storage.memo.LayeredMemo provides it)."""

    def lookup(self, keys: Sequence[str]) -> list[bytes | None]: ...

    def store(self, items: Mapping[str, bytes]) -> None: ...

    def claim(self, keys: Sequence[str], seconds: float = ...) -> list[bool]: ...


@dataclass(frozen=True, slots=True)
class OracleConfig:
    """The engine, solver limits (part of every memo key) and Z3's policy for unknown verdicts
    (an undecided normal form is always kept)."""

    rlimit: int = DEFAULT_RLIMIT
    mbqi: bool = True
    unknown_keeps: bool = False
    engine: Engine = "normal_form"
    grow_only: bool = True

    @property
    def limits_tag(self) -> str:
        return f"rlimit={self.rlimit},mbqi={int(self.mbqi)}"


@dataclass(slots=True)
class OracleCounters:
    queries: int = 0
    prefiltered: int = 0
    memo_hits: int = 0
    solver_calls: int = 0  # queries the engine answered: Z3 calls, or normal-form decisions
    solver_seconds: float = 0.0
    unknowns: int = 0  # of those, undecided
    claim_waits: int = 0  # verdicts another worker computed while this one waited for them
    decided: int = 0  # queries the normal forms answered (undecided ones included; "both" too)
    decide_seconds: float = 0.0
    undecided: int = 0  # normal forms past their size budget
    disagreements: int = 0  # "both": decided verdicts on which Z3 and the normal forms differ
    verdicts: dict[str, int] = field(default_factory=lambda: {v.value: 0 for v in Verdict})

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


class SubexprOracle:
    """Subexpression verdicts against one reference program's output expressions."""

    def __init__(
        self,
        finals: Sequence[Expr],
        n_inputs: int,
        config: OracleConfig | None = None,
        memo: VerdictMemo | None = None,
    ) -> None:
        self.finals = tuple(finals)
        self.n_inputs = n_inputs
        self.config = config or OracleConfig()
        self.memo = memo
        self.counters = OracleCounters()
        reference = f"{n_inputs};" + ";".join(e.sexpr for e in self.finals)
        # "both" keeps Z3's verdicts in the memo (its normal-form check is recomputed each time).
        engine = NORMAL_FORM_VERSION if self.config.engine == "normal_form" else f"{AXIOM_VERSION}|{Z3_VERSION}"
        limits = "" if self.config.engine == "normal_form" else self.config.limits_tag
        self._prefix = "|".join([MEMO_SCHEMA, engine, limits, reference])
        self.reference_digest = hashlib.sha256(reference.encode("ascii")).hexdigest()[:32]
        # Every verdict this oracle has settled, by term, and the terms by how they were settled:
        # a repeated query costs a lookup, and a node's whole batch is counted and filtered with
        # set operations rather than term by term.
        self._settled: dict[Expr, Verdict] = {}
        self._by_models: set[Expr] = set()  # refuted by the finite models (all NO)
        self._yes: set[Expr] = set()
        self._unknown: set[Expr] = set()
        self._shrinks: set[Expr] = set()
        self._kept: set[Expr] = set()  # the settled terms the policy keeps
        self.refuter = Refuter(self.finals)
        self._queries: SubQueries | None = None  # built at the first solver call
        self.decider = Decider(self.finals)
        self.disagreed: list[tuple[str, Verdict, Verdict]] = []  # "both": (candidate, normal form, Z3)

    def key(self, candidate: Expr) -> str:
        """The memo key: a digest of schema, engine (for Z3: axioms, version, limits), reference,
        candidate."""
        text = f"{self._prefix}|{candidate.sexpr}"
        return "mugraph:sub:" + hashlib.sha256(text.encode("ascii")).hexdigest()[:40]

    def keeps(self, verdict: Verdict) -> bool:
        if verdict is Verdict.UNKNOWN:
            return self.config.unknown_keeps or self.config.engine != "z3"
        if verdict is Verdict.SHRINKS:
            return not self.config.grow_only
        return verdict is Verdict.YES

    def keep_many(self, candidates: Sequence[Expr]) -> list[bool]:
        return [self.keeps(v) for v in self.verdicts(candidates)]

    def verdicts(self, candidates: Sequence[Expr]) -> list[Verdict]:
        """Verdicts for a batch, in order (duplicates are asked once and counted each time)."""
        self._settle(candidates)
        out = [self._settled[c] for c in candidates]
        for v in out:
            self.counters.verdicts[v.value] += 1
        return out

    def kept(self, candidates: Collection[Expr]) -> set[Expr]:
        """Settles a batch of distinct terms and returns the set of settled terms the policy
        keeps, to test the batch's members against at once. The oracle's own set: read it, do not
        change it (it grows with later batches)."""
        self._settle(candidates)
        n, yes, unknown, shrinks = len(candidates), len(self._yes.intersection(candidates)), 0, 0
        if self._unknown:
            unknown = len(self._unknown.intersection(candidates))
        if self._shrinks:
            shrinks = len(self._shrinks.intersection(candidates))
        counts = self.counters.verdicts
        counts["Y"] += yes
        counts["U"] += unknown
        counts["S"] += shrinks
        counts["N"] += n - yes - unknown - shrinks
        return self._kept

    def _settle(self, candidates: Collection[Expr]) -> None:
        """Settles every term of the batch not settled yet (models, then memo, then the engine)
        and counts where each query's answer came from."""
        self.counters.queries += len(candidates)
        if len(self._settled) > SETTLED_LIMIT:
            for held in (self._settled, self._by_models, self._yes, self._unknown, self._shrinks, self._kept):
                held.clear()
            self.decider = Decider(self.finals)  # and its normal forms, which hold their terms
        settled = self._settled
        unique = candidates if isinstance(candidates, (dict, set, frozenset)) else dict.fromkeys(candidates)
        todo = [c for c in unique if c not in settled]
        # The finite models are Z3's shortcut; the normal forms need none.
        refuted = [c for c in todo if self.refuter.refutes(c)] if self.config.engine != "normal_form" else []
        from_models = len(self._by_models.intersection(unique)) + len(refuted)
        memo_hits = len(unique) - len(todo) - (from_models - len(refuted))
        if refuted:
            self._record(self._checked({c: Verdict.NO for c in refuted}), self._by_models)
            todo = [c for c in todo if c not in settled]
        keys = {c: self.key(c) for c in todo} if self.memo is not None else {}
        if todo and self.memo is not None:
            still = []
            found: dict[Expr, Verdict] = {}
            for c, raw in zip(todo, self.memo.lookup([keys[c] for c in todo]), strict=True):
                v = _read(raw)
                if v is None:
                    still.append(c)
                else:
                    found[c] = v
            memo_hits += len(found)
            self._record(self._checked(found))
            todo = still
        self._record(self._checked(self._solve(todo, keys)))
        self.counters.prefiltered += from_models
        self.counters.memo_hits += memo_hits

    def _checked(self, verdicts: dict[Expr, Verdict]) -> dict[Expr, Verdict]:
        """Under "both", Z3's verdicts checked against the normal forms', which are kept where
        they are decided; otherwise the verdicts as they are."""
        if self.config.engine != "both":
            return verdicts
        out: dict[Expr, Verdict] = {}
        for c, z in verdicts.items():
            nf = self._decide(c)
            if Verdict.UNKNOWN not in (nf, z) and (nf is Verdict.NO) != (z is Verdict.NO):
                self.counters.disagreements += 1
                self.disagreed.append((c.sexpr, nf, z))
            out[c] = z if nf is Verdict.UNKNOWN else nf
        return out

    def _decide(self, c: Expr) -> Verdict:
        t0 = time.perf_counter()
        found = self.decider.decide(c)
        v = Verdict.UNKNOWN if found is None else Verdict.NO if not found else Verdict.YES
        if v is Verdict.YES and not self.decider.grows(c):
            v = Verdict.SHRINKS
        self.counters.decide_seconds += time.perf_counter() - t0
        self.counters.decided += 1
        self.counters.undecided += v is Verdict.UNKNOWN
        return v

    def _record(self, verdicts: Mapping[Expr, Verdict], by_models: set[Expr] | None = None) -> None:
        self._settled.update(verdicts)
        if by_models is not None:
            by_models.update(verdicts)
        for c, v in verdicts.items():
            if v is Verdict.YES:
                self._yes.add(c)
            elif v is Verdict.UNKNOWN:
                self._unknown.add(c)
            elif v is Verdict.SHRINKS:
                self._shrinks.add(c)
            if self.keeps(v):
                self._kept.add(c)

    def _solve(self, todo: Sequence[Expr], keys: Mapping[Expr, str]) -> dict[Expr, Verdict]:
        """Verdicts the memo did not have (`keys`: their memo keys). With a shared memo, each Z3
        query is claimed first: of several workers meeting one term at once, one runs Z3 and the
        others wait for its verdict (or for its claim to lapse, then take it over), so parallel
        workers repeat no solver work. A normal-form verdict is cheaper than the wait: it is
        decided at once and stored."""
        if not todo:
            return {}
        memo = self.memo
        ask = self._nf if self.config.engine == "normal_form" else self._z3
        if memo is None:
            return {c: ask(c) for c in todo}

        def solve(cs: Sequence[Expr]) -> dict[Expr, Verdict]:
            out = {c: ask(c) for c in cs}
            memo.store({keys[c]: v.value.encode() for c, v in out.items()})
            return out

        if self.config.engine == "normal_form":
            return solve(todo)

        def claimed(cs: Sequence[Expr]) -> list[Expr]:
            return [c for c, mine in zip(cs, memo.claim([keys[c] for c in cs], CLAIM_SECONDS), strict=True) if mine]

        solved = solve(claimed(todo))
        waiting = [c for c in todo if c not in solved]
        pause = 0.002
        deadline = time.monotonic() + 2 * CLAIM_SECONDS  # past it, solve whatever is still held
        while waiting and time.monotonic() < deadline:
            time.sleep(pause)
            pause = min(2 * pause, 0.05)
            for c, raw in zip(waiting, memo.lookup([keys[c] for c in waiting]), strict=True):
                v = _read(raw)
                if v is not None:
                    solved[c] = v
                    self.counters.claim_waits += 1
            waiting = [c for c in waiting if c not in solved]
            # A claim whose holder died lapses after its lease: then this worker takes it over.
            solved.update(solve(claimed(waiting)))
            waiting = [c for c in waiting if c not in solved]
        solved.update(solve(waiting))
        return solved

    def _nf(self, c: Expr) -> Verdict:
        """The normal forms' verdict, counted as the engine's call."""
        t0 = time.perf_counter()
        v = self._decide(c)
        self.counters.solver_seconds += time.perf_counter() - t0
        self.counters.solver_calls += 1
        self.counters.unknowns += v is Verdict.UNKNOWN
        return v

    def _z3(self, c: Expr) -> Verdict:
        if self._queries is None:
            self._queries = SubQueries(self.finals, self.n_inputs, self.config.rlimit, self.config.mbqi)
        t0 = time.perf_counter()
        v = _FROM_Z3[self._queries.check(c)]
        self.counters.solver_seconds += time.perf_counter() - t0
        self.counters.solver_calls += 1
        self.counters.unknowns += v is Verdict.UNKNOWN
        return v
