"""The full-text index: FTS5's trigram bm25 arm served from the Rust core (docs/fts-index.md)."""
