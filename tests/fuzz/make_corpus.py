#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets under tests/fuzz/corpus/.

Each seed is a small, valid example of what the fuzzer's input format
expresses (the formats are in the header comments of text_fuzz.cc,
cdb_fuzz.cc, pdu_fuzz.cc and nvme_pdu_fuzz.cc): the fuzzer starts from them, and reaches
the full feature phase, the write paths and the CHAP exchange without
having to discover them. Run it again after changing an input format;
the seeds it writes are committed.

    tests/fuzz/make_corpus.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
FUZZ_TARGET = b"iqn.2026-11.io.strata:fuzz"
CHAP_TARGET = b"iqn.2026-11.io.strata:chap"
INITIATOR = b"iqn.2026-11.io.strata:fuzzer"


def write(fuzzer, name, data):
    folder = os.path.join(HERE, "corpus", fuzzer)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def text(*pairs):
    return b"".join(k + b"=" + v + b"\0" for k, v in pairs)


# --- text_fuzz: data segments of Login and Text PDUs -------------------------

def text_seeds():
    write("text_fuzz", "login_normal", text(
        (b"InitiatorName", INITIATOR), (b"TargetName", FUZZ_TARGET), (b"SessionType", b"Normal"),
        (b"AuthMethod", b"None"), (b"HeaderDigest", b"CRC32C,None"), (b"DataDigest", b"None"),
        (b"MaxRecvDataSegmentLength", b"262144"), (b"MaxBurstLength", b"16776192"),
        (b"FirstBurstLength", b"262144"), (b"InitialR2T", b"No"), (b"ImmediateData", b"Yes"),
        (b"MaxOutstandingR2T", b"1"), (b"ErrorRecoveryLevel", b"0"), (b"MaxConnections", b"1"),
        (b"DefaultTime2Wait", b"2"), (b"DefaultTime2Retain", b"0"),
        (b"DataPDUInOrder", b"Yes"), (b"DataSequenceInOrder", b"Yes")))
    write("text_fuzz", "login_discovery", text(
        (b"InitiatorName", INITIATOR), (b"SessionType", b"Discovery"), (b"MaxRecvDataSegmentLength", b"0x2000")))
    write("text_fuzz", "chap", text(
        (b"AuthMethod", b"CHAP,None"), (b"CHAP_A", b"7,5"), (b"CHAP_N", b"user"),
        (b"CHAP_R", b"0x" + b"ab" * 16), (b"CHAP_I", b"17"), (b"CHAP_C", b"0bq83vEjRoaZ3UXp5Mkzww==")))
    write("text_fuzz", "odd_values", text(
        (b"MaxBurstLength", b"huge"), (b"IFMarker", b"Yes"), (b"OFMarkInt", b"1~65535"),
        (b"X-com.example.Private", b"1"), (b"SessionType", b"Other"), (b"HeaderDigest", b"MD5")) + b"\0\0\0")
    write("text_fuzz", "send_targets", text((b"SendTargets", b"All")))


# --- cdb_fuzz: scripts of commands -------------------------------------------

def command(cdb, control=0, expected=0, out_bytes=0, pattern=b"", lun=None):
    """One record: control, CDB, expected transfer length, data-out."""
    if lun is not None:
        control = (control & ~0x03) | 0x03
    record = bytes([control]) + (struct.pack(">H", lun) if lun is not None else b"")
    record += bytes([len(cdb)]) + cdb + struct.pack(">I", expected)
    record += struct.pack(">I", out_bytes)[1:] + struct.pack(">H", len(pattern)) + pattern
    return record


def cdb10(op, lba, blocks, byte1=0):
    return struct.pack(">BBIBHB", op, byte1, lba, 0, blocks, 0)


def cdb16(op, lba, blocks, byte1=0):
    return struct.pack(">BBQIBB", op, byte1, lba, blocks, 0, 0)


def cdb_seeds():
    idle = 0x0c  # run the loop until idle before the command
    write("cdb_fuzz", "identify", b"".join([
        command(bytes([0x00, 0, 0, 0, 0, 0])),                    # TEST UNIT READY
        command(bytes([0x12, 0, 0, 0, 96, 0]), expected=96),     # INQUIRY
        command(bytes([0x12, 1, 0x83, 0x10, 0, 0]), expected=4096),  # VPD 83h
        command(bytes([0x12, 1, 0xb0, 0, 64, 0]), control=1, expected=64),  # VPD B0h, LUN 1
        command(cdb10(0x25, 0, 0), expected=8),                  # READ CAPACITY(10)
        command(bytes([0x9e, 0x10]) + bytes(8) + struct.pack(">I", 32) + bytes(2), expected=32),
    ]))
    write("cdb_fuzz", "luns", b"".join([
        command(bytes([0xa0, 0, 0, 0, 0, 0]) + struct.pack(">I", 4096) + bytes(2), expected=4096),  # REPORT LUNS
        command(bytes([0x12, 0, 0, 0, 96, 0]), control=2, expected=96),  # INQUIRY of an absent LUN
        command(bytes([0x00] * 6), lun=300),                      # flat space LUN, absent
    ]))
    write("cdb_fuzz", "read_write", b"".join([
        command(cdb10(0x2a, 8, 2), expected=8192, out_bytes=8192, pattern=b"strata"),  # WRITE(10)
        command(cdb10(0x28, 8, 2), expected=8192),                                     # READ(10), in flight with it
        command(cdb16(0x8a, 100, 16, 0x08), control=1, expected=8192, out_bytes=8192, pattern=b"\x5a"),  # WRITE(16) FUA, LUN 1
        command(cdb16(0x88, 96, 24), control=1 | idle, expected=12288),                # READ(16), LUN 1
        command(bytes([0x08, 0, 0, 8, 2, 0]), control=0x10, expected=8192),            # READ(6), reusing a task
    ]))
    write("cdb_fuzz", "write_unaligned", command(cdb10(0x2a, 0, 1), control=0x20, expected=4096,
                                                 out_bytes=4096, pattern=b"\x01\x02\x03"))
    write("cdb_fuzz", "verify", b"".join([
        command(cdb10(0x2e, 20, 1), expected=4096, out_bytes=4096, pattern=b"v"),      # WRITE AND VERIFY(10)
        command(cdb10(0x2f, 20, 1, 0x02), control=idle, expected=4096, out_bytes=4096, pattern=b"v"),  # BYTCHK=01b
        command(cdb10(0x2f, 20, 2, 0x06), control=idle, expected=4096, out_bytes=4096, pattern=b"w"),  # BYTCHK=11b
    ]))
    unmap_list = struct.pack(">HHI", 22, 16, 0) + struct.pack(">QII", 64, 32, 0)
    write("cdb_fuzz", "thin", b"".join([
        command(cdb16(0x93, 0, 64, 0x08), expected=4096, out_bytes=4096),              # WRITE SAME(16) UNMAP, zeros
        command(cdb16(0x93, 200, 8), expected=4096, out_bytes=4096, pattern=b"same"),  # WRITE SAME(16), a pattern
        command(bytes([0x42, 0, 0, 0, 0, 0, 0]) + struct.pack(">H", len(unmap_list)) + b"\0",
                control=idle, expected=len(unmap_list), out_bytes=len(unmap_list), pattern=unmap_list),  # UNMAP
        command(cdb10(0x35, 0, 0), expected=0),                                        # SYNCHRONIZE CACHE(10)
    ]))
    caching = bytes([0x08, 0x12, 0x04]) + bytes(17)
    mode_list = bytes(8) + caching
    write("cdb_fuzz", "mode", b"".join([
        command(bytes([0x1a, 0, 0x3f, 0, 255, 0]), expected=255),                      # MODE SENSE(6), all pages
        command(bytes([0x5a, 0x10, 0x08, 0, 0, 0, 0, 0, 255, 0]), control=1, expected=255),  # MODE SENSE(10), LLBAA
        command(bytes([0x55, 0x10, 0, 0, 0, 0, 0, 0, len(mode_list), 0]), expected=len(mode_list),
                out_bytes=len(mode_list), pattern=mode_list),                          # MODE SELECT(10)
        command(bytes([0x03, 1, 0, 0, 20, 0]), expected=20),                           # REQUEST SENSE, descriptor
    ]))
    write("cdb_fuzz", "report_opcodes", b"".join([
        command(bytes([0xa3, 0x0c, 0x00, 0, 0, 0]) + struct.pack(">I", 4096) + bytes(2), expected=4096),
        command(bytes([0xa3, 0x0c, 0x83, 0x9e, 0, 0x10]) + struct.pack(">I", 64) + bytes(2), expected=64),
        command(bytes([0xa3, 0x0a, 0, 0, 0, 0]) + struct.pack(">I", 64) + bytes(2), expected=64),  # REPORT TPG
    ]))


# --- pdu_fuzz: connections ---------------------------------------------------

def bhs(opcode, flags=0, immediate=False, ahs_words=0, data_bytes=0, lun=0, itt=0, rest=b""):
    """A 48-byte BHS: bytes 0..19, then bytes 20..47 as given (zero-padded)."""
    head = bytes([opcode | (0x40 if immediate else 0), flags, 0, 0, ahs_words])
    head += struct.pack(">I", data_bytes)[1:] + struct.pack(">Q", lun) + struct.pack(">I", itt)
    return head + rest + bytes(28 - len(rest))


def pad(data):
    return data + bytes(-len(data) % 4)


def pdu(header_rest_fn, data=b""):
    return header_rest_fn(len(data)) + pad(data)


def login(keys, csg, nsg, transit=True, isid=b"\x80\0\0\0\0\x07", cmd_sn=1, exp_stat_sn=0):
    flags = (0x80 if transit else 0) | (csg << 2) | (nsg if transit else 0)
    data = text(*keys)
    head = bytes([0x43, flags, 0, 0, 0]) + struct.pack(">I", len(data))[1:] + isid + b"\0\0"
    head += struct.pack(">I", 1) + struct.pack(">HH", 0, 0) + struct.pack(">II", cmd_sn, exp_stat_sn) + bytes(16)
    return head + pad(data)


def scsi_command(cdb, flags, edtl, cmd_sn, itt, lun=0, data=b""):
    rest = struct.pack(">III", edtl, cmd_sn, 0) + cdb + bytes(16 - len(cdb))
    return bhs(0x01, flags, data_bytes=len(data), lun=lun << 48, itt=itt, rest=rest) + pad(data)


def data_out(itt, ttt, data_sn, offset, data, final=True, lun=0):
    rest = struct.pack(">IIIIII", ttt, 0, 0, 0, data_sn, offset)
    return bhs(0x05, 0x80 if final else 0, data_bytes=len(data), lun=lun << 48, itt=itt, rest=rest) + pad(data)


def nop_out(itt, cmd_sn, data=b"", immediate=True):
    rest = struct.pack(">III", 0xffffffff, cmd_sn, 0)
    return bhs(0x00, 0x80, immediate=immediate, data_bytes=len(data), itt=itt, rest=rest) + pad(data)


def text_request(itt, cmd_sn, data):
    rest = struct.pack(">III", 0xffffffff, cmd_sn, 0)
    return bhs(0x04, 0x80, immediate=True, data_bytes=len(data), itt=itt, rest=rest) + pad(data)


def tmf(function, itt, cmd_sn, referenced=0xffffffff, lun=0):
    rest = struct.pack(">IIIII", referenced, cmd_sn, 0, 0, 0)
    return bhs(0x02, 0x80 | function, immediate=True, lun=lun << 48, itt=itt, rest=rest)


def logout(itt, cmd_sn):
    return bhs(0x06, 0x80, immediate=True, itt=itt, rest=struct.pack(">III", 0, cmd_sn, 0))


def record(pdu_bytes, corrupt=0):
    """Mode 3 input: the control byte, then the PDU without padding (the harness pads)."""
    header = pdu_bytes[:48]
    length = struct.unpack(">I", b"\0" + header[5:8])[0]
    return bytes([corrupt]) + header + pdu_bytes[48:48 + length]


def pdu_seeds():
    RAW, NORMAL, DISCOVERY, DIGESTS = 0, 1, 2, 3
    SMALL_MRDSL, SOLICITED = 0x04, 0x08
    read10 = lambda lba, blocks: struct.pack(">BBIBHB", 0x28, 0, lba, 0, blocks, 0)
    write10 = lambda lba, blocks: struct.pack(">BBIBHB", 0x2a, 0, lba, 0, blocks, 0)
    F, R, W = 0x80, 0x40, 0x20
    SIMPLE = 0x01

    write("pdu_fuzz", "raw_login", bytes([RAW]) + login(
        [(b"InitiatorName", INITIATOR), (b"TargetName", FUZZ_TARGET), (b"SessionType", b"Normal"),
         (b"AuthMethod", b"None")], 0, 1) + login(
        [(b"HeaderDigest", b"None"), (b"DataDigest", b"None"), (b"MaxRecvDataSegmentLength", b"8192")], 1, 3,
        exp_stat_sn=1) + scsi_command(bytes([0x00] * 6), F | SIMPLE, 0, 1, 5))
    write("pdu_fuzz", "raw_unknown_target", bytes([RAW]) + login(
        [(b"InitiatorName", INITIATOR), (b"TargetName", b"iqn.2026-11.io.strata:nobody")], 1, 3))
    write("pdu_fuzz", "raw_chap_wrong", bytes([RAW]) + login(
        [(b"InitiatorName", b"iqn.2026-11.io.strata:bystander"), (b"TargetName", CHAP_TARGET),
         (b"SessionType", b"Normal"), (b"AuthMethod", b"CHAP")], 0, 0, transit=False) + login(
        [(b"CHAP_A", b"5")], 0, 0, transit=False, exp_stat_sn=1) + login(
        [(b"CHAP_N", b"bystander"), (b"CHAP_R", b"0x" + b"00" * 16)], 0, 1, exp_stat_sn=2))
    write("pdu_fuzz", "send_targets", bytes([DISCOVERY]) + text_request(3, 1, text((b"SendTargets", b"All"))) +
          logout(4, 1))
    write("pdu_fuzz", "read", bytes([NORMAL]) + scsi_command(read10(0, 8), F | R | SIMPLE, 32768, 1, 10))
    write("pdu_fuzz", "read_small_segments", bytes([NORMAL | SMALL_MRDSL]) +
          scsi_command(read10(0, 1), F | R | SIMPLE, 4096, 1, 10, lun=0))
    write("pdu_fuzz", "write_immediate", bytes([NORMAL]) +
          scsi_command(write10(4, 1), F | W | SIMPLE, 512, 1, 11, lun=1, data=b"\xa5" * 512) +
          scsi_command(read10(4, 1), F | R | SIMPLE, 512, 2, 12, lun=1))
    write("pdu_fuzz", "write_unsolicited_data_out", bytes([NORMAL]) +
          scsi_command(write10(8, 2), W | SIMPLE, 1024, 1, 13, lun=1, data=b"\x11" * 512) +
          data_out(13, 0xffffffff, 0, 512, b"\x22" * 512, lun=1))
    write("pdu_fuzz", "write_r2t", bytes([NORMAL | SOLICITED]) +
          scsi_command(write10(16, 2), F | W | SIMPLE, 1024, 1, 14, lun=1) +
          data_out(14, 1, 0, 0, b"\x33" * 1024, lun=1))
    write("pdu_fuzz", "digests", bytes([DIGESTS]) +
          record(nop_out(20, 1, b"ping")) +
          record(scsi_command(read10(0, 1), F | R | SIMPLE, 4096, 1, 21)) +
          record(scsi_command(write10(2, 1), F | W | SIMPLE, 512, 2, 22, lun=1, data=b"\x44" * 512), corrupt=2))
    write("pdu_fuzz", "task_management", bytes([NORMAL]) +
          scsi_command(read10(0, 16), F | R | SIMPLE, 65536, 1, 30) +
          tmf(1, 31, 2, referenced=30) + tmf(5, 32, 2, lun=1) + nop_out(33, 2) + logout(34, 2))


def nvme_pdu(pdu_type, specific=b"", data=b"", hd=False, dd=False, flags=0):
    """An NVMe/TCP PDU from the host: HLEN is the common header and
    `specific` padded to its type's length; digests are zeros when asked for
    (nvme_pdu_fuzz's terms byte, bit 7, has the harness write the header's)."""
    hlen = {0: 128, 2: 24, 4: 72, 6: 24}[pdu_type]
    header_end = hlen + (4 if hd else 0)
    pdo = header_end if data else 0
    plen = header_end + len(data) + (4 if dd and data else 0)
    flags |= (1 if hd else 0) | (2 if dd and data else 0)
    head = struct.pack("<BBBBI", pdu_type, flags, hlen, pdo, plen) + specific.ljust(hlen - 8, b"\0")
    return head + (b"\0" * 4 if hd else b"") + data + (b"\0" * 4 if dd and data else b"")


def nvme_pdu_seeds():
    # An ICReq (PFV 0, HPDA, DGST, MAXR2T), then capsules and data as nvme-cli's kernel host sends them.
    def icreq(hpda=0, digests=0):
        return nvme_pdu(0, struct.pack("<HBBI", 0, hpda, digests, 3))
    read_sqe = bytes([0x02, 0x40]) + struct.pack("<H", 1) + struct.pack("<I", 1) + b"\0" * 56
    write_sqe = bytes([0x01, 0x40]) + struct.pack("<H", 2) + struct.pack("<I", 1) + b"\0" * 56
    h2c = lambda cid, offset, length: struct.pack("<HHII", cid, 1, offset, length)
    write("nvme_pdu_fuzz", "plain", bytes([0x00, 0, 0]) + icreq() + nvme_pdu(4, read_sqe) +
          nvme_pdu(4, write_sqe, data=b"\x11" * 512) + nvme_pdu(6, h2c(2, 0, 4096), data=b"\x22" * 4096, flags=4))
    write("nvme_pdu_fuzz", "digests", bytes([0x83, 0, 3]) + icreq(3, 3) + nvme_pdu(4, read_sqe, hd=True) +
          nvme_pdu(4, write_sqe, data=b"\x33" * 512, hd=True, dd=True) +
          nvme_pdu(6, h2c(2, 4096, 1024), data=b"\x44" * 1024, hd=True, dd=True, flags=4) + nvme_pdu(2, b"\x01\0", data=b"\0" * 24))
    write("nvme_pdu_fuzz", "aligned", bytes([0x80, 7, 31]) + icreq(31, 1) + nvme_pdu(4, read_sqe, hd=True))
    write("nvme_pdu_fuzz", "before_icreq", bytes([0, 0, 0]) + nvme_pdu(4, read_sqe))


def nvme_connection_seeds():
    # Records: flags, a 64-byte SQE, a 16-bit big-endian data length, the data.
    def sqe(opcode, cid, nsid=0, cdw=(), sgl_bytes=0, in_capsule=False, fuse=0):
        b = bytearray(64)
        b[0], b[1] = opcode, 0x40 | fuse
        struct.pack_into("<HI", b, 2, cid, nsid)
        struct.pack_into("<QI", b, 24, 0, sgl_bytes)
        b[39] = 0x01 if in_capsule else 0x5A
        for i, v in enumerate(cdw):
            struct.pack_into("<I", b, 40 + 4 * i, v & 0xFFFFFFFF)
        return bytes(b)
    def record(entry, data=b"", flags=0):
        return bytes([flags]) + entry + struct.pack(">H", len(data)) + data
    identify = record(sqe(0x06, 1, 0, (1,), 4096))
    identify_ns = record(sqe(0x06, 2, 1, (0,), 4096))
    log_page = record(sqe(0x02, 3, 0xFFFFFFFF, (0x0C | (1023 << 16),), 4096))
    features = record(sqe(0x09, 4, 0, (0x07, 0x00030003)))
    aer = record(sqe(0x0C, 5))
    write("nvme_connection_fuzz", "admin", bytes([1]) + identify + identify_ns + log_page + features + aer)
    write_in_capsule = record(sqe(0x01, 10, 1, (8, 0, 0), 4096, True), b"\x5a" * 4096)
    read = record(sqe(0x02, 11, 1, (8, 0, 0), 4096))
    write_r2t = record(sqe(0x01, 12, 2, (64, 0, 15), 8192))
    compare = record(sqe(0x05, 13, 1, (8, 0, 0), 4096, True, fuse=1), b"\x5a" * 4096)
    fused_write = record(sqe(0x01, 14, 1, (8, 0, 0), 4096, True, fuse=2), b"\x77" * 4096)
    zeroes = record(sqe(0x08, 15, 1, (100, 0, 7 | 1 << 25)))
    dsm = record(sqe(0x09, 16, 1, (0, 4), 16, True), struct.pack("<IIQ", 0, 8, 200))
    register = record(sqe(0x0D, 17, 1, (0,), 16, True), struct.pack("<QQ", 0, 0xAB))
    acquire = record(sqe(0x11, 18, 1, (1 << 8,), 16, True), struct.pack("<QQ", 0xAB, 0))
    report = record(sqe(0x0E, 19, 1, (1023, 1), 4096))
    release = record(sqe(0x15, 20, 1, (1,), 8, True), struct.pack("<Q", 0xAB))
    flush = record(sqe(0x00, 21, 1))
    write("nvme_connection_fuzz", "io", bytes([2 | 4]) + write_in_capsule + read + write_r2t + compare + fused_write +
          zeroes + dsm + register + acquire + report + release + flush)
    write("nvme_connection_fuzz", "digests", bytes([3 | 4]) + identify + record(sqe(0x06, 6, 0, (2,), 4096), flags=1) +
          record(sqe(0x7F, 7, 0, (0, 0, 0x1C), 0), b""))
    # Fused pairs whose halves fail: a data digest error on the Compare, then
    # on the Write; a Write with no Compare; a Compare and then an unfused
    # command; a pair split over two queues; a pair cut off by the end of
    # the connection (its Write's data still to come by R2T).
    def compare_(cid, flags=0, in_capsule=True):
        return record(sqe(0x05, cid, 1, (8, 0, 0), 4096, in_capsule, fuse=1), b"\x5a" * 4096 if in_capsule else b"",
                      flags)
    def fused_write_(cid, flags=0, in_capsule=True):
        return record(sqe(0x01, cid, 1, (8, 0, 0), 4096, in_capsule, fuse=2), b"\x77" * 4096 if in_capsule else b"",
                      flags)
    write("nvme_connection_fuzz", "fused_digests", bytes([2 | 4 | 8]) + write_in_capsule + compare_(30, 2) +
          fused_write_(31) + compare_(32) + fused_write_(33, 2) + compare_(34, 0, False) + fused_write_(35, 2) + read)
    write("nvme_connection_fuzz", "fused_sequences", bytes([2 | 4]) + fused_write_(40) + compare_(41) + read +
          compare_(42) + compare_(43) + fused_write_(44) + record(sqe(0x01, 45, 1, (8, 0, 0), 4096, True, fuse=3),
                                                                  b"\x11" * 4096) + read)
    write("nvme_connection_fuzz", "fused_split", bytes([2 | 4]) + compare_(50) + fused_write_(51, 8) + read +
          compare_(52, 8) + fused_write_(53))
    write("nvme_connection_fuzz", "fused_cut", bytes([2]) + compare_(60) + fused_write_(61, 0, False))
    disconnect = bytearray(sqe(0x7F, 22))
    disconnect[4] = 0x08
    write("nvme_connection_fuzz", "raw", bytes([0]) + nvme_pdu(0, struct.pack("<HBBI", 0, 0, 0, 0)) +
          nvme_pdu(4, bytes(disconnect)) + b"\xff" * 8)


if __name__ == "__main__":
    text_seeds()
    cdb_seeds()
    pdu_seeds()
    nvme_pdu_seeds()
    nvme_connection_seeds()
