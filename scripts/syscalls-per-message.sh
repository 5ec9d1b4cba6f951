#!/usr/bin/env bash
# syscalls-per-message.sh GOMSG [RATE] — read and write system calls per
# delivered message of each service, at a fixed push rate (default 1000/s,
# 1,000 gRPC sessions), from the kernel's own counters (/proc/PID/io syscr
# and syscw over 5 s inside a 20 s `gomsg-bench latency --spawn` window).
# Unlike CPU time, these counts hardly move with other load on the
# machine, so two builds compare on a busy machine too. Linux only.
# BENCH overrides the gomsg-bench binary (default: go run ./cmd/gomsg-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "$1") rate=${2:-1000}
name=$(basename "$bin")
out=$(mktemp -d)
if [ -z "${BENCH:-}" ]; then go build -o "$out/gomsg-bench" ./cmd/gomsg-bench; BENCH=$out/gomsg-bench; fi
"$BENCH" latency --spawn --gomsg "$bin" --sessions 1000 --rate "$rate" --duration 20s --baseline-duration 0 \
	--out "$out" >"$out/run.txt" 2>&1 &
run=$!
pidof() { pgrep -f "$name $1" | head -1; }
for _ in $(seq 1 120); do [ -n "$(pidof boat)" ] && break; sleep 1; done
sleep 14 # into the measured window (sessions connected, load running)
declare -A r w
for s in boat station carrier; do
	p=$(pidof "$s"); r[$s]=$(awk '/^syscr/{print $2}' "/proc/$p/io"); w[$s]=$(awk '/^syscw/{print $2}' "/proc/$p/io")
done
sleep 5
for s in boat station carrier; do
	p=$(pidof "$s")
	r2=$(awk '/^syscr/{print $2}' "/proc/$p/io") w2=$(awk '/^syscw/{print $2}' "/proc/$p/io")
	printf '%-8s reads/msg %5.2f  writes/msg %5.2f\n' "$s" \
		"$(echo "($r2-${r[$s]})/(5*$rate)" | bc -l)" "$(echo "($w2-${w[$s]})/(5*$rate)" | bc -l)"
done
wait $run || { cat "$out/run.txt"; exit 1; }
grep -h "acked deliveries/s" "$out/run.txt" | head -1
rm -rf "$out"
