"""Service mode: chat_shell as its own FastAPI app (`POST /v1/response`, SSE)."""
