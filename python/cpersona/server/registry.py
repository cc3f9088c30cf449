"""The tool declaration (one `ToolSpec` per MCP tool) and the two argument layers: schema
validation, then lenient coercion into the tool's typed argument model (§1.2).

A tool is declared once, in its group's module under server/tools/: its name and position in
`tools/list`, its description, its argument model (a frozen dataclass whose fields, in order,
are the published properties: each field's `arg(schema)` is that property's JSON schema, its
default what the handler sees when the argument is absent or of the wrong type), its access
demand for ACL mode (server/access.py), its handler and its failure shape. The JSON schema on
the wire, the registration order and the ACL's table are all read from these declarations.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from cpersona.memory.text import first_surrogate
from cpersona.server.access import Access

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

    from cpersona.config import Settings
    from cpersona.engine import Engine

#: A tool's argument model: a frozen dataclass whose fields are declared with `arg`.
A = TypeVar("A")

#: A tool's handler: the Engine (the typed service layer) and the coerced arguments.
Handler = Callable[["Engine", A], dict[str, Any]]

_DEFAULTS: dict[str, Any] = {
    "string": "",
    "integer": 0,
    "number": 0.0,
    "boolean": False,
    "object": {},
    "array": [],
}
_FROM_SCHEMA: Any = object()
_SCHEMA = "cpersona.schema"
_REQUIRED = "cpersona.required"


def arg(schema: Mapping[str, Any], default: Any = _FROM_SCHEMA, *, required: bool = False) -> Any:
    """A field of an argument model: its published JSON schema, whether the schema requires
    it, and the value the handler sees when it is absent or of the wrong type (by default the
    zero of the schema's first type: '', 0, 0.0, false, {} or [])."""
    if default is _FROM_SCHEMA:
        default = _DEFAULTS.get(_first_type(schema))
    metadata = {_SCHEMA: schema, _REQUIRED: required}
    if isinstance(default, dict | list):  # each call gets its own, as handlers may keep it
        frozen = default
        return field(default_factory=lambda: copy.deepcopy(frozen), metadata=metadata)
    return field(default=default, metadata=metadata)


def _fields(model: Any) -> tuple[dataclasses.Field[Any], ...]:
    # `type[A]` is no dataclass to a type checker; ToolSpec checks that it is one.
    return dataclasses.fields(model)


def input_schema(model: type[Any]) -> dict[str, Any]:
    """The JSON schema `tools/list` publishes for `model` (fields in declaration order)."""
    fields = _fields(model)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {f.name: f.metadata[_SCHEMA] for f in fields},
    }
    required = [f.name for f in fields if f.metadata[_REQUIRED]]
    if required:
        schema["required"] = required
    return schema


@dataclass(frozen=True)
class NoArguments:
    """The argument model of a tool that takes none."""


@dataclass(frozen=True)
class Annotations:
    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None


#: The hint sets most tools publish (a hint left None is not sent).
READS = Annotations(read_only=True)
#: Writes that leave the same state when repeated (store skips a duplicate; a lock relocks).
EDITS = Annotations(read_only=False, destructive=False, idempotent=True)
#: Writes that add a new row each call.
APPENDS = Annotations(read_only=False, destructive=False, idempotent=False)
#: Writes that remove rows; repeating one removes nothing more.
DELETES = Annotations(read_only=False, destructive=True, idempotent=True)
#: Tools that may write (a flag such as `fix` decides), publishing no further hint.
MAY_WRITE = Annotations(read_only=False)


def keeping(**empty: object) -> Callable[[str], dict[str, Any]]:
    """A `ToolSpec.failure` whose refusals keep the tool's documented keys present (surface.md
    §1.3): `{ok: false, error}`, then each of `empty` at its value (a fresh copy each time)."""

    def failure(error: str) -> dict[str, Any]:
        return {"ok": False, "error": error, **copy.deepcopy(empty)}

    return failure


@dataclass(frozen=True)
class ToolSpec(Generic[A]):
    """One MCP tool, whole: everything any layer needs to list, guard and call it.

    The group modules declare each tool positionally, in field order: name, position,
    description, argument model, access, handler, annotations, then `failure` by keyword.
    """

    name: str
    #: Its place in `tools/list` (1-based; CPersona 2.5.12's order, surface.md §2's # column).
    position: int
    #: The description as listed; a function of the settings when it quotes any.
    description: str | Callable[[Settings], str]
    args: type[A]
    #: What a call needs in ACL mode (server/access.py); `Access.anyone()` for none.
    access: Access
    handler: Handler[A]
    annotations: Annotations = Annotations()
    #: Shape of this tool's failure (keys added to `{ok: false, error}`), e.g. store's `result`.
    failure: Callable[[str], dict[str, Any]] | None = None
    _schema: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not dataclasses.is_dataclass(self.args):
            raise TypeError(f"{self.name}: the argument model must be a dataclass")
        for f in _fields(self.args):
            if _SCHEMA not in f.metadata:
                raise TypeError(f"{self.name}: argument {f.name} is not declared with arg()")
        object.__setattr__(self, "_schema", input_schema(self.args))  # built once, listed often

    def describe(self, settings: Settings) -> str:
        if isinstance(self.description, str):
            return self.description
        return self.description(settings)

    @property
    def input_schema(self) -> dict[str, Any]:
        return self._schema

    def validator(self) -> Draft202012Validator:
        # Imported on the first tool call: jsonschema (with attrs, referencing, rpds) costs as
        # much start-up time as numpy, and initialize / tools/list never validate anything.
        from jsonschema import Draft202012Validator

        return Draft202012Validator(self.input_schema)

    def fail(self, error: str) -> dict[str, Any]:
        if self.failure is not None:
            return self.failure(error)
        return {"ok": False, "error": error}


def schema_error(spec: ToolSpec[Any], arguments: dict[str, Any]) -> str | None:
    """The first schema violation as one sentence, or None when the arguments conform."""
    errors = sorted(spec.validator().iter_errors(arguments), key=lambda e: list(e.path))
    if not errors:
        return None
    err = errors[0]
    where = ".".join(str(p) for p in err.path)
    return f"{where}: {err.message}" if where else err.message


def coerce(spec: ToolSpec[A], arguments: Mapping[str, Any]) -> A:
    """The call's argument model, each declared argument read leniently: absent or of the
    wrong type -> its default.

    `bool` is never accepted as a number, and an integral float like 3.0 (which passes the
    schema's integer check) reads as the default, as in CPersona 2.5.x.
    """
    values: dict[str, Any] = {}
    for f in _fields(spec.args):
        value = arguments.get(f.name, _MISSING)
        if _fits(f.metadata[_SCHEMA], value):
            values[f.name] = value
    return spec.args(**values)


_MISSING = object()


def _first_type(prop: Mapping[str, Any]) -> str:
    kind = prop.get("type", "")
    return kind[0] if isinstance(kind, list) else str(kind)


def _fits(prop: Mapping[str, Any], value: Any) -> bool:
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
