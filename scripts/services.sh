#!/usr/bin/env bash
# Installs (with apt-get, when missing) and starts what the test suite needs: PostgreSQL,
# Redis, Debian's Chromium (with a CJK font, for the pages in Chinese) and docker compose. Whatever this script starts is recorded in .run/started so
# scripts/stop-services.sh stops exactly that and nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .run
: > .run/started

need=()
command -v pg_ctlcluster >/dev/null 2>&1 || need+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ -d /usr/share/fonts/truetype/wqy ] || need+=(fonts-wqy-zenhei)
# `docker compose config` checks the compose file's required secrets (no daemon needed).
docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
if [ ${#need[@]} -gt 0 ]; then
  echo "==> apt-get install ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# PostgreSQL: start the first cluster if it is down, then wait until it accepts connections.
if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  echo "==> starting PostgreSQL $version"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start
  echo "postgres $version" >> .run/started
fi
for _ in $(seq 1 60); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 0.5; done
pg_isready -h 127.0.0.1 -p 5432 -q || { echo "PostgreSQL did not start" >&2; exit 1; }
# Tests connect as postgres over TCP; make sure that works without a password (local trust).
if ! psql -h 127.0.0.1 -U postgres -d postgres -Atc "select 1" >/dev/null 2>&1; then
  echo "PostgreSQL at 127.0.0.1:5432 refuses user postgres; set CHAT_SHELL_TEST_POSTGRES_URL" >&2
  exit 1
fi

# Redis: start a throwaway instance if nothing answers.
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "==> starting Redis"
  redis-server --bind 127.0.0.1 --port 6379 --save '' --appendonly no --daemonize yes \
    --pidfile "$PWD/.run/redis.pid" --logfile "$PWD/.run/redis.log"
  echo "redis" >> .run/started
  for _ in $(seq 1 40); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.25; done
fi
