"""What one scoped vector scan asks for (retrieval.md §4.0, §4.2-4.3), as two values: whose rows
(`Scope`) and what of them is kept (`ScanLimits`). The recall pipeline builds them once and every
path below (the index file, the chunked SQLite scan, PostgreSQL's statement) reads them."""

from __future__ import annotations

from dataclasses import dataclass

from cpersona.models import ProjectFilter
from cpersona.timerange import TimeRange

__all__ = ["ScanLimits", "Scope"]


@dataclass(frozen=True, slots=True)
class Scope:
    """The isolation scope of one call (retrieval.md §4.0)."""

    agent_id: str
    project: ProjectFilter
    channel: str = ""
    source_prefix: str = ""
    span: TimeRange | None = None


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
