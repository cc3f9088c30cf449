"""What one scoped read of recall asks for (retrieval.md §4.0, §4.2-4.3), as two values: whose
rows (`Scope`) and, for a vector scan, what of them is kept (`ScanLimits`). The recall pipeline
builds them once (retrieval/recall_query.py) and every channel and backend below it (the index
files, the chunked SQLite scan, PostgreSQL's statement, FTS5, the keyword statements, hydration)
reads the same `Scope`."""

from __future__ import annotations

from dataclasses import dataclass

from cpersona.models import ProjectFilter
from cpersona.storage.filters import project_where
from cpersona.timerange import TimeRange

__all__ = ["ScanLimits", "Scope"]


@dataclass(frozen=True, slots=True)
class Scope:
    """The isolation scope of one call (retrieval.md §4.0): the agent, the project and channel
    axes, the memories' source prefix (episodes have no source) and a time-scoped recall's
    range. Which rows it admits is written once in Python as the tests' oracle
    (tests/retrieval/scope_reference.py); each backend renders it its own way: `where` for
    SQL (agent, project, channel; the source prefix and the range are applied beside it, the
    range in Python where the stored rows have no instant key), hashes for the index files
    (derived/kernel_scope.py)."""

    agent_id: str
    project: ProjectFilter
    channel: str = ""
    source_prefix: str = ""
    span: TimeRange | None = None

    def where(self, alias: str = "") -> tuple[str, list[object]]:
        """The agent, project and channel axes as a WHERE fragment and its parameters."""
        p = f"{alias}." if alias else ""
        parts = [f"{p}agent_id = ?"]
        params: list[object] = [self.agent_id]
        pw, pp = project_where(self.project, f"{p}project_id")
        parts.append(pw)
        params.extend(pp)
        if self.channel:
            parts.append(f"{p}channel IN (?, '')")
            params.append(self.channel)
        return " AND ".join(parts), params


@dataclass(frozen=True, slots=True)
class ScanLimits:
    """Positions [0, window) are the near window and [window, reach) the far region (none when
    reach <= window); a row is kept when its score >= threshold, and each list is cut to its
    length (k near, far_k far) by (score DESC, position ASC)."""

    window: int
    reach: int
    threshold: float
    k: int
    far_k: int

    @property
    def has_far(self) -> bool:
        return self.reach > self.window

    @property
    def positions(self) -> int:
        """How many in-scope rows take a position: the window, and the far region's rows."""
        return max(self.window, self.reach)

    @property
    def kept_far(self) -> int:
        """The far list's length as a SQL LIMIT: 0 without a far region."""
        return max(self.far_k, 0) if self.has_far else 0

    def keeps_nothing(self) -> bool:
        """Whether no row can be kept, whatever the table holds (the scan need not run)."""
        return self.positions <= 0 or (self.k <= 0 and self.kept_far == 0)
