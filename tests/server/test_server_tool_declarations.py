"""The tool declarations (server/registry.py, server/tools/*): each argument model's typed
attributes hold what coercion can put there, each access demand names arguments the tool has,
and a call's model is its own (a handler that keeps a default list cannot leak it into the next
call). The wire shape of the declarations is tests/server/test_server_tool_list.py's."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import pytest
from cpersona.server.access import READ, READ_WRITE, STAR, Access, flag
from cpersona.server.registry import coerce
from cpersona.server.tools import TOOLS

#: The Python type a JSON schema type coerces to (an integer is a number too).
PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def admitted(annotation: Any) -> set[type]:
    """The runtime classes an annotation admits (`str | None` -> {str, NoneType})."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return set().union(*(admitted(a) for a in typing.get_args(annotation)))
    if annotation is None or annotation is type(None):
        return {type(None)}
    if annotation is float:
        return {int, float}  # the numeric tower: an int is a float argument
    return {typing.get_origin(annotation) or annotation}


FIELDS = [
    pytest.param(spec, f, id=f"{spec.name}.{f.name}")
    for spec in TOOLS
    for f in dataclasses.fields(spec.args)
]


@pytest.mark.parametrize(("spec", "field"), FIELDS)
def test_an_argument_attribute_admits_its_schema_types_and_its_default(spec, field):
    annotation = typing.get_type_hints(spec.args)[field.name]
    classes = admitted(annotation)
    schema_types = spec.input_schema["properties"][field.name].get("type")
    for kind in schema_types if isinstance(schema_types, list) else [schema_types]:
        assert set(PY_TYPES[kind]) <= classes, (kind, annotation)
    default = coerce(spec, {})
    assert type(getattr(default, field.name)) in classes


@pytest.mark.parametrize("spec", TOOLS, ids=lambda s: s.name)
def test_an_access_demand_names_arguments_of_its_tool(spec):
    properties = spec.input_schema["properties"]
    for name in spec.access.agent_arguments:
        assert properties[name] == {"type": "string", **properties[name]}


def test_a_coerced_model_is_the_calls_own():
    (archive,) = [spec for spec in TOOLS if spec.name == "archive_episode"]
    first = coerce(archive, {"agent_id": "a", "summary": "s"})
    first.history.append({"timestamp": "kept by a handler"})
    assert coerce(archive, {"agent_id": "a", "summary": "s"}).history == []


def test_coercion_reads_wrong_types_as_the_declared_defaults():
    (recall,) = [spec for spec in TOOLS if spec.name == "recall"]
    a = coerce(recall, {"agent_id": "a", "query": 5, "limit": 3.0, "deep": 1, "project_id": ""})
    assert (a.agent_id, a.query, a.limit, a.deep) == ("a", "", 10, False)
    assert a.project_id == "" and coerce(recall, {}).project_id is None


def test_a_new_declaration_carries_its_whole_demand():
    """What a tool added in one file gets from the guard, without any table naming it."""
    access = Access.read("owner_id", sweeping=True, writes_when=flag("purge")) + Access.every_agent(
        READ_WRITE, applies_when=flag("purge"), because="purging reaches every agent"
    )

    def need(args: dict[str, Any], export_dir_set: bool = False) -> list[tuple[str, str, Any]]:
        found = access.demands("new_tool", args, export_dir_set=export_dir_set)
        return [(d.agent, d.required, d.widened) for d in found]

    assert need({"owner_id": "o"}) == [("o", READ, None)]
    sweeping = "owner_id is omitted or empty, which makes new_tool cover every agent; send owner_id"
    assert need({"owner_id": ""}) == [(STAR, READ, sweeping)]
    assert need({"owner_id": "o", "purge": True}) == [
        ("o", READ_WRITE, None),
        (STAR, READ_WRITE, "purging reaches every agent"),
    ]
    assert list(access.agent_arguments) == ["owner_id"]
    files = Access.write("owner_id", files=True)
    assert files.demands("f", {"owner_id": "o"}, export_dir_set=True)[0].agent == "o"
    confined = files.demands("f", {"owner_id": "o"}, export_dir_set=False)[0]
    assert (confined.agent, confined.widened) == (
        STAR,
        "f reaches any path without CPERSONA_EXPORT_DIR",
    )
    assert Access.anyone().demands("t", {"agent_id": "a"}, export_dir_set=False) == []
