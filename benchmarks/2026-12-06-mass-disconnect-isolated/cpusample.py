import os, sys, time
# samples CPU% of processes by name every 0.25 s; prints rows when any of them moves
names = {}
def procs():
    out = {}
    for p in os.listdir('/proc'):
        if not p.isdigit(): continue
        try:
            s = open(f'/proc/{p}/stat').read()
            cmd = open(f'/proc/{p}/cmdline').read().split('\0')
        except Exception: continue
        f = s[s.rindex(')')+2:].split()
        t = (int(f[11]) + int(f[12])) / 100.0
        c = ' '.join(cmd[:3])
        if 'gomsg' in c or 'redis-server' in c:
            label = cmd[0].split('/')[-1]
            if label == 'nice': label = cmd[3].split('/')[-1]
            if label.startswith('gomsg') and len(cmd) > 1 and not cmd[0].endswith('bench'):
                # gomsg <service> --boat-id X
                label = cmd[1] if cmd[1] != '-n' else cmd[4]
                if '--boat-id' in cmd: label += ':' + cmd[cmd.index('--boat-id')+1]
            if os.environ.get('X') is None and 'GOMSG_BENCH_HOLD' in open(f'/proc/{p}/environ').read(): label = 'holder'
            out[p] = (label, t)
    return out
prev = procs(); pt = time.time()
t0 = pt
while True:
    time.sleep(0.25)
    cur = procs(); ct = time.time()
    row = {}
    for p,(l,t) in cur.items():
        if p in prev:
            row[l] = row.get(l,0) + (t - prev[p][1]) / (ct-pt) * 100
    print('%.2f ' % ct + ' '.join('%s=%3.0f' % (k, v) for k, v in sorted(row.items()) if v >= 1), flush=True)
    prev, pt = cur, ct
