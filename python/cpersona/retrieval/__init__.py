"""The recall pipeline (spec retrieval.md): channels, fusion, scoring, gate, messages."""
