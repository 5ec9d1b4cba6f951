#!/usr/bin/env bash
# The JavaScript client as a user gets it: `npm pack` in clients/js, the
# tarball's contents checked (ESM, type declarations, README, no tests),
# installed with ws into a scratch project in a temporary directory, which
# connects to a real `gomsg dev` (started on free ports) on Node's WebSocket
# and on an injected one, and receives a push on each.
# Usage: scripts/js-pack-test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/node.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

go build -o "$tmp/gomsg" ./cmd/gomsg
(cd clients/js && { [ -d node_modules ] && npm ls --depth=0 >/dev/null 2>&1 || npm ci --no-audit --no-fund; } &&
  npm pack --silent --pack-destination "$tmp" >/dev/null)
tarball=$(ls "$tmp"/gomsg-client-*.tgz)
files=$(tar -tzf "$tarball")
for want in package/package.json package/README.md package/dist/index.js package/dist/index.d.ts package/dist/client.d.ts; do
  grep -qx "$want" <<<"$files" || { echo "js-pack-test: $want missing from $(basename "$tarball"):" >&2; echo "$files" >&2; exit 1; }
done
if grep -q '^package/test/' <<<"$files"; then
  echo "js-pack-test: the package holds the tests" >&2
  exit 1
fi

mkdir "$tmp/app"
cp clients/js/test/pack-app.mjs "$tmp/app/"
ws=$(node -p 'require("./clients/js/package.json").devDependencies.ws')
(cd "$tmp/app" && echo '{"name":"scratch","private":true,"type":"module"}' >package.json &&
  npm install --silent --no-audit --no-fund "$tarball" "ws@$ws" &&
  node pack-app.mjs "$tmp/gomsg")
