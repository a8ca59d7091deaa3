"""Rankings: best first, deterministic, and the same when recomputed from stored rows."""

from __future__ import annotations

import json

from mugraph.ir.canonical import canonical_digest
from mugraph.programs import builtin_programs
from mugraph.stages.layout.choose import choose_layouts
from mugraph.stages.layout.profiles import PROFILES
from mugraph.stages.layout.rank import combined, rank, rerank
from tests.stages.layout.corpus import corpus, graph


def _rms_norm_candidates() -> dict[str, tuple]:  # type: ignore[type-arg]
    return {d: (graph(t), choose_layouts(graph(t))) for p, s, d, t in corpus() if p == "rms_norm" and
            s != "reference"}


def test_ranking_is_sorted_complete_and_deterministic() -> None:
    ref = builtin_programs()["rms_norm"].reference()
    cands = _rms_norm_candidates()
    rows, ref_row = rank(cands, (ref, choose_layouts(ref)), PROFILES["A100"])
    again, _ = rank(dict(reversed(list(cands.items()))), (ref, choose_layouts(ref)), PROFILES["A100"])
    assert json.dumps(rows) == json.dumps(again)
    assert sorted(r["digest"] for r in rows) == sorted(cands)
    keys = [(not r["fits"], r["estimated_seconds"]) for r in rows]
    assert keys == sorted(keys)
    for r in rows:
        assert r["speedup"] == ref_row["estimated_seconds"] / r["estimated_seconds"]
    # Mirage's expert is among the searched μGraphs, and at least as fast as the reference
    expert = canonical_digest(builtin_programs()["rms_norm"].experts["expert"]())
    assert next(r for r in rows if r["digest"] == expert)["speedup"] > 1.0


def test_rerank_from_stored_rows_equals_a_fresh_ranking() -> None:
    ref = builtin_programs()["rms_norm"].reference()
    cands = _rms_norm_candidates()
    ref_digest = canonical_digest(ref)
    rows, ref_row = rank(cands, (ref, choose_layouts(ref)), PROFILES["H100"])
    ref_row["digest"] = ref_digest
    stored = json.loads(json.dumps(combined(rows, ref_row)))
    graphs = {d: g for d, (g, _) in cands.items()} | {ref_digest: ref}
    for name in ("H100", "H200"):
        fresh_rows, fresh_ref = rank(cands, (ref, choose_layouts(ref)), PROFILES[name])
        fresh_ref["digest"] = ref_digest
        assert json.dumps(rerank(stored, graphs, PROFILES[name])) == json.dumps(combined(fresh_rows, fresh_ref))


def test_the_reference_wins_a_tie() -> None:
    ref = builtin_programs()["rms_norm"].reference()
    lay = choose_layouts(ref)
    rows, ref_row = rank({"same": (ref, lay)}, (ref, lay), PROFILES["H100"])
    assert combined(rows, ref_row)[0]["reference"] is True
