#!/usr/bin/env bash
# Runs every fuzz target of the module for a while each (one worker: the
# machine is shared). Usage: scripts/fuzz.sh [fuzztime, default 5s]
# CI runs it with the default; longer runs (e.g. 60s) are for hunting.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-5s}
n=0
while IFS=: read -r file line; do
  target=$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*).*/\1/' <<<"$line")
  dir=./$(dirname "$file")
  echo "fuzz: $dir $target ($fuzztime)"
  if ! out=$(go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -parallel 1 "$dir" 2>&1); then
    echo "$out" | tail -30
    exit 1
  fi
  echo "$out" | tail -1
  n=$((n + 1))
done < <(grep -r -e "^func Fuzz" --include="*_test.go" cmd internal)
echo "fuzz: $n targets, no failure"
