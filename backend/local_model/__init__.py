"""The embedded local model (SPEC 8): SmolLM2-135M-Instruct served by llama-cpp-python's
OpenAI-compatible server, so a fresh install chats with no account or key.

`installer` builds (once per machine, into a wheel cache) and installs the server and the model,
`model_file` finds and verifies the model file, `supervisor` runs the server as a child
process, and `integration` wires it into the service when no provider is configured.
"""
