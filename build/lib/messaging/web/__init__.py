"""The faces of the API: the app, its routers, SSE, MCP, limits and metrics."""
