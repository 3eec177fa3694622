#!/usr/bin/env bash
# Container entrypoint: one image, several roles.
#   migrate   upgrade the schema (retries while the database starts)
#   backend   the API and UI: accepts turns and relays their events
#   worker    runs the turns from the job queue (chat_shell in package or service mode, by
#             CHAT_SHELL_RUNTIME_MODE)
#   service   chat_shell alone (service mode)
#   model     the local model server (OpenAI-compatible)
#   anything else is executed as given
set -euo pipefail

role="${1:-backend}"
shift || true
host="${HOST:-0.0.0.0}"

case "$role" in
  migrate)
    attempts="${MIGRATE_ATTEMPTS:-30}"
    for i in $(seq 1 "$attempts"); do
      if chat-shell migrate; then exit 0; fi
      echo "migrate: attempt $i/$attempts failed; retrying in 2s" >&2
      sleep 2
    done
    echo "migrate: database still unreachable after $attempts attempts" >&2
    exit 1
    ;;
  backend)
    exec chat-shell serve --host "$host" --port "${PORT:-8000}" "$@"
    ;;
  worker)
    exec chat-shell worker "$@"
    ;;
  service)
    exec chat-shell service --host "$host" --port "${PORT:-8100}" "$@"
    ;;
  model)
    exec chat-shell local-model serve --host "$host" --port "${PORT:-8080}" "$@"
    ;;
  *)
    exec "$role" "$@"
    ;;
esac
