#!/usr/bin/env bash
# The JavaScript client's tests: its unit tests (node's test runner, against
# an in-test WebSocket server) and the browser end-to-end test (a real
# `gomsg dev`, the demo page in headless Chromium). Installs what is missing:
# Debian's chromium (as root) and the npm packages of clients/js (npm ci).
# It fails, never skips, when something is missing and cannot be installed.
# Usage: scripts/browser-test.sh        (CHROMIUM=/path overrides the browser)
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null 2>&1 || { echo "browser-test.sh: $1 not found: $2" >&2; exit 1; }; }
need go "install Go"
# Node.js 22+ and npm: fetched from the npm registry when missing or too old.
source scripts/node.sh

CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$CHROMIUM" ]; then
  echo "browser-test.sh: $CHROMIUM not found (set CHROMIUM to use another)" >&2
  source scripts/apt.sh
  apt_install browser-test.sh chromium
  [ -x "$CHROMIUM" ] || { echo "browser-test.sh: apt-get installed chromium but $CHROMIUM is still missing" >&2; exit 1; }
fi
export CHROMIUM

cd clients/js
# npm ci is quick when node_modules matches package-lock.json already.
if [ ! -d node_modules ] || ! npm ls --depth=0 >/dev/null 2>&1; then
  npm ci --no-audit --no-fund
fi
npm test
