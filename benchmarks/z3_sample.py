"""Record Z3's verdicts on a sample of the subexpression queries a search asks, as test data.

The sample is the data of tests/stages/prune/test_decide.py: the normal forms must agree with Z3 on
every query it decides. A whole default space asks tens of thousands of distinct queries and Z3
takes 20-40 ms on each, so the sample is drawn once (deterministically) and kept.

    python benchmarks/z3_sample.py rms_norm gated_mlp lora --per-program 1000 --seconds 120

For each program: search its default space (normal-form oracle, under a time limit) collecting
every distinct query, drop those the finite models refute (sound "no" answers that need no
solver; the test checks the normal forms on them separately), sample, and ask Z3 at Mirage's
rlimit, each query in a fresh context as the oracle does.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Collection
from pathlib import Path

from mugraph.programs import get_builtin
from mugraph.stages.prune.expr import Expr
from mugraph.stages.prune.models import Refuter
from mugraph.stages.prune.oracle import DEFAULT_RLIMIT
from mugraph.stages.prune.z3_encoding import SubQueries
from mugraph.stages.search.config import preset_config
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.stages.search.serial import run_search

OUT = Path(__file__).resolve().parent.parent / "tests/stages/prune/data/z3_sample.json"
VERDICT = {"unsat": "Y", "sat": "N", "unknown": "U"}


def queries(name: str, seconds: float) -> tuple[Fragment, list[Expr]]:
    prog = get_builtin(name)
    fragment = Fragment(prog.reference(), preset_config(prog.preset), name)
    searcher = Searcher(fragment)
    seen: dict[Expr, None] = {}
    kept = searcher.oracle.kept

    def collect(cands: Collection[Expr]) -> set[Expr]:
        seen.update(dict.fromkeys(cands))
        return kept(cands)

    searcher.oracle.kept = collect  # type: ignore[method-assign,assignment]
    run_search(searcher, time_limit=seconds)
    return fragment, list(seen)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("programs", nargs="+")
    ap.add_argument("--per-program", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=120.0, help="search time per program to collect queries")
    ap.add_argument("--rlimit", type=int, default=DEFAULT_RLIMIT)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    data: dict[str, object] = {}
    for name in args.programs:
        t0 = time.perf_counter()
        fragment, asked = queries(name, args.seconds)
        refuter = Refuter(fragment.finals)
        open_ = sorted((c for c in asked if not refuter.refutes(c)), key=lambda c: c.sexpr)
        sample = random.Random(name).sample(open_, min(args.per_program, len(open_)))
        z3 = SubQueries(fragment.finals, len(fragment.input_names), args.rlimit, True)
        rows = [[c.sexpr, VERDICT[z3.check(c)]] for c in sorted(sample, key=lambda c: c.sexpr)]
        data[name] = {
            "finals": [f.sexpr for f in fragment.finals],
            "n_inputs": len(fragment.input_names),
            "rlimit": args.rlimit,
            "asked": len(asked),
            "not_refuted_by_models": len(open_),
            "queries": rows,
        }
        counts = {v: sum(r[1] == v for r in rows) for v in "YNU"}
        print(
            f"{name}: {len(asked)} queries, {len(open_)} open, sampled {len(rows)}: {counts}, "
            f"{time.perf_counter() - t0:.0f} s",
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=0) + "\n")


if __name__ == "__main__":
    main()
