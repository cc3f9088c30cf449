"""The subcommands of `cpersona` (cli.py dispatches to them): backup and restore bundles,
migration between backends, re-embedding, export/import and channel migration, the derived
index files (`cpersona index`), the checkup CLI, the stdio-to-HTTP proxy and the agent-policy
installer. The package root holds the core they drive; `cpersona.checkup` and
`cpersona.proxy_stdio` stay at the root only as the entry points the contract names
(`python -m ...`, surface.md §14.1)."""
