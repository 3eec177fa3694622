#!/usr/bin/env bash
# Sets up everything and runs every test: unit, integration (SQLite and PostgreSQL), Redis,
# HTTP/SSE and browser. CHAT_SHELL_DEEP=1 adds the long property, soak and reconnect runs.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test,bench
bash scripts/services.sh
trap 'bash scripts/stop-services.sh' EXIT
export TIKTOKEN_CACHE_DIR="$PWD/.cache/tiktoken"
# The real-model tests need the local model server: built once per machine into the wheel cache
# (~/.cache/chat-shell/wheels, outside the checkout), so later runs only install it (seconds).
.venv/bin/chat-shell local-model install
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
