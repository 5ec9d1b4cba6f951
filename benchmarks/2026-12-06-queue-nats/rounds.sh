#!/bin/bash
for r in 1 2 3; do
  for q in kafka nats; do
    ./gomsg-bench throughput --spawn --gomsg ./gomsg --queue $q --sessions 1000 --duration 8s --warmup 2s --baseline-duration 0 --floor=false --out ./r-$q-$r > ./log-$q-$r.txt 2>&1
  done
done
echo done > ./finished
