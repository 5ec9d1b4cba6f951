import sys,re
# print histogram summaries: count, fraction > each bucket
for f in sys.argv[1:]:
    for line in open(f):
        pass
    bk={}
    for line in open(f):
        m=re.match(r'(gomsg_\w+_seconds)_bucket\{le="([^"]+)"\} (\S+)',line)
        if m: bk.setdefault(m.group(1),[]).append((m.group(2),float(m.group(3))))
    for name,b in bk.items():
        tot=b[-1][1]
        if tot==0: continue
        s=' '.join(f'>{le}:{(tot-c)/tot*100:.2f}%' for le,c in b if le in ('0.005','0.01','0.025','0.05','0.1'))
        print(f, name, int(tot), s)
