"""A small NVMe/TCP host over a plain socket, for protocol tests against
strata-iscsi-target: PDUs built and read byte by byte (NVMe/TCP 1.0),
submission queue entries built by helpers (NVMe Base 2.0, NVMe-oF 1.1),
several commands in flight on a queue, and PDUs no well-behaved host
sends (bad digests, oversized capsules, unknown types). One Queue is one
TCP connection: an admin queue or an I/O queue of a controller."""
import atexit, queue, socket, struct, subprocess, sys, threading, time, uuid

DISCOVERY_NQN = "nqn.2014-08.org.nvmexpress.discovery"

# PDU types, and the common header's flags.
IC_REQ, IC_RESP, H2C_TERM_REQ, C2H_TERM_REQ, CAPSULE_CMD, CAPSULE_RESP = 0, 1, 2, 3, 4, 5
H2C_DATA, C2H_DATA, R2T = 6, 7, 9
HDGST, DDGST, LAST_PDU, SUCCESS = 0x01, 0x02, 0x04, 0x08
# Properties (controller registers).
CAP, VS, CC, CSTS = 0x00, 0x08, 0x14, 0x1c
CC_ENABLE = 1 | 6 << 16 | 4 << 20  # EN, IOSQES 64 bytes, IOCQES 16 bytes
# Opcodes: admin, fabrics, NVM I/O.
GET_LOG_PAGE, IDENTIFY, SET_FEATURES, GET_FEATURES, ASYNC_EVENT, KEEP_ALIVE = 0x02, 0x06, 0x09, 0x0a, 0x0c, 0x18
FABRICS, PROPERTY_SET, CONNECT, PROPERTY_GET, DISCONNECT = 0x7f, 0x00, 0x01, 0x04, 0x08
FLUSH, WRITE, READ, COMPARE, WRITE_ZEROES, DSM = 0x00, 0x01, 0x02, 0x05, 0x08, 0x09
FUSE_FIRST, FUSE_SECOND = 1, 2


def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    return table

_CRC_TABLE = _crc_table()

def crc32c(data, crc=0):
    """CRC32C (Castagnoli), as NVMe/TCP digests: crc32c(b"123456789") ==
    0xE3069283; `crc` continues a previous result. A byte at a time from a
    table: iscsi_raw.py's bit-at-a-time loop is too slow for MiBs of data."""
    crc ^= 0xffffffff
    t = _CRC_TABLE
    for b in data:
        crc = t[(crc ^ b) & 0xff] ^ (crc >> 8)
    return crc ^ 0xffffffff

def digest(data, bad=False):
    """A header or data digest as the wire carries it (least significant byte
    first); `bad` spoils it."""
    return struct.pack('<I', crc32c(data) ^ (1 if bad else 0))


class TermReq(Exception):
    """The controller's C2HTermReq: the connection ends. FES says why, FEI where."""
    def __init__(self, fes, fei, offending=b""):
        super().__init__("C2HTermReq FES %d FEI %d" % (fes, fei))
        self.fes, self.fei, self.offending = fes, fei, offending

class ProtocolError(Exception):
    """The controller sent something NVMe/TCP does not allow (a bad digest, a
    PDU out of place, data for no command)."""


class Completion:
    """A completion queue entry (16 bytes), and the data a read brought.
    The status field is the CQE's last 16 bits less the phase tag (bit 0)."""
    def __init__(self, cqe, data=b""):
        self.result, self.dw1, self.sqhd, self.sqid, self.cid, raw = struct.unpack('<IIHHHH', cqe)
        field = raw >> 1
        self.sc, self.sct, self.dnr = field & 0xff, field >> 8 & 7, field >> 14 & 1
        self.data = bytes(data)

    ok = property(lambda self: self.sct == 0 and self.sc == 0)
    status = property(lambda self: self.sct << 8 | self.sc)  # e.g. 0x285: media error, compare failure
    result64 = property(lambda self: self.result | self.dw1 << 32)  # an 8-byte Property Get

    def __repr__(self):
        return "CID %d: SCT %d SC 0x%02x%s, result 0x%x" % (self.cid, self.sct, self.sc, " DNR" if self.dnr else "",
                                                            self.result)


class Pdu:
    """A PDU from the controller: its header (HLEN bytes, the common 8
    first), where its data began (PDO), and its data."""
    def __init__(self, header, data):
        self.header, self.data = header, data
        self.type, self.flags, self.hlen, self.pdo = header[0], header[1], header[2], header[3]

    def u16(self, at):
        return struct.unpack_from('<H', self.header, at)[0]

    def u32(self, at):
        return struct.unpack_from('<I', self.header, at)[0]


# --- Submission queue entries -------------------------------------------------

def sqe(opcode, nsid=0, fuse=0, **cdw):
    """A 64-byte submission queue entry: PSDT 01b (SGLs, as Linux's host sets
    it, 0x40), FUSE bits 1:0, NSID, and cdw10=... to cdw15=. The queue
    fills in the command ID and the SGL when it sends it."""
    b = bytearray(64)
    b[0], b[1] = opcode, 0x40 | fuse
    struct.pack_into('<I', b, 4, nsid)
    for name, value in cdw.items():
        struct.pack_into('<I', b, 40 + 4 * (int(name[3:]) - 10), value & 0xffffffff)
    return b

def set_sgl(entry, length, in_capsule):
    """The data pointer (bytes 24..39): in-capsule data is a Data Block at
    offset 0 (type 0, subtype 1); anything else a Transport SGL Data Block
    (type 5, subtype 0xA) that R2T/H2CData or C2HData carry."""
    struct.pack_into('<QI3xB', entry, 24, 0, length, 0x01 if in_capsule else 0x5a)

def fabrics_sqe(fctype):
    b = sqe(FABRICS)
    b[4] = fctype
    return b

def connect_sqe(qid, sqsize, kato_ms=0):
    """Connect: RECFMT 0, QID, SQSIZE (0's based), CATTR 0, KATO in ms."""
    b = fabrics_sqe(CONNECT)
    struct.pack_into('<HHHBxI', b, 40, 0, qid, sqsize, 0, kato_ms)
    return b

def connect_data(hostid, cntlid, subnqn, hostnqn):
    """Connect's 1024 bytes: HOSTID, CNTLID (0xffff: any, on an admin queue),
    SUBNQN at 256 and HOSTNQN at 512, NUL-terminated."""
    d = bytearray(1024)
    d[0:16] = hostid
    struct.pack_into('<H', d, 16, cntlid)
    for at, nqn in ((256, subnqn), (512, hostnqn)):
        raw = nqn.encode()[:255]
        d[at:at + len(raw)] = raw
    return bytes(d)

def invalid_parameter(result):
    """(IATTR, IPO) of a Connect refused with Connect Invalid Parameters:
    IPO in bits 15:0, IATTR (1: in the data, 0: in the SQE) in bits 23:16
    (NVMe-oF 1.1 figure 21; Linux's IPO_IATTR_CONNECT_DATA, SPDK's
    spdk_nvmf_fabric_connect_rsp)."""
    return result >> 16 & 0xff, result & 0xffff

def property_get_sqe(offset, size=4):
    b = fabrics_sqe(PROPERTY_GET)
    struct.pack_into('<B3xI', b, 40, 1 if size == 8 else 0, offset)
    return b

def property_set_sqe(offset, value, size=4):
    b = fabrics_sqe(PROPERTY_SET)
    struct.pack_into('<B3xIQ', b, 40, 1 if size == 8 else 0, offset, value)
    return b

def identify_sqe(cns, nsid=0):
    return sqe(IDENTIFY, nsid, cdw10=cns)

def get_log_page_sqe(lid, nbytes, offset=0, lsp=0, rae=False, nsid=0):
    numd = nbytes // 4 - 1
    return sqe(GET_LOG_PAGE, nsid, cdw10=lid | lsp << 8 | int(rae) << 15 | (numd & 0xffff) << 16,
               cdw11=numd >> 16, cdw12=offset & 0xffffffff, cdw13=offset >> 32)

def set_features_sqe(fid, value, save=False):
    return sqe(SET_FEATURES, cdw10=fid | int(save) << 31, cdw11=value)

def get_features_sqe(fid, select=0):
    return sqe(GET_FEATURES, cdw10=fid | select << 8)

def rw_sqe(opcode, nsid, slba, nblocks, fua=False, fuse=0):
    """Read, Write or Compare of `nblocks` from `slba` (NLB 0's based)."""
    return sqe(opcode, nsid, fuse, cdw10=slba, cdw11=slba >> 32, cdw12=(nblocks - 1) | int(fua) << 30)

def write_zeroes_sqe(nsid, slba, nblocks, deallocate=False):
    return sqe(WRITE_ZEROES, nsid, cdw10=slba, cdw11=slba >> 32, cdw12=(nblocks - 1) | int(deallocate) << 25)

def dsm_sqe(nsid, ranges, deallocate=True):
    """Dataset Management of `ranges` ranges (NR 0's based), AD (bit 2)."""
    return sqe(DSM, nsid, cdw10=ranges - 1, cdw11=4 if deallocate else 0)

def dsm_ranges(ranges):
    """DSM's data: per (slba, nblocks), context attributes 0, length, SLBA."""
    return b"".join(struct.pack('<IIQ', 0, n, slba) for slba, n in ranges)


# --- Queues -------------------------------------------------------------------

class _Command:
    def __init__(self, data, read_bytes, corrupt_h2c_digest):
        self.data, self.read, self.corrupt_h2c_digest = data, bytearray(read_bytes), corrupt_h2c_digest


class Queue:
    """One connection: ICReq/ICResp (unless `icreq` is False), then capsules
    and data. Commands are submitted (several may be in flight), R2Ts are
    answered with H2CData as they come, and completions are kept by CID
    until asked for, in whatever order they arrive."""
    opened = []  # every queue made, for close_all()

    def __init__(self, port, host="127.0.0.1", header_digest=False, data_digest=False, hpda=0, maxr2t=0,
                 icreq=True):
        self.s = socket.create_connection((host, port))
        Queue.opened.append(self)
        self.header_digest = self.data_digest = False
        self.cpda, self.max_h2c_data = 0, 4096
        self.in_capsule_bytes = 8192  # the admin queue's, fixed by NVMe/TCP; an I/O queue's from IOCCSZ
        self.pending, self.done = {}, {}
        self._cid = 0
        self.last_c2h_pdo = None
        self.cntlid = self.qid = None
        if icreq:
            self.initialize(header_digest, data_digest, hpda, maxr2t)

    def initialize(self, header_digest, data_digest, hpda=0, maxr2t=0):
        """ICReq (PFV 0, HPDA, DGST, MAXR2T); takes the ICResp's CPDA, DGST and
        MAXH2CDATA as this connection's terms and returns the ICResp."""
        self.send_pdu(IC_REQ, struct.pack('<HBBI', 0, hpda, int(header_digest) | int(data_digest) << 1, maxr2t)
                      + bytes(112))
        r = self.recv_pdu()
        if r.type == C2H_TERM_REQ:
            raise TermReq(r.u16(8), r.u32(10), r.data)
        if r.type != IC_RESP:
            raise ProtocolError("the answer to an ICReq is a PDU of type %d" % r.type)
        self.cpda, dgst, self.max_h2c_data = r.header[10], r.header[11], r.u32(12)
        self.header_digest, self.data_digest = bool(dgst & 1), bool(dgst & 2)
        return r

    # Bytes and PDUs.
    def recvn(self, n, timeout=10):
        self.s.settimeout(timeout)
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self.s.recv_into(view[got:])
            if not k:
                raise EOFError("the target closed the connection")
            got += k
        return bytes(buf)

    def send_pdu(self, ptype, specific, data=b"", flags=0, bad_header_digest=False, bad_data_digest=False):
        """Sends a PDU: the common header, `specific` (the rest of the header),
        the header digest, the pad to CPDA's alignment, `data`, its digest;
        digests as negotiated (never on ICReq or H2CTermReq)."""
        hlen = 8 + len(specific)
        digests = ptype not in (IC_REQ, H2C_TERM_REQ)
        hd = self.header_digest and digests
        dd = self.data_digest and digests and bool(data)
        flags |= (HDGST if hd else 0) | (DDGST if dd else 0)
        header_end = hlen + (4 if hd else 0)
        align = (self.cpda + 1) * 4
        pdo = -(-header_end // align) * align if data else 0
        plen = pdo + len(data) + (4 if dd else 0) if data else header_end
        header = struct.pack('<BBBBI', ptype, flags, hlen, pdo, plen) + bytes(specific)
        pad = bytes(pdo - header_end if data else 0)
        self.s.sendall(header + (digest(header, bad_header_digest) if hd else b"") + pad + bytes(data)
                       + (digest(data, bad_data_digest) if dd else b""))

    def recv_pdu(self, timeout=10):
        """The next PDU, its digests checked (ProtocolError if wrong)."""
        common = self.recvn(8, timeout)
        ptype, flags, hlen, pdo = common[:4]
        plen = struct.unpack_from('<I', common, 4)[0]
        if hlen < 8 or plen < hlen:
            raise ProtocolError("a PDU of type %d with HLEN %d, PLEN %d" % (ptype, hlen, plen))
        header = common + self.recvn(hlen - 8, timeout)
        at = hlen
        if ptype in (IC_RESP, C2H_TERM_REQ):  # never digested; a TermReq's data is the PDU in error
            return Pdu(header, self.recvn(plen - hlen, timeout) if plen > hlen else b"")
        if bool(flags & HDGST) != self.header_digest:
            raise ProtocolError("HDGSTF %d on a PDU of type %d, header digests being %s"
                                % (flags & HDGST, ptype, "on" if self.header_digest else "off"))
        if flags & HDGST:
            if self.recvn(4, timeout) != digest(header):
                raise ProtocolError("a bad header digest on a PDU of type %d" % ptype)
            at += 4
        data = b""
        if plen > at:
            if pdo < at or bool(flags & DDGST) != self.data_digest:
                raise ProtocolError("PDO %d, DDGSTF %d on a PDU of type %d with data" % (pdo, flags & DDGST, ptype))
            self.recvn(pdo - at, timeout)
            data = self.recvn(plen - pdo - (4 if flags & DDGST else 0), timeout)
            if flags & DDGST and self.recvn(4, timeout) != digest(data):
                raise ProtocolError("a bad data digest on a PDU of type %d" % ptype)
        return Pdu(header, data)

    # Commands.
    def next_cid(self):
        while True:
            self._cid = self._cid % 0xfffe + 1
            if self._cid not in self.pending and self._cid not in self.done:
                return self._cid

    def submit(self, entry, data=b"", read_bytes=0, in_capsule=None, cid=None, bad_header_digest=False,
               bad_data_digest=False, bad_h2c_digest=False):
        """Sends a command capsule; returns its CID. Data goes in the capsule
        if it fits (or as `in_capsule` says), else when the controller asks
        for it (R2T); `read_bytes` is what C2HData brings back. The bad_*
        flags spoil the capsule's digests or the H2CData PDUs' data digest."""
        entry = bytearray(entry)
        cid = self.next_cid() if cid is None else cid
        struct.pack_into('<H', entry, 2, cid)
        if in_capsule is None:
            in_capsule = 0 < len(data) <= self.in_capsule_bytes
        set_sgl(entry, len(data) or read_bytes, in_capsule and bool(data))
        self.pending[cid] = _Command(data, read_bytes, bad_h2c_digest)
        self.send_pdu(CAPSULE_CMD, entry, data if in_capsule else b"", bad_header_digest=bad_header_digest,
                      bad_data_digest=bad_data_digest)
        return cid

    def wait(self, cid, timeout=10):
        """The completion of command `cid`, handling every PDU before it."""
        while cid not in self.done:
            self.step(timeout)
        return self.done.pop(cid)

    def wait_all(self, cids, timeout=30):
        return [self.wait(cid, timeout) for cid in cids]

    def command(self, entry, data=b"", read_bytes=0, timeout=10, **kw):
        """Submits one command and waits for it."""
        return self.wait(self.submit(entry, data, read_bytes, **kw), timeout)

    def step(self, timeout=10):
        """Reads one PDU and acts on it: a completion is kept, read data put
        in place, an R2T answered. A C2HTermReq raises TermReq."""
        p = self.recv_pdu(timeout)
        if p.type == C2H_TERM_REQ:
            raise TermReq(p.u16(8), p.u32(10), p.data)
        if p.type not in (CAPSULE_RESP, C2H_DATA, R2T):
            raise ProtocolError("a PDU of type %d after the ICResp" % p.type)
        cid = p.u16(8 if p.type != CAPSULE_RESP else 20)
        cmd = self.pending.get(cid)
        if cmd is None:
            raise ProtocolError("a PDU of type %d for CID %d, not in flight" % (p.type, cid))
        if p.type == CAPSULE_RESP:
            del self.pending[cid]
            self.done[cid] = Completion(p.header[8:24], cmd.read)
        elif p.type == C2H_DATA:
            offset, length = p.u32(12), p.u32(16)
            if length != len(p.data) or offset + length > len(cmd.read):
                raise ProtocolError("C2HData of %d bytes at %d (DATAL %d) for a read of %d"
                                    % (len(p.data), offset, length, len(cmd.read)))
            cmd.read[offset:offset + length] = p.data
            self.last_c2h_pdo = p.pdo
            if p.flags & SUCCESS:  # no response capsule follows
                del self.pending[cid]
                self.done[cid] = Completion(struct.pack('<IIHHHH', 0, 0, 0, self.qid or 0, cid, 0), cmd.read)
        else:
            self.answer_r2t(cid, cmd, p.u16(10), p.u32(12), p.u32(16))

    def answer_r2t(self, cid, cmd, ttag, offset, length):
        """H2CData for an R2T, at most MAXH2CDATA each, LAST_PDU on the last."""
        if offset + length > len(cmd.data):
            raise ProtocolError("an R2T for %d bytes at %d of a %d-byte write" % (length, offset, len(cmd.data)))
        end = offset + length
        while offset < end:
            n = min(self.max_h2c_data, end - offset)
            self.send_pdu(H2C_DATA, struct.pack('<HHII4x', cid, ttag, offset, n), cmd.data[offset:offset + n],
                          flags=LAST_PDU if offset + n == end else 0, bad_data_digest=cmd.corrupt_h2c_digest)
            offset += n

    def ending(self, seconds=5):
        """How the controller ends this connection within `seconds`: returns
        (closed, term), term the C2HTermReq it sent first (or None).
        Everything else it sends is dropped."""
        end, term = time.monotonic() + seconds, None
        try:
            while time.monotonic() < end:
                try:
                    p = self.recv_pdu(max(end - time.monotonic(), 0.01))
                except ProtocolError:
                    continue
                if p.type == C2H_TERM_REQ and term is None:
                    term = TermReq(p.u16(8), p.u32(10), p.data)
        except (EOFError, ConnectionResetError, BrokenPipeError):
            return True, term
        except (socket.timeout, TimeoutError):
            pass
        return False, term

    def close(self):
        self.s.close()

    @classmethod
    def close_all(cls):
        for q in cls.opened:
            q.close()
        cls.opened.clear()

    # Fabrics and admin commands.
    def connect(self, subnqn, hostnqn, hostid, cntlid=0xffff, qid=0, sqsize=31, kato_ms=0):
        """Fabrics Connect; on success the queue knows its QID and controller."""
        c = self.command(connect_sqe(qid, sqsize, kato_ms), connect_data(hostid, cntlid, subnqn, hostnqn),
                         in_capsule=True)
        if c.ok:
            self.qid, self.cntlid = qid, c.result & 0xffff if qid == 0 else cntlid
        return c

    def property_get(self, offset, size=4):
        return self.command(property_get_sqe(offset, size))

    def property_set(self, offset, value, size=4):
        return self.command(property_set_sqe(offset, value, size))

    def enable(self, seconds=10):
        """CC.EN = 1 (64- and 16-byte entries), then CSTS.RDY polled: True once ready."""
        if not self.property_set(CC, CC_ENABLE).ok:
            return False
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            c = self.property_get(CSTS)
            if c.ok and c.result & 1:
                return True
            time.sleep(0.05)
        return False

    def identify(self, cns, nsid=0):
        return self.command(identify_sqe(cns, nsid), read_bytes=4096)

    def get_log_page(self, lid, nbytes, offset=0, **kw):
        return self.command(get_log_page_sqe(lid, nbytes, offset, **kw), read_bytes=nbytes)

    def keep_alive(self):
        return self.command(sqe(KEEP_ALIVE))

    # NVM I/O.
    def read(self, nsid, slba, nblocks, block_bytes, **kw):
        return self.command(rw_sqe(READ, nsid, slba, nblocks), read_bytes=nblocks * block_bytes, **kw)

    def write(self, nsid, slba, data, block_bytes, fua=False, **kw):
        return self.command(rw_sqe(WRITE, nsid, slba, len(data) // block_bytes, fua), data, **kw)


class Host:
    """A host: its NQN and HOSTID, which every queue of its controllers carries."""
    def __init__(self, nqn, hostid=None):
        self.nqn, self.hostid = nqn, hostid or uuid.uuid4().bytes

    def admin(self, port, subnqn, kato_ms=0, enable=True, **ic):
        """A new controller: an admin queue connected (CNTLID 0xffff) and enabled."""
        q = Queue(port, **ic)
        c = q.connect(subnqn, self.nqn, self.hostid, kato_ms=kato_ms)
        if not c.ok:
            raise ProtocolError("admin Connect to %s refused: %r" % (subnqn, c))
        if enable and not q.enable():
            raise ProtocolError("CSTS.RDY never came")
        q.subnqn = subnqn
        return q

    def io(self, port, admin, qid, sqsize=127, **ic):
        """I/O queue `qid` of `admin`'s controller."""
        q = Queue(port, **ic)
        c = q.connect(admin.subnqn, self.nqn, self.hostid, cntlid=admin.cntlid, qid=qid, sqsize=sqsize)
        if not c.ok:
            raise ProtocolError("I/O queue %d Connect refused: %r" % (qid, c))
        q.subnqn = admin.subnqn
        return q


# --- The target under test ------------------------------------------------------

failures = []

def check(what, ok, detail=""):
    """Prints "ok: what", or "FAIL: what -- detail" and remembers the failure."""
    print(("ok: " + what) if ok else ("FAIL: %s -- %s" % (what, detail) if detail else "FAIL: " + what), flush=True)
    if not ok:
        failures.append(what)
    return ok

def start(binary, *args, nqn="nqn.2026-11.io.strata:test", iqn="iqn.x:t"):
    """Starts the target on free loopback ports for iSCSI and NVMe/TCP;
    returns (process, iSCSI port, NVMe/TCP port) once both listen."""
    target = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--nvme-listen", "127.0.0.1:0", "--target", iqn,
                               "--nqn", nqn, *args], stdout=subprocess.PIPE, text=True)
    atexit.register(target.kill)  # also when a test dies of an exception
    lines = queue.Queue()
    def drain():  # a thread, so that a silent target cannot hang the test, and stdout never fills
        for line in target.stdout:
            lines.put(line)
        lines.put(None)
    threading.Thread(target=drain, daemon=True).start()
    iscsi = nvme = None
    while iscsi is None or nvme is None:
        try:
            line = lines.get(timeout=15)
        except queue.Empty:
            sys.exit("the target did not say it listens within 15 s")
        if line is None:
            sys.exit("the target exited (status %s) before it listened" % target.wait())
        words = line.split()
        if line.startswith("listening on"):
            iscsi = int(words[2].rsplit(":", 1)[1])
        elif line.startswith("nvme listening on"):
            nvme = int(words[3].rsplit(":", 1)[1])
    return target, iscsi, nvme

def stop(target):
    target.terminate()
    try:
        target.wait(10)
    except subprocess.TimeoutExpired:
        target.kill()
        target.wait()
