#!/usr/bin/env python3
"""Sessions of strata-iscsi-target over raw PDUs: NOP-In pings find a dead
initiator, a login that never finishes is dropped, a second login of the
same initiator port replaces the first session (reinstatement), a login
naming a session (TSIH) is refused, the target asks initiators to log out
(Asynchronous Message), and each task management function gets the
response RFC 7143 11.6.1 names.
   iscsi_session_test.py PATH/TO/strata-iscsi-target"""
import os, signal, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from iscsi_raw import Connection, check, finish, start

target, port = start(sys.argv[1], "--ping-seconds", "1", "--login-timeout-seconds", "1", "--luns", "2")

# Pings: an idle initiator gets a NOP-In asking for an answer; answering keeps it.
c = Connection(port)
r, _ = c.full_login()
check("login succeeds", r[36] == 0 and r[1] & 0x80)
r, _ = c.receive(timeout=5)
ttt = int.from_bytes(r[20:24], 'big')
check("an idle initiator is pinged: a NOP-In with a target transfer tag and no task tag",
      r[0] & 0x3f == 0x20 and ttt != 0xffffffff and r[16:20] == b"\xff" * 4)
answer = bytearray(48); answer[0] = 0x40; answer[1] = 0x80
answer[16:20] = b"\xff" * 4; answer[20:24] = ttt.to_bytes(4, 'big'); answer[24:28] = c.cmd_sn.to_bytes(4, 'big')
c.send(answer)
r, _ = c.receive(timeout=5)
check("after an answer the initiator is pinged again, not dropped", r[0] & 0x3f == 0x20)
check("an initiator that stops answering is presumed dead and disconnected", c.closed_within(5))

# A login that never finishes.
c = Connection(port)
check("a connection that never logs in is closed", c.closed_within(5))

# Reinstatement: the same initiator name and ISID log in again.
old = Connection(port, isid=bytes([0x80, 0, 0, 0, 0, 7]))
old.full_login()
new = Connection(port, isid=bytes([0x80, 0, 0, 0, 0, 7]))
r, _ = new.full_login()
check("a second login of the same initiator port succeeds", r[36] == 0)
check("... and ends the older session", old.closed_within(3))
other = Connection(port, isid=bytes([0x80, 0, 0, 0, 0, 8]))
r, _ = other.full_login()
check("another ISID is another session: both stay", r[36] == 0 and not new.closed_within(0.3))

# A login that names a session to join.
c = Connection(port, isid=bytes([0x80, 0, 0, 0, 0, 9]))
r, _ = c.login(0, 1, [("InitiatorName", "iqn.x:i"), ("TargetName", "iqn.x:t"), ("AuthMethod", "None")], tsih=5)
check("a login with a TSIH is refused: session does not exist (02/0a)", r[36:38] == bytes([2, 0x0a]))

# Task management, one function after another on one session.
c = Connection(port, isid=bytes([0x80, 0, 0, 0, 0, 10]))
c.full_login()
def tmf(function, **kw):
    r, _ = c.tmf(function, **kw)
    while r[0] & 0x3f == 0x20:  # a ping between: skip it
        r, _ = c.receive()
    return r[2]
check("ABORT TASK of an unknown tag, RefCmdSN behind the window: task does not exist (1)",
      tmf(1, ref_tag=0x1234, ref_cmd_sn=c.cmd_sn - 1) == 1)
# The initiator sent a command (CmdSN n) and then the ABORT TASK (CmdSN
# n + 1), and the command has not arrived: it is taken as received.
check("ABORT TASK of a command sent before it that has not arrived: function complete (0)",
      tmf(1, ref_tag=0x1234, ref_cmd_sn=c.cmd_sn, cmd_sn=c.cmd_sn + 1) == 0)
c.scsi(bytes([0x00] + [0] * 5), itt=0x1234)  # TEST UNIT READY with the cancelled CmdSN
c.scsi(bytes([0x00] + [0] * 5), itt=0x1235)
r, _ = c.receive()
while r[0] & 0x3f == 0x20:
    r, _ = c.receive()
check("... and that command, when it comes, is never run: only the next is answered",
      int.from_bytes(r[16:20], 'big') == 0x1235)
check("ABORT TASK SET: function complete (0)", tmf(2) == 0)
check("CLEAR ACA (no ACA is ever established): function complete (0)", tmf(3) == 0)
check("CLEAR TASK SET: function complete (0)", tmf(4) == 0)
check("LOGICAL UNIT RESET: function complete (0)", tmf(5) == 0)
check("LOGICAL UNIT RESET of a LUN not mapped: LUN does not exist (2)", tmf(5, lun=9) == 2)
check("TASK REASSIGN at ErrorRecoveryLevel 0: reassignment not supported (4)", tmf(8) == 4)
check("an unknown function: not supported (5)", tmf(14) == 5)
# Unit attentions through the transport: a new session meets 29/00 once; a
# LOGICAL UNIT RESET from another session gives it 29/03.
def tur(conn, itt):
    conn.scsi(bytes([0x00] + [0] * 5), itt=itt)
    r, d = conn.receive()
    while r[0] & 0x3f == 0x20:
        r, d = conn.receive()
    if r[3] != 0x02:
        return "GOOD" if r[3] == 0 else "status %02x" % r[3]
    sense = d[2:]
    return "%x/%02x/%02x" % (sense[2] & 0xf, sense[12], sense[13])
watcher = Connection(port, isid=bytes([0x80, 0, 0, 0, 0, 13]))
watcher.full_login(initiator="iqn.x:watcher")
check("a new session's first command meets POWER ON, RESET 6/29/00", tur(watcher, 1) == "6/29/00")
check("... and its next is GOOD", tur(watcher, 2) == "GOOD")
check("LOGICAL UNIT RESET from one session", tmf(5) == 0)
check("... gives another session 6/29/03 BUS DEVICE RESET FUNCTION OCCURRED", tur(watcher, 3) == "6/29/03")
check("TARGET WARM RESET: function complete (0)", tmf(6) == 0)
bystander = Connection(port, isid=bytes([0x80, 0, 0, 0, 0, 11]))
bystander.full_login(initiator="iqn.x:other")
check("TARGET COLD RESET: function complete (0)", tmf(7) == 0)
check("... then the connection ends", c.closed_within(3))
check("... and so do the target's other sessions", bystander.closed_within(3))

# Flow control: a connection holding its budget of write data (1 MiB here)
# closes its CmdSN window; a command past it gets TASK SET FULL; the
# response that frees the budget reopens the window.
budget, bport = start(sys.argv[1], "--max-held-write-mib", "1", "--lun-mib", "4")
c = Connection(bport)
c.full_login()
tur(c, 0x4f)  # the new nexus's 29/00
def next_pdu(conn):
    r, d = conn.receive()
    while r[0] & 0x3f == 0x20:
        r, d = conn.receive()
    return r, d
write1m = bytes([0x2a, 0, 0, 0, 0, 0, 0, 0x08, 0x00, 0])  # WRITE(10) LBA 0, 2048 blocks
c.scsi(write1m, itt=0x50, edtl=1 << 20, writes=True)
r, _ = next_pdu(c)
exp, mx = int.from_bytes(r[28:32], 'big'), int.from_bytes(r[32:36], 'big')
check("a write holding the whole budget gets its R2T with the window closed (MaxCmdSN = ExpCmdSN - 1)",
      r[0] & 0x3f == 0x31 and (mx + 1) & 0xffffffff == exp)
first_r2t = r
c.scsi(bytes([0x2a, 0, 0, 0, 0, 0x10, 0, 0, 8, 0]), itt=0x51, edtl=4096, write=b"\x11" * 4096)
r, _ = next_pdu(c)
check("a write past the closed window gets TASK SET FULL", r[0] & 0x3f == 0x21 and r[3] == 0x28 and r[16:20] == (0x51).to_bytes(4, 'big'))
r2t = first_r2t
while True:  # answer each R2T with its burst, in 64 KiB Data-Out PDUs
    ttt, start_at = r2t[20:24], int.from_bytes(r2t[40:44], 'big')
    length = int.from_bytes(r2t[44:48], 'big')
    for n, offset in enumerate(range(start_at, start_at + length, 65536)):
        d = bytearray(48); d[0] = 0x05; d[1] = 0x80 if offset + 65536 >= start_at + length else 0
        d[16:20] = (0x50).to_bytes(4, 'big'); d[20:24] = ttt; d[36:40] = n.to_bytes(4, 'big')
        d[40:44] = offset.to_bytes(4, 'big')
        c.send(d, b"\x22" * 65536)
    r2t, _ = next_pdu(c)
    if r2t[0] & 0x3f != 0x31:
        break
r = r2t
exp, mx = int.from_bytes(r[28:32], 'big'), int.from_bytes(r[32:36], 'big')
check("... and the first write's response reopens the window", r[0] & 0x3f == 0x21 and r[3] == 0 and mx - exp + 1 >= 64)
budget.terminate()
budget.wait()

# Discovery: a Text Response longer than the initiator accepts comes in
# pieces (C bit, a target transfer tag to ask for the rest); task
# management, which a discovery session has nothing for, is rejected.
c = Connection(port, isid=bytes([0x80, 0, 0, 0, 0, 14]))
r, _ = c.login(0, 3, [("InitiatorName", "iqn.x:i"), ("SessionType", "Discovery"), ("AuthMethod", "None"),
                      ("MaxRecvDataSegmentLength", "512")])
check("a discovery login with MaxRecvDataSegmentLength=512", r[36] == 0)
keys = b"".join(b"X-Unknown-%02d=1\0" % i for i in range(60))  # 60 NotUnderstood answers, ~1.3 KB
text = bytearray(48); text[0] = 0x04; text[1] = 0x80; text[16:20] = (0x77).to_bytes(4, 'big')
text[20:24] = b"\xff" * 4; text[24:28] = c.cmd_sn.to_bytes(4, 'big')
c.send(text, keys)
answer, pieces, ok = b"", 0, True
while True:
    r, d = c.receive()
    if r[0] & 0x3f == 0x20:
        continue
    pieces += 1
    ok = ok and r[0] & 0x3f == 0x24 and len(d) <= 512
    answer += d
    if r[1] & 0x80:
        break
    ok = ok and r[1] & 0x40 and r[20:24] != b"\xff" * 4
    more = bytearray(48); more[0] = 0x04; more[1] = 0x80; more[16:20] = (0x77).to_bytes(4, 'big')
    more[20:24] = r[20:24]; c.cmd_sn += 1; more[24:28] = c.cmd_sn.to_bytes(4, 'big')
    c.send(more)
check("a long Text Response comes in pieces of at most 512 bytes, continued by C bit and tag",
      ok and pieces >= 3 and answer.count(b"=NotUnderstood\0") == 60)
r, _ = c.tmf(5)
check("task management on a discovery session is rejected", r[0] & 0x3f == 0x3f)

# Task attributes (defect 7, SAM-5 8.6): an ORDERED write whose data comes
# later holds back a newer SIMPLE read of its block, which then sees the
# write; a HEAD OF QUEUE read goes at once.
c = Connection(port, isid=bytes([0x80, 0, 0, 0, 0, 13]))
c.full_login()
def rw10(op, lba):
    return bytes([op, 0]) + lba.to_bytes(4, 'big') + bytes([0, 0, 1, 0])
def receive(timeout=10):
    """The next PDU that is not a ping; pings (1 s here) are answered."""
    while True:
        r, d = c.receive(timeout=timeout)
        if r[0] & 0x3f != 0x20:
            return r, d
        answer = bytearray(48); answer[0] = 0x40; answer[1] = 0x80
        answer[16:20] = b"\xff" * 4; answer[20:24] = r[20:24]; answer[24:28] = c.cmd_sn.to_bytes(4, 'big')
        c.send(answer)
c.scsi(bytes(6), 0x4ff)  # TEST UNIT READY: collects the new nexus's unit attention
receive()
c.scsi(rw10(0x2a, 300), 0x500, edtl=512, writes=True, attr=2)  # ORDERED, its data not sent yet
r2t, _ = receive()
check("the ORDERED write asks for its data (R2T)", r2t[0] & 0x3f == 0x31)
c.scsi(rw10(0x28, 300), 0x501, read_bytes=512, attr=1)  # SIMPLE, newer
c.scsi(rw10(0x28, 301), 0x502, read_bytes=512, attr=3)  # HEAD OF QUEUE
first, data = receive()
check("HEAD OF QUEUE runs at once, past the ORDERED write that waits for its data",
      first[0] & 0x3f == 0x25 and first[16:20] == (0x502).to_bytes(4, 'big'))
try:
    early, _ = receive(timeout=0.5)
except (TimeoutError, OSError):
    early = None
check("the SIMPLE read does not run before the older ORDERED write", early is None)
out = bytearray(48); out[0] = 0x05; out[1] = 0x80; out[16:20] = (0x500).to_bytes(4, 'big')
out[20:24] = r2t[20:24]
c.send(out, b"\x6d" * 512)
order, read_data = [], b""
while len(order) < 2:
    r, d = receive()
    if r[0] & 0x3f == 0x25:
        read_data += d
        if r[1] & 0x01:
            order.append(int.from_bytes(r[16:20], 'big'))
    elif r[0] & 0x3f == 0x21:
        order.append(int.from_bytes(r[16:20], 'big'))
check("the write completes first, then the read, which sees its data",
      order == [0x500, 0x501] and read_data == b"\x6d" * 512)

# The target asks initiators to log out.
c = Connection(port, isid=bytes([0x80, 0, 0, 0, 0, 12]))
c.full_login()
target.send_signal(signal.SIGUSR1)
r, _ = c.receive()
while r[0] & 0x3f == 0x20:
    r, _ = c.receive()
check("an Asynchronous Message asks for a logout within 10 s (event 1, Parameter3)",
      r[0] & 0x3f == 0x32 and r[36] == 1 and int.from_bytes(r[42:44], 'big') == 10)
finish(target)
