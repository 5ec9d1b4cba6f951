#!/bin/bash
cd /tmp/dis
for r in 1 2; do
  list="100 200 400 800"; [ $r = 2 ] && list="800 400 200 100"
  for g in $list; do
    python3 /tmp/dis/hwm.py /tmp/dis/gc-$g-$r.hwm.json & hp=$!
    echo "round $r gc $g load $(cut -d' ' -f1 /proc/loadavg)" >> /tmp/dis/gc.log
    GOMSG_GC_PERCENT=$g ./gomsg-bench throughput --spawn --gomsg /tmp/dis/gomsg-gc --sessions 1000 --duration 10s --baseline-duration 0 --out /tmp/dis/gc-$g-$r > /tmp/dis/gc-$g-$r.txt 2>&1
    kill $hp
    grep -h "acked deliveries/s" /tmp/dis/gc-$g-$r.txt | head -1 >> /tmp/dis/gc.log
  done
done
echo done >> /tmp/dis/gc.log
