"""The derived index files (the vector index, the full-text index): one log-following protocol
(base.py) with a format plug-in each (vectors/index.py, fts/index.py). docs/architecture.md,
"Derived indexes"."""
