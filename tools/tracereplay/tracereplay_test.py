#!/usr/bin/python3
"""The trace replayer's own checks: the plan offline, then a short replay
through a real stratad whose writes are read back.

    tools/tracereplay/tracereplay_test.py [PATH/TO/stratad]

Offline (always): every I/O of both CSV traces is 4 KiB-aligned and inside
the LUN, the counts match the trace, --max-ios and --start-s cut it,
--map dense keeps the trace's extents apart and refuses a LUN too small,
--spread-ties leaves no two records of the Tencent sample at one time, and
the sleeps add up to the span over --speedup.

Live (when stratad is given, and qemu-io can reach iscsi://): stratad on a
small shelf, 3,000 records of the CloudPhysics trace replayed at 4 KiB
alignment with --prefill, then each written range read back with qemu-io's
pattern check (the replayer writes 0x5a), and the figures checked (no
errors, I/O count). Exit 0 pass, 1 fail, 77 skip (qemu-io missing).
"""
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
replayer = os.path.join(here, "tracereplay.py")
traces = "/work/shared/traces"
cloudphysics = os.path.join(traces, "cloudphysics_vscsi_2h.csv.gz")
tencent = os.path.join(traces, "tencent_cbs_1s_sample.csv.gz")
failures = 0


def check(what, ok, detail=""):
    global failures
    print("%s: %s%s" % ("ok" if ok else "FAIL", what, "" if ok or not detail else "\n    " + str(detail)[:1500]))
    failures += 0 if ok else 1
    return ok


def run(*args):
    return subprocess.run([sys.executable, replayer] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=600)


def figures(out):
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def plan(trace, lun, *options):
    """(figures, [(op, offset, length)], total sleep ms) of a dry run."""
    with tempfile.NamedTemporaryFile("r", suffix=".qemu-io") as f:
        r = run(trace, "iscsi://unused/iqn/0", "--dry-run", "--lun-bytes", lun, "--commands", f.name, *options)
        if r.returncode != 0:
            return None, [], 0, r.stderr
        ios, sleep_ms = [], 0
        for line in f:
            w = line.split()
            if w[0] in ("aio_read", "aio_write"):
                ios.append((w[0], int(w[-2]), int(w[-1])))
            elif w[0] == "sleep":
                sleep_ms += int(w[1])
        return figures(r.stdout), ios, sleep_ms, r.stderr


if not os.path.exists(cloudphysics) or not os.path.exists(tencent):
    print("SKIP: the traces are not in %s" % traces)
    sys.exit(77)

LUN = 8 << 30
for trace, options in ((cloudphysics, []), (tencent, ["--spread-ties"])):
    name = os.path.basename(trace)
    f, ios, sleep_ms, err = plan(trace, LUN, *options)
    if not check("%s: the dry run plans" % name, f is not None, err):
        continue
    check("%s: one command per record" % name, len(ios) == int(f["ios"]), (len(ios), f["ios"]))
    check("%s: reads and writes as counted" % name,
          sum(op == "aio_read" for op, _, _ in ios) == int(f["reads"]), f)
    bad = [io for io in ios if io[1] % 4096 or io[2] % 4096 or io[2] == 0 or io[1] + io[2] > LUN]
    check("%s: every I/O 4 KiB-aligned and inside the LUN" % name, not bad, bad[:5])
    planned_ms = float(f["planned_s"]) * 1000
    check("%s: the sleeps add up to the span over the speedup (%d ms, planned %.0f)" % (name, sleep_ms, planned_ms),
          planned_ms - 2 <= sleep_ms <= planned_ms + 1)  # the last fraction of a ms is not slept; planned_s is rounded

f, ios, _, _ = plan(cloudphysics, LUN, "--max-ios", 1000, "--start-s", 3600)
check("--max-ios 1000 --start-s 3600: 1000 I/Os from the trace's hour on",
      f is not None and int(f["ios"]) == 1000 and float(f["trace_start_s"]) >= 3600, f)

f, ios, _, _ = plan(cloudphysics, 6 << 30, "--map", "dense")
check("--map dense: the trace's 1,312 extents packed into a 6 GiB LUN",
      f is not None and int(f["extents_touched"]) == 1312 and all(o + n <= 6 << 30 for _, o, n in ios), f)
f, _, _, err = plan(cloudphysics, 4 << 30, "--map", "dense")
check("--map dense refuses a LUN smaller than the trace's extents", f is None and "use --map modulo" in err, err)

# Tencent's clock: one second. Spread, no two records share a microsecond unless the tick holds more than its gap.
f, _, sleep_ms, _ = plan(tencent, LUN, "--speedup", "0.01")
f2, _, sleep_ms2, _ = plan(tencent, LUN, "--speedup", "0.01", "--spread-ties")
check("--spread-ties turns Tencent's two ticks into a paced replay (sleeps %d -> %d)" % (sleep_ms, sleep_ms2),
      sleep_ms2 > 150000 and f2 is not None and float(f2["trace_span_s"]) > float(f["trace_span_s"]))

stratad = sys.argv[1] if len(sys.argv) > 1 else None
if stratad is None:
    print("live part not run: no stratad given")
    sys.exit(1 if failures else 0)
if shutil.which("qemu-io") is None or shutil.which("qemu-img") is None:
    print("SKIP live: qemu-io or qemu-img is missing (qemu-utils, qemu-block-extra)")
    sys.exit(77 if failures == 0 else 1)

seed = int(os.environ.get("STRATA_TEST_SEED", random.randrange(1 << 30)))
print("seed", seed)
rng = random.Random(seed)
work = tempfile.mkdtemp(prefix="tracereplay-test-", dir="/var/tmp")
daemon = None
try:
    port = 20000 + rng.randrange(12000)
    url = "iscsi://127.0.0.1:%d/iqn.2026-11.io.strata:array/0" % port
    daemon = subprocess.Popen([stratad, "--state-dir", os.path.join(work, "state"), "--small-shelf", "--nvme", "off",
                               "--iscsi", "127.0.0.1:%d" % port, "--grpc", "127.0.0.1:%d" % (port + 1), "--http", "off"],
                              stdout=subprocess.PIPE, stderr=open(os.path.join(work, "stratad.log"), "w"), text=True)
    for line in daemon.stdout:
        if "stratad is ready" in line:
            break
    else:
        check("stratad starts", False, open(os.path.join(work, "stratad.log")).read())
        sys.exit(1)
    start_s = rng.randrange(0, 6000)
    print("slice: 3000 records from %d s" % start_s)
    commands = os.path.join(work, "replay.qemu-io")
    r = run(cloudphysics, url, "--max-ios", 3000, "--start-s", start_s, "--speedup", 1e6, "--prefill",
            "--commands", commands)
    f = figures(r.stdout)
    check("the replay runs with no error", r.returncode == 0 and f.get("errors") == "0", r.stdout + r.stderr)
    check("... all 3000 I/Os", f.get("ios") == "3000", f)
    check("... the 1 GiB LUN's size asked of qemu-img", f.get("lun_bytes") == str(1 << 30), f)
    # What the replay wrote last at each 4 KiB block: 0x5a everywhere it wrote (the prefill wrote 0x00 first).
    written = set()
    for line in open(commands):
        w = line.split()
        if w[0] == "aio_write":
            written.update(range(int(w[-2]) // 4096, (int(w[-2]) + int(w[-1])) // 4096))
    sample = rng.sample(sorted(written), min(200, len(written)))
    reads = ["read -q -P 0x5a %d 4k" % (b * 4096) for b in sample]
    out = subprocess.run(["qemu-io", "-f", "raw", url] + sum((["-c", c] for c in reads), []),
                         capture_output=True, text=True, timeout=300)
    check("%d blocks the replay wrote read back as its pattern (0x5a)" % len(sample),
          out.returncode == 0 and "mismatch" not in out.stdout + out.stderr and "fail" not in out.stdout.lower(),
          out.stdout[-1500:] + out.stderr[-500:])
finally:
    if daemon is not None and daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
    shutil.rmtree(work, ignore_errors=True)
sys.exit(1 if failures else 0)
