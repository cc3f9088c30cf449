"""The `check_health` checks, one module per topic (surface.md §9.2): each declares its
checks (`health.check.Check`) with their detectors, repairs and issue types; health/registry.py
lists the modules in the order of the answer."""
