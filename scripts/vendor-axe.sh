#!/usr/bin/env bash
# Vendors axe-core (pinned) into tests/support/vendor/axe-core/ with its license, for the
# accessibility audit of the browser tests (test-only: it stays out of frontend/static). Run it to
# upgrade; the result is committed, so nothing is downloaded when the tests run.
set -euo pipefail
cd "$(dirname "$0")/.."
version=4.14.1
dest=tests/support/vendor/axe-core
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

(cd "$work" && npm pack --silent "axe-core@$version" >/dev/null && tar xzf "axe-core-$version.tgz")
rm -rf "$dest" && mkdir -p "$dest"
cp "$work/package/axe.min.js" "$dest/axe.min.js"
cp "$work/package/LICENSE" "$dest/LICENSE"
{
  echo "Vendored by scripts/vendor-axe.sh; do not edit by hand."
  echo "axe-core@$version axe.min.js sha256 $(sha256sum "$dest/axe.min.js" | cut -d' ' -f1)"
} > "$dest/README.md"
echo "vendored into $dest:"; ls -la "$dest"
