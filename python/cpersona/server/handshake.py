"""The recorded handshake: `initialize` and `tools/list` answered before the MCP SDK has loaded.

Every MCP client spawns its own stdio server and waits for these two answers before it can do
anything; importing the SDK alone takes most of a second. The answers depend only on what this
install serves (the SDK's code, ours, the settings, the operating-context instructions) and on
the protocol version the client asks for, so a server records the SDK's own answer lines the
first time it gives them and a later server with the same inputs replays them, byte for byte,
while the SDK loads in the background. The SDK still sees every message: the replayed requests
are fed to it once it has loaded, so its negotiation and session state are its own, and its
answer to each is compared with the one sent (a difference deletes the record and is logged).

A record is one JSON file in the cache directory, named by a digest of those inputs, so any
change of either package (reinstalled or edited files), of the settings or of the instructions
simply finds no record. Only requests whose answer is fixed by that key are replayed: an
`initialize` with well-formed params, and a `tools/list` without params, each with an integer
or plain-text id; anything else waits for the SDK as before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import sys
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING

from cpersona import __version__, private_files

if TYPE_CHECKING:
    from cpersona.config import Settings

log = logging.getLogger("cpersona.handshake")

#: Bumped when the record's layout changes.
FORMAT = 1
#: Settings that can never shape a tool list or `initialize`, kept out of the digest's input.
_SECRET_SETTINGS = frozenset({"auth_token", "embedding_api_key"})
#: Ids replayed verbatim: their JSON spelling is the same from json and from the SDK.
_PLAIN_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
#: The packages whose code decides the two answers.
_PACKAGES = ("mcp", "mcp_types", "cpersona")
#: The id of an answer line as the SDK writes it (`{"jsonrpc":"2.0","id":...`), when plain.
_ANSWER_ID = re.compile(rb'\{"jsonrpc":"2\.0","id":(-?[0-9]{1,16}|"[A-Za-z0-9_.:-]{1,64}")[,}]')
#: Longer inbound lines are not looked at: a handshake request is a few hundred bytes.
_MAX_HANDSHAKE_LINE = 8192
_INITIALIZE_PARAMS = frozenset({"protocolVersion", "capabilities", "clientInfo"})


def _package_stamps() -> list[tuple[str, int, int]]:
    """(path, mtime_ns, size) of every source file of the packages that shape the answers:
    a reinstall or an edit of any of them changes the key. Found without importing them."""
    stamps: list[tuple[str, int, int]] = []
    for name in _PACKAGES:
        spec = find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            stamps.append((name, 0, 0))
            continue
        for root in spec.submodule_search_locations:
            for folder, dirs, files in os.walk(root):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for file in sorted(files):
                    if file.endswith(".py"):
                        path = os.path.join(folder, file)
                        st = os.stat(path)
                        stamps.append((path, st.st_mtime_ns, st.st_size))
    return stamps


def _settings_input(settings: Settings) -> dict[str, object]:
    values: dict[str, object] = {}
    for f in dataclasses.fields(settings):
        if f.name in _SECRET_SETTINGS:
            continue
        value = getattr(settings, f.name)
        if isinstance(value, (set, frozenset)):
            value = sorted(map(str, value))
        values[f.name] = value
    return values


def record_key(settings: Settings, instructions: str | None) -> str:
    """The digest naming the record for this install, these settings and instructions."""
    material = json.dumps(
        {
            "format": FORMAT,
            "cpersona": __version__,
            "python": sys.version,
            "packages": _package_stamps(),
            "settings": _settings_input(settings),
            "instructions": instructions,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(material.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Answer:
    """One recorded answer line, cut around its id: `head + <id as JSON> + tail`."""

    head: str
    tail: str

    def render(self, request_id: int | str) -> bytes:
        return (self.head + json.dumps(request_id) + self.tail).encode() + b"\n"

    @classmethod
    def cut(cls, line: bytes, request_id: int | str) -> Answer | None:
        """The template of an answer the SDK wrote for `request_id`, or None when the line is
        not the plain `{"jsonrpc":"2.0","id":...,"result":...}` shape."""
        text = line.decode().rstrip("\n")
        head = '{"jsonrpc":"2.0","id":'
        spelled = json.dumps(request_id)
        if not text.startswith(head + spelled + ',"result":'):
            return None
        return cls(head, text[len(head) + len(spelled) :])


def replayable_id(message: dict[str, object]) -> int | str | None:
    request_id = message.get("id")
    if isinstance(request_id, bool):
        return None
    if isinstance(request_id, int) and abs(request_id) < 2**53:
        return request_id
    if isinstance(request_id, str) and _PLAIN_ID.fullmatch(request_id):
        return request_id
    return None


def initialize_version(message: dict[str, object]) -> str | None:
    """The protocol version an `initialize` asks for, when its params are the plain shape
    every client sends (anything else waits for the SDK, which may refuse it)."""
    params = message.get("params")
    if not isinstance(params, dict) or set(params) - {
        "protocolVersion",
        "capabilities",
        "clientInfo",
    }:
        return None
    version = params.get("protocolVersion")
    info = params.get("clientInfo")
    if not isinstance(version, str) or not isinstance(params.get("capabilities"), dict):
        return None
    if not isinstance(info, dict) or not all(
        isinstance(info.get(k), str) for k in ("name", "version")
    ):
        return None
    return version


class Record:
    """The recorded answers of one key: `initialize` and `tools/list` per requested version."""

    def __init__(self, path: Path, answers: dict[str, dict[str, Answer]]) -> None:
        self.path = path
        self.answers = answers

    @classmethod
    def open(cls, root: Path, key: str) -> Record:
        path = root / f"handshake-{key}.json"
        answers: dict[str, dict[str, Answer]] = {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            for version, methods in data["answers"].items():
                answers[version] = {m: Answer(a["head"], a["tail"]) for m, a in methods.items()}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.debug("handshake record %s unreadable (%s); recording anew", path, exc)
            answers = {}
        return cls(path, answers)

    def answer(self, version: str, method: str) -> Answer | None:
        return self.answers.get(version, {}).get(method)

    def learn(self, version: str, method: str, answer: Answer) -> None:
        """Keep `answer` and write the record (temporary file, then rename: a reader never
        sees half of one; two servers writing at once leave one whole record)."""
        if self.answer(version, method) == answer:
            return
        self.answers.setdefault(version, {})[method] = answer
        data = {
            "format": FORMAT,
            "answers": {
                v: {m: {"head": a.head, "tail": a.tail} for m, a in methods.items()}
                for v, methods in self.answers.items()
            },
        }
        try:
            private_files.write_atomically(self.path, json.dumps(data), fsync=False)
        except OSError as exc:  # a read-only or full cache costs the next start its speed only
            log.debug("handshake record not written to %s: %s", self.path, exc)

    def forget(self) -> None:
        self.answers = {}
        with contextlib.suppress(OSError):
            self.path.unlink()


class Handshake:
    """One stdio session's side of the record: what was answered before the SDK loaded (to
    be fed to it and checked), and which of the SDK's answers to record."""

    #: Inbound lines looked at for the handshake; a session's first few hold it.
    WATCH_LINES = 8

    def __init__(self, record: Record | None) -> None:
        self.record = record
        #: The protocol version this session's `initialize` asked for (its plain shape only).
        self.version: str | None = None
        #: Answers written before the SDK loaded, by request id.
        self.sent: dict[int | str, bytes] = {}
        #: Ids of requests whose SDK answer goes into the record, with their method.
        self.expect: dict[int | str, str] = {}
        self._watch = self.WATCH_LINES
        self._initialized = False

    # Before the SDK has loaded.
    def early(self, raw: bytes) -> bytes | None:
        """The recorded answer to `raw` (b"" for the `initialized` notification, which needs
        none), or None when only the SDK can answer it, and every later line, too."""
        if self.record is None:
            return None
        message = _message(raw)
        if message is None:
            return None
        method = message.get("method")
        request_id = replayable_id(message)
        if method == "initialize" and not self._initialized and request_id is not None:
            version = initialize_version(message)
            answer = self.record.answer(version, method) if version is not None else None
            if answer is None:
                return None
            self.version, self._initialized = version, True
            return self._send(request_id, answer)
        if method == "notifications/initialized" and self._initialized and "id" not in message:
            return b""
        if method == "tools/list" and self.version is not None and request_id is not None:
            if message.get("params") not in (None, {}) or request_id in self.sent:
                return None
            answer = self.record.answer(self.version, method)
            return None if answer is None else self._send(request_id, answer)
        return None

    def _send(self, request_id: int | str, answer: Answer) -> bytes:
        line = answer.render(request_id)
        self.sent[request_id] = line
        return line

    # Once the SDK serves.
    def inbound(self, raw: bytes) -> None:
        """Note the requests whose answers are recorded (the first lines of a session)."""
        if self._watch <= 0 or self.record is None:
            return
        self._watch -= 1
        message = _message(raw)
        if message is None:
            return
        request_id = replayable_id(message)
        if request_id is None or request_id in self.sent:
            return
        method = message.get("method")
        if method == "initialize" and self.version is None:
            self.version = initialize_version(message)
            if self.version is not None:
                self.expect[request_id] = method
        elif (
            method == "tools/list"
            and self.version is not None
            and message.get("params")
            in (
                None,
                {},
            )
        ):
            self.expect[request_id] = method

    def outbound(self, line: bytes) -> bool:
        """False for the SDK's answer to a request already answered from the record (checked
        against it); records the answers it was waiting for."""
        if not self.sent and not self.expect:
            return True
        found = _ANSWER_ID.match(line)
        if found is None:
            return True
        request_id: int | str = json.loads(found.group(1))
        if request_id in self.sent:
            given = self.sent.pop(request_id)
            if given != line:
                log.warning(
                    "the recorded MCP handshake differs from the SDK's answer; record dropped "
                    "(the next start records it anew)"
                )
                if self.record is not None:
                    self.record.forget()
            return False
        method = self.expect.pop(request_id, None)
        if method is not None and self.version is not None and self.record is not None:
            answer = Answer.cut(line, request_id)
            if answer is not None:
                self.record.learn(self.version, method, answer)
        return True


def _message(raw: bytes) -> dict[str, object] | None:
    if len(raw) > _MAX_HANDSHAKE_LINE:  # a store or an attack, never a handshake request
        return None
    try:
        message = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return None
    return message
