"""The PostgreSQL backend (issue 12): `PgDatabase`, the SQL translator, the schema.

Importing this package does not import psycopg; `PgDatabase` does, on first use, so an
SQLite deployment never loads the driver.
"""
