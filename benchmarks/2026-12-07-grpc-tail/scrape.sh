#!/bin/bash
# scrape.sh OUTDIR: every 1s, find gomsg processes' listening ports and save /metrics of each (last one kept)
out=$1; mkdir -p $out
while true; do
  for pid in $(pgrep -f "gomsg[-a-z]* (boat|carrier|station) "); do
    name=$(tr '\0' ' ' < /proc/$pid/cmdline | awk '{print $2}')
    for port in $(ss -ltnp 2>/dev/null | grep "pid=$pid," | awk '{print $4}' | sed 's/.*://'); do
      curl -s -m 1 http://127.0.0.1:$port/metrics -o $out/tmp.$name.$port 2>/dev/null && grep -q gomsg_ $out/tmp.$name.$port && mv $out/tmp.$name.$port $out/$name.metrics
      rm -f $out/tmp.$name.$port
    done
  done
  sleep 1
done
