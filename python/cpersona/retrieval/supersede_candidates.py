"""Help the agent declare, without inferring (issue 32 item 3): when `store` writes a memory
very close to an existing one of the same scope, its answer lists those refs as candidates
the new memory could supersede (`supersede_candidates`). The server declares nothing: the
agent reads the list and calls declare_associations, or does not.

Close means one of two things, each reported as `why`:
- `msg_id_family`: both message ids are one family, the same text once a trailing version
  (`-2`, `_v3`, `.r4`, `#5`, ...) is taken off (`standup-v1` and `standup-v2`);
- `cosine`: the stored vectors' cosine is at least `CANDIDATE_COSINE`.

Same scope means the same agent, project and channel (what supersession itself requires).
Asked only for an agent that declares replacing roles, or a store that carries
`associations`: an agent that never declares pays nothing and sees store's answer unchanged.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np

from cpersona.models import ProjectFilter
from cpersona.storage import association_links as role_sql
from cpersona.storage import associations as decl
from cpersona.storage import search
from cpersona.storage.scan_request import ScanLimits, Scope
from cpersona.vectors.search import scan_table

if TYPE_CHECKING:
    from cpersona.retrieval.pipeline import Recaller

#: A stored cosine at or above this makes an existing memory a candidate.
CANDIDATE_COSINE = 0.9
#: At most this many candidates are listed, closest first.
MAX_CANDIDATES = 5
_VERSION = re.compile(r"[-_.:#/@ ]?(?:v|ver|rev|r)?\d+$", re.IGNORECASE)


def family(msg_id: str) -> str:
    """The message id without a trailing version; '' when nothing is left."""
    return _VERSION.sub("", msg_id.strip())


def candidates(
    recaller: Recaller,
    agent_id: str,
    project_id: str,
    channel: str,
    row_id: int,
    msg_id: str,
) -> list[dict[str, Any]]:
    """The existing memories of the new row's scope it could supersede, closest first."""
    found: dict[int, dict[str, Any]] = {}
    stem = family(msg_id) if msg_id else ""
    if stem:
        for other_id, other_msg in role_sql.same_scope_msg_ids(
            recaller.db, agent_id, project_id, channel, stem, row_id
        ):
            if family(other_msg) == stem:
                found[other_id] = {"ref": f"mem:{other_id}", "why": "msg_id_family"}
    blob = search.embeddings(recaller.db, "memories", [row_id]).get(row_id)
    if blob is not None:
        vec = np.frombuffer(blob, dtype="<f4")
        if vec.size and np.all(np.isfinite(vec)):
            for other_id, cosine in _nearest(recaller, agent_id, project_id, channel, vec):
                if other_id == row_id or cosine < CANDIDATE_COSINE:
                    continue
                entry = found.setdefault(other_id, {"ref": f"mem:{other_id}", "why": "cosine"})
                entry["cosine"] = round(cosine, 4)
    # Rows the new one already replaces by declaration are no longer candidates.
    declared = role_sql.role_links(
        recaller.db, agent_id, [("mem", row_id)], decl.REPLACING, as_object=False, as_subject=True
    )
    for link in declared:
        if link.obj[0] == "mem":
            found.pop(link.obj[1], None)
    if not found:
        return []
    # Only rows filed exactly where the new one is: supersession needs one scope.
    filed = role_sql.filed(recaller.db, [("mem", i) for i in found])
    here = [
        i
        for i in found
        if (f := filed.get(("mem", i))) is not None
        and (f.agent_id, f.project_id, f.channel) == (agent_id, project_id, channel)
    ]
    here.sort(key=lambda i: (-found[i].get("cosine", 2.0), -i))
    return [found[i] for i in here[:MAX_CANDIDATES]]


def _nearest(
    recaller: Recaller, agent_id: str, project_id: str, channel: str, vec: np.ndarray
) -> list[tuple[int, float]]:
    s = recaller.s
    limits = ScanLimits(s.max_memories, 0, CANDIDATE_COSINE, MAX_CANDIDATES + 1, 0)
    hits = scan_table(
        recaller.db,
        "memories",
        recaller.files.vectors.get("memories"),
        np.ascontiguousarray(vec, dtype=np.float32),
        Scope(agent_id, ProjectFilter(project_id), channel),
        limits,
        chunk_rows=s.vector_scan_chunk_rows,
        kernels=recaller.kernels,
    )
    return list(zip(hits.near_ids.tolist(), hits.near_scores.tolist(), strict=True))
