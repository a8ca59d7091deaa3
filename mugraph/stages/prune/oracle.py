"""The subexpression oracle: may a new tensor's abstract expression still lead to the output?

Verdicts come, in order, from the memo (a per-process LRU in front of a shared store, reached
through the small `VerdictMemo` protocol so this stage never knows Redis) and from Z3. One call
answers a whole batch (all operand tuples of a search node): one memo round trip for the batch,
Z3 only for the misses, one write-back.

Z3 runs in one context per thread, reused across queries, with one solver per reference whose
axioms are asserted once; each query is push/check/pop under a deterministic rlimit.

Unknown (the rlimit was hit before a proof either way): by default the candidate is pruned, as in
Mirage, whose oracle treats unknown as "not a subexpression". `OracleConfig(unknown_keeps=True)`
keeps such candidates instead (a larger, slower, more complete search). The memo stores the raw
verdict `U`, so changing the policy needs no new memo.

Before any memo or solver: a candidate whose *head set* (its heads other than `sum`, and its
variables) is contained in no output's head set is answered `N` at once. This is sound: every
equation among the axioms has the same heads other than `sum` and the same variables on both
sides, and every `⊑` axiom only adds heads, so the terms modulo the equations with
`sub(a, b) := heads(a) ⊆ heads(b)` satisfy every axiom, and in that model the candidate is no
subexpression. It spares the solver the commonest queries of a search (an exp, a div or a square
that no output has), which otherwise end `unknown` at the rlimit after ~40 ms each.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Protocol

import z3

from mugraph.stages.prune.expr import Expr, Head
from mugraph.stages.prune.z3_encoding import AXIOM_VERSION, Z3_VERSION, Z3Session

# Z3 otherwise catches SIGINT itself during a check (even where SIGINT is ignored, as on Dask workers) and
# answers "unknown": a verdict that depends on when Ctrl-C came, which the shared memo would then keep.
z3.set_param("ctrl_c", False)

MEMO_SCHEMA = "mugraph-memo/1"
DEFAULT_RLIMIT = 80_000  # Mirage's


class Verdict(StrEnum):
    YES = "Y"  # a subexpression of some output: keep
    NO = "N"  # provably not: prune
    UNKNOWN = "U"  # the resource limit was hit


VERDICT_BYTES = frozenset(v.value.encode() for v in Verdict)
_FROM_Z3 = {"unsat": Verdict.YES, "sat": Verdict.NO, "unknown": Verdict.UNKNOWN}


def head_set(e: Expr, seen: dict[Expr, frozenset[str]]) -> frozenset[str]:
    """Heads other than `sum`, and variables (`v0`, ...), of a term (see the module docstring)."""
    found = seen.get(e)
    if found is None:
        own = frozenset() if e.head == Head.SUM else frozenset({e.sexpr if e.head == Head.VAR else e.head})
        found = own.union(*(head_set(a, seen) for a in e.args))
        seen[e] = found
    return found


class VerdictMemo(Protocol):
    """What the oracle needs of a memo (storage.memo.LayeredMemo provides it)."""

    def lookup(self, keys: Sequence[str]) -> list[bytes | None]: ...

    def store(self, items: Mapping[str, bytes]) -> None: ...


@dataclass(frozen=True, slots=True)
class OracleConfig:
    """Solver limits (part of every memo key) and the policy for unknown verdicts."""

    rlimit: int = DEFAULT_RLIMIT
    mbqi: bool = True
    unknown_keeps: bool = False

    @property
    def limits_tag(self) -> str:
        return f"rlimit={self.rlimit},mbqi={int(self.mbqi)}"


@dataclass(slots=True)
class OracleCounters:
    queries: int = 0
    prefiltered: int = 0
    memo_hits: int = 0
    solver_calls: int = 0
    solver_seconds: float = 0.0
    unknowns: int = 0
    verdicts: dict[str, int] = field(default_factory=lambda: {v.value: 0 for v in Verdict})

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


_threads = threading.local()


def _session(ref_key: str, finals: Sequence[Expr], n_inputs: int, cfg: OracleConfig) -> Z3Session:
    """This thread's Z3 session for one reference (a context per thread, a solver per reference)."""
    ctx = getattr(_threads, "ctx", None)
    if ctx is None:
        ctx = _threads.ctx = z3.Context()
        _threads.sessions = {}
    sessions: dict[str, Z3Session] = _threads.sessions
    found = sessions.get(ref_key)
    if found is None:
        found = sessions[ref_key] = Z3Session(ctx, finals, n_inputs, cfg.rlimit, cfg.mbqi)
    return found


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
        self._prefix = "|".join(
            [MEMO_SCHEMA, AXIOM_VERSION, Z3_VERSION, self.config.limits_tag, reference]
        )
        self.reference_digest = hashlib.sha256(reference.encode("ascii")).hexdigest()[:32]
        self._local: dict[Expr, Verdict] = {}  # this oracle's own answers, when there is no memo
        self._heads: dict[Expr, frozenset[str]] = {}
        self._final_heads = [head_set(f, self._heads) for f in self.finals]

    def key(self, candidate: Expr) -> str:
        """The memo key: a digest of schema, axioms, Z3 version, limits, reference, candidate."""
        text = f"{self._prefix}|{candidate.sexpr}"
        return "mugraph:sub:" + hashlib.sha256(text.encode("ascii")).hexdigest()[:40]

    def keeps(self, verdict: Verdict) -> bool:
        return verdict is Verdict.YES or (verdict is Verdict.UNKNOWN and self.config.unknown_keeps)

    def keep_many(self, candidates: Sequence[Expr]) -> list[bool]:
        return [self.keeps(v) for v in self.verdicts(candidates)]

    def verdicts(self, candidates: Sequence[Expr]) -> list[Verdict]:
        """Verdicts for a batch, in order."""
        self.counters.queries += len(candidates)
        unique = list(dict.fromkeys(candidates))
        known: dict[Expr, Verdict] = {
            c: Verdict.NO for c in unique if not any(head_set(c, self._heads) <= f for f in self._final_heads)
        }
        self.counters.prefiltered += len(known)
        local = {c: self._local[c] for c in unique if c not in known and c in self._local}
        known.update(local)
        self.counters.memo_hits += len(local)
        todo = [c for c in unique if c not in known]
        if todo and self.memo is not None:
            keys = [self.key(c) for c in todo]
            found = self.memo.lookup(keys)
            still = []
            for c, raw in zip(todo, found, strict=True):
                if raw is not None and raw in VERDICT_BYTES:
                    known[c] = Verdict(raw.decode())
                    self.counters.memo_hits += 1
                else:
                    still.append(c)
            todo = still
        solved: dict[Expr, Verdict] = {}
        if todo:
            session = _session(self._prefix, self.finals, self.n_inputs, self.config)
            for c in todo:
                t0 = time.perf_counter()
                v = _FROM_Z3[session.check(c)]
                self.counters.solver_seconds += time.perf_counter() - t0
                self.counters.solver_calls += 1
                self.counters.unknowns += v is Verdict.UNKNOWN
                solved[c] = v
            if self.memo is not None:
                self.memo.store({self.key(c): v.value.encode() for c, v in solved.items()})
        known.update(solved)
        if self.memo is None:
            self._local.update(solved)
        out = [known[c] for c in candidates]
        for v in out:
            self.counters.verdicts[v.value] += 1
        return out
