"""ACL mode (surface.md §11.4): the client file, the grant lattice and each tool's demand.

`load_acl` reads and validates `CPERSONA_ACL_FILE` once at start-up; any defect is a
`ConfigError` whose message is the one line start-up prints. `Guard.authorize` is the hook the
outer dispatch calls after schema validation and before coercion (§1.5): it answers None to let
the call through, or the denial payload `{ok: false, error: "permission_denied", tool,
client_id, ...}`, in which case the handler never runs and no data leaves the server.

The demand of a call is read from its *raw* arguments: an agent-scope argument that is missing,
empty or not a string means `*` (every agent), so a caller can never widen its reach by leaving
an argument out. Nothing here touches the network, the database or the environment except
`load_acl` (the file and its `${VAR}` references).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from cpersona.errors import ConfigError

log = logging.getLogger("cpersona.acl")

STAR = "*"
#: The principal stdio calls run as; it never presents a token.
LOCAL = "local"
NONE, READ, READ_WRITE = "none", "read", "read-write"
_RANK = {NONE: 0, READ: 1, READ_WRITE: 2}
_CLIENT_KEYS = frozenset({"client_id", "token", "grants", "per_subject"})
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True, slots=True)
class Admitted:
    """A call let through with rewritten arguments and keys to add to its answer.

    Per-subject mode (server/subjects.py) rewrites `@me` to the caller's alias and adds
    `resolved_agent_id` / `alias_issued` to the answer (surface.md §11.5).
    """

    arguments: Mapping[str, Any]
    extra: Mapping[str, Any] = field(default_factory=dict)


#: The ACL hook (surface.md §11.4): None lets the call through, `Admitted` lets it through
#: changed, a dict is the answer instead (a denial).
Authorize = Callable[[str, Mapping[str, Any]], dict[str, Any] | Admitted | None]


@dataclass(frozen=True, slots=True)
class AclClient:
    """One row of the file, its token resolved."""

    client_id: str
    token: str | None
    grants: Mapping[str, str]
    per_subject: bool = False

    def level(self, agent: str) -> int:
        """Rank of this client's permission on `agent` (a concrete id or `*`).

        A concrete agent: its exact grant, even if lower than `*`'s, else the `*` grant, else
        none. `*` (a sweep over every agent): the lowest of all its grants, and none without
        a `*` grant — a sweep also reaches the agents it holds less on.
        """
        if agent == STAR:
            if STAR not in self.grants:
                return 0
            return min(_RANK[g] for g in self.grants.values())
        grant = self.grants.get(agent, self.grants.get(STAR, NONE))
        return _RANK[grant]


@dataclass(frozen=True, slots=True)
class AclConfig:
    """The validated file."""

    path: str
    clients: tuple[AclClient, ...]

    @property
    def per_subject(self) -> bool:
        """Whether any client is partitioned per OAuth subject (surface.md §11.5)."""
        return any(c.per_subject for c in self.clients)

    def client(self, client_id: str) -> AclClient | None:
        return next((c for c in self.clients if c.client_id == client_id), None)

    def identify(self, presented: bytes) -> str | None:
        """The client whose token equals `presented` (UTF-8 bytes), or None.

        Every token is compared in constant time and the loop never exits early, so the answer
        time does not tell which client, or how much of a token, matched.
        """
        found: str | None = None
        for client in self.clients:
            if client.token is None:
                continue
            if hmac.compare_digest(presented, client.token.encode("utf-8")):
                found = client.client_id
        return found


# --------------------------------------------------------------------------- loading


def load_acl(path: str, env: Mapping[str, str] | None = None) -> AclConfig:
    """Read and validate the ACL file.

    Raises:
        ConfigError: one line naming the file and the first defect found.
    """
    env = os.environ if env is None else env
    where = os.path.expanduser(path)
    try:
        with open(where, encoding="utf-8") as fh:
            text = fh.read()
        mode = os.stat(where).st_mode
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"CPERSONA_ACL_FILE={path}: cannot read it: {exc}") from None
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicate_keys)
        clients = tuple(_clients(doc, env))
    except (ValueError, _Defect) as exc:  # json.JSONDecodeError is a ValueError
        raise ConfigError(f"CPERSONA_ACL_FILE={path}: {exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning(
            "ACL file %s is readable by group or others (mode %o); it holds bearer tokens: "
            "chmod 600 it",
            path,
            stat.S_IMODE(mode),
        )
    return AclConfig(path=os.path.abspath(where), clients=clients)


class _Defect(Exception):
    """A validation failure inside the file (becomes the ConfigError line)."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # JSON would keep the last of two equal keys; a grant written twice is a mistake to show,
    # not a choice to make silently.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Defect(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


def _clients(doc: Any, env: Mapping[str, str]) -> Iterator[AclClient]:
    if not isinstance(doc, dict) or set(doc) != {"clients"}:
        raise _Defect('the top level must be exactly {"clients": [...]}')
    rows = doc["clients"]
    if not isinstance(rows, list) or not rows:
        raise _Defect('"clients" must be a non-empty list')
    seen_ids: set[str] = set()
    seen_tokens: dict[str, str] = {}
    for i, row in enumerate(rows):
        client = _client(i, row, env)
        if client.client_id in seen_ids:
            raise _Defect(f"clients[{i}]: client_id {client.client_id!r} is listed twice")
        seen_ids.add(client.client_id)
        if client.token is not None:
            other = seen_tokens.get(client.token)
            if other is not None:
                raise _Defect(
                    f"clients[{i}] ({client.client_id}): its token is also the token of "
                    f"{other!r}; every token must be unique"
                )
            seen_tokens[client.token] = client.client_id
        yield client


def _client(i: int, row: Any, env: Mapping[str, str]) -> AclClient:
    at = f"clients[{i}]"
    if not isinstance(row, dict):
        raise _Defect(f"{at} must be an object")
    unknown = sorted(set(row) - _CLIENT_KEYS)
    if unknown:
        raise _Defect(
            f"{at}: unknown key(s) {', '.join(map(repr, unknown))}; allowed: client_id, token, "
            "grants, per_subject"
        )
    client_id = row.get("client_id")
    if not isinstance(client_id, str) or not client_id:
        raise _Defect(f"{at}: client_id must be a non-empty string")
    at = f"{at} ({client_id})"
    token = _token(at, client_id, row, env)
    grants = row.get("grants", _MISSING)
    if not isinstance(grants, dict):
        raise _Defect(f'{at}: grants must be an object such as {{"alpha": "read-write"}}')
    for agent, grant in grants.items():
        if not agent:
            raise _Defect(f"{at}: a grant names an empty agent id")
        if not isinstance(grant, str) or grant not in _RANK:
            raise _Defect(
                f"{at}: the grant for {agent!r} is {grant!r}; expected none, read or read-write"
            )
    per_subject = row.get("per_subject", False)
    if not isinstance(per_subject, bool):
        raise _Defect(f"{at}: per_subject must be true or false")
    if per_subject and (token is not None or client_id == LOCAL):
        raise _Defect(f"{at}: per_subject is allowed only on a token: null client other than local")
    return AclClient(client_id, token, dict(grants), per_subject)


_MISSING = object()


def _token(at: str, client_id: str, row: dict[str, Any], env: Mapping[str, str]) -> str | None:
    if client_id == LOCAL:
        if row.get("token") is not None:
            raise _Defect(f"{at}: the local principal (stdio) takes no token; use null or omit it")
        return None
    if "token" not in row:
        raise _Defect(f"{at}: token is required (a string, a whole ${{VAR}} reference, or null)")
    raw = row["token"]
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw:
        raise _Defect(f"{at}: token must be a non-empty string or null")
    if "${" in raw:
        ref = _ENV_REF.fullmatch(raw)
        if ref is None:
            raise _Defect(f"{at}: token must be either a literal or exactly one whole ${{VAR}}")
        value = env.get(ref.group(1), "")
        if not value:
            raise _Defect(f"{at}: token refers to ${{{ref.group(1)}}}, which is unset or empty")
        raw = value
    if not raw.isascii():
        raise _Defect(f"{at}: token must be ASCII")
    return raw


# --------------------------------------------------------------------------- demands


@dataclass(frozen=True, slots=True)
class Demand:
    """A permission a call needs on one agent (or `*`), and why it is `*` when it is."""

    agent: str
    required: str
    widened: str | None = None  # why the scope is every agent; None for a concrete agent


DemandFn = Callable[[Mapping[str, Any], bool], list[Demand]]

#: The three tools any authenticated principal may call.
ANY_PRINCIPAL = frozenset({"persistence_status", "get_queue_status", "get_operating_context"})
AGENT_READ = frozenset({
    "recall", "recall_with_context", "get_contents", "get_profile", "get_recall_precision",
    "list_memories", "list_episodes",
})  # fmt: skip
AGENT_WRITE = frozenset({
    "store", "update_profile", "archive_episode", "update_memory", "lock_memory",
    "unlock_memory", "delete_memory", "delete_episode", "delete_agent_data",
    "calibrate_threshold", "set_recall_precision", "migrate_channel_axis",
})  # fmt: skip
#: `agent_id: ""` means every agent in these tools (surface.md §6.3), not the empty bucket.
_SWEEPING_WHEN_EMPTY = frozenset({
    "list_memories", "list_episodes", "calibrate_threshold", "migrate_channel_axis",
    "export_memories", "check_health",
})  # fmt: skip
_HEALTH_CROSS_AGENT_CHECK = "dedup_msg_id_index"


def _scope(tool: str, args: Mapping[str, Any], key: str, required: str) -> Demand:
    value = args.get(key)
    if isinstance(value, str) and value and value != STAR:
        return Demand(value, required)
    if value == STAR:
        why = f"{key} '*' addresses every agent"
    elif tool in _SWEEPING_WHEN_EMPTY and (value is None or value == ""):
        why = f"{key} is omitted or empty, which makes {tool} cover every agent; send {key}"
    else:
        why = (
            f"{key} is omitted, empty or not a string, so the call is not confined to one "
            f"agent; send {key}"
        )
    return Demand(STAR, required, why)


def _sweep(tool: str, required: str) -> Demand:
    return Demand(STAR, required, f"{tool} acts on every agent")


def _flag(args: Mapping[str, Any], key: str) -> bool:
    # Mirrors coercion: only a JSON true turns the flag on.
    return args.get(key) is True


def _health_checks(args: Mapping[str, Any]) -> list[Any]:
    checks = args.get("checks")
    return checks if isinstance(checks, list) else []


def demands(tool: str, args: Mapping[str, Any], *, export_dir_set: bool) -> list[Demand] | None:
    """What `tool` called with `args` needs, or None when the tool is not classified.

    `[]` means authentication alone suffices.
    """
    if tool in ANY_PRINCIPAL:
        return []
    if tool in AGENT_READ:
        return [_scope(tool, args, "agent_id", READ)]
    if tool in AGENT_WRITE:
        return [_scope(tool, args, "agent_id", READ_WRITE)]
    if tool in ("pause_persistence", "resume_persistence"):
        return [_sweep(tool, READ_WRITE)]
    if tool in ("export_memories", "import_memories"):
        key = "agent_id" if tool == "export_memories" else "target_agent_id"
        if export_dir_set:
            return [_scope(tool, args, key, READ_WRITE)]
        return [Demand(STAR, READ_WRITE, f"{tool} reaches any path without CPERSONA_EXPORT_DIR")]
    if tool == "merge_memories":
        mode = args.get("mode")
        copy = not isinstance(mode, str) or mode.strip().lower() == "copy"
        source = _scope(tool, args, "source_agent_id", READ if copy else READ_WRITE)
        return [source, _scope(tool, args, "target_agent_id", READ_WRITE)]
    if tool == "check_health":
        if not _flag(args, "fix"):
            return [_scope(tool, args, "agent_id", READ)]
        out = [_scope(tool, args, "agent_id", READ_WRITE)]
        checks = _health_checks(args)
        if not checks or _HEALTH_CROSS_AGENT_CHECK in checks:
            out.append(
                Demand(
                    STAR,
                    READ_WRITE,
                    f"check_health fix of {_HEALTH_CROSS_AGENT_CHECK} repairs every agent's rows; "
                    "name the checks to run without it",
                )
            )
        return out
    if tool == "deep_check":
        return [_scope(tool, args, "agent_id", READ_WRITE if _flag(args, "fix") else READ)]
    if tool == "get_session_findings":
        return [_sweep(tool, READ)]
    if tool == "check_update":
        return [_sweep(tool, READ_WRITE if _flag(args, "apply") else READ)]
    return None


#: Every tool of surface.md §2; `demands` classifies each one (tested).
CLASSIFIED = frozenset({
    *ANY_PRINCIPAL, *AGENT_READ, *AGENT_WRITE, "pause_persistence", "resume_persistence",
    "export_memories", "import_memories", "merge_memories", "check_health", "deep_check",
    "get_session_findings", "check_update",
})  # fmt: skip


# --------------------------------------------------------------------------- the guard


class Guard:
    """`authorize(tool, arguments)`: None to proceed, or the denial payload."""

    def __init__(
        self,
        config: AclConfig,
        principal: Callable[[], str | None],
        *,
        export_dir_set: bool,
    ) -> None:
        self.config = config
        self._principal = principal
        self._export_dir_set = export_dir_set

    @property
    def export_dir_set(self) -> bool:
        return self._export_dir_set

    def principal(self) -> str | None:
        """The client id the current call runs as."""
        return self._principal()

    def __call__(self, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any] | None:
        client_id = self._principal()
        if client_id is None:
            return self._deny(tool, None, detail="the request carries no authenticated client")
        needs = demands(tool, arguments, export_dir_set=self._export_dir_set)
        if needs is None:
            return self._deny(tool, client_id, detail="tool not classified for ACL enforcement")
        if not needs:
            return None
        client = self.config.client(client_id)
        for need in needs:
            held = client.level(need.agent) if client is not None else 0
            if held >= _RANK[need.required]:
                continue
            if client is None:
                detail = f"client {client_id!r} has no entry in the ACL file"
            elif need.widened is not None:
                detail = need.widened
            else:
                detail = (
                    f"client {client_id!r} holds {_name(held)} on {need.agent!r}; "
                    f"{tool} needs {need.required}"
                )
            return self._deny(
                tool, client_id, agent=need.agent, required=need.required, detail=detail
            )
        return None

    def _deny(
        self,
        tool: str,
        client_id: str | None,
        *,
        agent: str | None = None,
        required: str | None = None,
        detail: str | None = None,
    ) -> dict[str, Any]:
        return denial(tool, client_id, agent=agent, required=required, detail=detail)


def denial(
    tool: str,
    client_id: str | None,
    *,
    agent: str | None = None,
    required: str | None = None,
    detail: str | None = None,
) -> dict[str, Any]:
    """The permission-denied answer (logged at WARNING); keys present only when applicable."""
    log.warning(
        "permission denied: client %s called %s%s%s",
        client_id,
        tool,
        f" on agent {agent!r}" if agent is not None else "",
        f" ({detail})" if detail else "",
    )
    out: dict[str, Any] = {"ok": False, "error": "permission_denied", "tool": tool}
    if agent is not None:
        out["agent_id"] = agent
    if required is not None:
        out["required"] = required
    out["client_id"] = client_id
    if detail is not None:
        out["detail"] = detail
    return out


def _name(rank: int) -> str:
    return next(name for name, r in _RANK.items() if r == rank)
