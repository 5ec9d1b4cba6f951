#!/usr/bin/env bash
# main (no receipts emitted), emit (receipts on, default topic), emit-off (GOMSG_RECEIPTS_TOPIC="")
set -u
out=/work/wt-emit-mut/bench
run() { # name bin env...
	local name=$1 bin=$2 r=$3; shift 3
	echo "round $r $name load $(cut -d' ' -f1 /proc/loadavg)" >>"$out/log"
	env "$@" "$out/gomsg-bench" throughput --spawn --gomsg "$out/$bin" --sessions 1000 --duration 10s \
		--baseline-duration 0 --out "$out/r$r-$name" >"$out/r$r-$name.txt" 2>&1
	grep -h "acked deliveries/s" "$out/r$r-$name.txt" | head -1 >>"$out/log"
}
for r in 3 4; do
	if ((r % 2 == 1)); then
		run main gomsg-main $r X=1; run on gomsg-emit $r X=1; run off gomsg-emit $r GOMSG_RECEIPTS_TOPIC=
	else
		run off gomsg-emit $r GOMSG_RECEIPTS_TOPIC=; run on gomsg-emit $r X=1; run main gomsg-main $r X=1
	fi
done
echo done >>"$out/log"
