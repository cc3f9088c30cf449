"""`cpersona export PATH` and `cpersona import PATH`: the operator's backup and restore.

The operator runs these with their own file permissions, so `CPERSONA_EXPORT_DIR` (which
confines MCP callers) does not apply; the import size cap does. The summary is printed as one
JSON object on stdout; progress of a long import goes to stderr.

Exit codes: 0 = done; 1 = the export or import was refused or failed; 2 = the database could not
be opened.
"""

from __future__ import annotations

import json
import sys

from cpersona.config import Settings


def _stderr(line: str) -> None:
    print(f"cpersona: {line}", file=sys.stderr, flush=True)


def run_export(settings: Settings, path: str, agent_id: str, include_embeddings: bool) -> int:
    from cpersona.portability.export import export_memories

    engine = _engine(settings)
    if engine is None:
        return 2
    try:
        result = export_memories(engine, agent_id, path, include_embeddings, confined=False)
    finally:
        engine.close()
    return _finish(result)


def run_import(settings: Settings, path: str, agent_id: str, dry_run: bool) -> int:
    from cpersona.portability.import_ import import_memories

    engine = _engine(settings)
    if engine is None:
        return 2
    try:
        result = import_memories(engine, path, agent_id, dry_run, confined=False, progress=_stderr)
    finally:
        engine.close()
    return _finish(result)


def _engine(settings: Settings):  # type: ignore[no-untyped-def]
    from cpersona.engine import Engine

    try:
        return Engine(settings)
    except Exception as exc:
        from cpersona.storage import open_failure_reason

        reason = open_failure_reason(settings.db_path, settings.database_url, exc)
        _stderr(f"cannot open the database {settings.db_path}: {reason}")
        return None


def _finish(result: dict[str, object]) -> int:
    print(json.dumps(result, ensure_ascii=False, indent=2))
    if result.get("ok") is False:
        _stderr(str(result.get("error", "failed")))
        return 1
    return 0
