"""Every exception class cpersona raises. The Rust core raises these same classes."""

from __future__ import annotations


class CPersonaError(Exception):
    """Base class of cpersona's own errors."""


class ConfigError(CPersonaError, ValueError):
    """A setting has a value cpersona cannot use; the message names the variable."""


class InvalidInput(CPersonaError, ValueError):
    """A caller's argument is outside what the operation accepts."""


class StoreCorrupt(CPersonaError):
    """A derived vector file failed validation; it is rebuilt from SQLite, never trusted."""


class IndexObstructed(CPersonaError, OSError):
    """Something that is not cpersona's sits where an index file or its lock file belongs (a
    directory with contents): cpersona leaves it alone, and the index stays unusable until it is
    moved; scans read SQLite meanwhile. The message names the path and what to do."""


class AheadOfSnapshot(CPersonaError):
    """A derived index file has applied writes the caller's read snapshot does not see
    (another thread or process synced it after the snapshot began): it cannot answer for that
    snapshot, and it is not "ahead of the log" either (that test needs the newest log)."""


class EmbeddingUnavailable(CPersonaError):
    """The embedding provider could not produce a vector for this call."""


class EmbeddingMisconfigured(EmbeddingUnavailable):
    """The call failed before any request left the process (bad URL, no model, mode none).

    The recall health state reports such faults as `misconfigured` rather than `unreachable`
    (spec surface.md §12.5).
    """


class FullTextUnavailable(CPersonaError):
    """The full-text arm cannot answer: on PostgreSQL there is no FTS5 behind the Rust core's
    full-text index, so an index that cannot be read or written (a full disk, a read-only
    cache directory) leaves that arm empty for the call, as an FTS5 error does on SQLite."""
