#!/usr/bin/env bash
# lowlat.sh OUT RATE... — latency runs of /tmp/w/before and /tmp/w/after, two rounds, order reversed in the second.
set -u
out=$1; shift
mkdir -p $out
for rate in "$@"; do
 for r in 1 2; do
  order="before after"; [ $r = 2 ] && order="after before"
  for b in $order; do
   /tmp/w/$b/gomsg-bench latency --spawn --gomsg /tmp/w/$b/gomsg --rate $rate --sessions 1000 --duration 15s --baseline-duration 0 --out $out/$b-$rate-r$r > $out/$b-$rate-r$r.txt 2>&1
   python3 - $out/$b-$rate-r$r/latency.json $b $rate $r >> $out/summary.txt <<'PY'
import json,sys
d=json.load(open(sys.argv[1]));l=d['runs'][0]['load']
c=l['cpu_seconds'];s=l['syscalls_per_msg']
print(f"{sys.argv[2]} rate {sys.argv[3]} r{sys.argv[4]} | pushed {l['pushed']} missing {l['missing']} | p50 {l['latency']['p50_ms']:.2f} p99 {l['latency']['p99_ms']:.2f} | cpu/msg {l['cpu_per_msg_us']:.0f} w/backends {l['cpu_per_msg_with_backends_us']:.0f} | carrier {c['carrier']:.2f}s station {c['station']:.2f}s boat {c['boat']:.2f}s backends {c['backends']:.2f}s | sys/msg carrier {s['carrier']:.1f} station {s['station']:.1f} backends {s['backends']:.1f} | load {l['loadavg']}")
PY
  done
 done
done
