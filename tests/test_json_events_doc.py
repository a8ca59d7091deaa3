"""docs/commands.md's "The --json event stream" describes every event `optimize --json` prints and every
key of each, as the record types in `mugraph.pipeline.events` have them (and the records inside them:
a ranking row, a fragment's progress, a reranked fragment), marking exactly the keys that may be absent
as *optional*, and names no key the records lack: the page and the code cannot drift apart.
`tests/pipeline/test_event_records.py` checks a real run's events against the same record types."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

from mugraph.cli.pipeline import optimize
from mugraph.pipeline import events
from mugraph.stages.layout.rows import RankedRow
from mugraph.storage.run.run_records import FragmentProgress

DOC = Path(__file__).resolve().parents[1] / "docs" / "commands.md"
SECTION = "## The --json event stream"
NOT_PRINTED = {"history"}  # the live page's; `run_printed` leaves it out

NESTED: dict[str, Any] = {
    "A fragment's progress": FragmentProgress,
    "A ranking row": RankedRow,
    "A reranked fragment": events.Reranked,
}
# a bullet's keys: backticked names before its colon, at its start or after a "; "
KEYS = re.compile(r"(?:^- |; )((?:`\w+`, )*`\w+`): (\*optional\*)?")


def _event_types() -> dict[str, Any]:
    """Every event the stream can print, by its `event` value: the driver's and the closing `error`."""
    out = {}
    for record in (*typing.get_args(events.Event), events.ErrorEvent):
        (name,) = typing.get_args(typing.get_type_hints(record)["event"])
        out[name] = record
    return out


def _documented() -> dict[str, dict[str, bool]]:
    """Each subsection's title → its keys → whether marked optional."""
    text = DOC.read_text()
    assert SECTION in text, f"{DOC} lost its section {SECTION!r}"
    body = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    out: dict[str, dict[str, bool]] = {}
    for part in body.split("\n### ")[1:]:
        title, _, rest = part.partition("\n")
        bullets = re.sub(r"\n  +", " ", rest)  # a bullet's continued lines joined
        keys: dict[str, bool] = {}
        for line in bullets.splitlines():
            for names, optional in KEYS.findall(line):
                for name in re.findall(r"`(\w+)`", names):
                    assert name not in keys, f"{title}: `{name}` described twice"
                    keys[name] = bool(optional)
        out[title.strip().strip("`")] = keys
    return out


def _keys(record: Any) -> dict[str, bool]:
    optional: frozenset[str] = record.__optional_keys__
    required: frozenset[str] = record.__required_keys__
    return {k: k in optional for k in (required | optional) - {"event"}}


def test_every_event_and_every_key_is_documented() -> None:
    documented = _documented()
    expected = {name: _keys(r) for name, r in _event_types().items() if name not in NOT_PRINTED}
    expected |= {title: _keys(r) for title, r in NESTED.items()}
    assert set(documented) == set(expected), "sections differ: " + str(set(documented) ^ set(expected))
    for title, keys in expected.items():
        missing = sorted(set(keys) - set(documented[title]))
        unknown = sorted(set(documented[title]) - set(keys))
        assert not missing and not unknown, f"{title}: undocumented {missing}, not in the record {unknown}"
        wrong = sorted(k for k in keys if keys[k] != documented[title][k])
        assert not wrong, f"{title}: *optional* marked wrongly on {wrong}"


def test_help_names_both_closing_events() -> None:
    flag = next(p for p in optimize.params if p.name == "as_json")
    assert "'done'" in str(flag.help) and "'error'" in str(flag.help), flag.help
