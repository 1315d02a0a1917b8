#!/usr/bin/env python3
"""strata heat map and heat report against a real stratad, live and offline.

stratad on a small shelf with a heat snapshot every 10 s; v1's data is
written through iSCSI (qemu-io), moved to the HDD tier, and its affinity
set back to auto; then a hot set of four extents is read at random offsets
until the migrator has promoted it and the history holds two snapshots or
more. Live: the SVG parses as XML and has a cell per listed extent and
snapshot, the PNG has PNG's signature and an IHDR of the size the CLI
printed, the text map shows the hot extents on SSD, and the report lists
them as the hottest and as promoted. Then stratad stops, STATE/pools/p1 is
copied, and the same commands with --metadata on the copy (no daemon) give
the same snapshots, the same map and the same moves.
   strata_heat_test.py PATH/TO/stratad PATH/TO/strata"""
import atexit, json, os, random, re, shutil, signal, struct, subprocess, sys, tempfile, time
import xml.etree.ElementTree as ET

stratad, cli = sys.argv[1], sys.argv[2]
if shutil.which("qemu-io") is None:
    print("SKIP: qemu-io is missing (tools/install-deps.sh installs qemu-utils, qemu-block-extra)")
    sys.exit(77)

failures = 0
def check(what, ok, detail=""):
    global failures
    print("%s: %s%s" % ("ok" if ok else "FAIL", what, "" if ok or not detail else "\n    " + str(detail)[:2000]))
    if not ok:
        failures += 1
    return ok

seed = int(os.environ.get("STRATA_TEST_SEED", random.randrange(1 << 30)))
print("seed", seed)
rng = random.Random(seed)
work = tempfile.mkdtemp(prefix="strata-heat-", dir="/var/tmp")
atexit.register(shutil.rmtree, work, True)
state = os.path.join(work, "state")
port = 20000 + rng.randrange(12000)  # below Linux's ephemeral ports
api = "127.0.0.1:%d" % (port + 2)
url = "iscsi://127.0.0.1:%d/iqn.2026-11.io.strata:array/0" % port
log = open(os.path.join(work, "stratad.log"), "w")
daemon = subprocess.Popen([stratad, "--state-dir", state, "--small-shelf", "--iscsi", "127.0.0.1:%d" % port, "--grpc", api,
                           "--http", "off", "--nvme", "off", "--heat-history-interval-s", "10"],
                          stdout=subprocess.PIPE, stderr=log, text=True)
atexit.register(lambda: daemon.poll() is None and daemon.kill())
for line in daemon.stdout:
    if "stratad is ready" in line:
        break
else:
    check("stratad starts", False, open(os.path.join(work, "stratad.log")).read())
    sys.exit(1)

def strata(*words, live=True):
    argv = [cli] + (["--api", api] if live else []) + list(words)
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)

EXTENT = 4 << 20
# Every third extent is written (adjacent ones would be a sequential stream,
# which heat does not count); four of those are the hot set.
WRITTEN = list(range(0, 40, 3))
HOT = sorted(rng.sample(WRITTEN[1:], 4))
print("hot extents", HOT)
def qemu_io(commands):
    args = ["qemu-io", "-f", "raw"]
    for c in commands:
        args += ["-c", c]
    r = subprocess.run(args + [url], capture_output=True, text=True, timeout=120)
    return r.returncode == 0 and "error" not in r.stdout.lower()

check("v1's data written through iSCSI: every third extent of the first 40",
      qemu_io(["write -P 0x5a %d 4M" % (e * EXTENT) for e in WRITTEN]))
check("... moved to the HDD tier", strata("volume", "move", "v1", "--to", "capacity", "--wait").returncode == 0)
check("... and its affinity set back to auto", strata("volume", "update", "v1", "--affinity", "auto").returncode == 0)

def history():
    r = strata("--json", "heat", "map", "pools/p1", "--since", "1h")
    return json.loads(r.stdout) if r.returncode == 0 else {"snapshots": []}

def promoted(h):
    """The hot extents the last snapshot lists on the SSD tier."""
    if not h.get("snapshots"):
        return set()
    last = h["snapshots"][-1]
    return {int(e["extent"]) for e in last.get("extents", []) if e["tier"] == "TIER_PERFORMANCE"} & set(HOT)

def on_hdd(h):
    """The hot extents the last snapshot lists on the HDD tier."""
    if not h.get("snapshots"):
        return set()
    return {int(e["extent"]) for e in h["snapshots"][-1].get("extents", []) if e["tier"] == "TIER_CAPACITY"} & set(HOT)

# A snapshot with the hot set still cold on HDD first, so that the map sees it move.
deadline = time.time() + 40
while on_hdd(history()) != set(HOT) and time.time() < deadline:
    time.sleep(0.5)
check("a snapshot lists the hot set on the HDD tier before it is read", on_hdd(history()) == set(HOT), on_hdd(history()))
deadline = time.time() + 150
h = history()
while time.time() < deadline:
    qemu_io(["read %d 4k" % (rng.choice(HOT) * EXTENT + rng.randrange(1024) * 4096) for _ in range(300)])
    h = history()
    if len(h["snapshots"]) >= 3 and len(promoted(h)) == len(HOT):
        break
    time.sleep(2)
check("the history holds 3 snapshots or more", len(h["snapshots"]) >= 3, len(h["snapshots"]))
check("the hot set is on the SSD tier in the last snapshot", promoted(h) == set(HOT), promoted(h))

# Live, right after a snapshot so that none is taken before stratad stops.
count = len(h["snapshots"])
deadline = time.time() + 30
while len(history()["snapshots"]) == count and time.time() < deadline:
    time.sleep(0.5)
svg_live, png_live = os.path.join(work, "live.svg"), os.path.join(work, "live.png")
live = {
    "json": strata("--json", "heat", "map", "pools/p1", "--since", "1h"),
    "text": strata("heat", "map", "pools/p1", "--since", "1h"),
    "volume": strata("heat", "map", "v1", "--since", "1h"),
    "report": strata("heat", "report", "pools/p1", "--since", "1h"),
    "svg": strata("heat", "map", "pools/p1", "--since", "1h", "--svg", svg_live),
    "png": strata("heat", "map", "pools/p1", "--since", "1h", "--png", png_live),
}
daemon.send_signal(signal.SIGTERM)
check("stratad stops on SIGTERM", daemon.wait(timeout=60) == 0)
for name, r in live.items():
    check("live heat %s: exit 0" % name, r.returncode == 0, r.stderr)
print(live["text"].stdout)  # for the log: what the map looked like

snaps = json.loads(live["json"].stdout)["snapshots"]
hot_now = {int(e["extent"]) for e in snaps[-1]["extents"][:len(HOT)]}
check("the last snapshot's hottest extents are the hot set", hot_now == set(HOT), hot_now)

# The text map: a row per listed extent, the hot ones ending on SSD (S, or ^ where promoted).
rows = {}
for line in live["text"].stdout.splitlines():
    m = re.match(r"^(\S+)?\s+(\d+) (.*)$", line)
    if m and re.fullmatch(r"([ .:\-=+*#%@][ SHv^?])*[ .:\-=+*#%@]?[ SHv^?]?", m.group(3)):
        rows[int(m.group(2))] = m.group(3)
check("the text map has a row for each hot extent", set(HOT) <= set(rows), sorted(rows))
check("... each ending hot (# % @) on SSD (S or ^)", all(re.search(r"[#%@][S^]$", rows.get(e, "")) for e in HOT),
      {e: rows.get(e) for e in HOT})
check("... and a promotion (^) on each", all("^" in rows.get(e, "") for e in HOT), {e: rows.get(e) for e in HOT})
check("the volume's map is the pool's (v1 is its only volume)",
      live["volume"].stdout.splitlines()[1:] == live["text"].stdout.splitlines()[1:],
      live["volume"].stdout)

# The report: the hot extents are the hottest now, on SSD, and were promoted.
report = live["report"].stdout
check("the report says what the data can and cannot show", "What this can show" in report and "hottest extents" in report)
now = re.search(r"HOTTEST EXTENTS NOW.*?\n.*?\n((?:.*\n)*?)\n", report)
top = [l.split() for l in (now.group(1).splitlines() if now else [])][:len(HOT)]
check("the report's hottest extents now are the hot set, on SSD",
      {int(t[1]) for t in top} == set(HOT) and all(len(t) > 7 and t[7] == "SSD" for t in top), top)
moves = {int(m.group(1)) for m in re.finditer(r"^\S+ \S+\s+v1\s+(\d+)\s+promoted HDD->SSD .*waited", report, re.M)}
check("the report lists each hot extent as promoted, with its wait", set(HOT) <= moves, report)
check("the report has the SSD tier's hit ratio per snapshot",
      len(re.findall(r"^\d{4}-\d\d-\d\d \S+\s+\d+\s+\d+\s+[\d.]+%\s+[\d.]+%$", report, re.M)) == len(snaps), report)
check("... and totals", re.search(r"promotions (\d+), demotions \d+", report) is not None)

# The SVG: XML, a cell per listed extent in each snapshot.
try:
    tree = ET.parse(svg_live)
    cells = [e for e in tree.iter() if e.get("class") == "cell"]
    listed = sum(len(s["extents"]) for s in snaps)
    check("the SVG parses, with a cell per listed extent per snapshot", len(cells) == listed, (len(cells), listed))
    check("... and marks promotions", any(e.get("class") == "promoted" for e in tree.iter()))
except ET.ParseError as e:
    check("the SVG parses", False, e)

# The PNG: the signature, and an IHDR of the size printed.
data = open(png_live, "rb").read()
check("the PNG starts with PNG's signature", data[:8] == b"\x89PNG\r\n\x1a\n")
width, height = struct.unpack(">II", data[16:24]) if data[12:16] == b"IHDR" else (0, 0)
printed = re.search(r"(\d+) x (\d+) pixels", live["png"].stdout)
check("... its IHDR has the size the CLI printed", printed is not None and (width, height) == tuple(map(int, printed.groups())),
      (width, height, live["png"].stdout))
check("... and ends with IEND", data[-8:-4] == b"IEND")

# Offline: the same on a copy of the pool's metadata, with no daemon.
copy = os.path.join(work, "copy")
shutil.copytree(os.path.join(state, "pools", "p1"), copy)
svg_off, png_off = os.path.join(work, "off.svg"), os.path.join(work, "off.png")
off = {
    "json": strata("--json", "heat", "map", "pools/p1", "--since", "1h", "--metadata", copy, live=False),
    "text": strata("heat", "map", "pools/p1", "--since", "1h", "--metadata", copy, live=False),
    "report": strata("heat", "report", "pools/p1", "--since", "1h", "--metadata", copy, live=False),
    "svg": strata("heat", "map", "pools/p1", "--since", "1h", "--metadata", copy, "--svg", svg_off, live=False),
    "png": strata("heat", "map", "pools/p1", "--since", "1h", "--metadata", copy, "--png", png_off, live=False),
}
for name, r in off.items():
    check("offline heat %s: exit 0" % name, r.returncode == 0, r.stderr)
snaps_off = json.loads(off["json"].stdout)["snapshots"] if off["json"].returncode == 0 else []
check("offline: the same snapshots as live", snaps_off[:len(snaps)] == snaps, (len(snaps_off), len(snaps)))
same = len(snaps_off) == len(snaps)
if not same:
    print("note: stratad took %d more snapshot(s) before it stopped; the maps are compared on the JSON only" % (len(snaps_off) - len(snaps)))
def body(text, skip):
    """The output without its first `skip` lines (which name the source) and with the interval (live: configured;
    offline: the median gap) left out."""
    return [re.sub(r"one every [^;,]*", "one every -", l) for l in text.splitlines()[skip:]]
if same:
    check("offline: the same text map", body(off["text"].stdout, 1) == body(live["text"].stdout, 1), off["text"].stdout)
    section = lambda t: t[t.index("MOVES"):] if "MOVES" in t else t
    check("offline: the same moves, hit ratios and totals in the report",
          section(off["report"].stdout) == section(live["report"].stdout), off["report"].stdout)
    strip_svg = lambda p: re.sub(r"(live|offline)[^<]*; y:", "; y:", re.sub(r"every [^<,]*", "every -", open(p).read()))
    check("offline: the same SVG, but for the source named", strip_svg(svg_off) == strip_svg(svg_live))
    check("offline: a PNG of the same size", open(png_off, "rb").read()[16:24] == data[16:24])
check("offline: the report says it is offline and shows the last snapshot's hottest",
      "offline" in off["report"].stdout and "the last snapshot" in off["report"].stdout)

print("PASS" if failures == 0 else "FAILED: %d" % failures)
sys.exit(1 if failures else 0)
