"""Per-subject partitioning of OAuth clients (surface.md §11.5).

An ACL row `{"client_id": "oauth:<issuer>:<client>", "token": null, "per_subject": true}` gives
every end user (each verified `(iss, sub)`) of that client an agent of their own: an opaque alias
`u-<12 hex>`, issued on the subject's first call and recorded in the alias ledger: on a
database servers on several hosts share (PostgreSQL), the database (storage/shared.py), which
imports the ledger file at start; otherwise the file (`CPERSONA_ALIAS_LEDGER_FILE`, else
`alias_ledger.json` beside the database). The sentinel `@me`
in `agent_id`, `source_agent_id` or `target_agent_id` becomes that alias before the ACL check,
and such a caller reaches its own alias only, whatever the row grants (and never the export
directory, which all subjects would share); answers gain `resolved_agent_id` (and
`alias_issued: true` on the call that issued it).

While per-subject mode is configured, `@me` and alias-shaped ids the ledger never issued are
reserved: other principals are refused them, and start-up refuses a database that holds one, so
a future subject can never inherit rows it did not write.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cpersona import private_files
from cpersona.errors import ConfigError
from cpersona.forwarding import Forwarded
from cpersona.server.acl import (
    READ_WRITE,
    STAR,
    AclConfig,
    Admitted,
    Guard,
    agent_arguments,
    demands,
    denial,
    reaches_files,
)
from cpersona.server.oauth import Subject
from cpersona.storage import shared
from cpersona.storage.error_kinds import StorageError

if TYPE_CHECKING:
    from cpersona.config import Settings
    from cpersona.storage import Store

ME = "@me"
ALIAS_PREFIX = "u-"
_ALIAS = re.compile(r"u-[0-9a-f]{12}")
LEDGER_VERSION = 1


def ledger_path(settings: Settings) -> Path:
    if settings.alias_ledger_file:
        return Path(settings.alias_ledger_file).expanduser()
    db = settings.db_path
    base = Path.cwd() if db == ":memory:" else Path(db).resolve().parent
    return base / "alias_ledger.json"


class AliasLedger:
    """`{"version": 1, "aliases": {issuer: {subject: "u-<hex>"}}}`, written atomically, until
    `attach` finds a shared store: from then on the database is the ledger (the file is read
    once, never written), so every server issues one alias per subject."""

    def __init__(self, path: Path, aliases: dict[str, dict[str, str]]) -> None:
        self.path = path
        self._aliases = aliases
        self._issued = {alias for subjects in aliases.values() for alias in subjects.values()}
        self._lock = threading.Lock()
        self._db: Store | None = None

    @property
    def where(self) -> str:
        """What names the ledger in messages."""
        if self._db is None:
            return str(self.path)
        return f"in the database (imported from {self.path})"

    def attach(self, db: Store) -> None:
        """Keep the ledger in `db` when servers on several hosts may share it: the file's
        aliases are imported with their ids (rows already there kept), nothing else changes.

        Raises:
            ConfigError: the file gives a subject another alias than the database, or an alias
                the database gives another subject; nothing was imported.
        """
        if not db.capabilities.shared:
            return
        rows = [(i, sub, a) for i, subs in self._aliases.items() for sub, a in subs.items()]
        conflicts = shared.import_aliases(db, rows)
        if conflicts:
            shown = ", ".join(conflicts[:5]) + (" ..." if len(conflicts) > 5 else "")
            raise ConfigError(
                f"CPERSONA_ALIAS_LEDGER_FILE={self.path}: the alias ledger disagrees with the "
                f"one in the database ({shown}); nothing was imported (keep one of them)"
            )
        self._db = db

    @classmethod
    def load(cls, path: Path) -> AliasLedger:
        """The ledger at `path` (absent: empty, created on first use).

        Raises:
            ConfigError: the file exists but cannot be read or is not a ledger.
        """
        where = f"CPERSONA_ALIAS_LEDGER_FILE={path}"
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(path, {})
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where}: cannot read the alias ledger: {exc}") from None
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{where}: the alias ledger is not JSON ({exc})") from None
        if not isinstance(doc, dict) or doc.get("version") != LEDGER_VERSION:
            raise ConfigError(f'{where}: the alias ledger must be {{"version": 1, "aliases": ...}}')
        aliases = doc.get("aliases")
        if not isinstance(aliases, dict) or set(doc) != {"version", "aliases"}:
            raise ConfigError(f"{where}: the alias ledger needs exactly version and aliases")
        seen: set[str] = set()
        for issuer, subjects in aliases.items():
            if not isinstance(subjects, dict):
                raise ConfigError(f"{where}: aliases of issuer {issuer!r} are not an object")
            for subject, alias in subjects.items():
                if not isinstance(alias, str) or not _ALIAS.fullmatch(alias) or alias in seen:
                    raise ConfigError(
                        f"{where}: the alias of {issuer!r} / {subject!r} is {alias!r}; expected "
                        "a unique u-<12 hex digits>"
                    )
                seen.add(alias)
        return cls(path, aliases)

    def issued(self, alias: str) -> bool:
        if alias in self._issued:
            return True
        if self._db is None or not shared.alias_issued(self._db, alias):
            return False
        with self._lock:  # an alias, once issued, is never withdrawn: remember it
            self._issued.add(alias)
        return True

    def alias(self, subject: Subject) -> tuple[str, bool]:
        """(the subject's alias, whether this call issued it). The ledger is on disk (or in
        the database) first.

        Raises:
            OSError: the ledger file could not be written; no alias was issued.
            StorageError: the database could not be read or written; no alias was issued.
        """
        if self._db is not None:
            return self._shared_alias(self._db, subject)
        with self._lock:
            known = self._aliases.get(subject.issuer, {}).get(subject.subject)
            if known is not None:
                return known, False
            alias = _fresh(self._issued)
            updated = {issuer: dict(subs) for issuer, subs in self._aliases.items()}
            updated.setdefault(subject.issuer, {})[subject.subject] = alias
            self._write(updated)
            self._aliases = updated
            self._issued.add(alias)
            return alias, True

    def _shared_alias(self, db: Store, subject: Subject) -> tuple[str, bool]:
        with self._lock:
            known = self._aliases.get(subject.issuer, {}).get(subject.subject)
        if known is not None:
            return known, False
        while True:  # insert-or-read: a racing server's insert wins and is read back
            alias, issued = shared.issue_alias(
                db, subject.issuer, subject.subject, _fresh(self._issued)
            )
            if alias is not None:
                break
        with self._lock:
            self._aliases.setdefault(subject.issuer, {})[subject.subject] = alias
            self._issued.add(alias)
        return alias, issued

    def _write(self, aliases: dict[str, dict[str, str]]) -> None:
        # Temp file + fsync + rename: a crash leaves the old ledger or the new one, never half.
        body = json.dumps({"version": LEDGER_VERSION, "aliases": aliases}, indent=1)
        private_files.write_atomically(self.path, body + "\n")
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _fresh(taken: set[str]) -> str:
    while True:
        alias = ALIAS_PREFIX + secrets.token_hex(6)
        if alias not in taken:
            return alias


def per_subject_guard(guard: Guard, ledger: AliasLedger, db: Store) -> SubjectGuard:
    """`guard` with per-subject rewriting in front, once the database holds no reserved id.

    Raises:
        ConfigError: the database already holds `@me` or an alias the ledger did not issue.
    """
    from cpersona.server.oauth import current_subject
    from cpersona.storage.agents import agent_ids_with_prefix

    ledger.attach(db)
    reserved = [
        agent
        for agent in agent_ids_with_prefix(db, ME, ALIAS_PREFIX)
        if agent == ME or (_ALIAS.fullmatch(agent) and not ledger.issued(agent))
    ]
    if reserved:
        shown = ", ".join(map(repr, reserved[:5])) + (" ..." if len(reserved) > 5 else "")
        raise ConfigError(
            f"refusing to start in per-subject mode: the database holds agent id(s) {shown} "
            f"that the alias ledger {ledger.where} did not issue; a subject given such an alias "
            "would inherit those rows (move them to another agent id, or restore the ledger)"
        )
    return SubjectGuard(guard, ledger, current_subject)


class SubjectGuard:
    """The ACL guard with per-subject rewriting in front of it (an `app.Authorize`)."""

    def __init__(
        self,
        guard: Guard,
        ledger: AliasLedger,
        subject: Callable[[], Subject | None],
    ) -> None:
        self.guard = guard
        self.ledger = ledger
        self._subject = subject

    config: Forwarded[AclConfig] = Forwarded("guard")

    def __call__(self, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any] | Admitted | None:
        client_id = self.guard.principal()
        client = self.config.client(client_id) if client_id is not None else None
        subject = self._subject()
        if client is None or not client.per_subject or subject is None:
            return self._reserved(tool, client_id, arguments) or self.guard(tool, arguments)
        try:
            alias, issued = self.ledger.alias(subject)
        except (OSError, StorageError) as exc:
            return {"ok": False, "error": f"could not record the caller's alias: {exc}"}
        # Any argument that names an agent in some tool may carry `@me`.
        agent_keys = agent_arguments()
        rewritten = {
            key: (alias if key in agent_keys and value == ME else value)
            for key, value in arguments.items()
        }
        # One export directory serves every caller: a subject could import what another
        # exported.
        if reaches_files(tool):
            return denial(
                tool,
                client_id,
                agent=alias,
                required=READ_WRITE,
                detail="per-subject principals cannot use the export directory, which every "
                "subject would share",
            )
        for need in demands(tool, rewritten, export_dir_set=self.guard.export_dir_set) or ():
            if need.agent != alias:
                detail = (
                    f"a per-subject principal reaches only its own agent {alias!r} (send "
                    f"{ME!r}); " + (need.widened or f"{need.agent!r} is another agent")
                )
                return denial(
                    tool, client_id, agent=need.agent, required=need.required, detail=detail
                )
        refused = self.guard(tool, rewritten)
        if refused is not None:
            return refused
        extra: dict[str, Any] = {"resolved_agent_id": alias}
        if issued:
            extra["alias_issued"] = True
        return Admitted(rewritten, extra)

    def _reserved(
        self, tool: str, client_id: str | None, arguments: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        for key in agent_arguments():
            value = arguments.get(key)
            if not isinstance(value, str) or value == STAR:
                continue
            if value == ME:
                why = f"{key} {ME!r} names a per-subject caller's own agent; this caller has none"
            elif _ALIAS.fullmatch(value) and not self.ledger.issued(value):
                why = f"{key} {value!r} is reserved for per-subject aliases and was never issued"
            else:
                continue
            return denial(tool, client_id, agent=value, detail=why)
        return None
