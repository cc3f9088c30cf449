"""The vector index: files derived from SQLite, kept current by the server."""
