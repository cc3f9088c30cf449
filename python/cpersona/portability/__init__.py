"""Moving memories between databases and agents (surface.md §4.9, §8).

`export`: JSONL backup of one or every agent. `import_`: reading it back, idempotently.
`merge`: copy or move one agent's rows into another in one transaction. `channels`: the
one-time `discord` channel repair. `agents`: deleting every row of one agent. SQL lives in
`storage/bulk.py`; these modules hold the rules and answer in the tools' shapes.
"""

from __future__ import annotations

from cpersona.portability.agents import delete_agent_data
from cpersona.portability.channels import migrate_channel_axis
from cpersona.portability.export import export_memories
from cpersona.portability.import_ import import_memories
from cpersona.portability.merge import merge_memories

__all__ = [
    "delete_agent_data",
    "export_memories",
    "import_memories",
    "merge_memories",
    "migrate_channel_axis",
]
