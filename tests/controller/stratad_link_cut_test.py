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
say its copy is behind); a restarted (b beating: it holds p1 back until b
has heard it) serves p1 with that write. Over NVMe/TCP, a's port names
b's volume (namespace 2) with its size even while it cannot ask b (Identify
Namespace answers from the volume's record: a host rescanning then must
not fail).
   stratad_link_cut_test.py PATH/TO/stratad PATH/TO/strata"""
import os, shutil, socket, struct, subprocess, sys, threading, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target"))
from iscsi_raw import Connection, check, command, failures, until
import nvme_raw as nv
from two_controllers import ANO, AO, TARGET, UNAVAILABLE, Pair, rtpg

stratad, cli = sys.argv[1], sys.argv[2]
if shutil.which("qemu-io") is None:
    print("SKIP: qemu-io is missing (tools/install-deps.sh installs qemu-utils, qemu-block-extra)")
    sys.exit(77)
pair = Pair(stratad, cli)
port = pair.port
relay_at = ("127.0.0.1", port + 6)


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


relay = Relay(relay_at, pair.link)
relay.mend()
TUR = bytes(6)
strata, events_say, qemu_io = pair.strata, pair.events_say, pair.qemu_io

def login(host, isid):
    c = Connection(port, isid=bytes([0x80, 0, 0, 0, 0, isid]), host=host)
    r, _ = c.full_login(initiator="iqn.2026-11.test:cut", target=TARGET)
    return c if r[36] == 0 else None

def states(c, lun):
    """REPORT TARGET PORT GROUPS' states by group, or None."""
    g = rtpg(c, lun)
    return {k: v[0] for k, v in g.items()} if isinstance(g, dict) else None

NOT_READY = 2

nvme_a = "127.0.0.1:%d" % (port + 1)
pair.start("a", "--partner-dial", "%s:%d" % relay_at, "--nvme", nvme_a)
pair.start("b")
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
      states(cb, 0) == {1: AO, 2: UNAVAILABLE})
# A's first NVMe/TCP host: a has never asked b for v2's capacity.
nvme_admin = nv.Host("nqn.2026-11.test:cut").admin(port + 1, TARGET.replace("iqn.", "nqn.", 1), kato_ms=0)
ns2 = nvme_admin.identify(0, nsid=2)
nsze = struct.unpack_from("<Q", ns2.data, 0)[0] if ns2.ok else 0
print("Identify Namespace 2 through a, cut:", repr(ns2))
check("Identify Namespace 2 (b's v2) through a while a cannot ask b: its recorded size (%d blocks)" % nsze, ns2.ok and nsze > 0)
nv.Queue.close_all()
check("each owner's own port serves on: LUN 0 written through a, LUN 1 through b",
      qemu_io("a", 0, "write -P 0x41 1M 1M", "flush") and qemu_io("b", 1, "write -P 0x42 1M 1M", "flush"))
time.sleep(6)
check("no takeover either way while the link is cut",
      not events_say("a", "taken over from controller", 0) and not events_say("b", "taken over from controller", 0))
made = subprocess.run([cli, "--api", pair.api["b"], "volume", "create", "vcut", "--size", "1G"], capture_output=True, text=True)
print("volume create through b while cut:", made.returncode, (made.stdout + made.stderr).strip()[:300])
check("a change of the configuration is refused while the link is cut", made.returncode != 0)

# Mended.
relay.mend()
check("the link is back: b forwards LUN 0 again", until(lambda: command(cb, TUR, 0)[0] == 0, 15))
check("... and a forwards LUN 1 again", until(lambda: command(ca, TUR, 1)[0] == 0, 15))
check("REPORT TARGET PORT GROUPS through b for LUN 0: a's active/optimized, b's active/non-optimized",
      until(lambda: states(cb, 0) == {1: AO, 2: ANO}, 5))
check("what each owner took during the cut reads through the other's port",
      qemu_io("b", 0, "read -P 0x31 0 1M", "read -P 0x41 1M 1M") and qemu_io("a", 1, "read -P 0x32 0 1M", "read -P 0x42 1M 1M"))

# Cut again, a write a acknowledges, then a dies: b's copy lacks that write.
check("b's copy of p1 is current again", events_say("a", "controller b holds a current copy of its metadata", 20))
relay.cut()
check("the link is cut again", events_say("b", "UNREACHABLE", 5))
check("a acknowledges a write to LUN 0 (new extents: b's copy is behind now)", qemu_io("a", 0, "write -P 0x51 512M 4M", "flush"))
check("a's drives say b's copy of p1 is behind", events_say("a", "copy of its metadata is behind", 10))
pair.kill("a")
check("a killed: b does not take p1 over, its copy lacks what a acknowledged",
      events_say("b", "not taken over: its drives say this controller's copy of its metadata is behind", 15))
check("... and serves nothing of p1 (LUN 0 through b is not ready)", command(cb, TUR, 0)[1] == NOT_READY)
relay.mend()
pair.start("a", "--partner-dial", "%s:%d" % relay_at, "--nvme", nvme_a)
# (b beats: a holds p1 back until b has heard it, then opens it: the drives still name a.)
check("a restarted opens p1 once b has heard it", events_say("a", "opened once controller b heard this controller", 15))
check("a restarted serves p1 with the write it acknowledged", qemu_io("a", 0, "read -P 0x51 512M 4M", "read -P 0x41 1M 1M"))
check("... and b forwards to it again", until(lambda: command(cb, TUR, 0)[0] == 0, 20) and
      qemu_io("b", 0, "read -P 0x51 512M 4M"))

sys.exit(1 if failures else 0)
