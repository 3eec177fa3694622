#!/usr/bin/env bash
# Sets up everything and runs every test: unit, integration (SQLite and PostgreSQL), Redis,
# HTTP/SSE, browser and the real local models. CHAT_SHELL_DEEP=1 adds the long property, soak
# and reconnect runs and the local model under an emulated AVX2-only CPU (qemu-user).
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test,bench
bash scripts/services.sh
trap 'bash scripts/stop-services.sh' EXIT
export TIKTOKEN_CACHE_DIR="$PWD/.cache/tiktoken"
if [ "${CHAT_SHELL_DEEP:-}" = 1 ] && ! command -v qemu-x86_64 >/dev/null 2>&1; then
  echo "==> apt-get install qemu-user"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user >/dev/null
fi
# The real-model tests need both catalog models: downloaded once into ~/.cache/chat-shell/models
# (outside the checkout), then only checked; each install ends with a real decode.
CHAT_SHELL_LOCAL_MODEL=smollm2-135m .venv/bin/chat-shell local-model install
CHAT_SHELL_LOCAL_MODEL=qwen2.5-coder-1.5b .venv/bin/chat-shell local-model install
bash scripts/lint.sh
# Two workers by default (CI has 2 cores); CHAT_SHELL_TEST_WORKERS=0 runs in one process.
# The slowest tests are listed, so the default suite's budget (15 min) stays in view.
.venv/bin/python -m pytest -n "${CHAT_SHELL_TEST_WORKERS:-2}" --dist loadgroup --durations=25 "$@"
