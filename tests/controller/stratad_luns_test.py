#!/usr/bin/env python3
"""A host's LUN map changed while it is logged in, over raw PDUs against
stratad, with the changes made through the strata CLI: the live session
sees a LUN mapped at once, with REPORTED LUNS DATA HAS CHANGED (3F/0E) on
the LUNs it had, which REPORT LUNS clears (SPC-4 6.33); an unmapped LUN
is gone at once; a change of the host's IQNs that shuts the initiator out
closes its session.
   stratad_luns_test.py PATH/TO/stratad PATH/TO/strata"""
import os, random, shutil, subprocess, sys, tempfile, time, atexit
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target"))
from iscsi_raw import Connection, check, command, failures

stratad, cli = sys.argv[1], sys.argv[2]
state = tempfile.mkdtemp()
atexit.register(shutil.rmtree, state, True)
port = 20000 + random.randrange(12000)  # below Linux's ephemeral ports (32768 and up)
api = "127.0.0.1:%d" % (port + 2)
daemon = subprocess.Popen([stratad, "--state-dir", state, "--iscsi", "127.0.0.1:%d" % port, "--grpc", api, "--small-shelf"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
atexit.register(daemon.kill)
for line in daemon.stdout:
    if "stratad is ready" in line:
        break

def strata(*words):
    r = subprocess.run([cli, "--api", api, *words], capture_output=True, text=True)
    if r.returncode != 0:
        print("strata %s: %s" % (" ".join(words), r.stderr.strip()))
    return r.returncode == 0

TARGET = "iqn.2026-11.io.strata:array"
IQN = "iqn.2026-11.test:live"
check("setup: three volumes and host 'live' with v2 as its LUN 0",
      strata("volume", "create", "v2", "--size", "1G") and strata("volume", "create", "v3", "--size", "1G") and
      strata("volume", "create", "v4", "--size", "1G") and strata("host", "add", "live", "--iqn", IQN) and
      strata("map", "v2", "--host", "live", "--lun", "0"))

TUR = bytes(6)
def report_luns(c):
    cdb = bytearray(12); cdb[0] = 0xa0; cdb[6:10] = (4096).to_bytes(4, 'big')
    status, _, _, _, data = command(c, bytes(cdb), read_bytes=4096)
    n = int.from_bytes(data[0:4], 'big') // 8
    return status, [int.from_bytes(data[8 + 8 * i:10 + 8 * i], 'big') & 0x3fff for i in range(n)]
def settle(c, lun):
    """TEST UNIT READY until GOOD (the 29/00 of a first login)."""
    for _ in range(4):
        if command(c, TUR, lun)[0] == 0:
            return True
    return False

c = Connection(port, isid=bytes([0x80, 0, 0, 0, 0, 0x31]))
r, _ = c.full_login(initiator=IQN, target=TARGET)
check("the host's initiator logs in", r[36] == 0)
check("... and its LUN 0 is ready", settle(c, 0))
check("... REPORT LUNS: LUN 0 only", report_luns(c) == (0, [0]))

check("strata map v3 --host live --lun 1, while it is logged in", strata("map", "v3", "--host", "live", "--lun", "1"))
check("the next command on LUN 0 gets UNIT ATTENTION 3F/0E REPORTED LUNS DATA HAS CHANGED",
      command(c, TUR, 0)[:4] == (2, 6, 0x3f, 0x0e))
check("... once", command(c, TUR, 0)[0] == 0)
check("REPORT LUNS lists LUN 1 at once", report_luns(c) == (0, [0, 1]))
check("LUN 1 serves the session (after its power-on attention)", settle(c, 1))

check("strata map v4 --host live --lun 2", strata("map", "v4", "--host", "live", "--lun", "2"))
check("REPORT LUNS first lists LUN 2 ...", report_luns(c) == (0, [0, 1, 2]))
check("... and clears 3F/0E: LUN 0 and LUN 1 are GOOD at once", command(c, TUR, 0)[0] == 0 and command(c, TUR, 1)[0] == 0)

check("strata unmap v4-live", strata("unmap", "v4-live"))
check("LUN 2 is gone at once: LOGICAL UNIT NOT SUPPORTED", command(c, TUR, 2)[:4] == (2, 5, 0x25, 0x00))
check("... with 3F/0E on the others", command(c, TUR, 0)[:4] == (2, 6, 0x3f, 0x0e))
check("... REPORT LUNS: 0 and 1", report_luns(c) == (0, [0, 1]))

check("strata host update live --iqn (another IQN): the initiator is shut out",
      strata("host", "update", "live", "--iqn", "iqn.2026-11.test:other"))
check("... and its session is closed", c.closed_within(5))
c = Connection(port, isid=bytes([0x80, 0, 0, 0, 0, 0x32]))
r, _ = c.full_login(initiator="iqn.2026-11.test:other", target=TARGET)
check("the new IQN logs in, and sees the host's LUNs", r[36] == 0 and settle(c, 0) and report_luns(c) == (0, [0, 1]))

daemon.terminate()
daemon.wait()
sys.exit(1 if failures else 0)
