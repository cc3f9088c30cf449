"""The operating context (OC): an operator-owned TOML file (surface.md §6.6, §13.3, §4.3).

The file names the valid project ids (`[registry]`), maps agents to their default project for
`project_id: "@auto"` (`[defaults]`), carries a summary sent as MCP `initialize.instructions`
and doctrine sections served by `get_operating_context`. It is optional: with no file, with
the kill switch `CPERSONA_OPERATING_CONTEXT=off`, or with any read, parse or schema error the
feature is *dormant* and every project id passes unchanged. An error is never fatal.

The file is re-parsed whenever its modification time (or size) changes.
"""

from __future__ import annotations

import logging
import os
import threading
import tomllib
from dataclasses import dataclass, field
from typing import Any

from cpersona.config import Settings

log = logging.getLogger("cpersona.oc")

ENFORCE_MODES = ("off", "warn", "reject")
#: A summary longer than this is reported by `check_health operating_context_size`.
SUMMARY_SOFT_LIMIT = 3000
AUTO = "@auto"


@dataclass(frozen=True, slots=True)
class Context:
    """A usable operating-context file."""

    revision: str
    summary: str
    project_ids: tuple[str, ...] | None  # None: the file names no registry (nothing checked)
    enforce: str
    defaults: dict[str, str]
    doctrine: dict[str, str]


@dataclass(frozen=True, slots=True)
class Gate:
    """The outcome of the project gate for one call.

    `project_id` is the value the tool goes on with; `refusal` the error text of a refused
    write (None = proceed); `extra` the additive response keys (`resolved_project_id`,
    `operating_context_warning`).
    """

    project_id: str | None
    refusal: str | None = None
    revision: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def refused(self, **collection: Any) -> dict[str, Any]:
        """The refusal shape: `{ok: false, error, operating_context_revision, ...collection}`."""
        return {
            "ok": False,
            "error": self.refusal,
            "operating_context_revision": self.revision,
            **collection,
        }


class SchemaError(ValueError):
    """The file parses as TOML but does not follow the OC schema."""


class OperatingContext:
    """The OC file of one server process, cached by modification time."""

    def __init__(self, settings: Settings) -> None:
        switch = (settings.operating_context or "").strip().lower()
        self.disabled = switch == "off"
        self.path = os.path.expanduser(settings.operating_context_path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._context: Context | None = None
        self._why = ""

    # -- loading -----------------------------------------------------------------------------

    def load(self) -> tuple[Context | None, str]:
        """The usable context, or (None, why it is dormant)."""
        if self.disabled:
            return None, "disabled (CPERSONA_OPERATING_CONTEXT=off)"
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None, f"no sidecar file at {self.path}"
        except OSError as exc:
            return None, f"sidecar unusable: {exc}"
        stamp = (st.st_mtime_ns, st.st_size)
        with self._lock:
            if stamp != self._stamp:
                self._context, self._why = _read(self.path)
                self._stamp = stamp
                if self._context is None:
                    log.warning("operating context is dormant: %s", self._why)
            return self._context, self._why

    def present_but_unusable(self) -> str | None:
        """The parse/schema error of a file that exists but cannot be used (health), else None."""
        context, why = self.load()
        if context is None and why.startswith("sidecar unusable"):
            return why
        return None

    def instructions(self) -> str | None:
        """The `[instructions].summary` for `initialize.instructions`, or None (dormant/blank)."""
        context, _ = self.load()
        if context is None or not context.summary.strip():
            return None
        return context.summary

    # -- the project gate (§6.6) -------------------------------------------------------------

    def gate(self, project_id: str | None, agent_id: str, *, write: bool) -> Gate:
        """Resolve `@auto` and check the registry for one of the six project tools."""
        auto = project_id == AUTO
        context, _ = self.load()
        if context is None:
            return Gate(project_id, extra={"resolved_project_id": AUTO} if auto else {})
        if not project_id:
            return Gate(project_id, revision=context.revision)
        rev = context.revision
        value, warning = project_id, None
        if auto:
            mapped = context.defaults.get(agent_id)
            if mapped is None:
                text = (
                    f"@auto has no [defaults] mapping for agent_id '{agent_id}' (rev {rev}); "
                    "resolved to '' (global pool)"
                )
                if write and context.enforce == "reject":
                    return Gate(project_id, refusal=text, revision=rev)
                value = ""
                if context.enforce != "off":
                    warning = text
            else:
                value = mapped
        if (
            value
            and context.enforce != "off"
            and context.project_ids is not None
            and value not in context.project_ids
        ):
            text = f"project_id '{value}' not in registry (rev {rev})"
            if write and context.enforce == "reject":
                return Gate(project_id, refusal=text, revision=rev)
            warning = text
        extra: dict[str, Any] = {}
        if warning is not None:
            extra["operating_context_warning"] = warning
        if auto:
            extra["resolved_project_id"] = value
        return Gate(value, revision=rev, extra=extra)

    # -- get_operating_context (§4.3) --------------------------------------------------------

    def describe(self, section: str) -> dict[str, Any]:
        context, why = self.load()
        if context is None:
            return {"ok": False, "enabled": False, "error": f"operating context is dormant — {why}"}
        names = sorted(context.doctrine)
        if not section:
            return {
                "ok": True,
                "context_revision": context.revision,
                "instructions_summary": context.summary,
                "registry": {
                    "project_ids": list(context.project_ids or ()),
                    "enforce": context.enforce,
                },
                "defaults": dict(context.defaults),
                "doctrine_sections": names,
            }
        if section not in context.doctrine:
            return {
                "ok": False,
                "error": f"unknown doctrine section '{section}'",
                "doctrine_sections": names,
            }
        return {
            "ok": True,
            "context_revision": context.revision,
            "section": section,
            "body": context.doctrine[section],
        }


def _read(path: str) -> tuple[Context | None, str]:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
        return parse(data), ""
    except (OSError, tomllib.TOMLDecodeError, SchemaError, UnicodeDecodeError) as exc:
        return None, f"sidecar unusable: {exc}"


def _table(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise SchemaError(f"[{key}] must be a table")
    return value


def parse(data: dict[str, Any]) -> Context:
    """Validate a parsed TOML document against the OC schema (unknown keys are ignored).

    Raises:
        SchemaError: naming the first key that breaks the schema.
    """
    version = data.get("version")
    if type(version) is not int or version != 1:
        raise SchemaError(f"version must be the integer 1, got {version!r}")
    revision = data.get("context_revision", "")
    if not isinstance(revision, str):
        raise SchemaError("context_revision must be a string")
    summary = _table(data, "instructions").get("summary", "")
    if not isinstance(summary, str):
        raise SchemaError("[instructions].summary must be a string")
    registry = _table(data, "registry")
    ids = registry.get("project_ids")
    if ids is not None and (not isinstance(ids, list) or not all(isinstance(p, str) for p in ids)):
        raise SchemaError("[registry].project_ids must be an array of strings")
    enforce = registry.get("enforce", "warn")
    if enforce not in ENFORCE_MODES:
        raise SchemaError(f"[registry].enforce must be one of off, warn, reject, got {enforce!r}")
    defaults = _table(data, "defaults")
    for agent, project in defaults.items():
        if not isinstance(project, str):
            raise SchemaError(f"[defaults].{agent} must be a string")
    doctrine: dict[str, str] = {}
    sections = data.get("doctrine", [])
    if not isinstance(sections, list):
        raise SchemaError("[[doctrine]] must be an array of tables")
    for i, entry in enumerate(sections):
        if not isinstance(entry, dict):
            raise SchemaError(f"[[doctrine]] entry {i} must be a table")
        name, body = entry.get("name"), entry.get("body")
        if not isinstance(name, str) or not name:
            raise SchemaError(f"[[doctrine]] entry {i} needs a non-empty string name")
        if not isinstance(body, str):
            raise SchemaError(f"[[doctrine]] '{name}' needs a string body")
        if name in doctrine:
            raise SchemaError(f"[[doctrine]] name '{name}' appears twice")
        doctrine[name] = body
    return Context(
        revision=revision,
        summary=summary,
        project_ids=None if ids is None else tuple(ids),
        enforce=enforce,
        defaults=dict(defaults),
        doctrine=doctrine,
    )
