#!/usr/bin/env python3
"""Header and data digests (CRC32C) against strata-iscsi-target: they start
with the full feature phase (the last login response has none), cover every
PDU after it both ways, and an empty data segment has no data digest.
   iscsi_digest_test.py PATH/TO/strata-iscsi-target"""
import socket, struct, subprocess, sys
target = subprocess.Popen([sys.argv[1], "--listen", "127.0.0.1:0", "--target", "iqn.x:t"], stdout=subprocess.PIPE, text=True)
line = target.stdout.readline()
port = int(line.split()[2].rsplit(":", 1)[1])
failures = []
def check(what, ok):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok: failures.append(what)
def crc32c(data, crc=0xffffffff):
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc
def digest(data): return struct.pack('<I', crc32c(data) ^ 0xffffffff)
s=socket.create_connection(("127.0.0.1",port))
def recvn(n):
    d=b""
    while len(d)<n: d+=s.recv(n-len(d))
    return d
def login(csg,nsg,keys,hd=False):
    data=b"".join(k.encode()+b"="+v.encode()+b"\0" for k,v in keys)
    bhs=bytearray(48); bhs[0]=0x43; bhs[1]=0x80|(csg<<2)|nsg
    bhs[5:8]=len(data).to_bytes(3,'big'); bhs[8:14]=bytes([0x80,0,0,0,0,1]); bhs[16:20]=(1).to_bytes(4,'big')
    s.sendall(bytes(bhs)+data+b"\0"*((4-len(data)%4)%4))
    r=recvn(48); dsl=int.from_bytes(r[5:8],'big'); d=recvn((dsl+3)&~3)
    return r,d[:dsl]
r,d=login(0,1,[("InitiatorName","iqn.x:i"),("TargetName","iqn.x:t"),("SessionType","Normal"),("AuthMethod","None")])
r,d=login(1,3,[("HeaderDigest","CRC32C"),("DataDigest","CRC32C")])
check("the final login response agrees to CRC32C, and carries no digest", r[1] == 0x87 and d == b"HeaderDigest=CRC32C\0DataDigest=CRC32C\0")
# NOP-Out with ping data, header+data digests
ping=b"hello!"
bhs=bytearray(48); bhs[0]=0x40; bhs[1]=0x80; bhs[5:8]=len(ping).to_bytes(3,'big'); bhs[16:20]=(7).to_bytes(4,'big'); bhs[20:24]=b"\xff"*4
padded=ping+b"\0"*((4-len(ping)%4)%4)
s.sendall(bytes(bhs)+digest(bytes(bhs))+padded+digest(padded))
r=recvn(48); hd=recvn(4); ok_h = hd==digest(r)
dsl=int.from_bytes(r[5:8],'big'); body=recvn((dsl+3)&~3); dd=recvn(4)
check("a NOP-In echoes the ping with a good header and data digest", r[0] == 0x20 and int.from_bytes(r[16:20],'big') == 7 and ok_h and body[:dsl] == ping and dd == digest(body))
# empty NOP-Out (no data, so no data digest)
bhs[5:8]=b"\0\0\0"; bhs[16:20]=(8).to_bytes(4,'big'); bhs[24:28]=(1).to_bytes(4,'big')
s.sendall(bytes(bhs)+digest(bytes(bhs)))
r=recvn(48); hd=recvn(4)
check("an empty NOP-Out, with no data digest, is answered", int.from_bytes(r[16:20],'big') == 8 and int.from_bytes(r[5:8],'big') == 0 and hd == digest(r))
target.terminate()
target.wait()
sys.exit(1 if failures else 0)
