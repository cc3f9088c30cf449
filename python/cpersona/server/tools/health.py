"""Health tools: check_health, get_session_findings, deep_check (surface.md §9)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cpersona.health import credentials
from cpersona.health.context import from_engine
from cpersona.health.deep import DEEP_NAMES, deep_check, session_findings
from cpersona.health.registry import NAMES, REPORT_ONLY, check_health
from cpersona.server.access import READ, READ_WRITE, Access, flag
from cpersona.server.registry import MAY_WRITE, READS, ToolSpec, arg, keeping
from cpersona.server.tools.memory import SESSION_KEY, STR
from cpersona.session import bucket

if TYPE_CHECKING:
    from cpersona.engine import Engine

CHECKS = {"type": "array", "items": {"type": "string"}}
#: The check whose repair acts on every agent's rows, whatever `agent_id` says.
CROSS_AGENT_CHECK = "dedup_msg_id_index"


@dataclass(frozen=True)
class CheckHealthArgs:
    agent_id: str = arg(STR)
    fix: bool = arg({"type": "boolean"})
    checks: list[str] = arg(CHECKS)
    session_key: str = arg(SESSION_KEY)


@dataclass(frozen=True)
class FindingsArgs:
    session_key: str = arg(SESSION_KEY)
    per_kind_limit: int = arg({"type": "integer", "default": 5}, 5)
    include_summary: bool = arg({"type": "boolean", "default": True}, True)


@dataclass(frozen=True)
class DeepCheckArgs:
    """deep_check: as `CheckHealthArgs`, but `agent_id` is required ('' is one bucket)."""

    agent_id: str = arg(STR, required=True)
    fix: bool = arg({"type": "boolean"})
    checks: list[str] = arg(CHECKS)
    session_key: str = arg(SESSION_KEY)


def _repairs_every_agent(args: Mapping[str, Any]) -> bool:
    """A fix that runs the cross-agent repair (every check runs when none is named)."""
    if args.get("fix") is not True:
        return False
    checks = args.get("checks")
    return not isinstance(checks, list) or not checks or CROSS_AGENT_CHECK in checks


def _paused(engine: Engine, session_key: str) -> bool:
    return engine.pause.active(session_key) is not None


def _check_health(engine: Engine, a: CheckHealthArgs) -> dict[str, Any]:
    ctx = from_engine(engine, a.agent_id)
    out = check_health(
        ctx,
        requested=a.checks,
        fix=a.fix,
        paused=_paused(engine, a.session_key),
        extra_issues=engine.updates.health_issues(),
    )
    if out.get("fixed"):
        credentials.after_fix(engine, ctx)
    return out


def _deep_check(engine: Engine, a: DeepCheckArgs) -> dict[str, Any]:
    ctx = from_engine(engine, a.agent_id)
    return deep_check(ctx, requested=a.checks, fix=a.fix, paused=_paused(engine, a.session_key))


def _findings(engine: Engine, a: FindingsArgs) -> dict[str, Any]:
    shared = engine.settings.transport != "stdio" and not bucket(a.session_key).declared
    return session_findings(
        from_engine(engine),
        per_kind_limit=a.per_kind_limit,
        include_summary=a.include_summary,
        identity_shared=shared,
        extra_issues=engine.updates.health_issues(),
    )


_HEALTH_FAILURE = keeping(checks_run=[])


_ABOUT_CHECK_HEALTH = (
    f"Check the database with {len(NAMES)} checks, in this order: "
    f"{', '.join(NAMES)}. Each issue has `type`, `severity` (critical / warn / "
    "info) and `check`. `status` is the verdict: `unhealthy` if any critical, "
    "else `degraded` if any warn, else `healthy` (info never degrades). It judges "
    "what is stored, not whether embedding works: a corpus without vectors can be "
    "healthy. `agent_id` '' checks every agent. `checks` picks names (an unknown "
    "name refuses the call). `fix=true` repairs what the fixable checks found and "
    "reports what it did per issue (`fixed`, `fix_error`, ...); `status` then "
    "judges the state after the repairs. Repairs skip locked rows and stay within "
    "`agent_id`, except: the embedding repairs rewrite vectors of locked rows "
    f"too, `{CROSS_AGENT_CHECK}` acts across all agents, schema / FTS / index-file "
    "repairs act on the whole database, `file_permissions` chmods files. "
    "`oversized_content` and `oversized_profile` are lossy (they cut text), and so "
    "is `stored_credentials` (it replaces credentials with `[REDACTED:<kind>]`; "
    "findings name row ids and kinds, never a value). "
    f"Report-only (fix accepted, nothing written): {', '.join(REPORT_ONLY)}; "
    "critical file-integrity findings are never auto-repaired. While persistence "
    "is paused, fix is forced off (`repairs_skipped`)."
)
_CHECK_HEALTH_ACCESS = Access.read(sweeping=True, writes_when=flag("fix")) + Access.every_agent(
    READ_WRITE,
    applies_when=_repairs_every_agent,
    because=f"check_health fix of {CROSS_AGENT_CHECK} repairs every agent's rows; "
    "name the checks to run without it",
)
_ABOUT_GET_SESSION_FINDINGS = (
    "Every check_health check, read-only, over the whole database, as findings "
    "grouped by `kind` (at most `per_kind_limit` each, default 5; `capped_kinds` "
    "lists the kinds that had more), with counts by kind and severity and, unless "
    "`include_summary` is false, the `status` verdict. Never writes."
)
_ABOUT_DEEP_CHECK = (
    f"Data-quality heuristics for one agent ('' is the empty-agent bucket): "
    f"{', '.join(DEEP_NAMES)}. Only anonymous_source (recover names written as "
    "'[name] ...') and short_content (DELETES unlocked memories of 5 characters "
    "or fewer) act on `fix=true`; while persistence is paused fix is forced off."
)

# Each: name, position, description, arguments, access, handler, hints (ToolSpec's fields).
TOOLS = (
    ToolSpec(
        "check_health",
        27,
        _ABOUT_CHECK_HEALTH,
        CheckHealthArgs,
        _CHECK_HEALTH_ACCESS,
        _check_health,
        MAY_WRITE,
        failure=_HEALTH_FAILURE,
    ),
    ToolSpec(
        "get_session_findings",
        28,
        _ABOUT_GET_SESSION_FINDINGS,
        FindingsArgs,
        Access.every_agent(READ),
        _findings,
        READS,
    ),
    ToolSpec(
        "deep_check",
        29,
        _ABOUT_DEEP_CHECK,
        DeepCheckArgs,
        Access.read(writes_when=flag("fix")),
        _deep_check,
        MAY_WRITE,
        failure=_HEALTH_FAILURE,
    ),
)
