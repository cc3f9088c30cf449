"""The credential detector: which spans of a text are credentials, and the text without them.

The detector runs on every write, so it is built for text that holds none: each rule names the
literal needles any of its matches must contain, and its regex runs only when one of them is
in the text; the provider-token rules run only on text with a run of 20 token characters, the
`name = value` rule only on text holding one of its words. A typical memory costs a few `in`
tests and one short regex scan (5-10 µs, docs/notes/performance-notes.md). Rules are deliberately
narrow: a provider token is matched by its documented prefix and length, a JWT only when its
header decodes to a JSON object, a Discord token only when its first segment decodes to a user
id, an AWS secret key only beside an AWS access key id or assigned to a credential name. What
they never touch (commit hashes, UUIDs, content hashes, ticket and build ids, URLs without a
password, prose that mentions passwords) is tested in tests/credentials/.

Overlapping matches resolve by rule priority (a private-key block wins over anything inside
it, a provider token over the generic `name = value` rule), then by position.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

#: What a redacted span becomes; its own text is never redacted again (idempotence).
MARK = "[REDACTED:{}]"
_MARK_PREFIX = "[REDACTED:"

#: Characters of a base64url token; a match may neither start nor end inside a longer run.
_B64URL = "A-Za-z0-9_-"


@dataclass(frozen=True, slots=True)
class Finding:
    """One credential: `text[start:end]` is replaced by `[REDACTED:<kind>]`."""

    kind: str
    start: int
    end: int


Validator = Callable[[re.Match[str]], bool]


@dataclass(frozen=True, slots=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    #: Literal substrings one of which every match contains (the cheap pre-check).
    needles: tuple[str, ...]
    #: Lower wins an overlap.
    priority: int
    #: The regex group that is the credential (0: the whole match).
    group: int | str = 0
    validate: Validator | None = None
    #: Needles are looked for in the lower-cased text.
    folded: bool = False
    #: Every match holds a run of 20 `_LONG_RUN` characters (most provider tokens): the rule
    #: is skipped for text without one, which is most text, at the cost of one regex scan.
    long: bool = True


def _bounded(body: str, chars: str = _B64URL) -> re.Pattern[str]:
    """`body` not preceded or followed by a character of `chars` (a token, not part of one)."""
    return re.compile(rf"(?<![{chars}]){body}(?![{chars}])")


def _b64decode(segment: str) -> bytes | None:
    try:
        return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
    except (binascii.Error, ValueError):
        return None


def _jwt_header(m: re.Match[str]) -> bool:
    raw = _b64decode(m.group("header"))
    if raw is None:
        return False
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return False
    return isinstance(header, dict)


def _discord_user_id(m: re.Match[str]) -> bool:
    # The first segment is the bot's user id (a snowflake) in base64: that is what tells a
    # token from any other dotted identifier of the same shape.
    raw = _b64decode(m.group("uid"))
    return raw is not None and raw.isdigit() and 17 <= len(raw) <= 20


def _mixed_case(m: re.Match[str]) -> bool:
    # A hex digest (one case only) is never an AWS secret key; a random 40-character base64
    # key lacks either case with probability below 1e-9.
    text = m.group(0)
    return any(c.islower() for c in text) and any(c.isupper() for c in text)


_PRIVATE_LABEL = r"(?P<label>[A-Z0-9]+(?: [A-Z0-9]+)* )?PRIVATE KEY(?: BLOCK)?"
#: Inside a block: base64, PEM headers (`Proc-Type: 4,ENCRYPTED`), and `\n` escapes of JSON.
_PEM_BODY = r"[A-Za-z0-9+/=\s\\:,.-]"

_LONG_RUN = re.compile(r"[A-Za-z0-9_+/=.:-]{20,}")

_RULES: tuple[_Rule, ...] = (
    _Rule(
        "private_key",
        re.compile(
            rf"-----BEGIN {_PRIVATE_LABEL}-----"
            rf"(?:{_PEM_BODY}*?-----END (?P=label)?PRIVATE KEY(?: BLOCK)?-----"
            # A block cut short (no END line): its base64 lines, not the prose after them.
            r"|(?:(?:\s|\\[nr])*[A-Za-z0-9+/=]{16,})*)"
        ),
        ("PRIVATE KEY",),
        0,
        long=False,
    ),
    _Rule(
        "age_secret_key",
        _bounded(r"AGE-SECRET-KEY-1[02-9AC-HJ-NP-Z]{58}"),
        ("AGE-SECRET-KEY-1",),
        0,
    ),
    _Rule(
        "aws_access_key_id",
        _bounded(r"(?:AKIA|ASIA)[A-Z0-9]{16}", "A-Za-z0-9"),
        ("AKIA", "ASIA"),
        1,
    ),
    _Rule("gcp_api_key", _bounded(r"AIza[A-Za-z0-9_-]{35}"), ("AIza",), 1),
    _Rule(
        "github_token",
        _bounded(r"(?:gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{60,251})"),
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        1,
    ),
    _Rule(
        "gitlab_token",
        _bounded(r"gl(?:pat|dt|rt|ptt|soat|ft)-[A-Za-z0-9_.-]{20,}"),
        ("glpat-", "gldt-", "glrt-", "glptt-", "glsoat-", "glft-"),
        1,
    ),
    _Rule(
        "slack_token",
        _bounded(r"(?:xox[abprse]|xapp)-[A-Za-z0-9-]{15,}"),
        ("xox", "xapp-"),
        1,
    ),
    _Rule(
        "slack_webhook",
        re.compile(r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{8,}"),
        ("hooks.slack.com",),
        1,
    ),
    _Rule(
        "discord_webhook",
        re.compile(
            r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_-]{20,}"
        ),
        ("/api/webhooks/",),
        1,
    ),
    _Rule(
        "discord_token",
        _bounded(
            r"(?P<uid>[MNO][A-Za-z0-9_-]{22,27})\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}",
            "." + _B64URL,
        ),
        (".",),
        1,
        validate=_discord_user_id,
    ),
    _Rule(
        "telegram_token",
        _bounded(r"[0-9]{8,10}:AA[A-Za-z0-9_-]{33}"),
        (":AA",),
        1,
    ),
    _Rule(
        "stripe_key",
        _bounded(r"(?:(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,247}|whsec_[A-Za-z0-9]{24,})"),
        ("_live_", "_test_", "whsec_"),
        1,
    ),
    _Rule(
        "anthropic_key",
        _bounded(r"sk-ant-[A-Za-z0-9_-]{20,}"),
        ("sk-ant-",),
        1,
    ),
    _Rule(
        "openai_key",
        _bounded(r"sk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}|[A-Za-z0-9]{48})"),
        ("sk-",),
        1,
    ),
    _Rule("huggingface_token", _bounded(r"hf_[A-Za-z0-9]{30,}"), ("hf_",), 1),
    _Rule("npm_token", _bounded(r"npm_[A-Za-z0-9]{36}"), ("npm_",), 1),
    _Rule("pypi_token", _bounded(r"pypi-Ag[A-Za-z0-9_-]{50,}"), ("pypi-Ag",), 1),
    _Rule(
        "sendgrid_key",
        _bounded(r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}", "." + _B64URL),
        ("SG.",),
        1,
    ),
    _Rule("twilio_api_key", _bounded(r"SK[0-9a-fA-F]{32}", "A-Za-z0-9"), ("SK",), 1),
    _Rule(
        "shopify_token",
        _bounded(r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}", "A-Za-z0-9_"),
        ("shp",),
        1,
    ),
    _Rule(
        "digitalocean_token",
        _bounded(r"do[opr]_v1_[a-f0-9]{64}", "A-Za-z0-9_"),
        ("_v1_",),
        1,
    ),
    _Rule(
        "jwt",
        _bounded(
            r"(?P<header>eyJ[A-Za-z0-9_-]{16,})\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*",
            "." + _B64URL,
        ),
        ("eyJ",),
        2,
        validate=_jwt_header,
    ),
    _Rule(
        "url_password",
        re.compile(
            r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,30}://"
            r"[^\s:/?#@\"'\\<>\[\]]*:(?P<secret>[^\s/?#@\"'\\<>]+)@(?=[A-Za-z0-9\[])"
        ),
        ("://",),
        3,
        group="secret",
        long=False,
    ),
    _Rule(
        "authorization",
        re.compile(
            r"(?i:\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:bearer|basic|token|digest)\s+"
            r"|\bbearer\s+(?=[A-Za-z0-9._~+/-]{20}))"
            r"(?P<secret>[A-Za-z0-9._~+/-]{8,}=*)"
        ),
        ("authorization", "bearer"),
        3,
        group="secret",
        folded=True,
        long=False,
    ),
)

_LONG = tuple(r for r in _RULES if r.long)
_PLAIN = tuple(r for r in _RULES if not r.long and not r.folded)
_FOLDED = tuple(r for r in _RULES if not r.long and r.folded)

# -- values assigned to credential names ---------------------------------------------------------

#: The credential names, each the end of an identifier (`DB_PASSWORD`, `clientSecret`,
#: `x-api-key`); `_name_kind` says which kind a value under it is. `token` alone is a name
#: (`max_tokens = 4096` is not: the name must end with the word). パスワード is Japanese's.
_NAME_WORDS_RE = (
    r"pass(?:word|wd|phrase)|secret[_-]?(?:access[_-]?)?key|secret|token|api[_-]?key|"
    r"access[_-]?key|account[_-]?key|auth[_-]?key|private[_-]?key|パスワード"
)
#: On the lower-cased text: case-sensitive matching is ten times faster than `(?i)` in re.
_NAMES = re.compile(rf"(?:{_NAME_WORDS_RE})(?![a-z0-9])")
_NAMES_ANY_CASE = re.compile(rf"(?i:{_NAME_WORDS_RE})(?![A-Za-z0-9])")
#: After the name: an optional closing quote, then `=`, `:`, `:=` or `=>` (a value follows).
_ASSIGN = re.compile(
    r"(?P<close>[\"'])?[ \t　]*(?P<sep>(?>:=|=>|=|:|：|＝))[ \t　]*"
    r"(?:\"(?P<dq>[^\"\\\r\n]{1,512})\"|'(?P<sq>[^'\\\r\n]{1,512})'"
    r"|(?P<bare>[^\s\"'`,;()\[\]{}<>=:][^\s\"'`,;()\[\]{}<>]{0,511}))"
)
#: `--password value` on a command line.
_FLAG = re.compile(r"[ \t]+(?P<bare>[^\s\"'`,;()\[\]{}<>-][^\s\"'`,;()\[\]{}<>]{0,511})")
_IDENT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_NOT_VALUES = frozenset(
    {"null", "none", "nil", "true", "false", "undefined", "empty", "redacted", "n/a", "na"}
)
_PLACEHOLDER_STARTS = ("$", "{{", "%(", "%s", "os.environ", "process.env", "env.", "ENV[")
_MASK_CHARS = frozenset("*xX.•·_-#?")
_REFERENCE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_NAME_WORDS = ("pass", "secret", "token", "key", "パスワード")


def _name_kind(name: str) -> str:
    low = name.lower().replace("-", "_")
    if "pass" in low or "パスワード" in low:
        return "password"
    if "secret" in low and "access" in low and "aws" in low:
        return "aws_secret_key"
    if "secret" in low:
        return "secret"
    if "private" in low:
        return "private_key"
    if ("access" in low or "account" in low) and "key" in low:
        return "access_key"
    if "key" in low:
        return "api_key"
    return "token"


def is_credential_value(value: str, *, quoted: bool, colon: bool, name: str = "") -> bool:
    """Whether `value`, assigned to a credential name, is a credential and not a placeholder,
    a reference to one (`$TOKEN`, `settings.api_key`, `getenv(...)`), an empty or null value,
    a mask (`****`), a URL without a password, or (after `:` without quotes) a plain word of
    prose ("Password: forgotten")."""
    v = value.strip()
    if not v or v.startswith(_MARK_PREFIX):
        return False
    if v.lower() in _NOT_VALUES or v.startswith(_PLACEHOLDER_STARTS):
        return False
    if set(v) <= _MASK_CHARS or _SCHEME.match(v):
        return False
    if v.isdigit() and len(v) < 6:
        return False
    if not quoted:
        if _REFERENCE.fullmatch(v) and (
            any(w in v.lower() for w in _NAME_WORDS) or v.lower() == name.lower()
        ):
            return False
        if colon and v.isalpha() and len(v) < 16 and not _mixed_case_word(v):
            return False
    return True


def _mixed_case_word(word: str) -> bool:
    """`hUnTer`, not `hunter`, `Summer`, `NOTE` or a word of a script without case."""
    rest = word[1:]
    return any(c.isupper() for c in rest) and any(c.islower() for c in word)


def _assignments(text: str, folded: str) -> Iterator[Finding]:
    # Positions in `folded` are those of `text` when lower-casing kept every character one
    # character long (it does for ASCII; not for, e.g., U+0130).
    names = _NAMES.finditer(folded) if len(folded) == len(text) else _NAMES_ANY_CASE.finditer(text)
    for m in names:
        start = m.start()
        while start > 0 and text[start - 1] in _IDENT_CHARS:
            start -= 1
        name = text[start : m.end()].lstrip(".-")
        flag = text.startswith("--", start) and not name.startswith("-")
        a = _ASSIGN.match(text, m.end())
        if a is None and flag:
            a = _FLAG.match(text, m.end())
        if a is None:
            continue
        group = next(g for g in ("dq", "sq", "bare") if a.groupdict().get(g) is not None)
        value = a.group(group)
        end = a.end(group)
        if group == "bare":
            trimmed = value.rstrip(".")  # a sentence's full stop is not part of the value
            end -= len(value) - len(trimmed)
            value = trimmed
        colon = a.groupdict().get("sep") in (":", "：")
        if is_credential_value(value, quoted=group != "bare", colon=colon, name=name):
            yield Finding(_name_kind(name), a.start(group), end)


_AWS_SECRET = _bounded(r"[A-Za-z0-9/+]{40}", "A-Za-z0-9/+=")


def _aws_secret_keys(text: str) -> Iterator[Finding]:
    for m in _AWS_SECRET.finditer(text):
        if _mixed_case(m):
            yield Finding("aws_secret_key", m.start(), m.end())


# -- the detector ------------------------------------------------------------------------------


def _matches(rules: tuple[_Rule, ...], text: str, haystack: str) -> Iterator[tuple[int, Finding]]:
    for rule in rules:
        if not any(n in haystack for n in rule.needles):
            continue
        for m in rule.pattern.finditer(text):
            if rule.validate is None or rule.validate(m):
                yield rule.priority, Finding(rule.kind, m.start(rule.group), m.end(rule.group))


def _candidates(text: str) -> list[tuple[int, Finding]]:
    folded = text.lower()
    found = list(_matches(_PLAIN, text, text))
    found += _matches(_FOLDED, text, folded)
    if _LONG_RUN.search(text) is not None:
        long = list(_matches(_LONG, text, text))
        if any(f.kind == "aws_access_key_id" for _, f in long):
            long += ((1, f) for f in _aws_secret_keys(text))  # a key next to its key id
        found += long
    if any(w in folded for w in _NAME_WORDS):
        found += ((4, f) for f in _assignments(text, folded))
    return found


def find(text: str) -> list[Finding]:
    """The credentials in `text`, in text order, never overlapping."""
    candidates = _candidates(text)
    if not candidates:
        return []
    ranked = sorted(candidates, key=lambda p: (p[0], p[1].start, -p[1].end))
    taken: list[Finding] = []
    for _, f in ranked:
        if f.end <= f.start or text.startswith(_MARK_PREFIX, f.start):
            continue
        if all(f.end <= t.start or f.start >= t.end for t in taken):
            taken.append(f)
    taken.sort(key=lambda f: f.start)
    return taken


def redact(text: str) -> tuple[str, dict[str, int]]:
    """`text` with each credential replaced by `[REDACTED:<kind>]`, and the count per kind."""
    findings = find(text)
    if not findings:
        return text, {}
    counts: dict[str, int] = {}
    parts: list[str] = []
    at = 0
    for f in findings:
        parts += [text[at : f.start], MARK.format(f.kind)]
        at = f.end
        counts[f.kind] = counts.get(f.kind, 0) + 1
    parts.append(text[at:])
    return "".join(parts), counts


_NAME_ONLY = re.compile(rf"[A-Za-z0-9_.-]*(?i:{_NAME_WORDS_RE})[\"']?")


def redact_json(value: Any) -> tuple[Any, dict[str, int]]:
    """A JSON value (metadata, source) with its strings redacted; a string under a credential
    name (`{"api_key": "..."}`) is a credential as a whole, as `api_key = "..."` is in text."""
    counts: dict[str, int] = {}

    def add(found: dict[str, int]) -> None:
        for kind, n in found.items():
            counts[kind] = counts.get(kind, 0) + n

    def walk(v: Any, key: str | None) -> Any:
        if isinstance(v, str):
            if (
                key is not None
                and _NAME_ONLY.fullmatch(key)
                and not find(v)
                and is_credential_value(v, quoted=True, colon=False, name=key)
            ):
                kind = _name_kind(key)
                add({kind: 1})
                return MARK.format(kind)
            out, found = redact(v)
            add(found)
            return out
        if isinstance(v, dict):
            return {k: walk(item, k if isinstance(k, str) else None) for k, item in v.items()}
        if isinstance(v, list):
            return [walk(item, key) for item in v]
        return v

    return walk(value, None), counts


def redact_json_text(text: str) -> tuple[str, dict[str, int]]:
    """`redact_json` on JSON text (a stored `metadata`), written back as `json.dumps` writes it;
    text that is not JSON is redacted as text."""
    if "\\" not in text and "[" not in text and not find(text):
        # Without escapes or lists, what the walk would find the text rules find (a value under
        # a credential name is `"name": "value"` in the text): most rows stop here, unparsed.
        return text, {}
    try:
        value = json.loads(text)
    except ValueError:
        return redact(text)
    new, found = redact_json(value)
    return (json.dumps(new) if found else text), found
