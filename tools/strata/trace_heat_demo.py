#!/usr/bin/env python3
"""A heat map made from a real trace replayed through the array: starts
stratad on its small embedded shelf with a heat snapshot every few
seconds, replays a block trace (../shared/traces/*.csv.gz: ts_us,vol,
offset,size,op) time-compressed through iSCSI with qemu-io's asynchronous
reads and writes, then writes `strata heat map` (text, SVG, PNG) and
`strata heat report` into an output directory, live and, after stratad
stops, offline on a copy of the pool's metadata.

The trace's distinct 4 MiB extents are packed in order into a volume just
big enough (CloudPhysics' 1,312 extents spread over 31 GiB fit 6 GiB), so
that the small shelf holds them: the order, and so the map's y axis, is the
trace's; gaps between extents are gone.

   trace_heat_demo.py STRATAD STRATA TRACE.csv.gz OUT_DIR [--speedup 30] [--minutes 120] [--interval-s 10]"""
import argparse, atexit, collections, gzip, os, random, shutil, subprocess, sys, tempfile, time

p = argparse.ArgumentParser()
p.add_argument("stratad"); p.add_argument("strata"); p.add_argument("trace"); p.add_argument("out")
p.add_argument("--speedup", type=float, default=30, help="trace seconds per wall second")
p.add_argument("--minutes", type=float, default=120, help="replay the trace's first N minutes")
p.add_argument("--interval-s", type=int, default=10, help="stratad's --heat-history-interval-s")
p.add_argument("--slice-s", type=float, default=2, help="wall seconds per qemu-io batch")
a = p.parse_args()
EXTENT = 4 << 20

# The trace, its extents packed in order.
ios = []
with gzip.open(a.trace, "rt") as f:
    next(f)
    for line in f:
        ts, vol, off, size, op = line.rstrip().split(",")
        ts = int(ts)
        if ts > a.minutes * 60e6:
            break
        ios.append((ts, int(off), int(size), op))
extents = sorted({o // EXTENT for _, o, s, _ in ios} | {(o + s - 1) // EXTENT for _, o, s, _ in ios})
packed = {e: i for i, e in enumerate(extents)}
size_gib = (len(extents) * EXTENT + (1 << 30) - 1) >> 30
print("%d I/Os over %.0f s, %d extents packed into %d GiB" % (len(ios), ios[-1][0] / 1e6, len(extents), size_gib), flush=True)

os.makedirs(a.out, exist_ok=True)
work = tempfile.mkdtemp(prefix="strata-trace-heat-", dir="/var/tmp")
atexit.register(shutil.rmtree, work, True)
port = 20000 + random.randrange(12000)
api = "127.0.0.1:%d" % (port + 2)
daemon = subprocess.Popen([a.stratad, "--state-dir", os.path.join(work, "state"), "--small-shelf", "--iscsi", "127.0.0.1:%d" % port,
                           "--grpc", api, "--http", "off", "--nvme", "off", "--heat-history-interval-s", str(a.interval_s)],
                          stdout=subprocess.PIPE, stderr=open(os.path.join(work, "stratad.log"), "w"), text=True)
atexit.register(lambda: daemon.poll() is None and daemon.kill())
for line in daemon.stdout:
    if "stratad is ready" in line:
        break

def strata(*words, live=True):
    r = subprocess.run([a.strata] + (["--api", api] if live else []) + list(words), capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("strata %s: %s" % (" ".join(words), r.stderr))
    return r.stdout

strata("volume", "create", "trace", "--size", "%dG" % size_gib)
strata("map", "trace", "--lun", "1")
url = "iscsi://127.0.0.1:%d/iqn.2026-11.io.strata:array/1" % port

def command(off, size, op):
    e = off // EXTENT
    at = packed[e] * EXTENT + off % EXTENT
    size = min(size, (len(extents) * EXTENT) - at)
    return ("aio_read -q %d %d" if op == "R" else "aio_write -q -P 0x5a %d %d") % (at, size)

start = time.time()
i = 0
while i < len(ios):
    slice_end_us = (time.time() - start + a.slice_s) * a.speedup * 1e6
    batch = []
    while i < len(ios) and ios[i][0] <= slice_end_us:
        batch.append(command(ios[i][1], ios[i][2], ios[i][3]))
        i += 1
        if len(batch) % 33 == 32:
            batch.append("aio_flush")  # at most 32 in flight: qemu-io's buffers and the target's queue stay small
    if batch:
        r = subprocess.run(["qemu-io", "-f", "raw", url], input="\n".join(batch + ["aio_flush", "quit"]) + "\n",
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("qemu-io: " + r.stderr)
    late = (time.time() - start) * a.speedup * 1e6 - slice_end_us
    print("\r%6d / %d I/Os, trace %5.0f s, %s" % (i, len(ios), ios[i - 1][0] / 1e6, "behind by %.0f s" % (late / 1e6) if late > 0 else "on time"),
          end="", flush=True)
    if late < 0:
        time.sleep(-late / a.speedup / 1e6)
print()
time.sleep(a.interval_s + 2)  # the last slice in a snapshot

for what, words in [("map.txt", ["heat", "map", "pools/p1"]), ("report.txt", ["heat", "report", "pools/p1"])]:
    open(os.path.join(a.out, what), "w").write(strata(*words))
strata("heat", "map", "pools/p1", "--svg", os.path.join(a.out, "map.svg"))
strata("heat", "map", "pools/p1", "--png", os.path.join(a.out, "map.png"))
daemon.terminate()
daemon.wait(timeout=60)
copy = os.path.join(work, "copy")
shutil.copytree(os.path.join(work, "state", "pools", "p1"), copy)
open(os.path.join(a.out, "map-offline.txt"), "w").write(strata("heat", "map", "pools/p1", "--metadata", copy, live=False))
open(os.path.join(a.out, "report-offline.txt"), "w").write(strata("heat", "report", "pools/p1", "--metadata", copy, live=False))
print("wrote", ", ".join(sorted(os.listdir(a.out))), "into", a.out)
