"""Two stratad controllers over one simulated shelf, for the tests of the
dual-controller array in Python (stratad_alua_test.py,
stratad_link_cut_test.py): a on 127.0.0.1, b on 127.0.0.2, iSCSI on one
random port on each, the API two above it, the partner link on b five
above it. Controller a builds the two controllers' small default (pool
p1 with v1 as LUN 0, a's; pool p2 with v2 as LUN 1, b's)."""
import atexit, os, random, shutil, socket, subprocess, sys, tempfile, time
from iscsi_raw import command, failures  # tests/target, on the path of every test that imports this

TARGET = "iqn.2026-11.io.strata:array"


def free_ports(count):
    """The first of `count` ports in a row that nothing listens on, on
    either controller's address, drawn at random below Linux's ephemeral
    ports (32768 and up), so that a test running beside this one is not
    stepped on (it may still draw them after; that is rare)."""
    while True:
        first = 20000 + random.randrange(12000)
        try:
            for host in ("127.0.0.1", "127.0.0.2"):
                for p in range(first, first + count):
                    with socket.socket() as s:
                        s.bind((host, p))
            return first
        except OSError:
            continue


class Pair:
    def __init__(self, stratad, cli):
        self.stratad, self.cli = stratad, cli
        self.state = tempfile.mkdtemp()
        print("state in", self.state)
        self.port = free_ports(7)
        self.api = {"a": "127.0.0.1:%d" % (self.port + 2), "b": "127.0.0.2:%d" % (self.port + 2)}
        self.link = ("127.0.0.2", self.port + 5)
        self.daemons = {}
        self.raised = False
        self.killed = set()  # by the test: not died
        hook = sys.excepthook
        def raised(*info):
            self.raised = True
            hook(*info)
        sys.excepthook = raised  # runs before atexit's stop_all, which then shows the daemons' logs
        atexit.register(self.stop_all)

    def start(self, name, *extra):
        """Starts controller `name` ("a" or "b") with `extra` arguments and
        waits until it is ready."""
        args = [self.stratad, "--state-dir", os.path.join(self.state, name), "--shelf", os.path.join(self.state, "shelf"),
                "--iscsi", "%s:%d" % (self.host(name), self.port), "--grpc", self.api[name],
                "--partner-link", "%s:%d" % self.link, *extra]
        args += ["--small-shelf"] if name == "a" else ["--controller", "b"]
        err = open(os.path.join(self.state, name + ".err"), "a")
        d = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True)
        self.daemons[name] = d
        self.killed.discard(name)
        for line in d.stdout:
            if "stratad is ready" in line:
                return
        d.wait()
        raise RuntimeError("controller %s ended before it was ready (exit %s): %s" % (name, d.returncode, self.log_tail(name)))

    def log_tail(self, name, lines=30):
        try:
            with open(os.path.join(self.state, name + ".err")) as f:
                return "".join(f.readlines()[-lines:])
        except OSError as e:
            return str(e)

    def kill(self, name):
        self.daemons[name].kill()
        self.daemons[name].wait()
        self.killed.add(name)

    def stop_all(self):
        """Kills both; when the test failed, or a controller had died on
        its own, shows the end of each controller's log first."""
        died = [n for n, d in self.daemons.items() if d.poll() is not None and n not in self.killed]
        for d in self.daemons.values():
            d.kill()
            d.wait()
        if failures or self.raised or died:
            for name in self.daemons:
                print("---- the end of %s's log%s:\n%s" % (name, " (it had died)" if name in died else "", self.log_tail(name)))
        if not os.environ.get("KEEP"):
            shutil.rmtree(self.state, True)

    @staticmethod
    def host(name):
        return "127.0.0.1" if name == "a" else "127.0.0.2"

    def strata(self, name, *words):
        """The CLI through `name`'s API: its output, or None (and why, printed)."""
        r = subprocess.run([self.cli, "--api", self.api[name], *words], capture_output=True, text=True)
        if r.returncode != 0:
            print("strata %s: %s" % (" ".join(words), r.stderr.strip()))
        return r.stdout if r.returncode == 0 else None

    def events_say(self, name, text, seconds):
        """True once `name`'s event log holds `text`, polled for `seconds`."""
        for _ in range(max(1, int(seconds * 10))):
            r = subprocess.run([self.cli, "--api", self.api[name], "events", "--limit", "1000"], capture_output=True, text=True)
            if r.returncode == 0 and text in r.stdout:
                return True
            time.sleep(0.1)
        return False

    def qemu_io(self, name, lun, *cmds):
        """qemu-io's commands on LUN `lun` through `name`'s portal: True if
        every one succeeded (and every read matched its pattern)."""
        args = ["qemu-io", "-f", "raw"]
        for cmd in cmds:
            args += ["-c", cmd]
        url = "iscsi://%s:%d/%s/%d" % (self.host(name), self.port, TARGET, lun)
        r = subprocess.run(args + [url], capture_output=True, text=True, timeout=120)
        out = r.stdout + r.stderr
        ok = r.returncode == 0 and not any(w in out.lower() for w in ("error", "fail", "mismatch"))
        if not ok:
            print(out.strip()[:600])
        return ok


AO, ANO, UNAVAILABLE = 0, 1, 3

def rtpg(c, lun=0):
    """REPORT TARGET PORT GROUPS on LUN `lun`: {group id: (state, [relative
    ports])}, or the (status, key, ASC, ASCQ) it failed with."""
    cdb = bytearray(12); cdb[0] = 0xa3; cdb[1] = 0x0a; cdb[6:10] = (1024).to_bytes(4, 'big')
    status, key, asc, ascq, d = command(c, bytes(cdb), lun=lun, read_bytes=1024)
    if status != 0:
        return (status, key, asc, ascq)
    groups, at, end = {}, 4, 4 + int.from_bytes(d[0:4], 'big')
    while at + 8 <= end:
        count = d[at + 7]
        ports = [int.from_bytes(d[at + 8 + 4 * i + 2:at + 8 + 4 * i + 4], 'big') for i in range(count)]
        groups[int.from_bytes(d[at + 2:at + 4], 'big')] = (d[at] & 0x0f, ports)
        at += 8 + 4 * count
    return groups
