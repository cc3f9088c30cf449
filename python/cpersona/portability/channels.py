"""`migrate_channel_axis`: re-channel memories filed under the literal channel `discord`
(surface.md §8.4).

Old Discord bridges stored the bridge *type* as the channel. Where a row's
`metadata.session_id` starts with a numeric channel id (`<channel>:<user>:<chunk>` or
`<channel>:shared`), that id is the row's real channel. Only the `channel` column changes; a
row whose new identity would collide with an existing row (the content UNIQUE index) stays
where it is. Dry run by default, idempotent (a moved row no longer matches), and the report and
the update of a real run read one snapshot (they share the write transaction).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cpersona.storage import bulk

if TYPE_CHECKING:
    from cpersona.portability.host import Host

#: Sample rows and invalid-metadata ids the report lists.
SAMPLES = 5
INVALID_IDS = 10


def migrate_channel_axis(
    engine: Host,
    agent_id: str = "",
    dry_run: bool = True,
    globalize_unrecoverable: bool = False,
    *,
    paused: bool = False,
) -> dict[str, Any]:
    """Report (and unless a dry run, perform) the migration; the tool's response object.

    `agent_id` '' covers every agent. `paused` is the no-persist hook (issue 5): it forces the
    dry run; the pause feature adds `repairs_skipped` and its reason.
    """
    effective_dry_run = dry_run or paused
    scope = agent_id or None
    migrated = globalized = 0
    if effective_dry_run:
        with bulk.snapshot(engine.db) as rows:
            report = rows.channel_report(scope, sample=SAMPLES, invalid_ids=INVALID_IDS)
    else:
        with bulk.transaction(engine.db) as rows:
            report = rows.channel_report(scope, sample=SAMPLES, invalid_ids=INVALID_IDS)
            migrated = rows.rechannel_recoverable(scope)
            unrecoverable = report.discord_total - report.recoverable_total
            if globalize_unrecoverable and unrecoverable:
                globalized = rows.globalize_unrecoverable(scope)
        if migrated or globalized:
            engine.after_write()  # the channel is part of each row's index scope
    return {
        "agent_id": agent_id,
        "dry_run": effective_dry_run,
        "recoverable_total": report.recoverable_total,
        "recoverable_by_channel": [{"channel": c, "count": n} for c, n in report.by_channel],
        "unrecoverable_total": report.discord_total - report.recoverable_total,
        "invalid_metadata_total": report.invalid_metadata_total,
        "invalid_metadata_ids": report.invalid_metadata_ids,
        "globalize_unrecoverable": globalize_unrecoverable,
        "migrated": migrated,
        "globalized": globalized,
        "samples": [
            {"id": i, "recovered_channel": c, "session_id": s} for i, c, s in report.samples
        ],
    }
