"""`import_memories`: read a JSONL export back, idempotently (surface.md §8.2).

Three phases, so that neither file I/O nor the embedding model ever runs while SQLite's write
lock is held:

1. *Plan*: read the (size-bounded) file and turn each line into a sanitised record or an
   error line. Nothing touches the database.
2. *Preview*: replay the dedup rules against one read snapshot. This is the whole of a dry run
   and tells a real run which rows will be written; those of them the file carries no usable
   vector for are embedded now, in batches (an improvement over 2.5.x, which leaves them
   unsearchable until a health repair; docs/compatibility.md).
3. *Write*: one transaction re-runs the probes (authoritative against concurrent writers) and
   inserts. Any failure, including a header whose counts disagree with the body, rolls the
   whole import back.

Memories dedupe on msg_id and on exact content within their exact project/channel bucket,
episodes on exact summary within theirs; a profile overwrites the one of the same
(agent_id, user_id). So importing a file twice changes nothing the second time.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cpersona.credentials.policy import kinds, screen_record
from cpersona.memory.text import parse_utc, sanitize, utc_now_iso
from cpersona.portability import records
from cpersona.portability import vectors as kept
from cpersona.portability.counts import Copied
from cpersona.portability.paths import confine, read_bounded, refusal
from cpersona.storage import association_graph, bulk
from cpersona.storage.bulk import EpisodeRecord, MemoryRecord, ProfileRecord
from cpersona.storage.error_kinds import DISK_FULL, is_disk_full
from cpersona.vectors.remote import Item

if TYPE_CHECKING:
    from cpersona.portability.host import Host

log = logging.getLogger("cpersona.portability")

PROGRESS_EVERY = kept.PROGRESS_EVERY
Progress = Callable[[str], None]


_Item = kept.PlannedRow


@dataclass(slots=True)
class _Plan:
    items: list[_Item] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped_memories: int = 0
    skipped_episodes: int = 0
    header: dict[str, Any] | None = None
    present: list[int] = field(default_factory=lambda: [0, 0, 0])
    #: Line number -> credentials found in that record (CPERSONA_SECRETS, issue 22).
    credentials: dict[int, dict[str, int]] = field(default_factory=dict)
    #: The declared associations the file carries (issue 32; 2.6's export 1.1 records).
    graph: association_graph.Graph = field(default_factory=association_graph.Graph)

    def mismatch(self) -> str | None:
        """Why the body disagrees with the header's declared counts, or None."""
        if self.header is None:
            return None
        declared = [self.header.get(k) for k in ("memory_count", "episode_count", "profile_count")]
        for value, found in zip(declared, self.present, strict=True):
            if isinstance(value, int) and not isinstance(value, bool) and value != found:
                shown = [
                    "?" if not isinstance(v, int) or isinstance(v, bool) else v for v in declared
                ]
                return (
                    "file truncated or inconsistent: the header declares "
                    f"{shown[0]} memories / {shown[1]} episodes / {shown[2]} profiles, "
                    f"the file holds {self.present[0]} / {self.present[1]} / {self.present[2]}"
                )
        return None


@dataclass(slots=True)
class _Tally(Copied):
    profile_updated: bool = False
    future_timestamps: int = 0
    embedded_here: int = 0
    without_vector: int = 0
    #: Credentials redacted in the records imported (kind -> count).
    redacted: dict[str, int] = field(default_factory=dict)
    #: Why the file's vector of each written row was not kept (portability/vectors.py).
    refused: list[str] = field(default_factory=list)
    #: Items the preview found would be written (a real run embeds these).
    written: list[_Item] = field(default_factory=list)
    #: What a real run inserted, per agent, for the remote vector service.
    inserted: dict[str, list[Item]] = field(default_factory=dict)
    #: The file's ref of each row written -> its ref here (the declarations follow it).
    ref_map: dict[str, str] = field(default_factory=dict)


class _Aborted(Exception):
    pass


def import_memories(
    engine: Host,
    input_path: str,
    target_agent_id: str = "",
    dry_run: bool = False,
    *,
    paused: bool = False,
    confined: bool = True,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Import a JSONL export; the tool's response object.

    `paused` is the no-persist hook (issue 5): the path and size checks run, then a non-dry
    run answers the skipped zero tally without reading the file; the pause feature adds its
    markers. `confined=False` (the operator's command line) skips the `CPERSONA_EXPORT_DIR`
    check. `progress` receives one line every few thousand records (default: the log).
    """
    report = progress or log.info
    s = engine.settings
    if not input_path:
        return _fail("input_path is required")
    path = confine(input_path, s.export_dir if confined else None)
    if path is None:
        return _fail(refusal("input_path", input_path))
    raw = read_bounded(
        path, input_path, s.max_import_bytes, nofollow=confined and s.export_dir is not None
    )
    if isinstance(raw, dict):
        return raw
    if paused and not dry_run:
        return _tally_shape(_Tally(), dry_run=True)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _fail(f"could not read {input_path}: {exc}")

    plan = _plan(text, target_agent_id, s.max_content_length, s.max_profile_length, s.secrets)
    if s.secrets == "reject" and plan.credentials:
        lines = ", ".join(map(str, sorted(plan.credentials)))
        found: dict[str, int] = {}
        for counts in plan.credentials.values():
            for kind, n in counts.items():
                found[kind] = found.get(kind, 0) + n
        return failure_shape(
            f"import refused: records on lines {lines} hold credentials ({kinds(found)}); "
            "CPERSONA_SECRETS=reject refuses to store them, nothing was written"
        )
    target = kept.table_models(engine)
    kept.screen(plan.items, kept.file_models(plan.header), target)
    mismatch = plan.mismatch()
    tally = _Tally(skipped_memories=plan.skipped_memories, skipped_episodes=plan.skipped_episodes)
    carried: dict[str, int] | None = None
    try:
        if dry_run or mismatch is not None:
            with bulk.snapshot(engine.db) as rows:
                _apply(rows, plan, tally, s, write=False, report=report)
                carried = _carry(rows, plan, tally, target_agent_id, dry_run=True)
            if mismatch is not None:
                raise _Aborted(mismatch)
        else:
            with bulk.snapshot(engine.db) as rows:
                _apply(rows, plan, _Tally(), s, write=False, report=None, keep=tally.written)
            kept.embed(engine, [i for i in tally.written if i.needs_vector], report)
            with bulk.transaction(engine.db) as rows:
                kept.admit(rows, tally.written, target)
                _apply(rows, plan, tally, s, write=True, report=report)
                carried = _carry(rows, plan, tally, target_agent_id, dry_run=False)
    except Exception as exc:  # one transaction: everything rolled back
        if is_disk_full(exc):
            log.warning("import of %s failed: %s (%s)", path, DISK_FULL, exc)
        elif not isinstance(exc, _Aborted):
            log.exception("import of %s failed", path)
        return _aborted(exc, dry_run, tally, plan.errors)
    if not dry_run:
        engine.after_write()
        if engine.remote is not None:
            for agent, items in tally.inserted.items():
                engine.remote.index(agent, items)
        log.info(
            "imported %s memories (%s skipped), %s episodes (%s skipped) from %s",
            *tally.logged(),
            path,
        )
    out = _tally_shape(tally, dry_run=dry_run)
    if carried is not None:  # 2.6.14's key, only for a file that declares something
        out["associations"] = carried
    if tally.redacted and s.secrets == "redact":
        out["redacted"] = dict(sorted(tally.redacted.items()))
    if tally.future_timestamps:
        out["future_timestamps"] = tally.future_timestamps
    if not dry_run and tally.embedded_here:
        out["embedded_on_import"] = tally.embedded_here
    if tally.refused:
        out["foreign_vectors"] = kept.counts(tally.refused)
        out["foreign_vectors_hint"] = (
            "the file's vectors of these rows are not this database's model at its width, or "
            "the file names no model: they are not kept; "
            + (
                "a real run embeds these rows with the table's model"
                if dry_run
                else "the rows were embedded with the table's model (any counted in "
                "missing_embeddings have no vector yet)"
            )
        )
    if not dry_run and tally.without_vector:
        out["missing_embeddings"] = tally.without_vector
        out["missing_embeddings_hint"] = (
            f"{tally.without_vector} imported rows have no vector (embedding unavailable) "
            "and are found only by full-text and keyword search until "
            "check_health(fix=true) re-embeds them"
        )
    if plan.errors:
        out["errors"] = plan.errors
    return out


# -- plan ----------------------------------------------------------------------------------------


def _plan(text: str, target: str, content_cap: int, profile_cap: int, secrets: str) -> _Plan:
    plan = _Plan()
    # '\n' only: U+2028 and friends are legal unescaped inside JSON strings.
    for number, line in enumerate(text.split("\n"), 1):
        line = line.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            plan.errors.append(f"Line {number}: invalid JSON: {exc}")
            continue
        if not isinstance(record, dict):
            plan.errors.append(f"Line {number}: not a JSON object")
            continue
        kind = record.get("_type")
        if kind == "header":
            plan.header = record
        elif kind in ("memory", "episode", "profile"):
            slot = ("memory", "episode", "profile").index(kind)
            plan.present[slot] += 1  # records present, before any other check
            found = screen_record(record, secrets)
            if found:
                plan.credentials[number] = found
            agent = target or records.text_field(record, "agent_id")
            if not agent:
                plan.errors.append(f"Line {number}: {kind} missing agent_id")
            elif kind == "memory":
                _plan_memory(plan, number, record, agent, content_cap)
            elif kind == "episode":
                _plan_episode(plan, number, record, agent, content_cap)
            else:
                _plan_profile(plan, number, record, agent, profile_cap)
        elif kind in ("entity", "mention", "relation"):
            if not plan.graph.add(record):
                plan.errors.append(f"Line {number}: {kind} missing id")
        elif kind not in (None, ""):
            plan.errors.append(f"Line {number}: unknown type '{kind}'")
    return plan


def _carry(
    rows: bulk.Rows, plan: _Plan, tally: _Tally, target: str, *, dry_run: bool
) -> dict[str, int] | None:
    """The file's declarations written (or, `dry_run`, counted) against the rows the import
    wrote: a declaration naming a row it skipped or could not read is dropped, counted."""
    if not plan.graph:
        return None
    done = rows.carry_graph(plan.graph, tally.ref_map, agent_id=target or None, dry_run=dry_run)
    return {**done.counts(), "dropped": done.dropped}


def _stamp(plan: _Plan, number: int, record: dict[str, Any], key: str) -> str | None:
    stamp, usable = records.sqlite_stamp(record.get(key))
    if not usable:
        plan.errors.append(
            f"Line {number}: {key} {record.get(key)!r} names no instant; the import time is used"
            if key != "last_recalled_at"
            else f"Line {number}: last_recalled_at {record.get(key)!r} names no instant; dropped"
        )
    return stamp


def _vector(plan: _Plan, number: int, record: dict[str, Any]) -> bytes | None:
    blob, why = records.decode_embedding(record.get("embedding_b64"))
    if why is not None:
        plan.errors.append(f"Line {number}: {why}; the file's vector was not used")
    return blob


def _plan_memory(plan: _Plan, number: int, record: dict[str, Any], agent: str, cap: int) -> None:
    raw = record.get("content")
    if not isinstance(raw, str) or not raw:
        plan.skipped_memories += 1
        if raw not in (None, ""):
            plan.errors.append(f"Line {number}: memory content is not a string; not imported")
        return
    content, truncated = sanitize(raw, cap)
    if not content:
        plan.skipped_memories += 1
        plan.errors.append(f"Line {number}: memory is empty after sanitisation; not imported")
        return
    if truncated:
        plan.errors.append(
            f"Line {number}: memory content exceeded the {cap}-character cap and was truncated"
        )
    created_at = _stamp(plan, number, record, "created_at")
    timestamp = records.text_field(record, "timestamp") or _timestamp_from(created_at)
    embedding = _vector(plan, number, record)
    rec = MemoryRecord(
        id=records.int_field(record, "id"),
        agent_id=agent,
        project_id=records.text_field(record, "project_id"),
        msg_id=records.text_field(record, "msg_id"),
        content=content,
        source=records.json_text(record.get("source")),
        timestamp=timestamp,
        metadata=records.json_text(record.get("metadata")),
        channel=records.text_field(record, "channel"),
        recall_count=max(0, records.int_field(record, "recall_count")),
        last_recalled_at=_stamp(plan, number, record, "last_recalled_at"),
        locked=records.int_field(record, "locked") != 0,
        created_at=created_at,
        embedding=embedding,
    )
    plan.items.append(_Item("memory", number, rec, needs_vector=embedding is None))


def _timestamp_from(created_at: str | None) -> str:
    # A record without a timestamp gets its insertion instant in the server's default format
    # (what the invalid_timestamp repair would derive), else now.
    instant = parse_utc(created_at) if created_at else None
    return instant.isoformat() if instant is not None else utc_now_iso()


def _plan_episode(plan: _Plan, number: int, record: dict[str, Any], agent: str, cap: int) -> None:
    raw = record.get("summary")
    if not isinstance(raw, str) or not raw:
        return  # ignored, not counted (2.5.x)
    summary, truncated = sanitize(raw, cap)
    if not summary:
        plan.skipped_episodes += 1
        plan.errors.append(
            f"Line {number}: episode summary is empty after sanitisation; not imported"
        )
        return
    if truncated:
        plan.errors.append(
            f"Line {number}: episode summary exceeded the {cap}-character cap and was truncated"
        )
    keywords = record.get("keywords")
    if isinstance(keywords, list):
        words = " ".join(str(k) for k in keywords)
    else:
        words = keywords if isinstance(keywords, str) else ""
    resolved = record.get("resolved")
    embedding = _vector(plan, number, record)
    rec = EpisodeRecord(
        id=records.int_field(record, "id"),
        agent_id=agent,
        project_id=records.text_field(record, "project_id"),
        summary=summary,
        keywords=words,
        start_time=records.optional_text(record, "start_time"),
        end_time=records.optional_text(record, "end_time"),
        resolved=resolved is True or (isinstance(resolved, int) and resolved != 0),
        channel=records.text_field(record, "channel"),
        created_at=_stamp(plan, number, record, "created_at"),
        embedding=embedding,
    )
    plan.items.append(_Item("episode", number, rec, needs_vector=embedding is None))


def _plan_profile(plan: _Plan, number: int, record: dict[str, Any], agent: str, cap: int) -> None:
    raw = record.get("content")
    if not isinstance(raw, str) or not raw:
        plan.errors.append(f"Line {number}: profile has no content; the existing profile was kept")
        return
    content, truncated = sanitize(raw, cap)
    if not content:
        plan.errors.append(
            f"Line {number}: profile is empty after sanitisation; the existing profile was kept"
        )
        return
    if truncated:
        plan.errors.append(
            f"Line {number}: profile exceeded the {cap}-character profile cap and was truncated"
        )
    rec = ProfileRecord(
        id=0,
        agent_id=agent,
        user_id=records.text_field(record, "user_id"),
        project_id=records.text_field(record, "project_id"),
        content=content,
        updated_at=_stamp(plan, number, record, "updated_at"),
    )
    plan.items.append(_Item("profile", number, rec))


# -- preview and write -----------------------------------------------------------------------------


def _apply(
    rows: bulk.Rows,
    plan: _Plan,
    tally: _Tally,
    settings: Any,
    *,
    write: bool,
    report: Progress | None,
    keep: list[_Item] | None = None,
) -> None:
    """Run the dedup rules over every planned record; insert them when `write`.

    A preview cannot see rows it did not insert, so it remembers the identities it has
    passed (within-file duplicates are skipped exactly as a real run skips them).
    """
    seen_msg: set[tuple[str, str, str]] = set()
    seen_content: set[tuple[str, str, str, str]] = set()
    seen_episode: set[tuple[str, str, str, str]] = set()
    total = len(plan.items)
    for done, item in enumerate(plan.items, 1):
        rec = item.record
        if isinstance(rec, MemoryRecord):
            msg_key = (rec.agent_id, rec.project_id, rec.msg_id)
            content_key = (rec.agent_id, rec.project_id, rec.channel, rec.content)
            duplicate = (
                (rec.msg_id != "" and msg_key in seen_msg)
                or content_key in seen_content
                or rows.memory_exists(
                    rec.agent_id, rec.project_id, rec.channel, rec.msg_id, rec.content
                )
            )
            if not duplicate and write:
                new_id = rows.insert_memory(rec)
                duplicate = new_id is None
                if new_id is not None:
                    tally.inserted.setdefault(rec.agent_id, []).append(
                        Item(f"mem:{new_id}", rec.content)
                    )
            if duplicate:
                tally.skipped_memories += 1
            else:
                # A preview maps to a stand-in: it counts what a real run would carry.
                tally.ref_map[f"mem:{rec.id}"] = f"mem:{new_id if write else 0}"
                if not write:
                    if rec.msg_id:
                        seen_msg.add(msg_key)
                    seen_content.add(content_key)
                tally.memories += 1
                if _ahead(rec.timestamp, settings):
                    tally.future_timestamps += 1
                _count_written(tally, item, plan)
                if keep is not None:
                    keep.append(item)
        elif isinstance(rec, EpisodeRecord):
            key = (rec.agent_id, rec.project_id, rec.channel, rec.summary)
            if key in seen_episode or rows.episode_exists(*key):
                tally.skipped_episodes += 1
            else:
                new_id = 0
                if write:
                    new_id = rows.insert_episode(rec)
                    tally.inserted.setdefault(rec.agent_id, []).append(
                        Item(f"ep:{new_id}", rec.summary)
                    )
                else:
                    seen_episode.add(key)
                tally.ref_map[f"ep:{rec.id}"] = f"ep:{new_id}"
                tally.episodes += 1
                _count_written(tally, item, plan)
                if keep is not None:
                    keep.append(item)
        else:
            if write:
                rows.upsert_profile(rec)
            tally.profile_updated = True
            _count_written(tally, item, plan)
        if (
            write
            and report is not None
            and total >= PROGRESS_EVERY
            and (done % PROGRESS_EVERY == 0 or done == total)
        ):
            report(f"import: {done}/{total} records written")


def _count_written(tally: _Tally, item: _Item, plan: _Plan) -> None:
    for kind, n in plan.credentials.get(item.line, {}).items():
        tally.redacted[kind] = tally.redacted.get(kind, 0) + n
    rec = item.record
    if isinstance(rec, ProfileRecord):
        return
    if item.refused:
        tally.refused.append(item.refused)
    if item.embedded_here:
        tally.embedded_here += 1
    elif rec.embedding is None:
        tally.without_vector += 1


def _ahead(timestamp: str, settings: Any) -> bool:
    if settings.future_timestamp_mode == "off":
        return False
    instant = parse_utc(timestamp)
    if instant is None:
        return False
    ahead = (instant - datetime.now(UTC)).total_seconds()
    return bool(ahead > settings.future_timestamp_skew_seconds)


# -- responses -----------------------------------------------------------------------------------


def _fail(error: str) -> dict[str, Any]:
    return {"ok": False, "error": error}


def _tally_shape(tally: _Tally, *, dry_run: bool) -> dict[str, Any]:
    return {
        "ok": True,
        "dry_run": dry_run,
        **tally.fields("imported"),
        "profile_updated": tally.profile_updated,
    }


def _aborted(exc: Exception, dry_run: bool, tally: _Tally, errors: list[str]) -> dict[str, Any]:
    how = "aborted (dry run — nothing was written)" if dry_run else "aborted and rolled back"
    out: dict[str, Any] = {
        "ok": False,
        "error": f"import {how}: {DISK_FULL if is_disk_full(exc) else exc}",
        "dry_run": dry_run,
        **tally.fields("imported", rolled_back=True),
        "profile_updated": False,
    }
    if errors:
        out["errors"] = errors
    return out


def failure_shape(error: str) -> dict[str, Any]:
    """The tool's failure object for a refusal made before the handler (keys kept present)."""
    out = _tally_shape(_Tally(), dry_run=False)
    out.update(ok=False, error=error)
    return out
