#!/usr/bin/env bash
# Runs the service on the embedded defaults: SQLite under ./data, migrated on start, and the
# local model (installed on first use with visible progress, then started as a child process)
# when no provider is configured. Set OPENAI_BASE_URL / OPENAI_API_KEY (or CHAT_SHELL_*
# variables, see docs/configuration.md) to change them.
set -euo pipefail
cd "$(dirname "$0")/.."
export TIKTOKEN_CACHE_DIR="${TIKTOKEN_CACHE_DIR:-$PWD/.cache/tiktoken}"
exec .venv/bin/chat-shell serve --migrate --host "${HOST:-127.0.0.1}" --port "${PORT:-8000}"
