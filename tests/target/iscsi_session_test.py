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
