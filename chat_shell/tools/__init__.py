"""Built-in tools (OpenAI-style function tools)."""
