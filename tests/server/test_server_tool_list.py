"""The tool list as clients receive it: the `tools/list` answer a real stdio server writes,
byte for byte, against golden files captured from the server before the tools became one
declaration each (server/tools/*: spec, argument model and access demand in one object).

Two settings are compared: the defaults, and one where every setting a description quotes
differs (limits, credential mode, export directory, release checks), so a description that
stopped following its setting fails too. That every protocol version gives the default
settings' bytes, from the SDK on a first start and from the recorded handshake
(server/handshake.py) on the next, is checked in test_server_handshake.py, whose two starts
per version answer the same `tools/list`.
"""

from __future__ import annotations

from pathlib import Path

from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from support.stdio_server import RawServer

GOLDEN = Path(__file__).with_name("golden")

#: Settings a tool description quotes, each away from its default.
CONFIGURED = {
    "CPERSONA_MAX_CONTENT_LENGTH": "1234",
    "CPERSONA_MAX_METADATA_LENGTH": "567",
    "CPERSONA_MAX_PROFILE_LENGTH": "89",
    "CPERSONA_RECALL_PREVIEW_CHARS": "321",
    "CPERSONA_SECRETS": "reject",
    "CPERSONA_UPDATE_CHECK": "true",
    "CPERSONA_MAX_IMPORT_BYTES": "4096",
    "CPERSONA_CALIBRATE_SAMPLE_SIZE": "150",
}


def listed_result(db: Path, version: str, env: dict[str, str]) -> tuple[bytes, str]:
    """The `result` member of the server's `tools/list` answer line, as written on stdout,
    and the server's log."""
    server = RawServer(db, {"CPERSONA_LOG_LEVEL": "debug", **env})
    try:
        server.call(
            "initialize",
            {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "cpersona-tests", "version": "0"},
            },
        )
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        request_id = server.request("tools/list")
        server.answer(request_id)
        head = b'{"jsonrpc":"2.0","id":%d,"result":' % request_id
        (line,) = [line for line in server.lines if line.startswith(head)]
        body = line[len(head) :].rstrip(b"\n")
        assert body.endswith(b"}")
    finally:
        assert server.close() == 0, server.stderr[-2000:]
    return body[:-1], server.stderr  # without the envelope's closing brace


def configured_env(root: Path) -> dict[str, str]:
    exports = root / "exports"
    exports.mkdir(exist_ok=True)
    return {**CONFIGURED, "CPERSONA_EXPORT_DIR": str(exports)}


def test_tools_list_follows_the_settings_its_descriptions_quote(tmp_path: Path) -> None:
    golden = (GOLDEN / "tools_list.configured.json").read_bytes()
    default = (GOLDEN / "tools_list.default.json").read_bytes()
    version = HANDSHAKE_PROTOCOL_VERSIONS[-1]
    env = {**configured_env(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    found, _ = listed_result(tmp_path / "mem.db", version, env)
    assert found == golden
    assert golden != default
