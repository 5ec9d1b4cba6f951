#!/bin/bash
# Alternating grpc/ws rounds of idle and throughput on one boat build.
set -u
M=/tmp/benchws-NkAa
OUT=/work/wt-benchws/benchmarks/2026-11-27-issue16
cd /work/wt-benchws
run() { # scenario transport round args...
  local sc=$1 tr=$2 r=$3; shift 3
  local d=$OUT/$sc-$tr-r$r
  mkdir -p $d
  echo "== $(date -u +%T) $sc $tr round $r  load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $OUT/run.log
  echo "$M/gomsg-bench $sc --spawn --gomsg $M/gomsg --transport $tr --out $d $*" > $d/command.txt
  $M/gomsg-bench $sc --spawn --gomsg $M/gomsg --transport $tr --out $d "$@" > $d/stdout.md 2> $d/stderr.log
  echo "   rc=$? $(date -u +%T)" | tee -a $OUT/run.log
}
for r in 1 2 3; do
  if [ $r = 2 ]; then order="ws grpc"; else order="grpc ws"; fi
  for tr in $order; do run idle $tr $r --sessions 1000,5000 --floor=false; done
done
for r in 1 2 3; do
  if [ $r = 2 ]; then order="ws grpc"; else order="grpc ws"; fi
  for tr in $order; do run throughput $tr $r --sessions 1000 --duration 20s --warmup 2s --baseline-duration 0; done
done
