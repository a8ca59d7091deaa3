"""Cross-checks between a run store's records, so that no set of deleted or emptied files passes as whole.

The ledger names every committed record, but an emptied ledger names none, and a store missing a found
μGraph besides would pass as complete with another result. So the records are also checked against each
other, at every open, with no help from the ledger:

- the task table's commit record counts the found μGraphs of each fragment: fewer records on disk is
  damage (more is not: a killed batch may have written records before its commit);
- every confirmation, layout and ranked μGraph names a found one; a layout or ranked μGraph has a
  confirmation, a ranked μGraph a layout;
- the final record's μGraphs are confirmed, each fragment it names a best for has a ranking holding that
  best, and a final record that says the run is complete has a confirmation for every found μGraph.

Each is checked on names alone (directory listings and two small records per fragment), so an open stays
cheap. The records are read in the reverse of the order the writer writes them (final, rankings,
layouts, confirmations, found) and the writer never deletes one: a reader beside a live writer sees
every record a later-written one names. (`repair` deletes records, holding the writer's lock, in the
order that keeps this true of what is left; a reader beside it may see a record listed and gone.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mugraph.storage.run.errors import damaged
from mugraph.storage.run.records import metadata_file, record_names

__all__ = ["check_final_shape", "check_records", "ranked_digests"]

_KINDS = ("layouts", "confirmations", "found")  # listed in this order: the reverse of writing


def check_records(
    root: Path,
    fragments: Sequence[Mapping[str, Any]],
    final: Mapping[str, Any] | None,
    rankings: Sequence[list[Any] | None],
    found_counts: Mapping[int, int],
) -> None:
    """StoreDamaged naming a missing (or contradicted) file when the records do not fit together.

    `final` and `rankings` must have been read before this call lists the other records."""
    names = {kind: [set(record_names(root, f"{kind}/{i}")) for i in range(len(fragments))] for kind in _KINDS}
    found, confirmed, laid = names["found"], names["confirmations"], names["layouts"]

    def need(kind: str, i: int, digest: str, named_by: Path) -> None:
        if digest not in names[kind][i]:
            raise damaged(metadata_file(root, f"{kind}/{i}/{digest}"), f"missing, though {named_by} names it")

    for i in range(len(fragments)):
        for digest in sorted(confirmed[i]):
            need("found", i, digest, metadata_file(root, f"confirmations/{i}/{digest}"))
        for digest in sorted(laid[i]):
            need("found", i, digest, metadata_file(root, f"layouts/{i}/{digest}"))
            need("confirmations", i, digest, metadata_file(root, f"layouts/{i}/{digest}"))
        ranking = rankings[i]
        file = metadata_file(root, f"rankings/{i}")
        for digest in ranked_digests(ranking or [], file):
            for kind in _KINDS[::-1]:
                need(kind, i, digest, file)
    for i, counted in sorted(found_counts.items()):
        if i < len(fragments) and len(found[i]) < counted:
            raise damaged(
                root / "found" / str(i),
                f"holds {len(found[i])} found μGraphs, but the commit record "
                f"{metadata_file(root, 'tasks')} counts {counted}",
            )
    if final is not None:
        _check_final(root, fragments, final, rankings, found, confirmed)


def ranked_digests(ranking: list[Any], file: Path) -> list[str]:
    """The digests of a ranking's μGraphs (not the reference program's row)."""
    out = []
    for row in ranking:
        if not isinstance(row, dict) or not isinstance(row.get("digest"), str):
            raise damaged(file, "a ranking row without a digest")
        if not row.get("reference"):
            out.append(row["digest"])
    return out


def _check_final(
    root: Path,
    fragments: Sequence[Mapping[str, Any]],
    final: Mapping[str, Any],
    rankings: Sequence[list[Any] | None],
    found: list[set[str]],
    confirmed: list[set[str]],
) -> None:
    file = metadata_file(root, "final")
    mugraphs, best = check_final_shape(final, file)
    every = set().union(*confirmed)
    for digest in sorted(set(mugraphs) - every):
        where = next((i for i, f in enumerate(found) if digest in f), 0)
        raise damaged(metadata_file(root, f"confirmations/{where}/{digest}"), f"missing, though {file} names it")
    for i, fragment in enumerate(fragments):
        chosen = best.get(fragment.get("name"))
        if chosen is None:
            continue
        ranking = rankings[i]
        ranking_file = metadata_file(root, f"rankings/{i}")
        if ranking is None:
            raise damaged(ranking_file, f"missing, though {file} names the best of fragment {i}")
        if not any(isinstance(r, dict) and r.get("digest") == chosen for r in ranking):
            raise damaged(ranking_file, f"does not rank {chosen[:16]}, the best {file} names")
    if final.get("complete") is True:
        for i in range(len(fragments)):
            for digest in sorted(found[i] - confirmed[i]):
                raise damaged(
                    metadata_file(root, f"confirmations/{i}/{digest}"),
                    f"missing, though {file} says the run is complete",
                )


def check_final_shape(final: Mapping[str, Any], file: Path) -> tuple[list[str], dict[Any, Any]]:
    """The final record's μGraphs and best per fragment (by name); StoreDamaged naming `file` where
    they are not a list of digests and a mapping."""
    mugraphs = final.get("mugraphs", [])
    if not isinstance(mugraphs, list) or not all(isinstance(d, str) for d in mugraphs):
        raise damaged(file, "mugraphs is not a list of digests")
    best = final.get("best_per_fragment", {})
    if not isinstance(best, dict):
        raise damaged(file, "best_per_fragment is not a mapping")
    return mugraphs, best
