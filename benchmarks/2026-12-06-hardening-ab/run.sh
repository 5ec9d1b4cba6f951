#!/bin/bash
cd /tmp/ab
for r in 1 2 3 4; do for v in before after; do
  uptime > /tmp/ab/$v-r$r.uptime
  ./gomsg-bench-$v throughput --spawn --gomsg /tmp/ab/gomsg-$v --sessions 1000 --baseline-duration 0 --duration 15s --out /tmp/ab/$v-r$r > /tmp/ab/$v-r$r.log 2>&1
  uptime >> /tmp/ab/$v-r$r.uptime
done; done
echo done > /tmp/ab/DONE
