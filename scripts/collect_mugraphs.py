"""Collect confirmed μGraphs of the benchmarks into one JSON-lines file for the layout tests.

    python scripts/collect_mugraphs.py STORE... [--gqa-subtree] --out tests/stages/layout/data/mugraphs.jsonl

Every confirmed μGraph of every fragment of each run store (made by `mugraph optimize`), the gqa
μGraphs below the expert's first kernel (narrowed limits of the search tests), and every program's
reference and expert μGraphs. One line per graph: program, source, digest, graph (JSON text).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from mugraph.ir.canonical import canonical_digest
from mugraph.ir.serialize import dumps
from mugraph.programs import builtin_programs, get_builtin
from mugraph.stages.search.config import preset_config
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.storage.run.store import RunStore

GQA_NARROW = {"grids": [[2, 16, 4], [2, 16, 1]], "kernel_ops": []}
GQA_K1 = [
    "open(grid=[2, 16, 4],imaps=[[0, -1, 1], [0, 2, -1], [0, 1, -1]])",
    "loop(fmaps=[-1, 2, 1],F=4)",
    "matmul(0,1)",
    "exp(3)",
    "accum_sum(4)",
    "matmul(4,2)",
    "accum_no_red(6)",
    "close(omap=[0, 2, 1])",
]


def from_store(path: Path) -> list[dict[str, Any]]:
    out = []
    with RunStore.open_existing(path) as st:
        program = st.identity["program"]
        for i, frag in enumerate(st.fragments()):
            found = st.found(i)
            for d, r in sorted(st.confirmations(i).items()):
                if r["equivalent"]:
                    out.append(
                        {
                            "program": program,
                            "fragment": frag["name"],
                            "source": f"store:{path.name}",
                            "digest": d,
                            "graph": found[d].graph,
                        }
                    )
    return out


def gqa_subtree() -> list[dict[str, Any]]:
    prog = get_builtin("gqa")
    s = Searcher(Fragment(prog.reference(), preset_config(prog.preset).with_overrides(GQA_NARROW), "gqa"))
    r = s.explore(s.find_path(GQA_K1))
    return [
        {"program": "gqa", "fragment": "gqa", "source": "search:gqa-k1-subtree", "digest": d, "graph": f.graph}
        for d, f in sorted(r.found.items())
    ]


def builtins() -> list[dict[str, Any]]:
    out = []
    for name, prog in builtin_programs().items():
        ref = prog.reference()
        out.append(
            {
                "program": name,
                "fragment": name,
                "source": "reference",
                "digest": canonical_digest(ref),
                "graph": dumps(ref),
            }
        )
        for label, build in prog.experts.items():
            g = build()
            out.append(
                {
                    "program": name,
                    "fragment": name,
                    "source": f"expert:{label}",
                    "digest": canonical_digest(g),
                    "graph": dumps(g),
                }
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stores", nargs="*", type=Path)
    ap.add_argument("--gqa-subtree", action="store_true")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    rows = builtins()
    for p in a.stores:
        rows += from_store(p)
    if a.gqa_subtree:
        rows += gqa_subtree()
    seen: set[tuple[str, str]] = set()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with a.out.open("w") as fh:
        for row in rows:
            key = (row["program"], row["digest"])
            if key not in seen:
                seen.add(key)
                fh.write(json.dumps(row, sort_keys=True) + "\n")
    print(f"{a.out}: {len(seen)} μGraphs")


if __name__ == "__main__":
    main()
