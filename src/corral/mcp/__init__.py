"""The brain-side MCP client (official `mcp` SDK) and vault-credential auth; see docs/mcp.md."""
