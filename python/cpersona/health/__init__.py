"""Health and maintenance: the check_health registry and its repairs, deep_check, the checkup
CLI (surface.md §9)."""
