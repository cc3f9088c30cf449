"""The second phase of recall (retrieval.md §1): the rows of the ids the arms ranked, read
from the database in scope.

Each read is a statement, and on PostgreSQL a round trip. The vector arm ranks first but its
candidates are needed only at fusion, so its ids wait (`expect`) and ride with the next read
of the same table: the keyword arm's full-text hits, the episode arm's, or, when neither reads,
the vector arm's own at `candidates`. One statement per table where there were two, with the
same rows: every read applies the same scope and source filter in the same snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from cpersona.retrieval.candidates import Candidate, from_episode, from_memory
from cpersona.storage import Store, search
from cpersona.storage.scan_request import Scope
from cpersona.storage.search import EpisodeHit, MemoryHit

#: (kind "mem" or "ep", row id, cosine) as the vector arm ranks them.
Ranked = tuple[str, int, float]


class Hydration:
    """One recall's reads of rows by id in `scope` (memories also by its source prefix)."""

    def __init__(self, db: Store, scope: Scope) -> None:
        self._db = db
        self._scope = scope
        self._source = scope.source_prefix
        self._mems: dict[int, MemoryHit] = {}
        self._eps: dict[int, EpisodeHit] = {}
        #: Ids read already (found or not) and ids to read with the next read, per kind.
        self._read: dict[str, set[int]] = {"mem": set(), "ep": set()}
        self._expected: dict[str, list[int]] = {"mem": [], "ep": []}

    def expect(self, hits: Iterable[Ranked]) -> None:
        """Read the rows of `hits` with the next read of their table."""
        for kind, row_id, _ in hits:
            if row_id not in self._read[kind]:
                self._expected[kind].append(row_id)

    def _fetch(self, kind: str, ids: Sequence[int]) -> None:
        read = self._read[kind]
        want = list(dict.fromkeys(i for i in (*self._expected[kind], *ids) if i not in read))
        if not want:
            return
        if kind == "mem":
            self._mems.update(search.memories_by_id(self._db, want, self._scope, self._source))
        else:
            self._eps.update(search.episodes_by_id(self._db, want, self._scope))
        read.update(want)
        self._expected[kind] = []

    def memories(self, ids: Sequence[int]) -> dict[int, MemoryHit]:
        """As `search.memories_by_id` for this recall's scope and source."""
        self._fetch("mem", ids)
        return {i: self._mems[i] for i in ids if i in self._mems}

    def episodes(self, ids: Sequence[int]) -> dict[int, EpisodeHit]:
        """As `search.episodes_by_id` for this recall's scope."""
        self._fetch("ep", ids)
        return {i: self._eps[i] for i in ids if i in self._eps}

    def candidates(self, hits: Sequence[Ranked]) -> list[Candidate]:
        """`hits` as candidates in their order, their cosine set; a row that vanished between
        the phases (or is out of scope) is dropped silently."""
        mems = self.memories([i for k, i, _ in hits if k == "mem"])
        eps = self.episodes([i for k, i, _ in hits if k == "ep"])
        out = []
        for kind, row_id, score in hits:
            if kind == "mem":
                mem = mems.get(row_id)
                row = None if mem is None else from_memory(mem)
            else:
                ep = eps.get(row_id)
                row = None if ep is None else from_episode(ep)
            if row is not None:
                row.cosine = float(score)
                out.append(row)
        return out
