"""The local model server process: llama.cpp's own HTTP server (OpenAI-compatible chat
completions with streaming, usage and a prompt cache) from the prebuilt `xllamacpp` wheel,
serving one GGUF file until SIGTERM.

The wheel is built for x86-64 with AVX2, FMA and F16C and without llama.cpp's AMX backend
(which crashes on Q4_0/Q4_1 weights, llama.cpp issue 11115), so it runs the same on every
x86-64 CPU from Haswell on. Its options are the subset of llama.cpp's `llama-server` options
the supervisor passes, so `CHAT_SHELL_LOCAL_MODEL_SERVER` may name a `llama-server` instead.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

# llama.cpp's host-memory prompt cache (default 8 GiB): room for a few 4k-token prompts, so a
# summary call between two turns does not evict the conversation's cached prompt.
_PROMPT_CACHE_MIB = 512


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a GGUF model with llama.cpp's HTTP server.")
    parser.add_argument("--model", required=True)
    parser.add_argument("--alias", required=True, help="the model id the server answers to")
    parser.add_argument("--ctx-size", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=1, help="threads generating tokens")
    parser.add_argument("--threads-batch", type=int, default=1, help="threads reading the prompt")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.model_alias = {args.alias}
    params.n_ctx = args.ctx_size
    params.n_parallel = 1
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads_batch
    params.hostnames = [args.host]
    params.port = args.port
    params.cache_ram_mib = _PROMPT_CACHE_MIB
    params.ui = False
    # The supervisor's verifying decode follows at once; llama.cpp's own warm-up run (seconds
    # on a busy machine) would only delay it.
    params.warmup = False
    # Blocked before the server's threads start (they inherit the mask), so only sigwait sees them.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    try:
        # Serves from its own threads while referenced, so until the process exits.
        _server = xllamacpp.Server(params)
    except RuntimeError as exc:
        # llama.cpp has logged why (no such file, not a model, port taken) just before.
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)
    signal.sigwait(stop_signals)
    sys.stderr.flush()
    # The loaded model needs no teardown: skip the C++ destructors.
    os._exit(0)


if __name__ == "__main__":
    main()
