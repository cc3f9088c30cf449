"""`CPERSONA_SECRETS`: what one write does with the credentials in the text it takes.

`redact` (the default) stores each as `[REDACTED:<kind>]` and the write's answer carries
`redacted` (kind -> count); `reject` refuses the write, naming the kinds and never the values;
`allow` stores text verbatim, as CPersona 2.5.x does (docs/compatibility.md). A `Screen` is
made per write, passed every field the write stores, and asked for its refusal before anything
is written: the row, both indexes, the change logs and the vector all see the screened text.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from cpersona.credentials import MODES

V = TypeVar("V")


class Screen:
    """The fields of one write, screened under one mode; counts what it found."""

    __slots__ = ("counts", "mode")

    def __init__(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown credentials mode {mode!r}: expected one of {MODES}")
        self.mode = mode
        self.counts: dict[str, int] = {}

    def text(self, value: str) -> str:
        """`value` as the write stores it (redacted in `redact` mode, else as given)."""
        return self._screened(value, "redact")

    def json(self, value: Any) -> Any:
        """A JSON value (metadata, source, keyword lists) as the write stores it."""
        return self._screened(value, "redact_json")

    def _screened(self, value: V, redactor: Literal["redact", "redact_json"]) -> V:
        """`value` as stored, the kinds `detect.<redactor>` finds in it counted."""
        if self.mode == "allow" or not value:
            return value
        from cpersona.credentials import detect  # see the package docstring

        out: V
        out, found = getattr(detect, redactor)(value)
        for kind, n in found.items():
            self.counts[kind] = self.counts.get(kind, 0) + n
        return out if self.mode == "redact" else value

    @property
    def refusal(self) -> str | None:
        """Why `reject` refuses this write (kinds only, never a value), or None."""
        if self.mode != "reject" or not self.counts:
            return None
        return (
            f"the text holds credentials ({kinds(self.counts)}); CPERSONA_SECRETS=reject "
            "refuses to store them: remove them, or store where they are kept instead"
        )

    def mark(self, out: dict[str, Any]) -> dict[str, Any]:
        """`out` with `redacted` when this write redacted something (else unchanged)."""
        if self.mode == "redact" and self.counts:
            out["redacted"] = dict(sorted(self.counts.items()))
        return out


def kinds(counts: dict[str, int]) -> str:
    """`github_token x1, password x2`: kinds and counts, for messages and logs."""
    return ", ".join(f"{k} x{n}" for k, n in sorted(counts.items()))


#: The fields of an export record that a write stores as text or JSON (every record kind).
_RECORD_FIELDS = ("content", "summary", "keywords", "metadata", "source")


def screen_record(record: dict[str, Any], mode: str) -> dict[str, int]:
    """Screen an export record's stored fields in place (import_memories); the counts.

    A record whose text the screen changed loses the file's vector, which embeds the original
    text: the import embeds the stored one instead.
    """
    screen = Screen(mode)
    changed = False
    for key in _RECORD_FIELDS:
        value = record.get(key)
        if isinstance(value, str):
            new: Any = screen.text(value)
        elif isinstance(value, dict | list):
            new = screen.json(value)
        else:
            continue
        if new != value:
            record[key] = new
            changed = True
    if changed:
        record.pop("embedding_b64", None)
    return screen.counts
