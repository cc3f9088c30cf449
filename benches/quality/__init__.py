"""Retrieval-quality benchmark on real data (LoCoMo, JSQuAD); see run.py and docs/quality.md."""
