"""Model providers: profiles, the OpenAI-compatible client, error classification."""
