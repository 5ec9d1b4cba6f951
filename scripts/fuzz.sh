#!/usr/bin/env bash
# Runs every fuzz target of the module for a while each (one worker: the
# machine is shared). Usage: scripts/fuzz.sh [fuzztime, default 30000x]
# The default is a count of executions, not a duration: Go 1.26's fuzz
# coordinator can fail a duration run with a bare "context deadline
# exceeded" at the -fuzztime boundary on a busy machine (golang/go#75804,
# fixed in Go 1.27), while a count has no deadline to race. CI runs the
# default; longer runs (e.g. 60s, or 1000000x) are for hunting.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-30000x}
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
