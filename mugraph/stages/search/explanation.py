"""What `explain` says of one expert, as `search`, `optimize` and `mugraph explain` print it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from mugraph.stages.search.task_paths import Path


class ExplanationJSON(TypedDict):
    """`Explanation` as `mugraph explain --json` prints it (`reason` is the one-line reason)."""

    expert: str
    inside: bool
    rule: str | None
    reason: str
    setting: str | None
    path: list[int]
    labels: list[str]
    root_choice: int | None


@dataclass
class Explanation:
    """What `explain` says of one expert: inside (with its path) or the rule that excludes it."""

    expert: str
    inside: bool
    rule: str = ""  # "grid", "for-loop range", "block inputs", "op count", "oracle", ...
    reason: str = ""  # one line for people
    setting: str | None = None  # a `--set KEY=VALUE` that would admit the expert, if one would
    path: Path = ()  # inside: the expert's path; outside: the path of the excluding node
    labels: list[str] = field(default_factory=list)

    @property
    def root_choice(self) -> int | None:
        return self.path[0] if self.inside and self.path else None

    def line(self) -> str:
        """The one-line reason `search` prints beside "expert not found"."""
        if self.inside:
            return (
                f"inside the space, at root choice {self.root_choice} "
                f"(path {list(self.path)}); the oracle keeps every step"
            )
        if self.rule == "not equivalent":
            return f"not equivalent to the reference ({self.reason}); the search finds only equivalent μGraphs"
        fix = f"; --set '{self.setting}' would admit it" if self.setting else ""
        return f"outside the space ({self.rule}): {self.reason}{fix}"

    def missed_reason(self, complete: bool) -> str:
        """Why a search that did not find the expert missed it: where the expert lies inside the space,
        a search stopped at its time limit has not reached it yet (not a contradiction to print)."""
        if self.inside and not complete:
            return f"the search stopped at its time limit; it lies {self.line()}"
        return self.line()

    def missed_line(self, complete: bool) -> str:
        """What `optimize` and `search` print after the expert's name when their search missed it."""
        verdict = "not found yet" if self.inside and not complete else "NOT found"
        return f"{verdict}: {self.missed_reason(complete)}"

    def as_json(self) -> ExplanationJSON:
        return {
            "expert": self.expert,
            "inside": self.inside,
            "rule": self.rule or None,
            "reason": self.line(),
            "setting": self.setting,
            "path": list(self.path),
            "labels": self.labels,
            "root_choice": self.root_choice,
        }
