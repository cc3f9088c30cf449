"""The reading of JSON-RPC messages on both transports (server/jsonrpc.py, server/stdio.py),
against the SDK's own reader as the oracle: what it reads is read the same; what it refuses
gets an error that carries the request's id whenever the request has a valid one."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
import pytest
from cpersona.server.jsonrpc import MAX_DEPTH, Refusal, read_body, tool_call_with_surrogates
from cpersona.server.stdio_wire import read_line
from hypothesis import given, settings
from hypothesis import strategies as st

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=12,
)
ids = st.integers() | st.text(max_size=8) | st.floats(allow_nan=False) | st.booleans() | st.none()
envelopes = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
        "id": ids,
        "method": st.sampled_from(["tools/call", "ping", "notifications/initialized"]) | values,
        "params": values,
        "result": values,
        "error": values,
    },
)


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _check(message: Any, text: str) -> None:
    try:
        oracle = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValueError:
        oracle = None
    for outcome in (read_line(text), read_body(text.encode())):
        if isinstance(outcome, Refusal):
            answer = json.loads(outcome.body())
            types.JSONRPCError.model_validate(answer)
            if isinstance(message, dict) and _valid_id(message.get("id")):
                assert answer["id"] == message["id"]
            else:
                assert answer["id"] is None
            if not outcome.answer:  # only a notification goes unanswered on stdio
                assert isinstance(message, dict) and "method" in message and "id" not in message
        elif oracle is None:  # nothing the SDK refuses is let through, but for one case:
            assert tool_call_with_surrogates(text) is not None  # the tool refuses it itself
        else:
            if isinstance(oracle, types.JSONRPCNotification):
                assert "id" not in message  # an id the SDK ignored is refused, not dropped
            if outcome is not None:
                assert outcome == oracle


@settings(max_examples=400, deadline=None)
@given(envelopes)
def test_envelopes_are_read_as_the_sdk_reads_them_or_answered_with_their_id(message):
    _check(message, json.dumps(message))


@settings(max_examples=200, deadline=None)
@given(values)
def test_any_json_value_is_read_or_answered(message):
    _check(message, json.dumps(message))


@pytest.mark.parametrize("levels", [MAX_DEPTH - 2, MAX_DEPTH - 1, 5_000])
def test_nesting_past_the_parser_is_refused_as_invalid_params_with_the_id(levels):
    """`params` is level 2; its contents reach level 2 + levels - 1 (plus the scalar)."""
    params = '{"a":' + "[" * levels + "1" + "]" * levels + "}"
    text = f'{{"jsonrpc":"2.0","id":"deep","method":"tools/call","params":{params}}}'
    if levels + 2 <= MAX_DEPTH:
        line = read_line(text)
        assert isinstance(line, types.JSONRPCRequest) and line.id == "deep"
        assert read_body(text.encode()) is None  # let through to the SDK
        return
    for outcome in (read_line(text), read_body(text.encode())):
        assert isinstance(outcome, Refusal)
        assert (outcome.id, outcome.code) == ("deep", types.INVALID_PARAMS)
        assert f"nested {levels + 2} levels deep" in outcome.message


def test_a_lone_surrogate_in_tool_arguments_reaches_the_tool_elsewhere_it_is_refused():
    """The tool answers its own refusal for a lone surrogate in its arguments (nothing is
    written; tests/server/test_server_stdio.py); anywhere else it is invalid params."""
    call = '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"store","arguments":'
    inside = call + '{"agent_id":"a","message":{"content":"half \\ud83d"}}}}'
    line = read_line(inside)
    assert isinstance(line, types.JSONRPCRequest) and line.id == 3
    assert read_body(inside.encode()) is None
    outside = '{"jsonrpc":"2.0","id":4,"method":"ping","params":{"x":"\\udc00"}}'
    for outcome in (read_line(outside), read_body(outside.encode())):
        assert isinstance(outcome, Refusal)
        assert (outcome.id, outcome.code) == (4, types.INVALID_PARAMS)
        assert "surrogate" in outcome.message
