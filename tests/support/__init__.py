"""What the tests share, defined once: the engine factory (`engine`), the MCP client helper
(`mcp_client`) and the backends a test runs on (`backends`). tests/conftest.py turns them into
fixtures; a test directory's conftest adds only what is its own."""
