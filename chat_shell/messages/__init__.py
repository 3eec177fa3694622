"""Message shapes: chain entries, LangChain messages, markers, tool-call pairs."""
