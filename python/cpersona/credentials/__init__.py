"""Credentials in text a write takes (issue 22): what counts as one and what a write does with it.

`detect` finds them (private-key blocks, provider tokens by their documented formats, JWTs,
URL passwords, values assigned to credential names) and redacts them as `[REDACTED:<kind>]`;
`policy` applies `CPERSONA_SECRETS` (redact / reject / allow) to the fields of one write.
Nothing imports `detect` before the first write or health check: compiling its patterns takes
about 10 ms, which start-up (spawn to `tools/list`, docs/notes/performance-notes.md) should not pay.
"""

from __future__ import annotations

#: CPERSONA_SECRETS's values (config.py declares the setting with these).
MODES = ("redact", "reject", "allow")


def tool_note(mode: str) -> str:
    """What a text-writing tool's description says of credentials, so an agent learns it from
    `tools/list` ("" under `allow`: 2.5.x's descriptions, unchanged)."""
    return {
        "redact": " Credentials in the text (API keys, tokens, private keys, JWTs, URL "
        "passwords, `password=...`) are stored as `[REDACTED:<kind>]`; the answer's `redacted` "
        "counts them by kind.",
        "reject": " A write whose text holds credentials (API keys, tokens, private keys, JWTs, "
        "URL passwords, `password=...`) is refused, naming their kinds.",
        "allow": "",
    }[mode]


def describe(mode: str) -> str:
    """The start-up banner's line on what writes do with credentials."""
    return {
        "redact": "redacted before anything is written (CPERSONA_SECRETS=redact)",
        "reject": "writes that hold them are refused (CPERSONA_SECRETS=reject)",
        "allow": "stored verbatim, as CPersona 2.5.x does (CPERSONA_SECRETS=allow)",
    }[mode]
