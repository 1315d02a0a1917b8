#!/usr/bin/env python3
"""Sessions of several connections (MC/S, RFC 7143 6.3) against
strata-iscsi-target, over raw PDUs: a connection joins by TSIH up to the
MaxConnections the session negotiated, commands are delivered in CmdSN order
across connections, a command's data go on its own connection, a
connection is reinstated by its CID and logged out from another, and the
whole session logs out at once. Also the C bit: login and text keys
continued over several PDUs, and an unknown SessionType refused.
   iscsi_mcs_test.py PATH/TO/strata-iscsi-target"""
import os, socket, struct, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from iscsi_raw import Connection, check, finish, start

target, port = start(sys.argv[1])
ISID = bytes([0x80, 0, 0, 0, 0, 0x20])

def silent(c, seconds):
    """True if nothing comes on `c` within `seconds`."""
    try:
        c.receive(timeout=seconds)
        return False
    except (socket.timeout, TimeoutError):
        return True

def alive(c):
    """An immediate NOP-Out gets its NOP-In."""
    bhs = bytearray(48); bhs[0] = 0x40; bhs[1] = 0x80
    bhs[16:20] = (0x7777).to_bytes(4, 'big'); bhs[20:24] = b"\xff" * 4; bhs[24:28] = c.cmd_sn.to_bytes(4, 'big')
    try:
        c.send(bhs)
        r, _ = c.receive(timeout=3)
        return r[0] & 0x3f == 0x20
    except (OSError, EOFError):
        return False

def read10(lba, blocks):
    return bytes([0x28, 0]) + lba.to_bytes(4, 'big') + bytes([0]) + blocks.to_bytes(2, 'big') + bytes([0])

def write10(lba, blocks):
    return bytes([0x2a, 0]) + lba.to_bytes(4, 'big') + bytes([0]) + blocks.to_bytes(2, 'big') + bytes([0])

def data_out(c, itt, ttt, data):
    bhs = bytearray(48); bhs[0] = 0x05; bhs[1] = 0x80
    bhs[16:20] = itt.to_bytes(4, 'big'); bhs[20:24] = ttt.to_bytes(4, 'big')
    c.send(bhs, data)

def logout(c, reason, cid=0, itt=0x60):
    bhs = bytearray(48); bhs[0] = 0x46; bhs[1] = 0x80 | reason
    bhs[16:20] = itt.to_bytes(4, 'big'); bhs[20:22] = cid.to_bytes(2, 'big')
    bhs[24:28] = c.cmd_sn.to_bytes(4, 'big')
    c.send(bhs)
    r, _ = c.receive()
    return r

def keys(d):
    return dict(kv.split("=", 1) for kv in d.decode().split("\0") if kv)

# The leading connection asks for two connections.
a = Connection(port, isid=ISID)
r, d = a.full_login(extra=[("MaxConnections", "2")])
tsih = int.from_bytes(r[14:16], 'big')
check("the leading connection logs in, MaxConnections=2 agreed", r[36] == 0 and keys(d).get("MaxConnections") == "2")

b = Connection(port, isid=ISID)
r, _ = b.full_login(tsih=tsih, cid=1)
check("a second connection joins the session by its TSIH", r[36] == 0 and int.from_bytes(r[14:16], 'big') == tsih)

c = Connection(port, isid=ISID)
r, _ = c.full_login(tsih=tsih, cid=2)
check("a third connection is refused: too many connections (02/06)", r[36:38] == bytes([2, 6]))

c = Connection(port, isid=ISID)
r, _ = c.full_login(tsih=tsih, cid=2, first=[("MaxBurstLength", "4096")])
check("a joining connection may not negotiate a leading-only key (02/00)", r[36:38] == bytes([2, 0]))

c = Connection(port, isid=bytes([0x80, 0, 0, 0, 0, 0x21]))
r, _ = c.full_login(tsih=tsih, cid=1)
check("another ISID cannot join the session: session does not exist (02/0a)", r[36:38] == bytes([2, 0x0a]))

# CmdSN order across connections: b's command one past ExpCmdSN waits
# for the command before it, which comes on a. (First a TEST UNIT READY
# takes the new session's unit attention.)
a.scsi(bytes(6), itt=0x0f)
a.receive()
sn = a.cmd_sn
b.cmd_sn = sn + 1
b.scsi(read10(0, 1), itt=0x10, read_bytes=512)
check("a command ahead of ExpCmdSN waits for the CmdSN before it", silent(b, 0.5))
a.cmd_sn = sn
a.scsi(bytes(6), itt=0x11)  # TEST UNIT READY
r, _ = a.receive()
check("the missing command runs, and ExpCmdSN counts both",
      r[0] & 0x3f == 0x21 and r[3] == 0 and int.from_bytes(r[28:32], 'big') == sn + 2)
r, d = b.receive()
check("... and then the one that waited, answered on its own connection",
      r[0] & 0x3f == 0x25 and int.from_bytes(r[16:20], 'big') == 0x10 and len(d) == 512)
a.cmd_sn = b.cmd_sn = sn + 2

# A write's data go on its connection (allegiance).
pattern = bytes(range(256)) * 2
b.scsi(write10(8, 1), itt=0x12, edtl=512, writes=True)
r, _ = b.receive()
ttt = int.from_bytes(r[20:24], 'big')
check("a write without data gets an R2T on its connection", r[0] & 0x3f == 0x31)
data_out(a, 0x12, ttt, pattern)
r, _ = a.receive()
check("its Data-Out on another connection is rejected", r[0] & 0x3f == 0x3f)
data_out(b, 0x12, ttt, pattern)
r, _ = b.receive()
check("... and taken on its own", r[0] & 0x3f == 0x21 and r[3] == 0)
a.cmd_sn = b.cmd_sn
a.scsi(read10(8, 1), itt=0x13, read_bytes=512)
r, d = a.receive()
check("the other connection reads what it wrote", d == pattern)
b.cmd_sn = a.cmd_sn

# Connection reinstatement: CID 1 logs in again.
b2 = Connection(port, isid=ISID)
r, _ = b2.full_login(tsih=tsih, cid=1)
check("a login with a CID in use reinstates the connection", r[36] == 0)
check("... the older connection of that CID ends", b.closed_within(3))
check("... and the session's other connection stays", alive(a))

# Logout of a connection, from another one.
r = logout(a, 1, cid=7)
check("logging out a CID the session does not have: CID not found (1)", r[0] & 0x3f == 0x26 and r[2] == 1)
r = logout(a, 2, cid=1)
check("removing a connection for recovery: not supported at ErrorRecoveryLevel 0 (2)", r[2] == 2)
r = logout(a, 1, cid=1)
check("logging out the other connection from this one succeeds", r[2] == 0)
check("... that connection ends", b2.closed_within(3))
check("... and this one stays", alive(a))

# The session logs out as a whole.
c = Connection(port, isid=ISID)
r, _ = c.full_login(tsih=tsih, cid=3)
check("a connection joins again once there is room", r[36] == 0)
c.cmd_sn = a.cmd_sn
r = logout(a, 0)
check("closing the session: logout succeeds", r[2] == 0)
check("... and every connection of the session ends", a.closed_within(3) and c.closed_within(3))

# Keys continued over several Login Requests (C bit).
c = Connection(port, isid=bytes([0x80, 0, 0, 0, 0, 0x22]))
text = b"InitiatorName=iqn.x:i\0TargetName=iqn.x:t\0SessionType=Normal\0AuthMethod=None\0"
r, d = c.login(0, 1, [], data=text[:30], more=True)
check("a Login Request with C set gets an empty response, no transit",
      r[0] & 0x3f == 0x23 and r[36] == 0 and r[1] & 0x80 == 0 and d == b"")
r, _ = c.login(0, 1, [], data=text[30:])
check("... and the whole keys log in", r[36] == 0 and r[1] & 0x80)
r, _ = c.login(1, 3, [])
check("... to the full feature phase", r[36] == 0)

# Text keys continued over several Text Requests.
def text_request(c, data, more, ttt=0xffffffff):
    bhs = bytearray(48); bhs[0] = 0x04; bhs[1] = 0x40 if more else 0x80
    bhs[16:20] = (0x30).to_bytes(4, 'big'); bhs[20:24] = ttt.to_bytes(4, 'big')
    bhs[24:28] = c.cmd_sn.to_bytes(4, 'big'); c.cmd_sn += 1
    c.send(bhs, data)
    return c.receive()
r, d = text_request(c, b"SendTar", True)
ttt = int.from_bytes(r[20:24], 'big')
check("a Text Request with C set gets an empty response and a tag to go on with",
      r[0] & 0x3f == 0x24 and d == b"" and ttt != 0xffffffff and r[1] & 0x80 == 0)
r, d = text_request(c, b"gets=All\0", False, ttt)
check("... and the whole request is answered", r[1] & 0x80 and keys(d).get("TargetName") == "iqn.x:t")

c = Connection(port, isid=bytes([0x80, 0, 0, 0, 0, 0x23]))
r, _ = c.login(0, 1, [("InitiatorName", "iqn.x:i"), ("SessionType", "Bulk"), ("AuthMethod", "None")])
check("an unknown SessionType is refused: session type not supported (02/09)", r[36:38] == bytes([2, 9]))

finish(target)
