"""Solver time per subexpression query, by verdict, beside the memo's cost per key.

    python benchmarks/bench_oracle.py

Queries: every intermediate tensor of every expert μGraph plus the verdict tables of the tests
(candidates that must be kept or pruned), asked one at a time of a fresh oracle (no memo), so
each costs one solver call. The same stream then goes through a private redis-server twice: the
first pass fills it, the second (a new oracle, as another worker would be) must make no solver call.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mugraph.programs import builtin_programs
from mugraph.stages.prune.expr import Expr, labelled_exprs, output_exprs
from mugraph.stages.prune.oracle import VERDICT_BYTES, SubexprOracle, Verdict
from mugraph.storage.memo.layered import LayeredMemo, open_memo_store
from mugraph.storage.memo.redis_server import EmbeddedRedis
from tests.helpers.verdict_tables import GATED_MLP, LORA


def streams() -> dict[str, list[Expr]]:
    extra = {"lora": [e for _, e, _ in LORA], "gated_mlp": [e for _, e, _ in GATED_MLP]}
    out = {}
    for name, prog in builtin_programs().items():
        exprs = [e for build in prog.experts.values() for _, e in labelled_exprs(build())]
        out[name] = list(dict.fromkeys(exprs + extra.get(name, [])))
    return out


def main() -> None:
    rows = []
    by_verdict: dict[Verdict, list[float]] = {v: [] for v in Verdict}
    with tempfile.TemporaryDirectory() as tmp, EmbeddedRedis(Path(tmp) / "memo") as server:
        for name, exprs in streams().items():
            ref = builtin_programs()[name].reference()
            finals, n = output_exprs(ref), len(ref.input_tensors)
            fresh = SubexprOracle(finals, n)
            times: dict[Verdict, list[float]] = {v: [] for v in Verdict}
            for e in exprs:
                t0 = time.perf_counter()
                (v,) = fresh.verdicts([e])
                times[v].append(time.perf_counter() - t0)
            for v in Verdict:
                by_verdict[v] += times[v]
            passes = []
            for _ in range(2):
                o = SubexprOracle(finals, n, memo=LayeredMemo(open_memo_store(server.url), valid_values=VERDICT_BYTES))
                t0 = time.perf_counter()
                o.verdicts(exprs)
                passes.append((o.counters.solver_calls, time.perf_counter() - t0))

            def med(xs: list[float]) -> str:
                return f"{statistics.median(xs) * 1e3:.1f}" if xs else "–"

            rows.append(
                f"| {name} | {len(exprs)} | {len(times[Verdict.YES])} / {len(times[Verdict.UNKNOWN])} "
                f"| {med(times[Verdict.YES])} | {med(times[Verdict.UNKNOWN])} "
                f"| {passes[0][0]} in {passes[0][1] * 1e3:.0f} ms | {passes[1][0]} in {passes[1][1] * 1e3:.1f} ms |"
            )
    print(
        "| program | queries | kept / unknown | solver ms, kept (median) | solver ms, unknown (median) "
        "| batch via Redis, 1st worker: solver calls | 2nd worker |"
    )
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    allq = [t for ts in by_verdict.values() for t in ts]
    print(
        f"\nAll {len(allq)} queries: median {statistics.median(allq) * 1e3:.1f} ms; kept "
        f"{statistics.median(by_verdict[Verdict.YES]) * 1e3:.1f} ms, unknown "
        f"{statistics.median(by_verdict[Verdict.UNKNOWN]) * 1e3:.1f} ms (rlimit 80000)."
    )


if __name__ == "__main__":
    main()
