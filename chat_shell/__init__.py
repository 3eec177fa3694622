"""chat_shell: the LangGraph turn runtime that governs the context window before every model call."""
