"""What one recall is asked and answers: the request, the result, the query's vector
(retrieval/pipeline.py runs it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cpersona.models import ProjectFilter
from cpersona.retrieval.candidates import Candidate
from cpersona.timerange import TimeRange


@dataclass(frozen=True, slots=True)
class QueryVector:
    """A query's embedding and the tables whose stored vectors came from the same model."""

    vector: np.ndarray
    tables: frozenset[str]
    model: str = ""  # that made `vector`; "" (a caller's own vector): used as is


@dataclass(frozen=True, slots=True)
class RecallRequest:
    agent_id: str
    query: str
    limit: int = 10
    deep: bool = False
    channel: str = ""
    exclude_contents: tuple[str, ...] = ()
    project: ProjectFilter = field(default_factory=lambda: ProjectFilter(None))
    source_id: str = ""
    session_key: str = ""
    paused: bool = False
    #: since/until (issue 22): every retriever keeps only rows whose instant is in it.
    span: TimeRange | None = None
    #: issue 32: keep superseded rows beside their successors (retrieval/supersession.py).
    include_superseded: bool = False


@dataclass
class RecallResult:
    rows: list[Candidate]  # best first; the tool reverses them
    gate_fallback: bool = False
    advisory: dict[str, Any] | None = None
