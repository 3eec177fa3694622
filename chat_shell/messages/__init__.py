"""Message shapes: chain entries, LangChain messages, markers, attachment previews."""
