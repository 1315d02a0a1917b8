#!/usr/bin/env python3
"""stratad over NVMe/TCP, with raw PDUs (tests/target/nvme_raw.py): the
embedded default's volume is namespace 1 of the array's subsystem for any
host, the same blocks as its iSCSI LUN 0; ANA reports this controller's
group optimized; a host record with an NQN (strata host add --nqn) sees
only its own LUNs, as namespaces LUN + 1, and a volume mapped to it while
it is connected reaches it as a namespace attribute event and the changed
namespace list.
   stratad_nvme_test.py PATH/TO/stratad PATH/TO/strata"""
import os, random, shutil, struct, subprocess, sys, tempfile, atexit
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target"))
import iscsi_raw
import nvme_raw as nv
from nvme_raw import check, failures

stratad, cli = sys.argv[1], sys.argv[2]
state = tempfile.mkdtemp()
atexit.register(shutil.rmtree, state, True)
port = 20000 + random.randrange(12000)  # below Linux's ephemeral ports (32768 and up)
api = "127.0.0.1:%d" % (port + 2)
nvme_port = port + 1
daemon = subprocess.Popen([stratad, "--state-dir", state, "--iscsi", "127.0.0.1:%d" % port, "--nvme", "127.0.0.1:%d" % nvme_port,
                           "--grpc", api, "--small-shelf"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
atexit.register(daemon.kill)
ready = ""
for line in daemon.stdout:
    ready += line
    if line.startswith("  nvme connect"):
        break
check("stratad says how to connect over NVMe/TCP", "nvme connect -t tcp -a 127.0.0.1 -s %d -n nqn.2026-11.io.strata:array" % nvme_port in ready,
      ready)

def strata(*words):
    r = subprocess.run([cli, "--api", api, *words], capture_output=True, text=True)
    if r.returncode != 0:
        print("strata %s: %s" % (" ".join(words), r.stderr.strip()))
    return r.returncode == 0

NQN = "nqn.2026-11.io.strata:array"

def active_namespaces(admin):
    c = admin.identify(2)
    return [n for n in struct.unpack("<1024I", c.data) if n != 0] if c.ok else None

# ---- any host: the embedded default's volume
anyone = nv.Host("nqn.2026-11.test:anyone")
admin = anyone.admin(nvme_port, NQN, kato_ms=0)
check("a host connects to the array's subsystem", admin.cntlid != 0)
check("... and sees namespace 1 (the embedded default's LUN 0)", active_namespaces(admin) == [1], str(active_namespaces(admin)))
ns = admin.identify(0, nsid=1)
blocks = struct.unpack_from("<Q", ns.data, 0)[0] if ns.ok else 0
BS = 1 << ns.data[130] if ns.ok else 4096  # LBA format 0's LBADS: the volume's block size
check("... the volume's size, in its blocks (512 or 4096 bytes)", BS in (512, 4096) and blocks * BS >= 1 << 30,
      "%r nsze %d, %d-byte blocks" % (ns, blocks, BS))
ana = admin.get_log_page(0x0c, 4096)
groups = struct.unpack_from("<H", ana.data, 8)[0] if ana.ok else 0
descriptors, at = {}, 16
for _ in range(groups):
    gid, count = struct.unpack_from("<II", ana.data, at)
    state_byte = ana.data[at + 16]
    nsids = list(struct.unpack_from("<%dI" % count, ana.data, at + 32))
    descriptors[gid] = (state_byte & 0x0f, nsids)
    at += 32 + 4 * count
check("ANA: controller a's group 1 is optimized and holds namespace 1", descriptors.get(1) == (1, [1]), str(descriptors))
check("... and b's group 2 is non-optimized", descriptors.get(2, (0,))[0] == 2, str(descriptors))
admin.command(nv.set_features_sqe(7, 0))
io = anyone.io(nvme_port, admin, 1)
data = random.randbytes(16 * BS)
check("a write over NVMe/TCP", io.write(1, 1000, data, BS).ok)
r = io.read(1, 1000, 16, BS)
check("... reads back", r.ok and r.data == data, repr(r))
c = iscsi_raw.Connection(port)
resp, _ = c.full_login(initiator="iqn.2026-11.test:anyone", target="iqn.2026-11.io.strata:array")
check("an iSCSI login to the same array", resp[36] == 0)
iscsi_raw.command(c, bytes(6))  # TEST UNIT READY: takes the new nexus's unit attention
status, _, _, _, got = iscsi_raw.command(c, bytes([0x88, 0]) + (1000).to_bytes(8, 'big') + (16).to_bytes(4, 'big') + bytes(2),
                                         read_bytes=16 * BS)
check("... reads the same blocks from LUN 0", status == 0 and got == data, "status %d" % status)

# ---- a host with an NQN of its own sees its own LUNs
DB = "nqn.2026-11.test:db"
check("strata volume create v2, host add db --nqn, map v2 --host db --lun 3",
      strata("volume", "create", "v2", "--size", "1G") and strata("host", "add", "db", "--nqn", DB) and
      strata("map", "v2", "--host", "db", "--lun", "3"))
check("strata host add refuses an NQN that is not one", not strata("host", "add", "bad", "--nqn", "iqn.2026-11.test:not-nvme"))
check("... and one another host has", not strata("host", "add", "db2", "--nqn", DB))
db = nv.Host(DB)
db_admin = db.admin(nvme_port, NQN, kato_ms=0)
check("host db sees namespace 4 (its LUN 3) only", active_namespaces(db_admin) == [4], str(active_namespaces(db_admin)))
check("... and the host without a record of its own still sees namespace 1 only", active_namespaces(admin) == [1])
db_admin.command(nv.set_features_sqe(0x0b, 1 << 8))  # namespace attribute notices
aer = db_admin.submit(nv.sqe(nv.ASYNC_EVENT))
check("strata volume create v3, map v3 --host db --lun 5, while db is connected",
      strata("volume", "create", "v3", "--size", "1G") and strata("map", "v3", "--host", "db", "--lun", "5"))
event = db_admin.wait(aer)
check("... db hears of it: a namespace attribute notice (type 2, info 0, page 04h)", event.ok and event.result & 0xffffff == 0x040002,
      repr(event))
changed = db_admin.get_log_page(0x04, 4096)
check("... the changed namespace list names namespace 6", changed.ok and struct.unpack_from("<2I", changed.data, 0) == (6, 0),
      repr(changed))
check("... and the active list is [4, 6]", active_namespaces(db_admin) == [4, 6])
db_io = db.io(nvme_port, db_admin, 1)
check("db writes its namespace 6", db_io.write(6, 0, data[:BS], BS).ok)
check("db has no namespace 1", not db_io.read(1, 0, 1, BS).ok)

nv.Queue.close_all()
daemon.terminate()
check("stratad stops on SIGTERM with NVMe hosts connected", daemon.wait(60) == 0)
print("%d failed: %s" % (len(failures), "; ".join(failures)) if failures else "all passed", flush=True)
sys.exit(1 if failures else 0)
