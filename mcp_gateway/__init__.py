"""The MCP gateway: a tenant's agents as the tools of an MCP server at ``/mcp/<tenant>``."""
