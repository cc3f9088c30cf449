"""The thresholds recall reads: vector thresholds and fused gates, global and per agent.

Calibration (retrieval.md §15) writes them; recall only reads. Until a calibration lands,
recall uses `CPERSONA_VECTOR_MIN_SIMILARITY` and the heuristic gate.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

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
