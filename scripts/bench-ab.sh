#!/usr/bin/env bash
# bench-ab.sh OUT ROUNDS name=commit ... — an A/B of gomsg builds with one
# load tool: builds each commit's gomsg (and gomsg-bench from the last one)
# into OUT, then runs `gomsg-bench throughput --spawn` on each build in turn,
# ROUNDS times, the order reversed in every even round, so that a machine
# getting busier favours no build. DURATION (10s) sets the window; EXTRA
# adds gomsg-bench flags. OUT/log has one line per run.
set -euo pipefail
out=$1 rounds=$2
shift 2
repo=$(git rev-parse --show-toplevel)
mkdir -p "$out"
names=()
for kv in "$@"; do
	name=${kv%%=*} rev=${kv#*=}
	names+=("$name")
	rm -rf "$out/src-$name"
	git -C "$repo" worktree add -f --detach "$out/src-$name" "$rev" >/dev/null
	(cd "$out/src-$name" && go build -o "$out/gomsg-$name" ./cmd/gomsg)
done
(cd "$out/src-${names[-1]}" && go build -o "$out/gomsg-bench" ./cmd/gomsg-bench)
for n in "${names[@]}"; do git -C "$repo" worktree remove --force "$out/src-$n"; done
for r in $(seq 1 "$rounds"); do
	order=("${names[@]}")
	if ((r % 2 == 0)); then mapfile -t order < <(printf '%s\n' "${names[@]}" | tac); fi
	for n in "${order[@]}"; do
		echo "round $r $n load $(cut -d' ' -f1 /proc/loadavg)" >>"$out/log"
		# shellcheck disable=SC2086
		"$out/gomsg-bench" throughput --spawn --gomsg "$out/gomsg-$n" --sessions 1000 --duration "${DURATION:-10s}" \
			--baseline-duration 0 ${EXTRA:-} --out "$out/r$r-$n" >"$out/r$r-$n.txt" 2>&1
		grep -h "acked deliveries/s" "$out/r$r-$n.txt" | head -1 >>"$out/log"
	done
done
