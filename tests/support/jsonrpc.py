"""JSON-RPC messages the tests write by hand to a server (stdio lines, HTTP bodies): the MCP
handshake, and requests too deep or malformed for a client library to send."""

from __future__ import annotations

from typing import Any

#: The MCP protocol version the hand-written handshakes offer.
PROTOCOL = "2025-06-18"
INITIALIZED: dict[str, Any] = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def initialize(request_id: int = 1, client: str = "cpersona-tests") -> dict[str, Any]:
    """The `initialize` request of a client named `client`."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": client, "version": "0"},
        },
    }


def deep_json(levels: int) -> str:
    """A JSON object nested `levels` deep."""
    return '{"k":' * levels + "1" + "}" * levels


def store_with_metadata(request_id: int, metadata: str) -> str:
    """A `store` call whose message metadata is the raw JSON text `metadata`."""
    return (
        f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call","params":{{"name":"store",'
        f'"arguments":{{"agent_id":"a","message":{{"content":"deep {request_id}",'
        f'"metadata":{metadata}}}}}}}}}'
    )
