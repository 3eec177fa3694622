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
# Lint runs beside the tests (it needs under half a core for most of a minute); either failing fails the run.
lint_log="$(mktemp)"
bash scripts/lint.sh >"$lint_log" 2>&1 &
lint_pid=$!
# Three workers by default on CI's 2 cores: much of a test is waiting (on a stream, a process
# starting, a browser), so a third worker fills that time. CHAT_SHELL_TEST_WORKERS=0 runs in one
# process. The slowest tests are listed, so the default suite's budget (12 min) stays in view.
status=0
.venv/bin/python -m pytest -n "${CHAT_SHELL_TEST_WORKERS:-3}" --dist loadgroup --durations=25 "$@" || status=$?
lint_status=0
wait "$lint_pid" || lint_status=$?
echo "==> lint (ruff, format, mypy)"
cat "$lint_log"
rm -f "$lint_log"
[ "$lint_status" = 0 ] || { echo "lint failed"; exit "$lint_status"; }
exit "$status"
