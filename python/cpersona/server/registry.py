"""Tool specs and the two argument layers: schema validation, then lenient coercion (§1.2)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cpersona.memory.text import first_surrogate

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

Handler = Callable[[Any, dict[str, Any]], dict[str, Any]]

_DEFAULTS: dict[str, Any] = {
    "string": "",
    "integer": 0,
    "number": 0.0,
    "boolean": False,
    "object": {},
    "array": [],
}


@dataclass(frozen=True)
class Annotations:
    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None


@dataclass(frozen=True)
class ToolSpec:
    """One MCP tool: its published schema, its description and its handler."""

    name: str
    description: str
    properties: dict[str, dict[str, Any]]
    required: tuple[str, ...]
    handler: Handler
    annotations: Annotations = Annotations()
    #: Per-argument values the handler sees when an argument is absent or of the wrong type.
    defaults: dict[str, Any] = field(default_factory=dict)
    #: Shape of this tool's failure (keys added to `{ok: false, error}`), e.g. store's `result`.
    failure: Callable[[str], dict[str, Any]] | None = None

    @property
    def input_schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "object", "properties": self.properties}
        if self.required:
            schema["required"] = list(self.required)
        return schema

    def validator(self) -> Draft202012Validator:
        # Imported on the first tool call: jsonschema (with attrs, referencing, rpds) costs as
        # much start-up time as numpy, and initialize / tools/list never validate anything.
        from jsonschema import Draft202012Validator

        return Draft202012Validator(self.input_schema)

    def fail(self, error: str) -> dict[str, Any]:
        if self.failure is not None:
            return self.failure(error)
        return {"ok": False, "error": error}


def schema_error(spec: ToolSpec, arguments: dict[str, Any]) -> str | None:
    """The first schema violation as one sentence, or None when the arguments conform."""
    errors = sorted(spec.validator().iter_errors(arguments), key=lambda e: list(e.path))
    if not errors:
        return None
    err = errors[0]
    where = ".".join(str(p) for p in err.path)
    return f"{where}: {err.message}" if where else err.message


def coerce(spec: ToolSpec, arguments: dict[str, Any]) -> dict[str, Any]:
    """Read each declared argument leniently: absent or wrong type -> its default.

    `bool` is never accepted as a number, and an integral float like 3.0 (which passes the
    schema's integer check) reads as the default, as in CPersona 2.5.x.
    """
    out: dict[str, Any] = {}
    for name, prop in spec.properties.items():
        default = spec.defaults.get(name, _DEFAULTS.get(_first_type(prop)))
        value = arguments.get(name, _MISSING)
        out[name] = value if _fits(prop, value) else default
    return out


_MISSING = object()


def _first_type(prop: dict[str, Any]) -> str:
    kind = prop.get("type", "")
    return kind[0] if isinstance(kind, list) else str(kind)


def _fits(prop: dict[str, Any], value: Any) -> bool:
    if value is _MISSING:
        return False
    kinds = prop.get("type")
    if kinds is None:
        return True
    for kind in kinds if isinstance(kinds, list) else [kinds]:
        if kind == "string" and isinstance(value, str):
            return True
        if kind == "integer" and isinstance(value, int) and not isinstance(value, bool):
            return True
        if kind == "number" and isinstance(value, int | float) and not isinstance(value, bool):
            return True
        if kind == "boolean" and isinstance(value, bool):
            return True
        if kind == "object" and isinstance(value, dict):
            return True
        if kind == "array" and isinstance(value, list):
            return True
        if kind == "null" and value is None:
            return True
    return False


def unstorable_text(
    arguments: dict[str, Any], path: str = "", find: Callable[[str], int | None] | None = None
) -> str | None:
    """Where a string or a key holds a lone surrogate (it cannot be stored as UTF-8), or None.
    `find` replaces the test (`first_nul` where the database cannot store U+0000).

    The answer never quotes the offending text: it could not be written back as UTF-8 either.
    """
    test = find or first_surrogate
    for key, value in arguments.items():
        pos = test(str(key))
        if pos is not None:
            return f"a key of {path or 'the arguments'} (character {pos})"
        here = f"{path}.{key}" if path else str(key)
        if isinstance(value, str):
            pos = test(value)
            if pos is not None:
                return f"{here} (character {pos})"
        elif isinstance(value, dict):
            found = unstorable_text(value, here, find)
            if found:
                return found
        elif isinstance(value, list):
            found = unstorable_text({str(i): v for i, v in enumerate(value)}, here, find)
            if found:
                return found
    return None


def first_nul(text: str) -> int | None:
    """Index of the first U+0000 (PostgreSQL text cannot hold it), or None."""
    pos = text.find("\x00")
    return None if pos < 0 else pos
