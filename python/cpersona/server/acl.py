"""ACL mode (surface.md §11.4): the client file, the grant lattice and the guard.

`load_acl` reads and validates `CPERSONA_ACL_FILE` once at start-up; any defect is a
`ConfigError` whose message is the one line start-up prints. `Guard.authorize` is the hook the
outer dispatch calls after schema validation and before coercion (§1.5): it answers None to let
the call through, or the denial payload `{ok: false, error: "permission_denied", tool,
client_id, ...}`, in which case the handler never runs and no data leaves the server.

What a call demands is its tool's own declaration (`ToolSpec.access`, server/access.py), read
from the call's *raw* arguments; this module knows no tool by name. Nothing here touches the
network, the database or the environment except `load_acl` (the file and its `${VAR}`
references).
"""

from __future__ import annotations

import functools
import hmac
import json
import logging
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cpersona.errors import ConfigError

# Re-exported: callers of the guard name grants and demands from here.
from cpersona.server.access import NONE as NONE
from cpersona.server.access import READ as READ
from cpersona.server.access import READ_WRITE as READ_WRITE
from cpersona.server.access import STAR as STAR
from cpersona.server.access import Demand as Demand

if TYPE_CHECKING:
    from cpersona.server.registry import ToolSpec

log = logging.getLogger("cpersona.acl")

#: The principal stdio calls run as; it never presents a token.
LOCAL = "local"
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


def _specs() -> Mapping[str, ToolSpec[Any]]:
    # Imported on the first demand, not with this module: the guard is built at start-up,
    # before the tools (and what they import) are needed.
    from cpersona.server.tools import by_name

    return by_name()


def demands(tool: str, args: Mapping[str, Any], *, export_dir_set: bool) -> list[Demand] | None:
    """What `tool` called with `args` needs (its declaration's `access`), or None when no
    tool has that name.

    `[]` means authentication alone suffices.
    """
    spec = _specs().get(tool)
    if spec is None:
        return None
    return spec.access.demands(tool, args, export_dir_set=export_dir_set)


def reaches_files(tool: str) -> bool:
    """Whether `tool` reads or writes a file path (the export directory when one is set)."""
    spec = _specs().get(tool)
    return spec is not None and spec.access.reaches_files


@functools.cache
def agent_arguments() -> tuple[str, ...]:
    """Every argument that names an agent in some tool's access declaration, sorted."""
    return tuple(sorted({n for spec in _specs().values() for n in spec.access.agent_arguments}))


def __getattr__(name: str) -> Any:
    # `CLASSIFIED` without importing the tools with this module (see `_specs`).
    if name == "CLASSIFIED":
        return frozenset(_specs())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------- the guard


@dataclass(frozen=True, eq=False)
class Guard:
    """`authorize(tool, arguments)`: None to proceed, or the denial payload."""

    config: AclConfig
    #: The client id the current call runs as (called per call).
    principal: Callable[[], str | None]
    export_dir_set: bool = field(kw_only=True)

    def __call__(self, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any] | None:
        client_id = self.principal()
        if client_id is None:
            return denial(tool, None, detail="the request carries no authenticated client")
        needs = demands(tool, arguments, export_dir_set=self.export_dir_set)
        if needs is None:
            return denial(tool, client_id, detail="tool not classified for ACL enforcement")
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
            return denial(tool, client_id, agent=need.agent, required=need.required, detail=detail)
        return None


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
