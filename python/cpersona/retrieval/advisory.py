"""The embedding health state and the recall `advisory` (retrieval.md §13, surface.md §12.5)."""

from __future__ import annotations

import threading
from typing import Any

FAILURES_TO_FAULT = 2


class EmbeddingHealth:
    """unknown -> healthy | hint | fault, observed by recall's query embeds."""

    def __init__(self, transport: str) -> None:
        self.transport = transport
        self.state = "unknown"
        self.kind = ""  # "unreachable" | "misconfigured" while in fault
        self.evidence: str | None = None
        self._failures = 0
        self._delivered: set[str] = set()  # session buckets that got the full runbook
        self._lock = threading.Lock()

    def observe_none(self) -> None:
        with self._lock:
            if self.state != "hint":
                self._delivered.clear()
            self.state = "hint"
            self.kind = ""
            self.evidence = "CPERSONA_EMBEDDING_MODE=none: no embedding backend is configured"

    def observe_foreign(self, evidence: str) -> None:
        """The stored vectors are a model this process cannot run: vector search is off."""
        with self._lock:
            if self.state != "hint" or self.kind != "foreign":
                self._delivered.clear()
            self.state = "hint"
            self.kind = "foreign"
            self.evidence = evidence

    def observe_ok(self) -> None:
        with self._lock:
            self.state = "healthy"
            self._failures = 0
            self.evidence = None
            self._delivered.clear()

    def observe_failure(self, evidence: str, misconfigured: bool) -> None:
        with self._lock:
            self._failures += 1
            self.evidence = evidence
            if self._failures >= FAILURES_TO_FAULT:
                if self.state != "fault":
                    self._delivered.clear()
                self.state = "fault"
                self.kind = "misconfigured" if misconfigured else "unreachable"

    def advisory(self, session_key: str) -> dict[str, Any] | None:
        """The advisory for this call, or None while healthy or unknown."""
        with self._lock:
            if self.state not in ("hint", "fault"):
                return None
            declared = bool(session_key.strip()) and session_key.strip() != "transport"
            bucket = session_key.strip() if declared else ""
            shared_keyless = not declared and self.transport != "stdio"
            full = bucket not in self._delivered or (shared_keyless and self.state == "fault")
            self._delivered.add(bucket)
            reason = self._reason()
            return {
                "degraded": True,
                "severity": self.state,
                "reason": reason,
                "evidence": self.evidence,
                "runbook": self._full(reason) if full else self._short(),
                "advisory_scope": "session" if declared or self.transport == "stdio" else "process",
            }

    def _reason(self) -> str:
        if self.state == "hint" and self.kind == "foreign":
            return (
                "the stored vectors come from another embedding model: recall uses full-text "
                "and keyword search only until they are converted"
            )
        if self.state == "hint":
            return "embeddings are disabled: recall uses full-text and keyword search only"
        if self.kind == "misconfigured":
            return "the embedding backend is misconfigured: query embeddings never left the process"
        return "the embedding backend is unreachable: query embeddings are failing"

    def _full(self, reason: str) -> str:
        if self.state == "hint" and self.kind == "foreign":
            fix = (
                "run `cpersona reembed` once (it converts the stored vectors to the configured "
                "model in place; recall keeps working meanwhile)"
            )
        elif self.state == "hint":
            fix = (
                "configure an embedding backend: unset CPERSONA_EMBEDDING_MODE for the "
                "embedded local model, or set it to http / api"
            )
        elif self.kind == "misconfigured":
            fix = "fix CPERSONA_EMBEDDING_MODE and its URL / key settings, then restart the server"
        else:
            fix = "restart or repoint the embedding server (CPERSONA_EMBEDDING_URL)"
        evidence = f" Evidence: {self.evidence}." if self.evidence else ""
        return (
            f"**Notify the user:** memory recall is degraded ({reason}).{evidence} Impact: recall "
            "matches words only, so paraphrases and older memories may be missed. To repair: "
            f"{fix}; then `check_health(fix=true)` re-embeds rows stored meanwhile. Tell the "
            "user plainly: 'My long-term memory search is running in a reduced mode, so I may "
            "miss things I was told before.' Setting CPERSONA_DEGRADED_ADVISORY=false silences "
            "this report, not the degradation."
        )

    def _short(self) -> str:
        evidence = f" ({self.evidence})" if self.state == "fault" and self.evidence else ""
        return f"Reminder: recall is still degraded{evidence}; results are keyword-only."
