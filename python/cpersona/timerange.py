"""Time-scoped calls: the `since`/`until` arguments and each row's instant (issue 22).

A row's instant is the one its `timestamp` names (episodes: `start_time`), read by
`parse_utc` as recall_with_context reads it; a row whose stamp names none uses `created_at`;
a row with neither has no instant and is in no bounded range. Instants are kept as integer
microseconds since the Unix epoch (UTC), the key the index files store per row
(docs/vector-index.md, docs/fts-index.md): exact for every instant `datetime` can hold, so the
index, the SQL fallback paths and this module agree to the microsecond.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from cpersona.memory.text import parse_utc

#: The key of a row without an instant (i64::MIN in the index files): inside no range.
NO_TIME = -(2**63)
_I64_MAX = 2**63 - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)

_T = TypeVar("_T")


def micros(instant: datetime) -> int:
    """`instant` (aware) as integer microseconds since the Unix epoch."""
    return (instant - _EPOCH) // _MICRO


def row_time(stamp: Any, created_at: Any) -> int:
    """A row's instant key: its stamp's instant, else `created_at`'s, else `NO_TIME`."""
    instant = parse_utc(stamp)
    if instant is None:
        instant = parse_utc(created_at)
    return NO_TIME if instant is None else micros(instant)


@dataclass(frozen=True, slots=True)
class TimeRange:
    """`[since, until)` in microseconds; a missing bound is open. Never empty of bounds: a
    call without either argument has no TimeRange at all (None), and behaves as before."""

    since: int | None
    until: int | None

    def admits(self, key: int) -> bool:
        if key == NO_TIME:
            return False
        if self.since is not None and key < self.since:
            return False
        return self.until is None or key < self.until

    def bounds(self) -> tuple[int, int]:
        """`[lo, hi)` with the open ends filled: lo above NO_TIME, hi the largest i64."""
        lo = NO_TIME + 1 if self.since is None else self.since
        return lo, _I64_MAX if self.until is None else self.until

    def kernel_args(self) -> dict[str, int]:
        """The `since`/`until` keywords of the kernels' scan and search."""
        out = {}
        if self.since is not None:
            out["since"] = self.since
        if self.until is not None:
            out["until"] = self.until
        if not out:  # open at both ends: still excludes rows without an instant
            out["since"] = NO_TIME + 1
        return out


class RangeError(ValueError):
    """A `since`/`until` argument that names no instant, or a reversed range."""


def _bound(name: str, value: Any) -> int | None:
    if value is None:
        return None
    instant = parse_utc(value) if isinstance(value, str) else None
    if instant is None:
        raise RangeError(
            f"{name} must be an ISO-8601 instant (e.g. 2026-01-31T09:00:00+09:00) or date "
            f"(2026-01-31), got {value!r}"
        )
    return micros(instant)


def parse_range(since: Any, until: Any) -> TimeRange | None:
    """The range the arguments name; None when neither is given. `since` is inclusive,
    `until` exclusive; no offset reads as UTC; a bare date is its start (00:00 UTC).

    Raises:
        RangeError: naming the argument that is not an instant, or both when `until` is not
            after `since`.
    """
    lo, hi = _bound("since", since), _bound("until", until)
    if lo is None and hi is None:
        return None
    if lo is not None and hi is not None and hi <= lo:
        raise RangeError(f"until ({until!r}) must be later than since ({since!r})")
    return TimeRange(lo, hi)


def first_in_span(
    rows: Iterable[_T],
    span: TimeRange,
    stamp: int | str,
    created: int | str,
    limit: int | None = None,
) -> list[_T]:
    """The first `limit` (None: all) of `rows`, in order, whose instant `span` admits; row
    fields `stamp` and `created` hold its stamp and `created_at`.

    A statement's LIMIT applied after the range, as the index files apply it: a cursor is
    read only until the limit is reached, then closed (a statement left mid-way would hold
    its read snapshot).
    """
    out: list[_T] = []
    try:
        for row in rows if limit is None or limit > 0 else ():
            if span.admits(row_time(row[stamp], row[created])):  # type: ignore[index]
                out.append(row)
                if limit is not None and len(out) >= limit:
                    break
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            close()
    return out
