"""The Z3 subexpression oracle: Mirage's verdicts, determinism, batching, the unknown policy."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import pytest

from mugraph.stages.prune.expr import Expr, mul, output_exprs, parse, red, var
from mugraph.stages.prune.oracle import OracleConfig, SubexprOracle, Verdict
from tests.helpers.builtin import reference
from tests.helpers.verdict_tables import GATED_MLP, LORA

TABLES = {"gated_mlp": GATED_MLP, "lora": LORA}


Z3 = OracleConfig(engine="z3")  # these tests are of Z3's route; normal forms: test_decide.py


def oracle(name: str, config: OracleConfig = Z3, memo: object = None) -> SubexprOracle:
    ref = reference(name)
    return SubexprOracle(output_exprs(ref), len(ref.input_tensors), config, memo)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(TABLES))
def test_verdict_table(name: str) -> None:
    o = oracle(name)
    table = TABLES[name]
    verdicts = o.verdicts([e for _, e, _ in table])
    wrong = [(label, v) for (label, _, keep), v in zip(table, verdicts, strict=True) if o.keeps(v) != keep]
    assert not wrong
    c = o.counters
    assert c.solver_calls + c.prefiltered == len({e for _, e, _ in table})
    assert c.solver_seconds > 0 and c.prefiltered > 0


@pytest.mark.parametrize("name", sorted(TABLES))
def test_prefilter_never_refuses_what_z3_proves(name: str) -> None:
    """The model prefilters answer N without Z3; Z3 itself must never prove those candidates
    subexpressions (it answers sat or unknown), so verdicts with and without them agree on keep/prune."""
    from mugraph.stages.prune.models import Refuter
    from mugraph.stages.prune.z3_encoding import SubQueries

    o = oracle(name)
    refuter = Refuter(o.finals)
    queries = SubQueries(o.finals, o.n_inputs, o.config.rlimit, o.config.mbqi)
    refuted = [e for _, e, _ in TABLES[name] if refuter.refutes(e)]
    by_heads = [e for e in refuted if refuter.refuted_by("heads", e)]
    assert by_heads and len(refuted) > len(by_heads)  # the other models refute what head sets cannot
    assert all(queries.check(e) != "unsat" for e in refuted)


def test_verdicts_do_not_depend_on_query_order_or_thread() -> None:
    """Verdicts are cached and shared, so they must be a function of the query alone."""
    exprs = [e for _, e, _ in LORA]
    forward = oracle("lora").verdicts(exprs)
    result: list[Verdict] = []
    t = threading.Thread(target=lambda: result.extend(oracle("lora").verdicts(exprs[::-1])))
    t.start()
    t.join()
    assert result[::-1] == forward


# transformer_block's first fragment (RMSNorm, then two matmuls) and three queries after which a Z3
# solver reused across queries proves a fourth that it cannot prove cold (logged from a search, then
# the history shrunk to the smallest that still flips the verdict).
RMS_REF = "(sum 64 (* (sum 1024 (* (/ v0 (rms 1024 v0)) v1)) v2))"
HISTORY = ["(* (sum 4 v2) (sum 4096 v0))", "(* (sum 2048 v2) (sum 4096 v0))", "(sum 16 (* (sum 512 v2) v0))"]
SENSITIVE = "(sum 16 (* (sum 4 v0) (sum 512 v2)))"


def test_the_history_reproducer_still_reproduces() -> None:
    """One solver reused across queries (push/pop) answers differently from a fresh one. Without
    this, the next test could pass for the wrong reason; if a new Z3 no longer flips this verdict,
    log a search's solver queries and shrink a new history."""
    import z3

    from mugraph.stages.prune.z3_encoding import SubQueries

    queries = SubQueries([parse(RMS_REF)], 3, OracleConfig().rlimit, OracleConfig().mbqi)
    reused = z3.Solver(ctx=z3.Context())
    reused.set("rlimit", queries.rlimit)
    reused.set("mbqi", queries.mbqi)
    reused.from_string(queries.prologue)

    def ask(text: str) -> str:
        reused.push()
        try:
            reused.from_string(queries.goal(parse(text)))
            return str(reused.check())
        finally:
            reused.pop()

    for text in HISTORY:
        ask(text)
    assert (queries.check(parse(SENSITIVE)), ask(SENSITIVE)) == ("unknown", "unsat")


def test_a_one_input_reference_declares_its_input() -> None:
    """No axiom names the input of a one-input program, yet every query does."""
    from mugraph.stages.prune.expr import Head, unary

    o = SubexprOracle([unary(Head.EXP, var(0))], 1, Z3)
    assert o.verdicts([var(0), unary(Head.SQRT, var(0))]) == [Verdict.YES, Verdict.NO]


def test_a_verdict_does_not_depend_on_earlier_queries() -> None:
    """One oracle asks the history first, another (in another thread) only the query: the same answer."""
    verdicts: dict[str, Verdict] = {}

    def ask(name: str, history: list[str]) -> None:
        o = SubexprOracle([parse(RMS_REF)], 3, Z3)
        o.verdicts([parse(t) for t in history])
        verdicts[name] = o.verdicts([parse(SENSITIVE)])[0]
        assert o.counters.solver_calls == len(history) + 1  # nothing refuted without Z3

    for name, history in (("after", HISTORY), ("cold", [])):
        t = threading.Thread(target=ask, args=(name, history))
        t.start()
        t.join()
    assert verdicts == {"after": Verdict.UNKNOWN, "cold": Verdict.UNKNOWN}


def test_unknown_policy() -> None:
    # The table's non-subexpressions, which the models refute, and two that the axioms entail (x and
    # sum(i, x) are subexpressions of each other) but whose proof needs a sum degree no term has.
    v0, v1 = var(0), var(1)
    exprs = [e for _, e, keep in GATED_MLP if not keep] + [red(1 << 20, mul(v0, v1)), red(1 << 17, v1)]
    default = oracle("gated_mlp")
    assert default.keep_many(exprs) == [False] * len(exprs)
    assert Verdict.UNKNOWN in default.verdicts(exprs)  # Mirage's case: the rlimit is hit
    lenient = oracle("gated_mlp", OracleConfig(unknown_keeps=True, engine="z3"))
    kept = lenient.keep_many(exprs)
    assert kept == [v is Verdict.UNKNOWN for v in lenient.verdicts(exprs)]
    assert any(kept)


def test_memo_keys_are_versioned() -> None:
    e = LORA[0][1]
    base = oracle("lora").key(e)
    assert base == oracle("lora").key(e)
    assert base.startswith("mugraph:sub:")
    assert oracle("lora", OracleConfig(rlimit=1000, engine="z3")).key(e) != base
    assert oracle("gated_mlp").key(e) != base
    assert oracle("lora").key(LORA[1][1]) != base
    assert oracle("lora", OracleConfig(unknown_keeps=True, engine="z3")).key(e) == base  # policy is not in the key


class RecordingMemo:
    """A dict memo that records its calls (a unit-test double of the VerdictMemo protocol)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.lookups: list[list[str]] = []
        self.stores: list[dict[str, bytes]] = []

    def lookup(self, keys: Sequence[str]) -> list[bytes | None]:
        self.lookups.append(list(keys))
        return [self.data.get(k) for k in keys]

    def store(self, items: Mapping[str, bytes]) -> None:
        if items:
            self.stores.append(dict(items))
        self.data.update(items)

    def claim(self, keys: Sequence[str], seconds: float = 10.0) -> list[bool]:
        return [True] * len(keys)


def test_one_memo_round_trip_per_batch_and_solver_only_for_misses() -> None:
    memo = RecordingMemo()
    exprs: list[Expr] = [e for _, e, _ in LORA]
    first = oracle("lora", memo=memo)
    v1 = first.verdicts(exprs + exprs[:3])  # duplicates inside a batch are asked once
    asked = len(set(exprs)) - first.counters.prefiltered
    assert len(memo.lookups) == 1 and len(memo.lookups[0]) == asked
    assert len(memo.stores) == 1 and set(memo.stores[0].values()) <= {b"Y", b"N", b"U"}
    second = oracle("lora", memo=memo)
    assert second.verdicts(exprs) == v1[: len(exprs)]
    assert second.counters.solver_calls == 0 and second.counters.memo_hits == asked
    assert len(memo.stores) == 1  # nothing new to write


def test_invalid_memo_values_are_not_trusted() -> None:
    memo = RecordingMemo()
    o = oracle("lora", memo=memo)
    e = LORA[0][1]
    memo.data[o.key(e)] = b"garbage"
    assert o.verdicts([e]) == [Verdict.YES]
    assert o.counters.solver_calls == 1
