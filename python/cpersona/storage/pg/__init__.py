"""PostgreSQL storage (issue 12)."""
