#!/usr/bin/env python3
"""A cut partner link between two live controllers (README.md, "Two
controllers"): controller a dials b through a relay this test owns
(stratad --partner-dial), and the test cuts it. Both controllers stay up
and keep their pools: the drive heartbeat still beats, so neither takes the
other's pool over; each says the other is UNREACHABLE. The ports that
forwarded answer by themselves: NOT READY 04/0A at first (a dead partner
looks the same for a moment), then 04/0C (TARGET PORT IN UNAVAILABLE
STATE, a path error, so multipath uses the owner's ports) and REPORT
TARGET PORT GROUPS says so; each owner's own ports serve on. When the link
is back, the forwarding ports serve again, and see what the owner wrote
meanwhile. Then: a write acknowledged by a while the link is cut is not in
b's copy, so when a is killed then, b must not take p1 over (the drives
say its copy is behind); a restarted serves p1 with that write.
   stratad_link_cut_test.py PATH/TO/stratad PATH/TO/strata"""
import os, random, shutil, socket, subprocess, sys, tempfile, threading, time, atexit
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target"))
from iscsi_raw import Connection, check, failures

stratad, cli = sys.argv[1], sys.argv[2]
if shutil.which("qemu-io") is None:
    print("SKIP: qemu-io is missing (tools/install-deps.sh installs qemu-utils, qemu-block-extra)")
    sys.exit(77)
state = tempfile.mkdtemp()
print("state in", state)
port = 20000 + random.randrange(12000)  # below Linux's ephemeral ports (32768 and up)
api = {"a": "127.0.0.1:%d" % (port + 2), "b": "127.0.0.2:%d" % (port + 2)}
link = ("127.0.0.2", port + 5)
relay_at = ("127.0.0.1", port + 6)
daemons = {}


class Relay:
    """Forwards each connection to `to`; cut() closes them all and stops
    listening (the dialer's redials are refused), mend() listens again."""
    def __init__(self, at, to):
        self.at, self.to, self.sockets, self.listener = at, to, [], None
        self.lock = threading.Lock()

    def mend(self):
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(self.at)
        self.listener.listen(4)
        threading.Thread(target=self.accept, args=(self.listener,), daemon=True).start()

    def accept(self, listener):
        while True:
            try:
                a, _ = listener.accept()
            except OSError:
                return
            try:
                b = socket.create_connection(self.to)
            except OSError:
                a.close()
                continue
            with self.lock:
                self.sockets += [a, b]
            for x, y in ((a, b), (b, a)):
                threading.Thread(target=self.pump, args=(x, y), daemon=True).start()

    def pump(self, x, y):
        try:
            while True:
                d = x.recv(65536)
                if not d:
                    break
                y.sendall(d)
        except OSError:
            pass
        for s in (x, y):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread, which lets go of the port
        self.listener.close()
        with self.lock:
            for s in self.sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self.sockets = []


relay = Relay(relay_at, link)
relay.mend()


def start(name):
    args = [stratad, "--state-dir", os.path.join(state, name), "--shelf", os.path.join(state, "shelf"),
            "--iscsi", "127.0.0.%d:%d" % (1 if name == "a" else 2, port), "--grpc", api[name],
            "--partner-link", "%s:%d" % link]
    args += ["--small-shelf", "--partner-dial", "%s:%d" % relay_at] if name == "a" else ["--controller", "b"]
    err = open(os.path.join(state, name + ".err"), "a")
    d = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True)
    for line in d.stdout:
        if "stratad is ready" in line:
            break
    daemons[name] = d


def stop_all():
    for d in daemons.values():
        d.kill()
        d.wait()
    if not os.environ.get("KEEP"):
        shutil.rmtree(state, True)
atexit.register(stop_all)


def strata(name, *words):
    r = subprocess.run([cli, "--api", api[name], *words], capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None


def events_say(name, text, seconds):
    for _ in range(int(seconds * 10)):
        out = strata(name, "events", "--limit", "1000")
        if out and text in out:
            return True
        time.sleep(0.1)
    return False


TARGET = "iqn.2026-11.io.strata:array"
itt = 0x100
def command(c, cdb, lun=0, read_bytes=0):
    """Runs a command; returns (status, sense key, ASC, ASCQ, data)."""
    global itt
    itt += 1
    c.scsi(cdb, itt, lun=lun, read_bytes=read_bytes)
    data = b""
    while True:
        r, d = c.receive()
        if r[0] & 0x3f == 0x25:
            data += d
            if r[1] & 0x01:
                return r[3], 0, 0, 0, data
            continue
        if r[0] & 0x3f == 0x21:
            if r[3] == 2 and len(d) >= 16:
                sense = d[2:]
                return 2, sense[2] & 0x0f, sense[12], sense[13], data
            return r[3], 0, 0, 0, data

TUR = bytes(6)
def until(predicate, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return False

def rtpg(c, lun):
    cdb = bytearray(12); cdb[0] = 0xa3; cdb[1] = 0x0a; cdb[6:10] = (1024).to_bytes(4, 'big')
    status, _, _, _, d = command(c, bytes(cdb), lun=lun, read_bytes=1024)
    if status != 0:
        return None
    groups, at, end = {}, 4, 4 + int.from_bytes(d[0:4], 'big')
    while at + 8 <= end:
        groups[int.from_bytes(d[at + 2:at + 4], 'big')] = d[at] & 0x0f
        at += 8 + 4 * d[at + 7]
    return groups

def qemu_io(name, lun, *cmds):
    args = ["qemu-io", "-f", "raw"]
    for cmd in cmds:
        args += ["-c", cmd]
    url = "iscsi://127.0.0.%d:%d/%s/%d" % (1 if name == "a" else 2, port, TARGET, lun)
    r = subprocess.run(args + [url], capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    ok = r.returncode == 0 and not any(w in out.lower() for w in ("error", "fail", "mismatch"))
    if not ok:
        print(out.strip()[:400])
    return ok

def login(host, isid):
    c = Connection(port, isid=bytes([0x80, 0, 0, 0, 0, isid]), host=host)
    r, _ = c.full_login(initiator="iqn.2026-11.test:cut", target=TARGET)
    return c if r[36] == 0 else None

AO, ANO, UNAVAILABLE = 0, 1, 3
NOT_READY = 2

start("a")
start("b")
check("b holds a current copy of p1's metadata", events_say("a", "controller b holds a current copy of its metadata", 20))
check("a hands p2 over to b, its home", events_say("a", "handed over to controller b, its home, in", 30))
ca, cb = login("127.0.0.1", 0x51), login("127.0.0.2", 0x52)
check("a host logs in to both controllers", ca is not None and cb is not None)
check("LUN 0 (p1, a's) and LUN 1 (p2, b's) ready through both ports",
      all(until(lambda c=c, l=l: command(c, TUR, l)[0] == 0, 5) for c in (ca, cb) for l in (0, 1)))
check("1 MiB written to LUN 0 through a and to LUN 1 through b",
      qemu_io("a", 0, "write -P 0x31 0 1M", "flush") and qemu_io("b", 1, "write -P 0x32 0 1M", "flush"))

# The cut.
relay.cut()
t0 = time.monotonic()
check("both see the link down, the other UNREACHABLE (its drive heartbeat beats)",
      events_say("a", "UNREACHABLE", 5) and events_say("b", "UNREACHABLE", 5))
first = command(cb, TUR, 0)
check("right after the cut, b's port answers LUN 0 NOT READY 04/0A (transition) or 04/0C",
      first[:3] == (2, NOT_READY, 0x04) and first[3] in (0x0a, 0x0c))
seen = []
check("then NOT READY 04/0C (target port unavailable: a path error) on b's port for LUN 0",
      until(lambda: seen.append(command(cb, TUR, 0)[:4]) or seen[-1] == (2, NOT_READY, 0x04, 0x0c), 10))
print("b's answers:", sorted(set(seen)))
print("b's port for LUN 0 unavailable %.1f s after the cut" % (time.monotonic() - t0))
check("... and on a's port for LUN 1 (b's pool), the same", until(lambda: command(ca, TUR, 1)[:4] == (2, NOT_READY, 0x04, 0x0c), 10))
check("REPORT TARGET PORT GROUPS through b for LUN 0: b's group unavailable, a's active/optimized",
      rtpg(cb, 0) == {1: AO, 2: UNAVAILABLE})
check("each owner's own port serves on: LUN 0 written through a, LUN 1 through b",
      qemu_io("a", 0, "write -P 0x41 1M 1M", "flush") and qemu_io("b", 1, "write -P 0x42 1M 1M", "flush"))
time.sleep(6)
check("no takeover either way while the link is cut",
      not events_say("a", "taken over from controller", 0.1) and not events_say("b", "taken over from controller", 0.1))
made = subprocess.run([cli, "--api", api["b"], "volume", "create", "vcut", "--size", "1G"], capture_output=True, text=True)
print("volume create through b while cut:", made.returncode, (made.stdout + made.stderr).strip()[:300])
check("a change of the configuration is refused while the link is cut", made.returncode != 0)

# Mended.
relay.mend()
check("the link is back: b forwards LUN 0 again", until(lambda: command(cb, TUR, 0)[0] == 0, 15))
check("... and a forwards LUN 1 again", until(lambda: command(ca, TUR, 1)[0] == 0, 15))
check("REPORT TARGET PORT GROUPS through b for LUN 0: a's active/optimized, b's active/non-optimized",
      until(lambda: rtpg(cb, 0) == {1: AO, 2: ANO}, 5))
check("what each owner took during the cut reads through the other's port",
      qemu_io("b", 0, "read -P 0x31 0 1M", "read -P 0x41 1M 1M") and qemu_io("a", 1, "read -P 0x32 0 1M", "read -P 0x42 1M 1M"))

# Cut again, a write a acknowledges, then a dies: b's copy lacks that write.
check("b's copy of p1 is current again", events_say("a", "controller b holds a current copy of its metadata", 20))
relay.cut()
check("the link is cut again", events_say("b", "UNREACHABLE", 5))
check("a acknowledges a write to LUN 0 (new extents: b's copy is behind now)", qemu_io("a", 0, "write -P 0x51 512M 4M", "flush"))
check("a's drives say b's copy of p1 is behind", events_say("a", "copy of its metadata is behind", 10))
daemons["a"].kill()
daemons["a"].wait()
check("a killed: b does not take p1 over, its copy lacks what a acknowledged",
      events_say("b", "not taken over: its drives say this controller's copy of its metadata is behind", 15))
check("... and serves nothing of p1 (LUN 0 through b is not ready)", command(cb, TUR, 0)[1] == NOT_READY)
relay.mend()
start("a")
check("a restarted serves p1 with the write it acknowledged", qemu_io("a", 0, "read -P 0x51 512M 4M", "read -P 0x41 1M 1M"))
check("... and b forwards to it again", until(lambda: command(cb, TUR, 0)[0] == 0, 20) and
      qemu_io("b", 0, "read -P 0x51 512M 4M"))

sys.exit(1 if failures else 0)
