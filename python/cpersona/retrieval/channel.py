"""The channel protocol of recall (issue 31): a channel ranks a RecallQuery and returns its
ranked lists; fusion (retrieval/fusion.py) takes any number of them.

A channel is one arm (vector, full-text, keyword, remote) bound to the backend that answers it
on this store, chosen once when the recaller is built (retrieval/channels.py). Where a derived
index file may be unable to answer (being rebuilt after damage, ahead of the snapshot), the
arm's backend is `Fallback(file, database)`: the file's answer, else the database's; the
backends themselves say "cannot answer" by returning None, never by raising.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, Protocol, TypeVar

from cpersona.retrieval.candidates import Candidate
from cpersona.retrieval.hydration import Hydration, Ranked
from cpersona.retrieval.recall_query import RecallQuery


@dataclass
class RankedList:
    """One channel's candidates, best first.

    `pending`: ids the channel ranked but did not read (the vector arm: its rows ride with
    the next read of their table, hydration.py); `hydrated` reads them into `rows`.
    `score`: which of a row's values relative-score fusion normalises (§5.4). `excludable`:
    whether the caller's exclusions apply (§4.10: not to episode hits). `keeps_row`: the
    order in which fusion keeps one row object per identity (lower first: the near list's rows
    carry the cosine; a far vote only adds, §19.2). `ties`: fusion's order of the lists (lower
    first, so lower wins ties: the memory keyword list 0, the vector lists 1, the episode list
    2, docs/quality.md).
    `weight`: the list's weight under rrf.
    """

    name: str
    rows: list[Candidate] = field(default_factory=list)
    pending: Sequence[Ranked] = ()
    score: Literal["cosine", "bm25"] = "bm25"
    excludable: bool = True
    keeps_row: int = 1
    ties: int = 0
    weight: float = 1.0

    def hydrated(self, reads: Hydration) -> RankedList:
        if self.pending:
            self.rows = self.rows + reads.candidates(self.pending)
            self.pending = ()
        return self


class Channel(Protocol):
    """Ranks one query into ranked lists (one, or the vector arm's near and far lists)."""

    #: The timing stage its work is counted under (cpersona.timings.STAGES): the channel enters
    #: it when it does work for the query (a blank query runs no vector scan, and is not timed
    #: as one).
    stage: str

    def rank(self, query: RecallQuery, reads: Hydration) -> list[RankedList]: ...


T = TypeVar("T", covariant=True)


class Backend(Protocol[T]):
    """One way an arm answers on this store; None: it cannot answer this time."""

    def answer(self, query: RecallQuery, reads: Hydration, table: str) -> T | None: ...


B = TypeVar("B")


class Fallback(Generic[B]):
    """`first`'s answer, else `then`'s: an index file, else the database's own statement."""

    def __init__(self, first: Backend[B], then: Backend[B]) -> None:
        self.first = first
        self.then = then

    def answer(self, query: RecallQuery, reads: Hydration, table: str) -> B | None:
        got = self.first.answer(query, reads, table)
        return got if got is not None else self.then.answer(query, reads, table)
