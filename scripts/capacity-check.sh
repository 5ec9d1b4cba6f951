#!/usr/bin/env bash
# capacity-check.sh OUT ROUNDS — checks docs/capacity.md's model on one
# machine: runs the same saturated push load against a cluster of 1 station,
# 1 carrier, 1 boat ("1x1") and of 1 station, 2 carriers, 2 boats ("2x2"),
# alternating, ROUNDS times (the order reversed in every even round), each on
# fresh processes: redis-server, `gomsg dev --services none` (embedded etcd and
# Kafka), station, carriers and boats, all started here on free loopback ports.
#
# The load is two `gomsg-bench throughput` runs at once, without --spawn, each
# with half of SESSIONS (1000) sessions on one boat (in 1x1 both on the one
# boat), 64 Push callers each, a DURATION (20s) window; the same two tools in
# both layouts, so the load tool's own CPU is alike. Over MEASURE (10) seconds
# from 6 s after the tools started, inside both windows, the script reads
# every process's CPU time (/proc/<pid>/stat) and carrier's
# gomsg_carrier_deliveries_total{outcome=acked|delivered}, and prints
# one line per run: delivered/s, CPU µs per delivered message by process, and
# the load average. OUT/<round>-<layout>/ keeps the tools' reports and the logs.
#
# Needs redis-server and python3 on PATH; GOMSG and BENCH name the
# binaries (default: built into OUT).
set -euo pipefail
out=$1 rounds=$2
sessions=${SESSIONS:-1000} duration=${DURATION:-20s} measure=${MEASURE:-10}
repo=$(git rev-parse --show-toplevel)
mkdir -p "$out"
gomsg=${GOMSG:-$out/gomsg} bench=${BENCH:-$out/gomsg-bench}
[[ -x $gomsg ]] || (cd "$repo" && go build -o "$gomsg" ./cmd/gomsg)
[[ -x $bench ]] || (cd "$repo" && go build -o "$bench" ./cmd/gomsg-bench)
tick=$(getconf CLK_TCK)

pids=()
stop_all() {
	# Only the processes this script started, boats first.
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null || true; done
	for p in "${pids[@]}"; do
		for _ in $(seq 1 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
	done
	pids=()
}
trap stop_all EXIT

# free_ports N: N loopback ports free a moment ago, each with its successor
# free too (embedded etcd's peer port).
free_ports() {
	python3 - "$1" <<'EOF'
import socket, sys
n, out, hold = int(sys.argv[1]), [], []
while len(out) < n:
    a = socket.socket(); a.bind(("127.0.0.1", 0)); p = a.getsockname()[1]; hold.append(a)
    b = socket.socket()
    try:
        b.bind(("127.0.0.1", p + 1))
    except OSError:
        continue
    hold.append(b); out.append(p)
print(" ".join(map(str, out)))
EOF
}

wait_ready() { # name ops-addr
	for _ in $(seq 1 600); do
		if curl -fsS -o /dev/null "http://$2/readyz" 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	echo "$1 not ready on $2 within 60 s (see its log)" >&2
	return 1
}

cpu_ticks() { # pid: utime+stime of the process
	if [[ -r /proc/$1/stat ]]; then awk '{print $14 + $15}' "/proc/$1/stat"; else echo "process $1 ended before the measurement did" >&2; echo 0; fi
}

io_bytes() { # pid: bytes read and written through read/write system calls (sockets included)
	if [[ -r /proc/$1/io ]]; then awk '/^(rchar|wchar):/ {s += $2} END {printf "%d", s}' "/proc/$1/io"; else echo 0; fi
}

deliveries() { # carrier ops addresses...: acked + delivered, summed
	local sum=0 v
	for a in "$@"; do
		v=$(curl -fsS "http://$a/metrics" | awk '/^gomsg_carrier_deliveries_total\{outcome="(acked|delivered)"\}/ {s += $2} END {printf "%d", s}')
		sum=$((sum + v))
	done
	echo "$sum"
}

sessions_online() { # boat ops addresses...
	local sum=0 v
	for a in "$@"; do
		v=$(curl -fsS "http://$a/metrics" | awk '/^gomsg_boat_sessions_online/ {s += $2} END {printf "%d", s}')
		sum=$((sum + v))
	done
	echo "$sum"
}

run() { # dir carriers boats
	local dir=$1 ncar=$2 nboat=$3
	mkdir -p "$dir/logs"
	read -r -a p <<<"$(free_ports 24)"
	local a="127.0.0.1"
	local redis=$a:${p[0]} kafka=$a:${p[1]} etcd=$a:${p[2]} devops=$a:${p[3]}
	local push=$a:${p[4]} internal=$a:${p[5]} stops=$a:${p[6]}
	local secret token keyline key
	secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
	token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
	{ read -r key; read -r keyline; } < <("$gomsg" keygen --scopes push,broadcast --name capacity)

	redis-server --port "${p[0]}" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir/logs" >"$dir/logs/redis.log" 2>&1 &
	pids+=($!)
	local -A pid_of=([redis]=$!)
	"$gomsg" dev --services none --embedded-kafka-addr "$kafka" --embedded-etcd-addr "$etcd" --redis-addrs "$redis" \
		--ops-addr "$devops" --log-level warn >"$dir/logs/backends.log" 2>&1 &
	pids+=($!)
	pid_of[backends]=$!
	wait_ready backends "$devops"
	local back=(--redis-addrs "$redis" --kafka-brokers "$kafka" --etcd-endpoints "$etcd" --log-level warn --internal-token "$token")
	"$gomsg" station --push-grpc-addr "$push" --push-http-addr "" --station-internal-addr "$internal" --jwt-secret "$secret" \
		--api-keys "$keyline" --ops-addr "$stops" --broadcast-rate 1000000 "${back[@]}" >"$dir/logs/station.log" 2>&1 &
	pids+=($!)
	pid_of[station]=$!
	wait_ready station "$stops"
	local carops=() boatops=() boataddr=() i k=7
	for ((i = 1; i <= ncar; i++)); do
		"$gomsg" carrier --ops-addr "$a:${p[k]}" "${back[@]}" >"$dir/logs/carrier-$i.log" 2>&1 &
		pids+=($!)
		pid_of[carrier-$i]=$!
		carops+=("$a:${p[k]}")
		wait_ready "carrier-$i" "$a:${p[k]}"
		k=$((k + 1))
	done
	for ((i = 1; i <= nboat; i++)); do
		"$gomsg" boat --boat-id "capacity-boat-$i" --client-addr "$a:${p[k]}" --ws-addr "$a:${p[k + 1]}" \
			--boat-internal-addr "$a:${p[k + 2]}" --station-addr "$internal" --ops-addr "$a:${p[k + 3]}" \
			--connect-rate 1000000 --connect-rate-per-ip 1000000 --max-connections 10000000 \
			--max-connections-per-ip 10000000 --max-streams-per-connection 1000000 "${back[@]}" >"$dir/logs/boat-$i.log" 2>&1 &
		pids+=($!)
		pid_of[boat-$i]=$!
		boataddr+=("$a:${p[k]}")
		boatops+=("$a:${p[k + 3]}")
		wait_ready "boat-$i" "$a:${p[k + 3]}"
		k=$((k + 4))
	done
	# Two load tools, half of the sessions each, on boat 1 and boat 2 (or
	# both on boat 1).
	local tools=() t ops
	for t in 1 2; do
		local b=$(((t - 1) % nboat))
		ops="boat=${boatops[b]},station=$stops,carrier=${carops[0]}"
		"$bench" throughput --client-addr "${boataddr[b]}" --push-addr "$push" --redis-addr "$redis" --kafka-brokers "$kafka" \
			--jwt-secret "$secret" --api-key "$key" --ops "$ops" --sessions $((sessions / 2)) --duration "$duration" \
			--warmup 2s --baseline-duration 0 --out "$dir/tool-$t" >"$dir/tool-$t.txt" 2>&1 &
		tools+=($!)
		pids+=($!)
		pid_of[tool-$t]=$!
	done
	# Measure from 6 s after the tools started (the sessions open in 1-3 s,
	# then 2 s of warm-up) for MEASURE seconds, inside both tools' windows.
	sleep 6
	local online
	online=$(sessions_online "${boatops[@]}")
	((online >= sessions)) || echo "$(basename "$dir"): only $online of $sessions sessions online when the measurement began" | tee -a "$out/log" >&2
	local -A c0 c1 b0 b1
	local name d0 d1 t0 t1
	for name in "${!pid_of[@]}"; do c0[$name]=$(cpu_ticks "${pid_of[$name]}") b0[$name]=$(io_bytes "${pid_of[$name]}"); done
	d0=$(deliveries "${carops[@]}") t0=$(date +%s.%N)
	sleep "$measure"
	for name in "${!pid_of[@]}"; do c1[$name]=$(cpu_ticks "${pid_of[$name]}") b1[$name]=$(io_bytes "${pid_of[$name]}"); done
	d1=$(deliveries "${carops[@]}") t1=$(date +%s.%N)
	local load
	load=$(cut -d' ' -f1-3 /proc/loadavg)
	wait "${tools[@]}" || echo "a load tool failed: see $dir/tool-*.txt" >&2
	local n=$((d1 - d0))
	# Slow metric reads on a busy machine can stretch the interval past the
	# tools' windows, where the load has stopped: such a rate is too low.
	# The tools' windows end 2 s of warm-up + DURATION after their sessions
	# opened, the measurement began 6 s after the tools started.
	if (($(echo "6 + $t1 - $t0 > 2 + ${duration%s}" | bc -l))); then
		echo "$(basename "$dir"): the measurement took $(echo "$t1 - $t0" | bc -l | cut -c1-5) s for $measure s and may run past the tools' windows: its delivered/s is not comparable" | tee -a "$out/log" >&2
	fi
	{
		printf '%s carriers=%d boats=%d delivered=%d in %.2fs: %.0f/s; load %s\n' "$(basename "$dir")" "$ncar" "$nboat" "$n" \
			"$(echo "$t1 - $t0" | bc -l)" "$(echo "$n / ($t1 - $t0)" | bc -l)" "$load"
		printf '  CPU µs per delivered message:'
		local total=0 svc=0 us
		for name in $(printf '%s\n' "${!pid_of[@]}" | sort); do
			us=$(echo "(${c1[$name]} - ${c0[$name]}) * 1000000 / $tick / $n" | bc -l)
			printf ' %s %.1f' "$name" "$us"
			total=$(echo "$total + $us" | bc -l)
			case $name in station | carrier-* | boat-*) svc=$(echo "$svc + $us" | bc -l) ;; esac
		done
		printf '; services %.1f, all %.1f (of %.0f available: %d cores)\n' "$svc" "$total" \
			"$(echo "$(nproc) * 1000000 / ($n / ($t1 - $t0))" | bc -l)" "$(nproc)"
		printf '  bytes read + written per delivered message:'
		for name in $(printf '%s\n' "${!pid_of[@]}" | sort); do
			printf ' %s %.0f' "$name" "$(echo "(${b1[$name]} - ${b0[$name]}) / $n" | bc -l)"
		done
		echo
		printf '  tools:'
		for t in 1 2; do printf ' %s' "[$(grep -h -m1 'acked deliveries/s' "$dir/tool-$t.txt" | tr -s ' ' || echo '?')]"; done
		echo
	} | tee -a "$out/log"
	stop_all
}

if [[ -n ${ONLY:-} ]]; then
	run "$out/only-$ONLY" "${ONLY%x*}" "${ONLY#*x}"
	exit
fi
for r in $(seq 1 "$rounds"); do
	order=("1x1" "2x2")
	if ((r % 2 == 0)); then order=("2x2" "1x1"); fi
	for l in "${order[@]}"; do
		echo "round $r $l start: load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/log"
		case $l in
		1x1) run "$out/r$r-1x1" 1 1 ;;
		2x2) run "$out/r$r-2x2" 2 2 ;;
		esac
	done
done
