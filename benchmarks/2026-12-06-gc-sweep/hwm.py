import os, sys, time, json
# records the peak VmHWM (kB) of gomsg station/carrier/boat processes until killed; writes JSON to argv[1] every second
peak = {}
while True:
    for p in os.listdir('/proc'):
        if not p.isdigit(): continue
        try:
            cmd = open(f'/proc/{p}/cmdline').read().split('\0')
            if not cmd[0].endswith('gomsg-gc') : continue
            st = open(f'/proc/{p}/status').read()
        except Exception: continue
        svc = cmd[1]
        for line in st.splitlines():
            if line.startswith('VmHWM:'):
                kb = int(line.split()[1]); peak[svc] = max(peak.get(svc, 0), kb)
    json.dump(peak, open(sys.argv[1], 'w'))
    time.sleep(1)
