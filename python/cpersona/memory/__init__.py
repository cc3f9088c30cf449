"""The write-side rules: store pipeline, dedup, edits, locks, episodes, profiles, listings."""
