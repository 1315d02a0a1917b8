#!/usr/bin/env python3
"""Every LUN on both controllers' ports, with ALUA (README.md, "Two
controllers"): a host logged in to a (relative port 1, group 1) and b
(port 2, group 2) sees one unit through two target ports, active/optimized
on the pool's owner and active/non-optimized on the partner, whose port
forwards every command to the owner's unit: writes through one port are
read through the other (qemu's iSCSI initiator), a reservation key
registered through b is the owner's, and both keys follow the pool through
the takeover and back. With the two controllers' default, LUN 1 (pool
p2) is b's: optimized through b's port. When a is killed, b's port answers NOT READY
04/0A (ASYMMETRIC ACCESS STATE TRANSITION) until it has taken the pool
over, then serves it as active/optimized with the data and the
registration; when a is back and the pool fails back, b's port forwards
again. A mapping made through either controller is presented by both.
   stratad_alua_test.py PATH/TO/stratad PATH/TO/strata"""
import os, shutil, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target"))
from iscsi_raw import Connection, check, command, failures, until
from two_controllers import ANO, AO, TARGET, Pair, rtpg

stratad, cli = sys.argv[1], sys.argv[2]
if shutil.which("qemu-io") is None:
    print("SKIP: qemu-io is missing (tools/install-deps.sh installs qemu-utils, qemu-block-extra)")
    sys.exit(77)
pair = Pair(stratad, cli)
port = pair.port
IQN = "iqn.2026-11.test:alua"
TUR = bytes(6)

def settle(c, lun=0):
    """TEST UNIT READY until GOOD (the 29/00 of a first login), for 2 s."""
    return until(lambda: command(c, TUR, lun)[0] == 0, 2)

def vpd83_port_and_group(c):
    cdb = bytes([0x12, 0x01, 0x83, 0x01, 0x00, 0x00])
    status, _, _, _, d = command(c, cdb, read_bytes=256)
    port = group = None
    at = 4
    while status == 0 and at + 4 <= len(d):
        kind, n = d[at + 1] & 0x0f, d[at + 3]
        if kind == 0x04:
            port = int.from_bytes(d[at + 4 + 2:at + 4 + 4], 'big')
        if kind == 0x05:
            group = int.from_bytes(d[at + 4 + 2:at + 4 + 4], 'big')
        at += 4 + n
    return port, group

def register(c, key):
    cdb = bytearray(10); cdb[0] = 0x5f; cdb[1] = 0x00; cdb[7:9] = (24).to_bytes(2, 'big')
    params = bytearray(24); params[8:16] = key.to_bytes(8, 'big')
    return command(c, bytes(cdb), write=bytes(params))[0]

def read_keys(c):
    cdb = bytearray(10); cdb[0] = 0x5e; cdb[1] = 0x00; cdb[7:9] = (256).to_bytes(2, 'big')
    status, _, _, _, d = command(c, bytes(cdb), read_bytes=256)
    if status != 0:
        return None
    n = int.from_bytes(d[4:8], 'big') // 8
    return sorted(int.from_bytes(d[8 + 8 * i:16 + 8 * i], 'big') for i in range(n))

strata, events_say = pair.strata, pair.events_say
def qemu_io(name, *cmds):
    return pair.qemu_io(name, 0, *cmds)
pair.start("a", "--volatile-drive-caches")
pair.start("b", "--volatile-drive-caches")
check("b holds a current copy of the pool's metadata", events_say("a", "controller b holds a current copy of its metadata", 15))
# The two controllers' default: p1 (v1, LUN 0) is a's, p2 (v2, LUN 1) b's, which a built and hands over.
check("a hands pool p2 over to b, its home", events_say("a", "handed over to controller b, its home, in", 30))

# The host logs in to both controllers: two nexuses (same ISID, two target ports).
ca = Connection(port, isid=bytes([0x80, 0, 0, 0, 0, 0x41]), host="127.0.0.1")
cb = Connection(port, isid=bytes([0x80, 0, 0, 0, 0, 0x41]), host="127.0.0.2")
r, _ = ca.full_login(initiator=IQN, target=TARGET)
check("the host logs in to a", r[36] == 0)
r, d = cb.login(0, 1, [("InitiatorName", IQN), ("TargetName", TARGET), ("AuthMethod", "None"), ("SessionType", "Normal")])
check("... b's login says target portal group 2", r[36] == 0 and b"TargetPortalGroupTag=2" in d)
r, _ = cb.login(1, 3, [])
check("the host logs in to b", r[36] == 0)
check("LUN 0 ready through a", settle(ca))
check("LUN 0 ready through b (forwarded to a)", settle(cb))
check("VPD 83h through a: relative port 1, group 1", vpd83_port_and_group(ca) == (1, 1))
check("VPD 83h through b: relative port 2, group 2", vpd83_port_and_group(cb) == (2, 2))
expected = {1: (AO, [1]), 2: (ANO, [2])}
check("REPORT TARGET PORT GROUPS through a: group 1 active/optimized, 2 active/non-optimized", rtpg(ca) == expected)
check("... the same through b", rtpg(cb) == expected)
flipped = {1: (ANO, [1]), 2: (AO, [2])}
check("LUN 1 (pool p2, b's): REPORT TARGET PORT GROUPS through a and b says group 2 is the optimized one",
      settle(ca, 1) and settle(cb, 1) and rtpg(ca, 1) == flipped and rtpg(cb, 1) == flipped)

check("1 MiB written through b (forwarded)", qemu_io("b", "write -P 0x5b 0 1M", "flush"))
check("... read back through a", qemu_io("a", "read -P 0x5b 0 1M"))
check("1 MiB written through a", qemu_io("a", "write -P 0x5a 1M 1M", "flush"))
check("... read back through b", qemu_io("b", "read -P 0x5a 1M 1M"))

check("a reservation key registered through b", register(cb, 0xb0b) == 0)
check("a reservation key registered through a", register(ca, 0xa0a) == 0)
check("READ KEYS through a lists both (one unit, the owner's)", read_keys(ca) == [0xa0a, 0xb0b])
check("... and through b", read_keys(cb) == [0xa0a, 0xb0b])

# A mapping made through b's API is presented by both controllers.
check("a third volume as LUN 2, through b's API", strata("b", "volume", "create", "v9", "--size", "1G") is not None and
      strata("b", "map", "v9", "--host", "all", "--lun", "2") is not None)
def luns_of(c):
    cdb = bytearray(12); cdb[0] = 0xa0; cdb[6:10] = (4096).to_bytes(4, 'big')
    for _ in range(5):  # 3F/0E first, then the list
        status, _, _, _, data = command(c, bytes(cdb), read_bytes=4096)
        if status == 0:
            n = int.from_bytes(data[0:4], 'big') // 8
            return [int.from_bytes(data[8 + 8 * i:10 + 8 * i], 'big') & 0x3fff for i in range(n)]
    return None
check("... REPORT LUNS lists LUNs 0, 1 and 2 through a and b", until(lambda: luns_of(ca) == [0, 1, 2] and luns_of(cb) == [0, 1, 2], 3))

# a killed: b's port is transitioning, then serves.
pair.kill("a")
t0 = time.monotonic()
first = command(cb, TUR)
check("right after a's kill -9, b answers NOT READY 04/0A (transition) or, taken over already, UNIT ATTENTION",
      first[:4] == (2, 2, 0x04, 0x0a) or first[1] == 6)
served = None
while time.monotonic() - t0 < 15:
    s = command(cb, TUR)
    if s[0] == 0:
        served = time.monotonic() - t0
        break
    time.sleep(0.05)
print("b's port served LUN 0 %.2f s after a's kill -9" % (served or -1))
check("b's port serves LUN 0 within 10 s of the kill", served is not None and served <= 10)
g = rtpg(cb)
check("REPORT TARGET PORT GROUPS through b: group 2 active/optimized now", isinstance(g, dict) and g.get(2, (None,))[0] == AO)
check("the data written through both ports is there", qemu_io("b", "read -P 0x5b 0 1M", "read -P 0x5a 1M 1M"))
check("the registrations made through both ports survived the takeover", read_keys(cb) == [0xa0a, 0xb0b])
check("b takes writes", qemu_io("b", "write -P 0xbb 2M 1M", "flush"))

# a back: the pool fails back, and b's port forwards again.
pair.start("a", "--volatile-drive-caches")
check("b hands the pool back to a", events_say("b", "handed over to controller a, its home, in", 30))
ca = Connection(port, isid=bytes([0x80, 0, 0, 0, 0, 0x42]), host="127.0.0.1")
r, _ = ca.full_login(initiator=IQN, target=TARGET)
check("the host logs in to a again", r[36] == 0 and settle(ca))
check("after failback, RTPG through a: group 1 active/optimized", rtpg(ca) == expected)
check("... and through b, which forwards again", until(lambda: command(cb, TUR)[0] == 0 and rtpg(cb) == expected, 10))
check("everything is read through both ports", qemu_io("a", "read -P 0x5b 0 1M", "read -P 0x5a 1M 1M", "read -P 0xbb 2M 1M") and
      qemu_io("b", "read -P 0xbb 2M 1M"))
check("the registrations came back with the pool", read_keys(ca) == [0xa0a, 0xb0b])

sys.exit(1 if failures else 0)
