"""The checkup CLI: `python -m cpersona.checkup [--db PATH] [--agent ID] [--fix] [--deep] [--json]`
(surface.md §9.5).

Exit codes, usable as a CI gate: 0 healthy, 1 degraded, 2 unhealthy, 3 the check could not
run (no such database, unreadable file, bad settings). A report-only run opens the database
read-only (§7.7): nothing is migrated, created or written. `--fix` opens it like the server
does and repairs. The server's no-persist pause does not apply here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from cpersona.commands.environment import settings_from_env
from cpersona.config import Settings

EXIT = {"healthy": 0, "degraded": 1, "unhealthy": 2}
COULD_NOT_RUN = 3


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m cpersona.checkup",
        description="Check a cpersona database (the check_health registry). Exit 0 healthy, "
        "1 degraded, 2 unhealthy, 3 could not run.",
    )
    p.add_argument(
        "--db",
        help="database file, or a postgresql:// URL (default: $CPERSONA_DATABASE_URL, else "
        "$CPERSONA_DB_PATH, else data/cpersona.db); must exist",
    )
    p.add_argument("--agent", default="", help="restrict agent-scoped checks to this agent")
    p.add_argument("--fix", action="store_true", help="apply repairs (default: report only)")
    p.add_argument(
        "--strict",
        action="store_true",
        help="accepted for CPersona 2.5.x compatibility: warn always gates (exit 1)",
    )
    p.add_argument(
        "--deep",
        action="store_true",
        help="also run deep_check (report-only) for every agent, or --agent",
    )
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    settings = settings_from_env("cpersona checkup")
    if settings is None:
        return COULD_NOT_RUN
    url = _database_url(args.db, settings)
    if url is not None:  # PostgreSQL: CPERSONA_DATABASE_URL, or --db postgresql://...
        from cpersona.storage import database_label

        where = database_label(settings.db_path, url)
        settings = dataclasses.replace(settings, database_url=url)
    else:
        path = args.db or settings.db_path
        if not args.db and "CPERSONA_DB_PATH" not in settings.explicit:
            print(
                f"cpersona checkup: using the default database {os.path.abspath(path)}",
                file=sys.stderr,
            )
        if path == ":memory:" or not os.path.isfile(path):
            print(f"cpersona checkup: no database file at {path}", file=sys.stderr)
            return COULD_NOT_RUN
        where = path
        settings = dataclasses.replace(settings, db_path=path, database_url=None)
    try:
        report = _run(settings, args)
    except Exception as exc:
        from cpersona.storage import open_failure_reason

        reason = open_failure_reason(settings.db_path, settings.database_url, exc)
        print(
            f"cpersona checkup: the check could not run on {where}: {type(exc).__name__}: {reason}",
            file=sys.stderr,
        )
        return COULD_NOT_RUN
    code = EXIT[report["status"]]
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        _print_human(report, code)
    return code


def _database_url(given: str | None, settings: Settings) -> str | None:
    """The PostgreSQL database to check: `--db` when it is a URL; without `--db`,
    CPERSONA_DATABASE_URL. A `--db` file path wins over the environment's URL."""
    if given:
        return given if given.startswith(("postgresql://", "postgres://")) else None
    return settings.database_url or None


def _run(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    from cpersona.health.deep import deep_check
    from cpersona.health.registry import check_health
    from cpersona.storage.upkeep.handle import agents, reading

    if args.fix:
        from cpersona.engine import Engine
        from cpersona.health.context import from_engine
        from cpersona.health.credentials import after_fix

        engine = Engine(settings)
        try:
            ctx = from_engine(engine, args.agent)
            report = check_health(ctx, fix=True, extra_issues=engine.updates.health_issues())
            if report.get("fixed"):
                after_fix(engine, ctx)
            if args.deep:
                report["deep"] = _deep(ctx, args.agent, agents(reading(engine.db)), deep_check)
            return report
        finally:
            engine.close()
    ctx = _read_only_context(settings, args.agent)
    try:
        report = check_health(ctx, fix=False)
        if args.deep:
            report["deep"] = _deep(ctx, args.agent, agents(reading(ctx.db)), deep_check)
        return report
    finally:
        if ctx.indexes:
            for index in ctx.indexes.values():
                index.close()
        if ctx.embedder is not None:
            ctx.embedder.close()
        ctx.db.close()


def _deep(ctx: Any, agent: str, agents: list[str], deep_check: Any) -> dict[str, Any]:
    out = {}
    for name in [agent] if agent else agents:
        ctx.agent_id = name
        out[name] = deep_check(ctx)
    ctx.agent_id = agent
    return out


def _read_only_context(settings: Settings, agent: str) -> Any:
    from cpersona.embedding import make_provider
    from cpersona.health.context import HealthContext
    from cpersona.operating_context import OperatingContext
    from cpersona.retrieval.sidecar import DatabaseSidecar, Sidecar, sidecar_path
    from cpersona.storage import open_read_only
    from cpersona.storage.upkeep.handle import reading, table_exists
    from cpersona.vectors.index import VectorIndex

    db = open_read_only(
        settings.db_path, settings.database_url, connect_timeout=settings.pg_connect_timeout_seconds
    )
    try:
        embedder = make_provider(settings)
        indexes = None
        sidecar: Sidecar
        if settings.database_url:  # no vector files on PostgreSQL; calibration in the database
            sidecar = DatabaseSidecar(db)
        else:
            sidecar = Sidecar(sidecar_path(settings.db_path))
            if table_exists(reading(db), "cpersona_meta"):
                indexes = {t: VectorIndex(db, t) for t in ("memories", "episodes")}
        return HealthContext(
            db=db,
            settings=settings,
            embedder=embedder if embedder.available else None,
            oc=OperatingContext(settings),
            sidecar=sidecar,
            indexes=indexes,
            read_only=True,
            agent_id=agent,
        )
    except BaseException:
        db.close()
        raise


def _fields(issue: dict[str, Any]) -> str:
    rest = {k: v for k, v in issue.items() if k not in ("type", "severity", "check")}
    return json.dumps(rest, ensure_ascii=False)


def _print_human(report: dict[str, Any], code: int) -> None:
    s = report["severity_summary"]
    fixed = " (fix applied)" if report["fixed"] else ""
    print(
        f"cpersona checkup: {report['total_memories']} memories, {s['critical']} critical / "
        f"{s['warn']} warn / {s['info']} info{fixed}"
    )
    for issue in report["issues"]:
        print(f"  [{issue['severity']}] {issue['type']}: {_fields(issue)}")
    for agent, deep in report.get("deep", {}).items():
        notable = {
            name: r
            for name, r in deep["results"].items()
            if r.get("error")
            or r.get("count")
            or r.get("pairs")
            or r.get("recoverable")
            or r.get("status") not in (None, "ok")
        }
        if notable:
            print(f"  deep {agent or '(empty agent)'}:")
            for name, result in notable.items():
                print(f"    {name}: {json.dumps(result, ensure_ascii=False)}")
    print(f"exit={code} ({report['status']})")
