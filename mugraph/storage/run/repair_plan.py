"""What `repair` does to a scanned store: which records it drops, which timeline records it empties,
which tasks it sets to run again, and the ledger it leaves. Pure: it reads the `Scan` and writes
nothing (`repair` applies the plan).

The rules, each leaving a state the normal resume handles, so that the resumed run ends with the
result of an undamaged one:

- A damaged (or missing committed) confirmation, layout, ranking or final record is dropped, and
  so is every record that names one dropped (a layout its confirmation, a ranking its μGraphs, the
  final record its rankings): a resumed run confirms each found μGraph without a confirmation, lays
  out each confirmed one without a layout, then ranks every fragment and writes the final record.
- A damaged found μGraph is dropped, and the tasks that may have found it are set to run again; a
  pending task whose children are committed is rerun and finds the same μGraphs (a task explores
  its path under its node budget, deterministically), its children found again by (fragment,
  path). Which task found a lost μGraph is not read from its damaged record: each done task counts
  its fingerprint matches (`verified`), and each found record names the one task it keeps; the
  task that found a lost μGraph matched it and is named by no intact record for it, so it matched
  more than the intact records it is named by. Those tasks run again (none but the finder in
  practice; every done task of the fragment where the counter is not kept). The same holds where a
  record is gone without a trace (the commit record counts more found records than are intact, or
  the ledger is damaged), so a rebuilt ledger misses nothing.
- A damaged measurement is dropped alone: the ranking it went into stays; `--measure` takes it again.
- A damaged timeline record is written again with no samples (its invocation's progress is lost, its
  number kept, so the next invocation does not write over a later one).
- A damaged experts record is dropped: every run writes it again, and no other record names it.
- A damaged ledger is rebuilt from the records kept.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from mugraph.storage.run.cross_checks import ranked_digests
from mugraph.storage.run.records import metadata_file
from mugraph.storage.run.repair_scan import Damage, Scan
from mugraph.storage.run.run_records import JsonObject

__all__ = ["DROP_ORDER", "FINDS_COUNTER", "RepairPlan", "plan_repair"]

# Records are removed in this order, each kind before those it names, so a repair killed midway
# leaves no record naming a removed one while a damaged record remains for `repair` to find again.
DROP_ORDER = ("experts", "final", "rankings", "measurements", "layouts", "confirmations", "found")
FINDS_COUNTER = "verified"  # a done task's fingerprint matches (each found μGraph is one)


@dataclass
class RepairPlan:
    """What `repair` does to the scanned store."""

    scan: Scan
    drop: list[str] = field(default_factory=list)  # records dropped, in the order they are removed
    emptied: list[str] = field(default_factory=list)  # timeline records written again with no samples
    rerun: list[int] = field(default_factory=list)  # done task rows set to run again
    counts: dict[int, int] = field(default_factory=dict)  # fragment → found records the commit record counts
    ledger: list[str] = field(default_factory=list)  # the ledger's records after the repair
    damage: list[Damage] = field(default_factory=list)  # the scan's, and records that do not fit together

    @property
    def changes(self) -> bool:
        return bool(self.drop or self.emptied or self.rerun or self.counts or self.ledger != self.scan.ledger)

    @property
    def ledger_rebuilt(self) -> bool:
        return self.scan.ledger is None

    def keeps_result(self) -> bool:
        """Whether the store keeps a complete final record (nothing left for a run to do)."""
        final = self.scan.final
        return final is not None and "final" not in self.drop and bool(final.get("complete"))


def plan_repair(scan: Scan) -> RepairPlan:
    """The repair of the scanned store (nothing to do where nothing is damaged)."""
    plan = RepairPlan(scan, damage=list(scan.damage))
    n = len(scan.fragments)
    found = {i: set(scan.found.get(i, {})) for i in range(n)}
    confirmed = {i: scan.keyed["confirmations"][i] & found[i] for i in range(n)}
    laid = {i: scan.keyed["layouts"][i] & confirmed[i] for i in range(n)}
    plan.rerun = _rerun(plan, found)
    bad = scan.damaged
    drops = [r for r in bad if r.split("/")[0] in ("found", "measurements", "experts")]
    drops += _unfit(scan, "confirmations", confirmed) + _unfit(scan, "layouts", laid)
    changed = {int(r.split("/")[1]) for r in drops if r.split("/")[0] not in ("measurements", "experts")}
    changed |= {scan.table.fragment_of(row) for row in plan.rerun}
    rankings = {
        i: rows for i, rows in scan.rankings.items() if i not in changed and set(_ranked(scan, i, rows)) <= laid[i]
    }
    drops += [f"rankings/{i}" for i in range(n) if i not in rankings and _exists_or_bad(scan, f"rankings/{i}")]
    if _drops_final(plan, changed, rankings, confirmed, found):
        drops.append("final")
    plan.drop = sorted(set(drops), key=lambda r: (DROP_ORDER.index(r.split("/")[0]), r))
    plan.emptied = _emptied(scan)
    plan.ledger = _ledger(plan, found, confirmed, laid, rankings)
    return plan


def _rerun(plan: RepairPlan, found: dict[int, set[str]]) -> list[int]:
    """The done tasks to run again, and the found counts the commit record must lower (in `plan`)."""
    scan = plan.scan
    lost = {int(r.split("/")[1]) for r in scan.damaged if r.startswith("found/")}
    for i, counted in sorted(scan.table.found_counts.items()):
        if i < len(found) and len(found[i]) < counted:
            plan.counts[i] = len(found[i])
            if i not in lost:
                problem = f"holds {len(found[i])} intact found μGraphs, but the commit record counts {counted}"
                plan.damage.append(Damage(f"found/{i}", scan.root / "found" / str(i), problem))
            lost.add(i)
    if scan.ledger is None:  # a record may be gone without a trace
        lost = set(found)
    return sorted(row for i in sorted(lost) for row in _finders(scan, i))


def _finders(scan: Scan, fragment: int) -> list[int]:
    """The done tasks of `fragment` that matched more μGraphs than the intact found records name them for."""
    done = [t for t in scan.table.records() if t.done and t.fragment == fragment]
    if FINDS_COUNTER not in scan.table.counter_names:
        return [t.row for t in done]
    named = Counter(r.task for r in scan.found.get(fragment, {}).values())
    return [t.row for t in done if t.counters[FINDS_COUNTER] > named[t.row]]


def _unfit(scan: Scan, kind: str, kept: dict[int, set[str]]) -> list[str]:
    """The records of `kind` dropped: damaged, or about a μGraph whose other records are dropped."""
    bad = [r for r in scan.damaged if r.startswith(f"{kind}/")]
    return bad + [f"{kind}/{i}/{d}" for i, names in scan.keyed[kind].items() for d in sorted(names - kept[i])]


def _ranked(scan: Scan, fragment: int, rows: list[JsonObject]) -> list[str]:
    return ranked_digests(rows, metadata_file(scan.root, f"rankings/{fragment}"))


def _exists_or_bad(scan: Scan, record: str) -> bool:
    return record in scan.damaged or metadata_file(scan.root, record).is_file()


def _drops_final(
    plan: RepairPlan,
    changed: set[int],
    rankings: dict[int, list[JsonObject]],
    confirmed: dict[int, set[str]],
    found: dict[int, set[str]],
) -> bool:
    """Whether the final record goes: damaged, its run changed (a run writes it again), or it names
    what the repair drops."""
    scan = plan.scan
    if "final" in scan.damaged:
        return True
    final = scan.final
    if final is None:
        return False
    if changed or plan.rerun:
        return True
    every = set().union(*confirmed.values()) if confirmed else set()
    if not set(final.get("mugraphs", [])) <= every:
        return True
    best = final.get("best_per_fragment", {})
    for i, fragment in enumerate(scan.fragments):
        digest = best.get(fragment["name"])
        ranked = {r.get("digest") for r in rankings.get(i, []) if isinstance(r, dict)}
        if digest is not None and digest not in ranked:
            return True
    return bool(final.get("complete")) and any(found[i] - confirmed[i] for i in found)


def _emptied(scan: Scan) -> list[str]:
    """The timeline records written again with no samples: the damaged ones, and any gap in the
    invocations' numbers (the next invocation is numbered by their count)."""
    bad = {r.split("/")[1] for r in scan.damaged if r.startswith("timeline/")}
    names = set(scan.timeline) | bad
    numbers = [int(n) for n in names if n.isdigit()]
    gaps = {f"{k:06d}" for k in range(max(numbers) + 1)} - names if numbers else set()
    return [f"timeline/{n}" for n in sorted(bad | gaps)]


def _ledger(
    plan: RepairPlan,
    found: dict[int, set[str]],
    confirmed: dict[int, set[str]],
    laid: dict[int, set[str]],
    rankings: dict[int, list[JsonObject]],
) -> list[str]:
    """The ledger after the repair: the old one less the records dropped, or, where it is damaged,
    every record kept."""
    scan, dropped = plan.scan, set(plan.drop)
    if scan.ledger is not None:
        return [r for r in scan.ledger if r not in dropped] + [r for r in plan.emptied if r not in scan.ledger]
    kept: dict[str, dict[int, set[str]]] = {
        "found": found,
        "confirmations": confirmed,
        "layouts": laid,
        "measurements": scan.keyed["measurements"],  # intact ones, all kept
    }
    out = ["fragments"] if scan.has_fragments_record else []
    out += [f"{kind}/{i}/{d}" for kind, per in kept.items() for i, names in sorted(per.items()) for d in sorted(names)]
    out += [f"rankings/{i}" for i in sorted(rankings)]
    out += sorted({f"timeline/{n}" for n in scan.timeline} | set(plan.emptied))
    out += ["final"] if scan.final is not None and "final" not in dropped else []
    return out + (["experts"] if scan.experts else [])
