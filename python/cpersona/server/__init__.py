"""The MCP surface on the official `mcp` SDK's low-level server."""
