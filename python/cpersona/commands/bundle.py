"""`cpersona backup DEST` and `cpersona restore BUNDLE --db PATH`: one consistent bundle.

A bundle is a directory holding what belongs together: the database (a snapshot taken
through SQLite's online backup API, storage/backup.py), its calibration sidecar, and the ACL
and operating-context files when they are configured, with `manifest.json` listing each
file's role, size and SHA-256. It is written under a temporary name beside DEST and renamed
into place only once complete, so a DEST that exists is a whole bundle.

Restore checks the manifest and every checksum before touching anything, refuses to replace
a database that holds rows unless forced, writes the pages into the target through SQLite
(safe with a server attached), puts the sidecar beside it and removes the target's vector
index files, which described the old content (the next reader rebuilds them). The bundle
holds the ACL file's tokens when one is configured: it is created owner-only (0700/0600).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from cpersona import __version__, private_files
from cpersona.config import Settings
from cpersona.retrieval.sidecar import sidecar_path
from cpersona.storage import backup as sqlite_backup
from cpersona.storage import database_label
from cpersona.storage.error_kinds import StorageError
from cpersona.vectors.index import TABLE_CODES, index_file

MANIFEST = "manifest.json"
FORMAT = "cpersona-backup"
FORMAT_VERSION = 1
#: The file name each role has inside a bundle.
NAMES = {
    "database": "cpersona.db",
    "calibration": "calibration.json",
    "acl": "acl.json",
    "operating_context": "operating-context.toml",
}
#: Databases of at least this many pages report their progress (32 MiB at 4 KiB pages).
PROGRESS_MIN_PAGES = 8 * sqlite_backup.STEP_PAGES


class BundleError(Exception):
    """A bundle that cannot be written or trusted, or a restore that was refused."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One file of a bundle, as the manifest lists it."""

    role: str
    name: str
    bytes: int
    sha256: str
    source: str


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class ProgressLine:
    """Progress of a page copy on stderr, every tenth, for databases worth waiting on."""

    def __init__(self, what: str, out: TextIO | None = None) -> None:
        self.what = what
        self.out = out if out is not None else sys.stderr
        self._shown = -1

    def __call__(self, done: int, total: int) -> None:
        if total < PROGRESS_MIN_PAGES:
            return
        tenth = done * 10 // max(total, 1)
        if tenth > self._shown:
            self._shown = tenth
            print(f"cpersona: {self.what} {tenth * 10}% ({done}/{total} pages)", file=self.out)


# -- backup ----------------------------------------------------------------------------------


def _extra_files(settings: Settings, db_path: str) -> list[tuple[str, Path]]:
    """(role, path) of the existing side files that belong with the database."""
    found: list[tuple[str, Path]] = []
    sidecar = sidecar_path(db_path)
    if sidecar and os.path.isfile(sidecar):
        found.append(("calibration", Path(sidecar)))
    # Expanded as the server's loader expands it (server/acl.py): `~/acl.json` is configured.
    acl = os.path.expanduser(settings.acl_file) if settings.acl_file else ""
    if acl and os.path.isfile(acl):
        found.append(("acl", Path(acl)))
    oc_off = (settings.operating_context or "").strip().lower() == "off"
    oc_path = Path(os.path.expanduser(settings.operating_context_path))
    if not oc_off and oc_path.is_file():
        found.append(("operating_context", oc_path))
    return found


def create(
    settings: Settings,
    dest: Path,
    *,
    db_path: str | None = None,
    progress: sqlite_backup.Progress | None = None,
    step_pages: int = sqlite_backup.STEP_PAGES,
) -> list[Entry]:
    """Write a bundle of the database (default: `settings.db_path`) to the new directory `dest`.

    Raises:
        BundleError: `dest` exists and is not an empty directory, there is no database file,
            or the configured database is PostgreSQL (its own tools back it up).
        StorageError, OSError: the database or a side file could not be read or written.
    """
    if db_path is None and settings.database_url:
        raise BundleError(
            "the database is PostgreSQL "
            f"({database_label(settings.db_path, settings.database_url)}): back it up "
            "with pg_dump, pg_basebackup or your provider's snapshots (docs/scale-out.md)"
        )
    source = db_path or settings.db_path
    if source == ":memory:" or not os.path.isfile(source):
        raise BundleError(f"no database file at {source}")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BundleError(f"{dest} already exists and is not an empty directory")
    dest = dest.absolute()
    private_files.make_dirs(dest.parent)
    work = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    private_files.make_dirs(work)
    try:
        db_file = work / NAMES["database"]
        # Reserved owner-only first: SQLite creates with the umask's mode, and gives its
        # journal the mode of the file it journals.
        private_files.reserve(db_file)
        sqlite_backup.copy_out(source, db_file, progress=progress, step_pages=step_pages)
        entries = [_entry("database", db_file, source)]
        for role, path in _extra_files(settings, source):
            target = work / NAMES[role]
            # operator files and an atomically renamed sidecar
            private_files.copy(path, target)
            entries.append(_entry(role, target, str(path)))
        _write_manifest(work, entries)
        if dest.is_dir():
            dest.rmdir()  # the empty directory the caller named
        os.rename(work, dest)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return entries


def _entry(role: str, path: Path, source: str) -> Entry:
    return Entry(role, path.name, path.stat().st_size, sha256_file(path), os.path.abspath(source))


def _write_manifest(work: Path, entries: list[Entry]) -> None:
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "cpersona_version": __version__,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "files": [dataclasses.asdict(e) for e in entries],
    }
    text = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
    private_files.write_atomically(work / MANIFEST, text, fsync=False)


# -- verify and restore ----------------------------------------------------------------------


def verify(bundle: Path) -> dict[str, Entry]:
    """The bundle's files by role, once the manifest and every checksum are found right.

    Raises:
        BundleError: naming the first problem (no manifest, a missing, resized or altered file).
    """
    try:
        manifest = json.loads((bundle / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BundleError(f"{bundle} is not a cpersona backup: no {MANIFEST}") from None
    except (OSError, ValueError) as exc:
        raise BundleError(f"{bundle / MANIFEST} cannot be read: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(f"{bundle / MANIFEST} is not a cpersona backup manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise BundleError(
            f"{bundle} has backup format version {manifest.get('format_version')!r}; this "
            f"cpersona reads version {FORMAT_VERSION}"
        )
    entries: dict[str, Entry] = {}
    for item in manifest.get("files") or []:
        entry = _read_entry(item)
        path = bundle / entry.name
        if not path.is_file():
            raise BundleError(f"the bundle is incomplete: {entry.name} is missing")
        if path.stat().st_size != entry.bytes or sha256_file(path) != entry.sha256:
            raise BundleError(f"the bundle is damaged: {entry.name} does not match its checksum")
        entries[entry.role] = entry
    if "database" not in entries:
        raise BundleError(f"{bundle / MANIFEST} lists no database")
    return entries


def _read_entry(item: Any) -> Entry:
    try:
        entry = Entry(
            str(item["role"]),
            str(item["name"]),
            int(item["bytes"]),
            str(item["sha256"]),
            str(item.get("source", "")),
        )
    except (TypeError, KeyError, ValueError):
        raise BundleError(f"the manifest has a malformed file entry: {item!r}") from None
    if entry.role not in NAMES or entry.name != NAMES[entry.role]:
        raise BundleError(f"the manifest lists an unexpected file: {entry.name!r}")
    return entry


@dataclass(frozen=True, slots=True)
class Restored:
    """What a restore wrote, and the side files it left in the bundle."""

    written: list[str]
    left: list[str]


def restore(
    bundle: Path,
    db_path: str,
    *,
    force: bool = False,
    acl_file: str | None = None,
    operating_context_path: str | None = None,
    progress: sqlite_backup.Progress | None = None,
) -> Restored:
    """Restore the bundle's database to `db_path`, its sidecar beside it, and the ACL and
    operating-context files to the paths given for them (else they stay in the bundle).

    Raises:
        BundleError: the bundle fails `verify`, or a target holds data and `force` is off.
        StorageError, OSError: the copy could not be made.
    """
    entries = verify(bundle)
    if db_path == ":memory:":
        raise BundleError("cannot restore into an in-memory database")
    _refuse_non_empty(db_path, force)
    # Expanded once, here: the existence check below must look at the file that gets written
    # (`--acl-file=~/acl.json` reaches us unexpanded, as the server's loaders expand it).
    destinations = {
        role: os.path.expanduser(path) if path else None
        for role, path in (("acl", acl_file), ("operating_context", operating_context_path))
    }
    for role, path in destinations.items():
        if role in entries and path and os.path.exists(path) and not force:
            raise BundleError(f"{path} exists; pass --force to replace it")
    private_files.make_dirs(Path(db_path).absolute().parent)
    created = not os.path.exists(db_path)
    if created:  # owner-only from the start, as the server creates it
        private_files.reserve(db_path)
    try:
        # One write transaction on the target, committed at the last step: a failed copy
        # leaves the target as it was.
        sqlite_backup.copy_in(bundle / NAMES["database"], db_path, progress=progress)
    except BaseException:
        if created:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(db_path + suffix).unlink(missing_ok=True)
        raise
    written = [os.path.abspath(db_path)]
    sidecar = sidecar_path(db_path)
    if sidecar is not None:
        if "calibration" in entries:
            _place(bundle / NAMES["calibration"], Path(sidecar))
            written.append(os.path.abspath(sidecar))
        else:  # a sidecar of the replaced content would calibrate the restored one
            Path(sidecar).unlink(missing_ok=True)
    for table in TABLE_CODES:  # they describe the replaced content; readers rebuild them
        index_file(db_path, table).unlink(missing_ok=True)
        Path(f"{index_file(db_path, table)}.sum").unlink(missing_ok=True)
    left = []
    for role, path in destinations.items():
        if role not in entries:
            continue
        if path:
            _place(bundle / NAMES[role], Path(path))
            written.append(os.path.abspath(path))
        else:
            left.append(str(bundle / NAMES[role]))
    return Restored(written, left)


def _refuse_non_empty(db_path: str, force: bool) -> None:
    if force or not os.path.exists(db_path) or os.path.getsize(db_path) == 0:
        return
    try:
        rows = sqlite_backup.data_rows(db_path)
    except StorageError:
        raise BundleError(
            f"{db_path} exists and is not an empty cpersona database; pass --force to replace it"
        ) from None
    if rows:
        raise BundleError(f"{db_path} holds {rows} rows; pass --force to replace them")


def _place(source: Path, target: Path) -> None:
    """Copy `source` to `target` atomically (a temporary file renamed over it), owner-only
    from its creation: the ACL file holds tokens."""
    private_files.copy(source, target)


# -- the commands ----------------------------------------------------------------------------


def _err(text: str) -> None:
    print(text, file=sys.stderr)


def _command(name: str, refused: str, work: Callable[[], list[str]]) -> int:
    """`cpersona <name>`: `work()` then the lines it returns, each on stderr. Exit 0 done, 2
    refused (a `BundleError`, said after `refused`), 1 failed (storage or the filesystem)."""
    try:
        lines = work()
    except BundleError as exc:
        _err(f"cpersona {name}: {refused}{exc}")
        return 2
    except (StorageError, OSError) as exc:
        _err(f"cpersona {name}: failed: {type(exc).__name__}: {exc}")
        return 1
    for line in lines:
        _err(f"cpersona {name}: {line}")
    return 0


def run_backup(settings: Settings, dest: str, db_path: str | None = None) -> int:
    """`cpersona backup DEST`: exit 0 written, 1 failed, 2 refused."""

    def work() -> list[str]:
        entries = create(
            settings, Path(dest), db_path=db_path, progress=ProgressLine("backup copied")
        )
        size = sum(e.bytes for e in entries)
        roles = ", ".join(e.role for e in entries)
        return [f"wrote {os.path.abspath(dest)} ({roles}; {size / 2**20:.1f} MiB)"]

    return _command("backup", "", work)


def run_restore(
    bundle: str,
    db_path: str,
    *,
    force: bool,
    acl_file: str | None,
    operating_context_path: str | None,
) -> int:
    """`cpersona restore BUNDLE --db PATH`: exit 0 restored, 1 failed, 2 refused."""

    def work() -> list[str]:
        done = restore(
            Path(bundle),
            db_path,
            force=force,
            acl_file=acl_file,
            operating_context_path=operating_context_path,
            progress=ProgressLine("restore copied"),
        )
        return [f"wrote {path}" for path in done.written] + [
            f"not restored (no destination given): {path}" for path in done.left
        ]

    return _command("restore", "refused: ", work)
