"""Tool definitions, resolution of agent tool configs, and routing of tool calls."""
