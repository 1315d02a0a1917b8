#!/usr/bin/env python3
"""NVMe/TCP against strata-iscsi-target, end to end over raw PDUs
(nvme_raw.py): ICReq and digests, discovery, Connect and its refusals,
properties, Identify, features, pipelined writes and reads on two I/O
queues (seeded: STRATA_TEST_SEED=N replays a run), Flush, Write Zeroes,
deallocation, Compare and fused Compare and Write, the statuses of bad
commands, the fatal transport errors (C2HTermReq), keep alive,
Disconnect, one unit seen through both protocols, and its one
reservation state, which NVMe hosts and iSCSI initiators share; all of it at 512-
and 4096-byte blocks.
   nvme_target_test.py PATH/TO/strata-iscsi-target"""
import math, os, random, socket, struct, sys, time, traceback
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import iscsi_raw
from nvme_raw import (ASYNC_EVENT, C2H_TERM_REQ, CAP, COMPARE, CSTS, DISCONNECT, DISCOVERY_NQN, FLUSH, FUSE_FIRST,
                      FUSE_SECOND, H2C_DATA, IC_REQ, R2T, READ, VS, WRITE, Host, ProtocolError, Queue, TermReq, check,
                      connect_data, connect_sqe, dsm_ranges, dsm_sqe, fabrics_sqe, failures, get_features_sqe,
                      invalid_parameter, rw_sqe, set_features_sqe, set_sgl, sqe, start, stop,
                      write_zeroes_sqe, _Command, CAPSULE_CMD)

NQN = "nqn.2026-11.io.strata:test"
HOST = Host("nqn.2026-11.io.strata:host-a")
LUN_MIB = 64
NUMBER_OF_QUEUES, KEEP_ALIVE_TIMER = 0x07, 0x0f  # feature IDs


class Target:
    """The tool, started with two 64 MiB units (namespaces 1 and 2) of `block`-byte blocks."""
    def __init__(self, binary, block, *args):
        self.process, self.iscsi_port, self.port = start(binary, "--luns", "2", "--lun-mib", str(LUN_MIB),
                                                         "--block-size", str(block), *args, nqn=NQN)
        self.block, self.blocks = block, (LUN_MIB << 20) // block


def u16(b, at):
    return struct.unpack_from('<H', b, at)[0]

def u32(b, at):
    return struct.unpack_from('<I', b, at)[0]

def u64(b, at):
    return struct.unpack_from('<Q', b, at)[0]

def is_status(c, sct, sc, dnr=None):
    return c.sct == sct and c.sc == sc and (dnr is None or c.dnr == dnr)

def controller(t, io_queues=1, host=HOST, kato_ms=0, **ic):
    """A controller of the test subsystem: its admin queue (enabled), the
    queues asked for (Number of Queues), and its I/O queues, each taking
    IOCCSZ's in-capsule limit."""
    admin = host.admin(t.port, NQN, kato_ms=kato_ms)
    if io_queues:
        c = admin.command(set_features_sqe(NUMBER_OF_QUEUES, (io_queues - 1) * 0x10001))
        assert c.ok, "Set Features Number of Queues: %r" % c
    ident = admin.identify(1).data
    ios = [host.io(t.port, admin, qid, **ic) for qid in range(1, io_queues + 1)]
    for q in ios:
        q.in_capsule_bytes = u32(ident, 1792) * 16 - 64
    return admin, ios


# --- Connection and discovery --------------------------------------------------

def test_icreq(t):
    for hd, dd in ((False, False), (True, True), (True, False), (False, True)):
        q = Queue(t.port, icreq=False)
        r = q.initialize(hd, dd)
        what = "header digest %s, data digest %s" % ("on" if hd else "off", "on" if dd else "off")
        check("ICReq with %s: ICResp (HLEN 128, PLEN 128, PFV 0) grants exactly that" % what,
              r.hlen == 128 and r.u32(4) == 128 and r.u16(8) == 0 and r.header[11] == int(hd) | int(dd) << 1,
              "HLEN %d PLEN %d PFV %d DGST %d" % (r.hlen, r.u32(4), r.u16(8), r.header[11]))
        check("... MAXH2CDATA at least 4096 and CPDA at most 31", r.u32(12) >= 4096 and r.header[10] <= 31,
              "MAXH2CDATA %d CPDA %d" % (r.u32(12), r.header[10]))
        c = q.connect(NQN, HOST.nqn, HOST.hostid)
        check("... then Connect, its 1024 bytes in the capsule padded to CPDA %d, succeeds" % q.cpda, c.ok, repr(c))
        ok = q.enable()
        ident = q.identify(1)  # 4 KiB of C2HData: its digests checked as they come
        check("... and so do enable and Identify (4 KiB of C2HData), digests checked both ways", ok and ident.ok and
              len(ident.data) == 4096, repr(ident))
    for hpda, hd in ((7, False), (31, True)):
        q = Queue(t.port, hpda=hpda, header_digest=hd)
        q.connect(NQN, HOST.nqn, HOST.hostid)
        q.enable()
        q.identify(1)
        check("HPDA %d: C2HData's data at a multiple of %d bytes" % (hpda, (hpda + 1) * 4),
              q.last_c2h_pdo is not None and q.last_c2h_pdo % ((hpda + 1) * 4) == 0, "PDO %s" % q.last_c2h_pdo)


def discovery_entries(d):
    """The discovery log page's entries, read as a host does: the 1024-byte
    header first (GENCTR, NUMREC), then the entries."""
    head = d.get_log_page(0x70, 1024)
    genctr, numrec = u64(head.data, 0), u64(head.data, 8)
    if not check("Get Log Page 0x70: the 1024-byte header (GENCTR %d, NUMREC %d)" % (genctr, numrec),
                 head.ok and 1 <= numrec <= 64, repr(head)):
        return []
    page = d.get_log_page(0x70, 1024 * numrec, offset=1024)
    check("... and its %d entries" % numrec, page.ok, repr(page))
    again = d.get_log_page(0x70, 1024)
    check("... GENCTR unchanged on reading the header again", u64(again.data, 0) == genctr)
    text = lambda b: b.split(b"\0")[0].decode(errors="replace").strip()  # NUL-terminated or space-padded
    return [dict(trtype=e[0], adrfam=e[1], subtype=e[2], portid=u16(e, 4), trsvcid=text(e[32:64]),
                 subnqn=text(e[256:512]), traddr=text(e[512:768]))
            for e in (page.data[at:at + 1024] for at in range(0, 1024 * numrec, 1024))]

def test_discovery(t):
    d = HOST.admin(t.port, DISCOVERY_NQN)
    ident = d.identify(1)
    check("the discovery controller: Identify says CNTRLTYPE 2", ident.ok and ident.data[111] == 2,
          "%r CNTRLTYPE %d" % (ident, ident.data[111] if ident.data else -1))
    entries = discovery_entries(d)
    ours = [e for e in entries if e["subnqn"] == NQN]
    check("the discovery log lists the test subsystem once", len(ours) == 1, repr(entries))
    if ours:
        e = ours[0]
        where = (e["trtype"], e["adrfam"], e["subtype"], e["traddr"], e["trsvcid"])
        check("... TCP (3), IPv4 (1), an NVM subsystem (2), at 127.0.0.1 and this port",
              where == (3, 1, 2, "127.0.0.1", str(t.port)), repr(e))


# --- The admin queue ------------------------------------------------------------

def test_admin_connect(t):
    a, b = Queue(t.port), Queue(t.port)
    ca = a.connect(NQN, HOST.nqn, HOST.hostid)
    cb = b.connect(NQN, HOST.nqn, HOST.hostid)
    check("admin Connect with CNTLID 0xffff: a controller ID, nonzero", ca.ok and 0 < ca.result & 0xffff < 0xfff0,
          repr(ca))
    check("a second admin Connect: another controller", cb.ok and cb.result & 0xffff != ca.result & 0xffff,
          "%r, %r" % (ca, cb))
    b.enable()
    aer = b.submit(sqe(ASYNC_EVENT))
    check("an Asynchronous Event Request stays outstanding while a later Keep Alive completes",
          b.keep_alive().ok and aer in b.pending)

def test_properties(t):
    q = Queue(t.port)
    q.connect(NQN, HOST.nqn, HOST.hostid)
    cap = q.property_get(CAP, 8)
    check("Property Get CAP (8 bytes): MQES at least 127, CQR set",
          cap.ok and cap.result64 & 0xffff >= 127 and cap.result64 >> 16 & 1, "%r CAP 0x%x" % (cap, cap.result64))
    vs = q.property_get(VS)
    check("Property Get VS: at least major version 1 (2.0 is 0x00020000)", vs.ok and vs.result >> 16 >= 1, repr(vs))
    before = q.property_get(CSTS)
    check("CSTS.RDY is 0 before CC.EN", before.ok and before.result & 1 == 0, repr(before))
    check("CC.EN = 1 (IOSQES 6, IOCQES 4) makes CSTS.RDY 1", q.enable())

def test_identify_controller(t):
    q = Queue(t.port)
    cntlid = q.connect(NQN, HOST.nqn, HOST.hostid).result & 0xffff
    q.enable()
    c = q.identify(1)
    d = c.data
    check("Identify controller succeeds with 4096 bytes", c.ok and len(d) == 4096, repr(c))
    subnqn = d[768:1024].split(b"\0")[0].decode(errors="replace")
    check("... SUBNQN (byte 768) is the subsystem's", subnqn == NQN, subnqn)
    check("... CNTLID (byte 78) is the one Connect gave", u16(d, 78) == cntlid, "%d vs %d" % (u16(d, 78), cntlid))
    check("... IOCCSZ (byte 1792) at least 4 (the 64-byte SQE)", u32(d, 1792) >= 4, str(u32(d, 1792)))
    check("... CMIC (byte 76) reports ANA (bit 3)", d[76] & 0x08, "CMIC 0x%x" % d[76])
    check("... ANACAP (byte 343) nonzero", d[343] != 0, "ANACAP 0x%x" % d[343])

def test_identify_namespaces(t):
    q = HOST.admin(t.port, NQN)
    ns = q.identify(0, 1)
    d = ns.data
    check("Identify namespace 1: NSZE is 64 MiB of %d-byte blocks" % t.block, ns.ok and u64(d, 0) == t.blocks,
          "%r NSZE %d" % (ns, u64(d, 0) if d else -1))
    lbads = u32(d, 128) >> 16 & 0xff
    check("... FLBAS format 0, whose LBADS is log2(%d)" % t.block, d[26] & 0xf == 0 and 1 << lbads == t.block,
          "FLBAS %d LBADS %d" % (d[26], lbads))
    active = q.identify(2, 0)
    ids = [u32(active.data, i) for i in range(0, 4096, 4) if u32(active.data, i)]
    check("the active namespace list (CNS 2) is [1, 2]", active.ok and ids == [1, 2], repr(ids))
    descriptors = {}
    for nsid in (1, 2):
        c = q.identify(3, nsid)
        at, found = 0, {}
        while at + 4 <= len(c.data) and c.data[at]:
            nidt, nidl = c.data[at], c.data[at + 1]
            found[nidt] = (nidl, c.data[at + 4:at + 4 + nidl])
            at += 4 + nidl
        descriptors[nsid] = found
        check("namespace %d's descriptors (CNS 3): an NGUID (2, 16 bytes) and a UUID (3, 16 bytes)" % nsid,
              c.ok and found.get(2, (0,))[0] == 16 and found.get(3, (0,))[0] == 16, repr(found))
    check("... namespace 1's NGUID and UUID are not namespace 2's",
          all(descriptors[1].get(k) != descriptors[2].get(k) for k in (2, 3)))
    nn = u32(q.identify(1).data, 516)
    absent = q.identify(0, 3)
    if nn < 3:
        check("Identify of NSID 3, above NN %d: Invalid Namespace or Format (0x0b), DNR" % nn,
              is_status(absent, 0, 0x0b, 1), repr(absent))
    else:  # NVMe 2.0 5.17.2.1: an inactive NSID gets a zero-filled structure
        check("Identify of NSID 3, inactive (NN %d): a zero-filled structure" % nn,
              absent.ok and not any(absent.data), repr(absent))
    if nn < 0xfffffffe:
        above = q.identify(0, nn + 1)
        check("Identify of NSID NN + 1: Invalid Namespace or Format (0x0b), DNR", is_status(above, 0, 0x0b, 1),
              repr(above))

def test_features(t):
    q = HOST.admin(t.port, NQN, kato_ms=30000)
    c = q.command(set_features_sqe(NUMBER_OF_QUEUES, 3 | 3 << 16))
    check("Set Features Number of Queues (4 asked): granted %d submission and %d completion queues"
          % ((c.result & 0xffff) + 1, (c.result >> 16) + 1), c.ok, repr(c))
    g = q.command(get_features_sqe(KEEP_ALIVE_TIMER))
    check("Get Features Keep Alive Timer: the Connect's KATO (30000 ms)", g.ok and g.result == 30000, repr(g))


# --- Connect's refusals -----------------------------------------------------------

def test_io_connect(t):
    admin = HOST.admin(t.port, NQN)
    admin.command(set_features_sqe(NUMBER_OF_QUEUES, 0))
    c = Queue(t.port).connect(NQN, HOST.nqn, HOST.hostid, cntlid=admin.cntlid, qid=1, sqsize=127)
    check("I/O queue Connect (QID 1, SQSIZE 127, the admin queue's CNTLID) succeeds", c.ok, repr(c))
    c = Queue(t.port).connect(NQN, HOST.nqn, HOST.hostid, cntlid=0x7ffe, qid=1, sqsize=127)
    check("I/O queue Connect naming an unknown controller: Connect Invalid Parameters (SCT 1, SC 0x82)",
          is_status(c, 1, 0x82), repr(c))
    c = Queue(t.port).connect("nqn.2026-11.io.strata:nobody", HOST.nqn, HOST.hostid)
    check("Connect to an unknown SUBNQN: Connect Invalid Parameters (SCT 1, SC 0x82)", is_status(c, 1, 0x82),
          repr(c))
    check("... naming the data's byte 256 (IATTR 1, IPO 256: result 0x00010100)",
          invalid_parameter(c.result) == (1, 256), "result 0x%x" % c.result)

def test_host_access(t):
    """Run on a target started with --nvme-host HOST."""
    c = Queue(t.port).connect(NQN, HOST.nqn, HOST.hostid)
    check("with --nvme-host, the host listed connects", c.ok, repr(c))
    other = Host("nqn.2026-11.io.strata:host-b")
    c = Queue(t.port).connect(NQN, other.nqn, other.hostid)
    check("... a host not listed gets Connect Invalid Host (SCT 1, SC 0x84)", is_status(c, 1, 0x84), repr(c))


# --- Data -------------------------------------------------------------------------

def plan(rng, t, count, max_bytes, in_capsule_bytes):
    """`count` writes at random, non-overlapping places of namespaces 1 and
    2: (nsid, slba, data, in_capsule). Half are at most 8 KiB (in the
    capsule if they fit, or by R2T, at random), half larger (log-uniform
    to max_bytes)."""
    small, large = 8192 // t.block, max_bytes // t.block
    sizes = [rng.randint(1, small) if rng.random() < 0.5 else
             int(math.exp(rng.uniform(math.log(small + 1), math.log(large)))) for _ in range(count)]
    nsids = [rng.choice((1, 2)) for _ in range(count)]
    writes = []
    for nsid in (1, 2):
        mine = [i for i in range(count) if nsids[i] == nsid]
        while sum(sizes[i] for i in mine) > t.blocks:
            biggest = max(mine, key=lambda i: sizes[i])
            sizes[biggest] //= 2
        free = t.blocks - sum(sizes[i] for i in mine)
        cuts, at, before = sorted(rng.randint(0, free) for _ in mine), 0, 0
        for i, cut in zip(mine, cuts):  # each range begins after the ones before and a random gap
            at += cut - before
            before = cut
            data = rng.randbytes(sizes[i] * t.block)
            writes.append((nsid, at, data, len(data) <= in_capsule_bytes and rng.random() < 0.5))
            at += sizes[i]
    rng.shuffle(writes)
    return writes

def run_batches(queues, items, submit, depth=32):
    """Submits `depth` items on each queue before waiting for any; returns
    [(item, completion)] in the order of `items`."""
    out = []
    for first in range(0, len(items), depth * len(queues)):
        rounds = []
        for n, q in enumerate(queues):
            batch = items[first + n * depth:first + (n + 1) * depth]
            rounds.append((q, batch, [submit(q, item) for item in batch]))
        for q, batch, cids in rounds:
            out += zip(batch, q.wait_all(cids))
    return out

def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

def test_data(t):
    admin, queues = controller(t, 2)
    mdts = admin.identify(1).data[77]
    max_bytes = min(1 << 20, 4096 << mdts if mdts else 1 << 20)
    writes = plan(RNG, t, 256, max_bytes, queues[0].in_capsule_bytes)
    print("  %d writes, %d MiB, %d in the capsule, on 2 I/O queues, 32 in flight on each"
          % (len(writes), sum(len(w[2]) for w in writes) >> 20, sum(w[3] for w in writes)), flush=True)
    done = run_batches(queues, writes, lambda q, w: q.submit(rw_sqe(WRITE, w[0], w[1], len(w[2]) // t.block),
                                                              w[2], in_capsule=w[3]))
    bad = [(w[:2], len(w[2]), c) for w, c in done if not c.ok]
    check("every write succeeds", not bad, "%d failed, first: %r" % (len(bad), bad[:1]))
    done = run_batches(queues, writes, lambda q, w: q.submit(rw_sqe(READ, w[0], w[1], len(w[2]) // t.block),
                                                              read_bytes=len(w[2])))
    bad = [(w[:2], len(w[2]), c, first_difference(c.data, w[2])) for w, c in done if not c.ok or c.data != w[2]]
    check("every read succeeds and returns what was written", not bad,
          "%d wrong, first: (namespace, LBA) %r, %d bytes, %r, first wrong byte %s" % ((len(bad),) + bad[0])
          if bad else "")
    check("Flush succeeds", queues[0].command(sqe(FLUSH, 1)).ok)

def test_zeroes_and_deallocate(t):
    _, (q,) = controller(t)
    bs, lba, n = t.block, t.blocks // 2, 16
    zeros = bytes(n * bs)
    for what, entry, data in (("Write Zeroes", write_zeroes_sqe(1, lba, n), b""),
                              ("Write Zeroes with DEAC", write_zeroes_sqe(1, lba, n, deallocate=True), b""),
                              ("Dataset Management deallocate", dsm_sqe(1, 1), dsm_ranges([(lba, n)]))):
        q.write(1, lba, RNG.randbytes(n * bs), bs)
        c = q.command(entry, data)
        r = q.read(1, lba, n, bs)
        check("%s succeeds, and the blocks then read as zeros" % what, c.ok and r.ok and r.data == zeros, repr(c))
    pattern = RNG.randbytes(n * bs)
    q.write(1, lba, pattern, bs)
    c = q.command(dsm_sqe(1, 2), dsm_ranges([(lba, 4), (lba + 8, 4)]))
    r = q.read(1, lba, n, bs)
    want = bytes(4 * bs) + pattern[4 * bs:8 * bs] + bytes(4 * bs) + pattern[12 * bs:]
    check("DSM with two ranges deallocates those and nothing else", c.ok and r.data == want, repr(c))

def test_compare(t):
    _, (q,) = controller(t)
    bs, lba, n = t.block, t.blocks // 3, 16
    pattern = RNG.randbytes(n * bs)
    q.write(1, lba, pattern, bs)
    c = q.command(rw_sqe(COMPARE, 1, lba, n), pattern)
    check("Compare with the same data succeeds", c.ok, repr(c))
    other = pattern[:-1] + bytes([pattern[-1] ^ 1])
    c = q.command(rw_sqe(COMPARE, 1, lba, n), other)
    check("Compare with one bit different: Compare Failure (SCT 2, SC 0x85)", is_status(c, 2, 0x85), repr(c))

def fused(q, lba, n, expected, new):
    first = q.submit(rw_sqe(COMPARE, 1, lba, n, fuse=FUSE_FIRST), expected, in_capsule=True)
    second = q.submit(rw_sqe(WRITE, 1, lba, n, fuse=FUSE_SECOND), new, in_capsule=True)
    return q.wait_all([first, second])

def test_fused(t):
    _, (q,) = controller(t)
    bs, lba = t.block, t.blocks // 4
    n = max(1, 4096 // bs)  # in the capsule: the pair goes back to back
    old, new, other = (RNG.randbytes(n * bs) for _ in range(3))
    q.write(1, lba, old, bs)
    compare, write = fused(q, lba, n, old, new)
    check("fused Compare and Write, matching: both succeed", compare.ok and write.ok, "%r, %r" % (compare, write))
    check("... and the write lands", q.read(1, lba, n, bs).data == new)
    compare, write = fused(q, lba, n, old, other)
    check("fused Compare and Write, not matching: Compare Failure (SCT 2, SC 0x85)", is_status(compare, 2, 0x85),
          repr(compare))
    check("... and the Write is aborted: Failed Fused Command (SCT 0, SC 0x09)", is_status(write, 0, 0x09), repr(write))
    check("... and the data is unchanged", q.read(1, lba, n, bs).data == new)


class Corked:
    """A queue's socket whose sends are held until uncorked, so that several
    PDUs leave in one TCP send."""
    def __init__(self, q):
        self.q, self.real, self.held = q, q.s, bytearray()
        q.s = self

    def sendall(self, data):
        self.held += data

    def __getattr__(self, name):
        return getattr(self.real, name)

    def uncork(self):
        self.q.s = self.real
        self.real.sendall(bytes(self.held))

def test_fused_failures(t):
    """Fused Compare and Write whose halves fail: the pair is answered
    together, the Write never runs when its Compare fails, and nothing of
    the pair outlives its slots (NVMe Base 2.0, 3.4.2)."""
    _, (q, q2) = controller(t, 2, data_digest=True)
    bs, lba = t.block, t.blocks // 4 + 64
    n = max(1, 4096 // bs)
    old = RNG.randbytes(n * bs)
    q.write(1, lba, old, bs)
    TRANSIENT, FAILED_FUSED, MISSING_FUSED = (0, 0x22), (0, 0x09), (0, 0x0a)
    def pair(first_kw, second_kw, one_send=False, first_in_capsule=True):
        cork = Corked(q) if one_send else None
        first = q.submit(rw_sqe(COMPARE, 1, lba, n, fuse=FUSE_FIRST), old, in_capsule=first_in_capsule,
                         **first_kw)
        second = q.submit(rw_sqe(WRITE, 1, lba, n, fuse=FUSE_SECOND), RNG.randbytes(n * bs), in_capsule=True,
                          **second_kw)
        if cork:
            cork.uncork()
        return q.wait_all([first, second])
    def unchanged():
        r = q.read(1, lba, n, bs)
        return r.ok and r.data == old
    for how, one_send in (("each in its own TCP send", False), ("both in one TCP send", True)):
        results = [pair(dict(bad_data_digest=True), {}, one_send) for _ in range(20)]
        bad = [(c, w) for c, w in results if not (is_status(c, *TRANSIENT) and is_status(w, *FAILED_FUSED))]
        check("20 fused pairs whose Compare fails its data digest, %s: the Compare is a Transient Transport "
              "Error, the Write Aborted due to Failed Fused Command (SC 0x09)" % how, not bad,
              "%d wrong, first %r" % (len(bad), bad[:1]))
        check("... and the blocks keep their old data", unchanged())
    c, w = pair({}, dict(bad_data_digest=True))
    check("a fused pair whose Write fails its data digest: the Write a Transient Transport Error, the Compare "
          "Aborted due to Failed Fused Command; nothing written", is_status(w, *TRANSIENT) and
          is_status(c, *FAILED_FUSED) and unchanged(), "%r, %r" % (c, w))
    c, w = pair(dict(bad_h2c_digest=True), {}, first_in_capsule=False)
    check("a fused Compare whose data comes on R2T with a bad digest: Transient; its Write Failed Fused; "
          "nothing written", is_status(c, *TRANSIENT) and is_status(w, *FAILED_FUSED) and unchanged(),
          "%r, %r" % (c, w))
    w = q.command(rw_sqe(WRITE, 1, lba, n, fuse=FUSE_SECOND), RNG.randbytes(n * bs), in_capsule=True)
    check("a fused Write with no Compare before it: Aborted due to Missing Fused Command (SC 0x0a), not written",
          is_status(w, *MISSING_FUSED) and unchanged(), repr(w))
    first = q.submit(rw_sqe(COMPARE, 1, lba, n, fuse=FUSE_FIRST), old, in_capsule=True)
    plain = q.submit(rw_sqe(READ, 1, lba, n), read_bytes=n * bs)
    c, r = q.wait_all([first, plain])
    check("a fused Compare followed by an unfused command: the Compare Missing Fused, the other runs",
          is_status(c, *MISSING_FUSED) and r.ok and r.data == old, "%r, %r" % (c, r))
    first = q.submit(rw_sqe(COMPARE, 1, lba, n, fuse=FUSE_FIRST), old, in_capsule=True)
    w = q2.command(rw_sqe(WRITE, 1, lba, n, fuse=FUSE_SECOND), RNG.randbytes(n * bs), in_capsule=True)
    r = q.read(1, lba, n, bs)
    c = q.wait(first)
    check("a pair split over two queues: the Write Missing Fused on its queue, the Compare Missing Fused when "
          "its own queue's next command comes; nothing written", is_status(w, *MISSING_FUSED) and
          is_status(c, *MISSING_FUSED) and r.ok and r.data == old, "%r, %r, %r" % (c, w, r))
    first = q.submit(rw_sqe(COMPARE, 9, lba, n, fuse=FUSE_FIRST), old, in_capsule=True)
    second = q.submit(rw_sqe(WRITE, 1, lba, n, fuse=FUSE_SECOND), RNG.randbytes(n * bs), in_capsule=True)
    c, w = q.wait_all([first, second])
    check("a fused Compare refused at once (an inactive namespace): its Write Failed Fused, not written",
          not c.ok and is_status(w, *FAILED_FUSED) and unchanged(), "%r, %r" % (c, w))
    c = q.command(rw_sqe(WRITE, 1, lba, n, fuse=3), RNG.randbytes(n * bs), in_capsule=True)
    check("FUSE 11b (reserved): Invalid Field, not written", is_status(c, 0, 0x02) and unchanged(), repr(c))
    # Disconnects mid-pair: a Compare alone, then a Compare with its Write's
    # data still to come on R2T; the target goes on.
    q.submit(rw_sqe(COMPARE, 1, lba, n, fuse=FUSE_FIRST), old, in_capsule=True)
    q.close()
    _, (q,) = controller(t, 1, data_digest=True)
    q.submit(rw_sqe(COMPARE, 1, lba, n, fuse=FUSE_FIRST), old, in_capsule=True)
    q.submit(rw_sqe(WRITE, 1, lba, n, fuse=FUSE_SECOND), RNG.randbytes(n * bs), in_capsule=False)
    q.close()
    _, (q,) = controller(t, 1)
    new = RNG.randbytes(n * bs)
    c, w = fused(q, lba, n, old, new)
    check("after disconnects mid-pair, the target serves a fused pair again, and it lands",
          c.ok and w.ok and q.read(1, lba, n, bs).data == new, "%r, %r" % (c, w))


# --- Errors -------------------------------------------------------------------------

def test_command_errors(t):
    admin, (q,) = controller(t)
    c = q.read(1, t.blocks - 1, 2, t.block)
    check("Read past the end: LBA Out of Range (SCT 0, SC 0x80)", is_status(c, 0, 0x80), repr(c))
    nn = u32(admin.identify(1).data, 516)
    c = q.read(5, 0, 1, t.block)
    if nn < 5:
        check("I/O to NSID 5 (above NN %d): Invalid Namespace or Format (0x0b), DNR" % nn, is_status(c, 0, 0x0b, 1),
              repr(c))
    else:  # NVMe 2.0 3.2.1.1: an inactive NSID is Invalid Field; Linux's nvmet answers 0x0b for both
        check("I/O to NSID 5 (inactive, NN %d): Invalid Namespace or Format (0x0b) or Invalid Field (0x02), DNR"
              % nn, is_status(c, 0, 0x0b, 1) or is_status(c, 0, 0x02, 1), repr(c))
    c = q.command(sqe(0x99, 1))
    check("an unknown I/O opcode (0x99): Invalid Command Opcode (SCT 0, SC 0x01)", is_status(c, 0, 0x01), repr(c))

def test_header_digest_error(t):
    admin = HOST.admin(t.port, NQN)
    admin.command(set_features_sqe(NUMBER_OF_QUEUES, 0x10001))
    bad, good = HOST.io(t.port, admin, 1, header_digest=True), HOST.io(t.port, admin, 2)
    bad.submit(rw_sqe(READ, 1, 0, 1), read_bytes=t.block, bad_header_digest=True)
    closed, term = bad.ending(5)
    check("a capsule with a bad header digest: C2HTermReq FES 3 (header digest error), then the connection closes",
          closed and term and term.fes == 3, "closed %s, %s" % (closed, term))
    check("... while the controller's admin queue and other I/O queue go on",
          admin.keep_alive().ok and good.read(1, 0, 1, t.block).ok)

def test_data_digest_errors(t):
    _, (q,) = controller(t, data_digest=True)
    bs, lba = t.block, t.blocks // 5
    before = RNG.randbytes(2 * bs)
    q.write(1, lba, before, bs)
    for what, kw in (("in-capsule data", dict(in_capsule=True, bad_data_digest=True)),
                     ("an H2CData PDU", dict(in_capsule=False, bad_h2c_digest=True))):
        c = q.write(1, lba, RNG.randbytes(2 * bs), bs, **kw)
        check("a data digest error on %s: Transient Transport Error (SCT 0, SC 0x22)" % what, is_status(c, 0, 0x22),
              repr(c))
        r = q.read(1, lba, 2, bs)
        check("... the connection goes on, and the blocks are unchanged", r.ok and r.data == before, repr(r))

def test_fatal_errors(t):
    _, (q,) = controller(t)
    too_much = bytes(q.in_capsule_bytes + t.block)
    q.submit(rw_sqe(WRITE, 1, 0, len(too_much) // t.block), too_much, in_capsule=True)
    closed, term = q.ending(5)
    check("a capsule with %d bytes of data (IOCCSZ allows %d): C2HTermReq FES 5 (data transfer limit exceeded)"
          % (len(too_much), q.in_capsule_bytes), closed and term and term.fes == 5, "closed %s, %s" % (closed, term))
    q = Queue(t.port)
    q.send_pdu(0x0f, bytes(16))
    closed, term = q.ending(5)
    check("a PDU of an unknown type (0x0f): C2HTermReq FES 1 (invalid header field), FEI 0 (the type)",
          closed and term and term.fes == 1 and term.fei == 0, "closed %s, %s" % (closed, term))
    q = Queue(t.port, icreq=False)
    q.submit(connect_sqe(0, 31), connect_data(HOST.hostid, 0xffff, NQN, HOST.nqn), in_capsule=True)
    closed, term = q.ending(5)
    check("a capsule before the ICReq: C2HTermReq FES 2 (PDU sequence error) or a plain close",
          closed and (term is None or term.fes == 2), "closed %s, %s" % (closed, term))
    q = Queue(t.port)
    q.send_pdu(IC_REQ, bytes(120))
    closed, term = q.ending(5)
    check("a second ICReq: C2HTermReq FES 2 (PDU sequence error)", closed and term and term.fes == 2,
          "closed %s, %s" % (closed, term))


# --- Keep alive, Disconnect -----------------------------------------------------------

def test_keep_alive(t):
    admin, (io,) = controller(t, kato_ms=2000)
    began = time.monotonic()
    closed, _ = admin.ending(6)
    check("KATO 2000 ms and a silent host: the admin connection closes within 6 s (%.1f s)"
          % (time.monotonic() - began), closed)
    check("... and so does its I/O queue's", io.ending(2)[0])
    admin, (io,) = controller(t, kato_ms=2000)
    answers, end = [], time.monotonic() + 5.5
    while time.monotonic() < end:
        answers.append(admin.keep_alive().ok)
        time.sleep(0.5)
    check("with a Keep Alive every 500 ms both connections stay up past 5 s",
          all(answers) and io.read(1, 0, 1, t.block).ok, "%d of %d answered" % (sum(answers), len(answers)))

def test_disconnect(t):
    admin, (io,) = controller(t)
    c = io.command(fabrics_sqe(DISCONNECT))
    check("Disconnect on an I/O queue succeeds", c.ok, repr(c))
    check("... and the target closes that connection", io.ending(3)[0])
    check("... while the admin queue stays", admin.keep_alive().ok)


# --- Both protocols -----------------------------------------------------------------------

def test_both_protocols(t):
    """Unit 0: namespace 1 over NVMe/TCP, LUN 0 over iSCSI."""
    _, (q,) = controller(t)
    bs, lba = t.block, 1234
    data = RNG.randbytes(bs)
    q.write(1, lba, data, bs)
    c = iscsi_raw.Connection(t.iscsi_port)
    r, _ = c.full_login()
    check("an iSCSI login to the same target", r[36] == 0)
    iscsi_raw.command(c, bytes(6))  # TEST UNIT READY: takes the new nexus's unit attention
    rw16 = lambda op, at: bytes([op, 0]) + at.to_bytes(8, 'big') + (1).to_bytes(4, 'big') + bytes(2)
    status, _, _, _, got = iscsi_raw.command(c, rw16(0x88, lba), read_bytes=bs)
    check("a block written over NVMe/TCP (namespace 1) reads the same over iSCSI (LUN 0)",
          status == 0 and got == data, "status %d, %d bytes" % (status, len(got)))
    data = RNG.randbytes(bs)
    status = iscsi_raw.command(c, rw16(0x8a, lba + 1), write=data)[0]
    r = q.read(1, lba + 1, 1, bs)
    check("... and one written over iSCSI reads the same over NVMe/TCP", status == 0 and r.data == data,
          "status %d, %r" % (status, r))


RESERVATION_REGISTER, RESERVATION_REPORT, RESERVATION_ACQUIRE, RESERVATION_RELEASE = 0x0d, 0x0e, 0x11, 0x15
WRITE_EXCLUSIVE, EXCLUSIVE_ACCESS = 1, 2

def register(q, new_key, current=0, action=0):
    return q.command(sqe(RESERVATION_REGISTER, 1, cdw10=action), struct.pack('<QQ', current, new_key))

def acquire(q, key, rtype, preempt_key=None):
    action = 0 if preempt_key is None else 1
    return q.command(sqe(RESERVATION_ACQUIRE, 1, cdw10=action | rtype << 8), struct.pack('<QQ', key, preempt_key or 0))

def release(q, key, rtype, clear=False):
    return q.command(sqe(RESERVATION_RELEASE, 1, cdw10=int(clear) | rtype << 8), struct.pack('<Q', key))

def report(q, extended=True):
    """(generation, rtype, PTPLS, [(holder, host id, key)]) of namespace 1."""
    c = q.command(sqe(RESERVATION_REPORT, 1, cdw10=4096 // 4 - 1, cdw11=int(extended)), read_bytes=4096)
    if not c.ok:
        return c
    d, header, entry = c.data, (64 if extended else 24), (64 if extended else 24)
    regs = []
    for i in range(u16(d, 5)):
        e = d[header + i * entry:]
        regs.append((e[2] & 1, bytes(e[16:32]) if extended else bytes(e[8:16]), u64(e, 8 if extended else 16)))
    return u32(d, 0), d[4], d[9], regs

def test_reservations(t):
    """One reservation state for NVMe hosts and iSCSI initiators."""
    bs = t.block
    other = Host("nqn.2026-11.io.strata:host-b")
    _, (a,) = controller(t)
    _, (b,) = controller(t, host=other)
    c = iscsi_raw.Connection(t.iscsi_port)
    c.full_login()
    iscsi_raw.command(c, bytes(6))  # the new nexus's unit attention
    write16 = lambda at: bytes([0x8a, 0]) + at.to_bytes(8, 'big') + (1).to_bytes(4, 'big') + bytes(2)
    block = RNG.randbytes(bs)
    check("host A registers key 0xA on namespace 1", register(a, 0xA).ok)
    check("... registering again without its key is a Reservation Conflict (SCT 0, SC 0x83)",
          is_status(register(a, 0xA), 0, 0x83))
    check("host A acquires Write Exclusive", acquire(a, 0xA, WRITE_EXCLUSIVE).ok)
    check("... and writes", a.write(1, 10, block, bs).ok)
    check("host B (not registered) may not write: Reservation Conflict", is_status(b.write(1, 10, block, bs), 0, 0x83))
    check("... but reads", b.read(1, 10, 1, bs).ok)
    status = iscsi_raw.command(c, write16(10), write=block)[0]
    check("an iSCSI initiator's WRITE(16) to the same unit meets RESERVATION CONFLICT (18h)", status == 0x18, "status %#x" % status)
    gen, rtype, ptpls, regs = report(a)
    check("Reservation Report (extended): Write Exclusive, one registrant, A, holding it with key 0xA",
          rtype == WRITE_EXCLUSIVE and regs == [(1, HOST.hostid, 0xA)], "type %d %r" % (rtype, regs))
    brief = report(b, extended=False)
    check("... and the 64-bit form, asked by B, says the same", brief[1] == WRITE_EXCLUSIVE and
          brief[3] == [(1, HOST.hostid[:8], 0xA)], repr(brief))
    check("host B registers key 0xB and preempts A (Write Exclusive, all registrants)",
          register(b, 0xB).ok and acquire(b, 0xB, 5, preempt_key=0xA).ok)
    gen2, rtype, _, regs = report(b)
    check("... the report: type 5, B alone, holding it, generation moved on", rtype == 5 and
          regs == [(1, other.hostid, 0xB)] and gen2 > gen, "type %d gen %d->%d %r" % (rtype, gen, gen2, regs))
    check("... A, preempted, may not write", is_status(a.write(1, 10, block, bs), 0, 0x83))
    check("... B writes", b.write(1, 10, block, bs).ok)
    check("B releases with the wrong type: an error, the reservation stays",
          not release(b, 0xB, WRITE_EXCLUSIVE).ok and report(b)[1] == 5)
    check("B releases", release(b, 0xB, 5).ok and report(b)[1] == 0)
    check("... and clears: no registrant is left", release(b, 0xB, 0, clear=True).ok and report(b)[3] == [])
    status = iscsi_raw.command(c, write16(10), write=block)[0]
    check("... and the iSCSI initiator writes again", status == 0, "status %#x" % status)
    check("an acquire of type 7 is an invalid field", is_status(acquire(a, 0xA, 7), 0, 0x02))


# --- Write buffers: bounded, and timed out -------------------------------------------

# The least each may be: twice the most one command moves (MDTS, 1 MiB).
BUFFER_ARGS = ("--nvme-write-buffer-bytes-per-queue", str(2 << 20), "--nvme-write-buffer-bytes-per-host",
               str(4 << 20), "--nvme-h2c-data-timeout-ms", "3000")

def r2ts_within(queues, seconds):
    """The R2Ts the queues get within `seconds`, unanswered: (queue, PDU) pairs."""
    got, end = [], time.monotonic() + seconds
    for q in queues:
        while True:
            try:
                p = q.recv_pdu(max(end - time.monotonic(), 0.05))
            except (socket.timeout, TimeoutError):
                break
            if p.type != R2T:
                raise ProtocolError("a PDU of type %d while R2Ts were awaited" % p.type)
            got.append((q, p))
    return got

def answer(q, p):
    cid = p.u16(8)
    q.answer_r2t(cid, q.pending[cid], p.u16(10), p.u32(12), p.u32(16))

def test_write_buffers(t):
    """Run against a target of 2 MiB per queue and 4 MiB per host (BUFFER_ARGS):
    R2Ts go out only as buffers are free, every write lands, and an R2T left
    unanswered for 3 s ends its connection."""
    admin = HOST.admin(t.port, NQN)
    refused = None
    others = [HOST.admin(t.port, NQN) for _ in range(15)]
    try:
        HOST.admin(t.port, NQN)
    except ProtocolError as e:
        refused = str(e)
    check("a host's 17th controller at the port is refused (Connect: Controller Busy, SCT 1 SC 0x81)",
          refused is not None and "SCT 1 SC 0x81" in refused, refused or "accepted")
    for o in others + [admin]:
        o.close()
    end = time.monotonic() + 5
    while True:  # the controllers end as their admin queues close
        try:
            _, queues = controller(t, 3)
            break
        except ProtocolError:
            if time.monotonic() > end:
                raise
            time.sleep(0.1)
    bs, size = t.block, 256 << 10
    base = t.blocks // 2
    q = queues[0]
    # A fused Compare and Write, both by R2T: the Compare's R2T waits for
    # its Write's capsule, and the pair's buffers are reserved together (a
    # Compare holding its own while its Write waited behind it for one
    # could hang the queue).
    n = (64 << 10) // bs
    old, new = RNG.randbytes(n * bs), RNG.randbytes(n * bs)
    w = q.write(1, base, old, bs, in_capsule=False)
    first = q.submit(rw_sqe(COMPARE, 1, base, n, fuse=FUSE_FIRST), old, in_capsule=False)
    early = r2ts_within([q], 0.3)
    second = q.submit(rw_sqe(WRITE, 1, base, n, fuse=FUSE_SECOND), new, in_capsule=False)
    pair_r2ts = r2ts_within([q], 0.5)
    check("a fused Compare by R2T: no R2T until its Write's capsule, then both halves' R2Ts",
          not early and len(pair_r2ts) == 2, "%d early, %d after" % (len(early), len(pair_r2ts)))
    for got_on, p in pair_r2ts:
        answer(got_on, p)
    c, w2 = q.wait_all([first, second], timeout=10)
    check("... and both succeed, and the write lands", w.ok and c.ok and w2.ok and q.read(1, base, n, bs).data == new,
          "%r, %r, %r" % (w, c, w2))
    # A capsule whose data disagrees with its SGL (R2T's, with data in the
    # capsule): refused, its data dropped, and the queue goes on in step.
    cid = q.next_cid()
    entry = bytearray(rw_sqe(WRITE, 1, base, 1))
    struct.pack_into('<H', entry, 2, cid)
    set_sgl(entry, bs, False)
    q.pending[cid] = _Command(b"", 0, False)
    q.send_pdu(CAPSULE_CMD, entry, bytes(bs))
    c = q.wait(cid)
    r = q.read(1, base, n, bs)
    check("a capsule carrying data its SGL says comes by R2T: Data SGL Length Invalid (0x0f), nothing written, "
          "the queue goes on", is_status(c, 0, 0x0f) and r.ok and r.data == new, "%r, %r" % (c, r))
    writes = {}
    for i in range(10):
        data = RNG.randbytes(size)
        cid = queues[0].submit(rw_sqe(WRITE, 1, base + i * size // bs, size // bs), data, in_capsule=False)
        writes[(0, cid)] = (base + i * size // bs, data)
    got = r2ts_within(queues[:1], 0.5)
    check("10 writes of 256 KiB on one queue of 2 MiB: 8 R2Ts, the others wait", len(got) == 8,
          "%d R2Ts" % len(got))
    answer(*got[0])
    done = queues[0].wait(got[0][1].u16(8))
    more = r2ts_within(queues[:1], 0.5)
    check("... one answered and done: one more R2T", done.ok and len(more) == 1, "%r, %d" % (done, len(more)))
    for i, q in enumerate(queues[1:], 1):
        for j in range(6):
            data = RNG.randbytes(size)
            lba = base + (10 + 6 * i + j) * size // bs
            writes[(i, q.submit(rw_sqe(WRITE, 1, lba, size // bs), data, in_capsule=False))] = (lba, data)
    extra = r2ts_within(queues[1:], 0.5)
    check("... 12 more on two other queues of the host (4 MiB in all): R2Ts only as far as the host's 4 MiB "
          "(8 held on the first queue, 8 more)", len(extra) == 8, "%d R2Ts" % len(extra))
    for q, p in got[1:] + more + extra:
        answer(q, p)
    end = time.monotonic() + 30
    while any(q.pending for q in queues) and time.monotonic() < end:
        for q in queues:  # every queue served at once: R2Ts answered as they come
            if q.pending:
                try:
                    q.step(0.05)
                except (socket.timeout, TimeoutError):
                    pass
    bad = [c for q in queues for c in q.done.values() if not c.ok] + [cid for q in queues for cid in q.pending]
    for q in queues:
        q.done.clear()
    check("... and as buffers come back every write gets its R2T and succeeds", not bad, repr(bad[:1]))
    wrong = [lba for lba, data in writes.values() if queues[0].read(1, lba, size // bs, bs).data != data]
    check("... and every write reads back", not wrong, "%d wrong" % len(wrong))
    q = queues[0]
    q.submit(rw_sqe(WRITE, 1, base, size // bs), RNG.randbytes(size), in_capsule=False)
    began = time.monotonic()
    got = r2ts_within([q], 0.5)
    closed, term = q.ending(8)
    check("an R2T never answered for 3 s: C2HTermReq FES 2 within 3-4 s, then the connection closes (%.1f s)"
          % (time.monotonic() - began), len(got) == 1 and closed and term and term.fes == 2 and
          2.9 < time.monotonic() - began < 5.5, "closed %s, %s" % (closed, term))
    q = queues[1]
    cid = q.submit(rw_sqe(WRITE, 1, base, size // bs), RNG.randbytes(size), in_capsule=False)
    (_, p), = r2ts_within([q], 0.5)
    q.send_pdu(H2C_DATA, struct.pack('<HHII4x', cid, p.u16(10), 0, 4096), bytes(4096))
    closed, term = q.ending(8)
    check("an R2T answered in part, then nothing: C2HTermReq FES 2, closed", closed and term and term.fes == 2,
          "closed %s, %s" % (closed, term))
    check("... while the host's last queue goes on", queues[2].read(1, base, 1, bs).ok)


TESTS = [test_icreq, test_discovery, test_admin_connect, test_properties, test_identify_controller,
         test_identify_namespaces, test_features, test_io_connect, test_data, test_zeroes_and_deallocate,
         test_compare, test_fused, test_fused_failures, test_command_errors, test_header_digest_error, test_data_digest_errors,
         test_fatal_errors, test_keep_alive, test_disconnect, test_both_protocols, test_reservations]

def run(test, t):
    print("== %s (%d-byte blocks)" % (test.__name__, t.block), flush=True)
    try:
        test(t)
    except Exception as e:
        traceback.print_exc(file=sys.stdout)
        check("%s ran to its end" % test.__name__, False, "%s: %s" % (type(e).__name__, e))
    finally:
        Queue.close_all()

seed = int(os.environ.get("STRATA_TEST_SEED", random.randrange(1 << 32)))
print("seed %d (STRATA_TEST_SEED=%d replays it)" % (seed, seed), flush=True)
RNG = random.Random(seed)
for block in (512, 4096):
    # 512-byte blocks on one loop; 4096 with connections spread over three
    # (each queue of a controller, and each controller, on its own loop).
    loops = ("--loops", "3") if block == 4096 else ()
    print("== %d-byte blocks, %s" % (block, "3 loops" if loops else "1 loop"), flush=True)
    target = Target(sys.argv[1], block, *loops)
    for test in TESTS:
        run(test, target)
    stop(target.process)
    target = Target(sys.argv[1], block, "--nvme-host", HOST.nqn, *loops)
    run(test_host_access, target)
    stop(target.process)
    target = Target(sys.argv[1], block, *BUFFER_ARGS, *loops)
    run(test_write_buffers, target)
    stop(target.process)
print("%d failed: %s" % (len(failures), "; ".join(failures)) if failures else "all passed", flush=True)
sys.exit(1 if failures else 0)
