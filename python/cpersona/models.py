"""Frozen value objects that cross module lines (storage -> memory -> server)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AgentRow:
    """The columns every table of an agent's rows opens with (storage/rows.py builds each
    whole row type on it, so the row and the shapes read from it share these fields)."""

    id: int
    agent_id: str
    project_id: str


@dataclass(frozen=True, slots=True)
class MemoryHead(AgentRow):
    """The columns of `memories` before the embedding: what the row and the listing share
    in the table's order."""

    msg_id: str
    content: str
    source: str  # JSON text
    timestamp: str
    metadata: str  # JSON text


@dataclass(frozen=True, slots=True)
class EpisodeHead(AgentRow):
    """The columns of `episodes` before the embedding."""

    summary: str
    keywords: str


@dataclass(frozen=True, slots=True)
class Memory(MemoryHead):
    """One row of `memories` (the embedding is not carried; it stays in storage/vectors)."""

    channel: str
    recall_count: int
    last_recalled_at: str | None
    locked: bool
    created_at: str
    embedded: bool


@dataclass(frozen=True, slots=True)
class Episode(EpisodeHead):
    """One row of `episodes`."""

    start_time: str | None
    end_time: str | None
    resolved: bool
    channel: str
    created_at: str
    embedded: bool


@dataclass(frozen=True, slots=True)
class NewMemory:
    """A memory about to be written: everything but the server-assigned columns."""

    agent_id: str
    project_id: str
    msg_id: str
    content: str
    source: str
    timestamp: str
    metadata: str
    channel: str
    embedding: bytes | None


@dataclass(frozen=True, slots=True)
class NewEpisode:
    """An episode about to be written."""

    agent_id: str
    project_id: str
    summary: str
    keywords: str
    start_time: str | None
    end_time: str | None
    resolved: bool
    channel: str
    embedding: bytes | None


@dataclass(frozen=True, slots=True)
class ProjectFilter:
    """The project axis of a read (surface.md §6.1): None = any, '' = global, X = X or global."""

    value: str | None
