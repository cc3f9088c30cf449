"""The thresholds recall reads: vector thresholds and fused gates, global and per agent.

Calibration (retrieval.md §15) writes them; recall only reads. Until a calibration lands,
recall uses `CPERSONA_VECTOR_MIN_SIMILARITY` and the heuristic gate.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from cpersona.config import PRECISION_BETAS, Settings

#: Fewest vectors a threshold is derived from.
MIN_EMBEDDINGS = 10


@dataclass
class Thresholds:
    """Process-wide calibration results (guarded by one lock)."""

    global_threshold: float
    agent_thresholds: dict[str, float] = field(default_factory=dict)
    global_fused_gate: float | None = None
    agent_fused_gates: dict[str, float] = field(default_factory=dict)
    fused_gate_signal: str | None = None
    agent_betas: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def vector_threshold(self, agent_id: str) -> float:
        """T(agent): the agent's calibrated threshold, else the global one."""
        with self.lock:
            return self.agent_thresholds.get(agent_id, self.global_threshold)

    def fused_gate(self, agent_id: str) -> tuple[float | None, str | None]:
        """(G, sigma_G): the agent's gate, else the global one, and the signal it was made for."""
        with self.lock:
            gate = self.agent_fused_gates.get(agent_id, self.global_fused_gate)
            return gate, self.fused_gate_signal

    def forget_agent(self, agent_id: str) -> None:
        with self.lock:
            self.agent_thresholds.pop(agent_id, None)
            self.agent_fused_gates.pop(agent_id, None)
            self.agent_betas.pop(agent_id, None)


def precision_label(beta: float) -> str:
    """strict / balanced / lenient for exactly 2.0 / 1.0 / 0.5, else custom."""
    for name, value in PRECISION_BETAS.items():
        if beta == value:
            return name
    return "custom"


def fused_signal(settings: Settings) -> str | None:
    """The score the fused gate is calibrated on: confidence, else the rank-fusion mode."""
    if settings.confidence_enabled:
        return "confidence"
    if settings.recall_mode in ("rsf", "rrf"):
        return settings.recall_mode
    return None  # cascade without confidence: the heuristic gate only


def gate_floor(s: Settings, signal: str) -> float:
    """CALIBRATE_FLOOR on the gate signal's own scale.

    The floor is a cosine-scale number. An rrf score is at most 3/(k+1) (three lists at rank
    0), so a cosine-scale floor of 0.05 sits above every keyword-only row's best possible
    score (2/61 = 0.033 at k=60) and a calibrated rrf gate would drop them all. The heuristic
    gate maps onto the rrf scale by the same factor (retrieval.md §7.3); so does this floor.
    A deliberate difference from CPersona 2.5.12 (docs/compatibility.md).
    """
    if signal == "rrf":
        return s.calibrate_floor * 3 / (s.rrf_k + 1)
    return s.calibrate_floor
