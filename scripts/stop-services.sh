#!/usr/bin/env bash
# Stops what scripts/services.sh started (and only that).
cd "$(dirname "$0")/.."
[ -f .run/started ] || exit 0
while read -r what version; do
  case "$what" in
    postgres) pg_ctlcluster --skip-systemctl-redirect "$version" main stop || true ;;
    redis) [ -f .run/redis.pid ] && kill "$(cat .run/redis.pid)" 2>/dev/null || true ;;
  esac
done < .run/started
rm -f .run/started
