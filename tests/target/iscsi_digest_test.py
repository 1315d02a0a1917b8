#!/usr/bin/env python3
"""Header and data digests (CRC32C) against strata-iscsi-target: they start
with the full feature phase (the last login response has none), cover every
PDU after it both ways, and an empty data segment has no data digest.
   iscsi_digest_test.py PATH/TO/strata-iscsi-target"""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from iscsi_raw import Connection, check, digest, finish, start

target, port = start(sys.argv[1])
c = Connection(port)
r, d = c.full_login(extra=[("HeaderDigest", "CRC32C"), ("DataDigest", "CRC32C")])
check("the final login response agrees to CRC32C, and carries no digest",
      r[1] == 0x87 and d == b"HeaderDigest=CRC32C\0DataDigest=CRC32C\0")
# NOP-Out with ping data, header+data digests
ping = b"hello!"
bhs = bytearray(48); bhs[0] = 0x40; bhs[1] = 0x80; bhs[5:8] = len(ping).to_bytes(3, 'big')
bhs[16:20] = (7).to_bytes(4, 'big'); bhs[20:24] = b"\xff" * 4
padded = ping + b"\0" * ((4 - len(ping) % 4) % 4)
c.s.sendall(bytes(bhs) + digest(bytes(bhs)) + padded + digest(padded))
r = c.recvn(48); hd = c.recvn(4); ok_h = hd == digest(r)
dsl = int.from_bytes(r[5:8], 'big'); body = c.recvn((dsl + 3) & ~3); dd = c.recvn(4)
check("a NOP-In echoes the ping with a good header and data digest",
      r[0] == 0x20 and int.from_bytes(r[16:20], 'big') == 7 and ok_h and body[:dsl] == ping and dd == digest(body))
# empty NOP-Out (no data, so no data digest)
bhs[5:8] = b"\0\0\0"; bhs[16:20] = (8).to_bytes(4, 'big'); bhs[24:28] = (1).to_bytes(4, 'big')
c.s.sendall(bytes(bhs) + digest(bytes(bhs)))
r = c.recvn(48); hd = c.recvn(4)
check("an empty NOP-Out, with no data digest, is answered",
      int.from_bytes(r[16:20], 'big') == 8 and int.from_bytes(r[5:8], 'big') == 0 and hd == digest(r))
finish(target)
