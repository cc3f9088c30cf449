"""The SQL of the health checks: what each check reads and each repair writes, by subject
(handle.py: the handle, counts and what a database holds; texts, embedding_rows, stamps,
sources, sqlite_objects)."""
