#!/usr/bin/env bash
# version.sh: the version a build of this checkout carries, as `make build`,
# `make dist` and `make image` stamp it:
#   vX.Y.Z      on the commit tagged vX.Y.Z (X.Y.Z from the VERSION file) when
#               no tracked file has uncommitted changes: a release;
#   vX.Y.Z-dev  anywhere else (another commit, changes, no git, no tags),
#               which semantic versioning orders before the release.
# A build that was not stamped says the same (internal/buildinfo.Dev).
set -euo pipefail
cd "$(dirname "$0")/.."

v=$(tr -d ' \t\r\n' < VERSION)
if ! [[ $v =~ ^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "version.sh: VERSION holds \"$v\": want a semantic version without a leading v, e.g. 0.1.0" >&2
  exit 1
fi
if command -v git >/dev/null 2>&1 &&
  tagged=$(git rev-parse -q --verify "refs/tags/v$v^{commit}" 2>/dev/null) &&
  [ "$tagged" = "$(git rev-parse HEAD 2>/dev/null)" ] &&
  [ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  echo "v$v"
else
  echo "v$v-dev"
fi
