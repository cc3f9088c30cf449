"""Where a host keeps the derived files of a PostgreSQL database: derived/placement.py (the
vector index's and the full-text index's alike); these names stay importable from here."""

from cpersona.derived.placement import SHARED_KEEP_LOG, cache_base, cache_directory

__all__ = ["SHARED_KEEP_LOG", "cache_base", "cache_directory"]
