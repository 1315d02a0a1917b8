#!/usr/bin/env python3
"""stratad as systemd sees it (Type=notify, WatchdogSec=): the test plays
systemd's side of sd_notify(3) on a datagram socket of its own: READY=1
once the array serves, WATCHDOG=1 pings at half the watchdog interval
(sent from the array's loop), STOPPING=1 on SIGTERM; under journald
(JOURNAL_STREAM set) each log line starts with its syslog priority.
   stratad_systemd_test.py PATH/TO/stratad"""
import atexit, os, shutil, signal, socket, subprocess, sys, tempfile, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, failed, finish, free_port, start_stratad

stratad = sys.argv[1]
state = tempfile.mkdtemp(prefix="strata-systemd-")
atexit.register(shutil.rmtree, state, True)
notify_path = os.path.join(state, "notify")
notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
notify.bind(notify_path)
notify.settimeout(120)
env = dict(os.environ, NOTIFY_SOCKET=notify_path, WATCHDOG_USEC="400000", JOURNAL_STREAM="8:12345")
log = open(os.path.join(state, "stderr"), "w+")
daemon = subprocess.Popen([stratad, "--state-dir", os.path.join(state, "array"), "--small-shelf", "--nvme", "off",
                           "--iscsi", "127.0.0.1:%d" % free_port(), "--grpc", "127.0.0.1:%d" % free_port(), "--http", "off"],
                          env=env, stdout=subprocess.DEVNULL, stderr=log)
atexit.register(daemon.kill)

messages = []
started = time.monotonic()
while "READY=1" not in messages and time.monotonic() - started < 120:
    messages += notify.recv(4096).decode().split("\n")
check("READY=1 once the array serves", "READY=1" in messages)
pings, first = 0, time.monotonic()
notify.settimeout(2)
while time.monotonic() - first < 2.0:
    try:
        if "WATCHDOG=1" in notify.recv(4096).decode().split("\n"):
            pings += 1
    except socket.timeout:
        break
check("WATCHDOG=1 every ~200 ms with WatchdogSec=400ms: %d in 2 s" % pings, 6 <= pings <= 14)
daemon.send_signal(signal.SIGTERM)
stopping = False
notify.settimeout(30)
try:
    while not stopping:
        stopping = "STOPPING=1" in notify.recv(4096).decode().split("\n")
except socket.timeout:
    pass
check("STOPPING=1 on SIGTERM", stopping)
check("a clean exit", daemon.wait(60) == 0)
log.seek(0)
lines = [l for l in log.read().splitlines() if l.startswith("<") or l.startswith("stratad")]
check("under journald every log line carries its priority (<6>stratad: info: …)",
      lines and all(l[:3] in ("<2>", "<3>", "<4>", "<6>") for l in lines) and any(l.startswith("<6>stratad: info: ") for l in lines))
check("... and says the watchdog is on", any("the systemd watchdog is on" in l for l in lines))
finish("stratad_systemd")
