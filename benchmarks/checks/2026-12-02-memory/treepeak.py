"""treepeak.py CMD...: run CMD, poll its process tree every 0.1 s, print each process's peak RSS (VmHWM) and
the peak of the tree's summed RSS (the main process is the one whose command line reads empty: it was
read before its exec)."""
import os, subprocess, sys, time
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
peaks, names, sum_peak = {}, {}, 0
def children(pid):
    out = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            out += [int(c) for c in open(f"/proc/{pid}/task/{t}/children").read().split()]
    except OSError: pass
    return out
while p.poll() is None:
    todo, total = [p.pid], 0
    while todo:
        pid = todo.pop(); todo += children(pid)
        try:
            st = {l.split(":")[0]: l.split()[1] for l in open(f"/proc/{pid}/status") if l.startswith(("VmHWM", "VmRSS", "Name"))}
            names.setdefault(pid, open(f"/proc/{pid}/cmdline").read().replace("\0", " ")[:90])
            peaks[pid] = max(peaks.get(pid, 0), int(st.get("VmHWM", 0)) // 1024)
            total += int(st.get("VmRSS", 0)) // 1024
        except OSError: pass
    sum_peak = max(sum_peak, total)
    time.sleep(0.1)
for pid, mb in sorted(peaks.items(), key=lambda kv: -kv[1]):
    print(f"{mb:6d} MB  {pid}  {names[pid]}")
print(f"rc={p.returncode} sum of the tree's RSS at its peak: {sum_peak} MB")
