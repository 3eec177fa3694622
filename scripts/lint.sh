#!/usr/bin/env bash
# The lint of `make lint` and of every test run (scripts/test.sh): ruff's rules and format, and
# mypy over the two packages (its settings are in pyproject.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy backend chat_shell
